package paygate

import (
	"context"
	"crypto/ecdsa"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"
	"go.uber.org/zap"

	"github.com/x402gate/x402gate/facilitator"
	"github.com/x402gate/x402gate/facilitator/approval"
	"github.com/x402gate/x402gate/facilitator/journal"
	"github.com/x402gate/x402gate/gate"
	"github.com/x402gate/x402gate/gate/redisretry"
	"github.com/x402gate/x402gate/internal/ratelimit"
	"github.com/x402gate/x402gate/verdictclient"
	"github.com/x402gate/x402gate/x402"
)

// bundles holds the open facilitators, shared by every config that uses the same
// configuration (docs/caddy.md#configuration).
var bundles = caddy.NewUsagePool()

// openTimeout bounds opening one facilitator: Redis and the database. The networks come
// up in the background once the app starts (docs/facilitator.md#start-up).
const openTimeout = 2 * time.Minute

// validateChainTimeout bounds the chain id check of `caddy validate`.
const validateChainTimeout = 30 * time.Second

// FacilitatorConfig configures one bundled facilitator. Secrets (signer_key, verdict_key,
// rpc, store url, journal dsn) are {env.*} or {file.*} placeholders, expanded in
// Provision and never logged.
type FacilitatorConfig struct {
	// Networks are the chains the facilitator settles on. At least one is required.
	Networks []NetworkConfig `json:"networks,omitempty"`
	// SignerKey is the facilitator account's hex private key, given as an {env.*} or
	// {file.*} placeholder; a literal key is refused. Required.
	SignerKey string `json:"signer_key,omitempty"`
	// Store is the approval store. Default: memory.
	Store *StoreConfig `json:"store,omitempty"`
	// Journal is the settlement journal. Default: sqlite at
	// <caddy data dir>/x402/<name>/journal.db ("default" uses x402/journal.db).
	Journal *DatabaseConfig `json:"journal,omitempty"`
	// GuardianMode is GUARDIAN_MODE: off, optional or required. Default: off.
	GuardianMode string `json:"guardian_mode,omitempty"`
	// VerdictURL is the verdict service's base URL. Required when GuardianMode is optional
	// or required.
	VerdictURL string `json:"verdict_url,omitempty"`
	// VerdictKey is the verdict service's API key (placeholder). Default: none.
	VerdictKey string `json:"verdict_key,omitempty"`
	// PricingURL is the pricing service of the verification fee. Default: none.
	PricingURL string `json:"pricing_url,omitempty"`
	// VerdictPoll bounds the wait for a terminal verdict. Default: the spec's 1s interval
	// and 20 attempts, with delays capped at 5s.
	VerdictPoll *VerdictPollConfig `json:"verdict_poll,omitempty"`
	// VerdictRate limits the verdict requests of one payer: Rate per second in the long
	// run and Burst at once, shared through Redis when the store is Redis. Default: 1/s
	// and 10.
	VerdictRate *VerdictRateConfig `json:"verdict_rate,omitempty"`
	// ApprovalTTL bounds how long a verdict approval stays usable. Default: 5m.
	ApprovalTTL caddy.Duration `json:"approval_ttl,omitempty"`
	// ReceiptTimeout bounds the wait for a settlement receipt. Default: 30s.
	ReceiptTimeout caddy.Duration `json:"receipt_timeout,omitempty"`
	// ReconcileInterval is how often the journal's unfinished settlements (a receipt that
	// came late, a transaction stuck under a risen base fee) are reconciled while Caddy
	// runs, besides at start. Default: 1m.
	ReconcileInterval caddy.Duration `json:"reconcile_interval,omitempty"`
	// ERC6492Factories are the wallet factories whose ERC-6492 signatures are accepted.
	// Default: none.
	ERC6492Factories []string `json:"erc6492_factories,omitempty"`
}

// VerdictPollConfig is how a bundled facilitator polls the verdict service: the first
// delay, doubled up to MaxDelay, for at most MaxAttempts reads. A verdict still pending at
// the bound is a refusal (fail closed).
type VerdictPollConfig struct {
	// Interval is the first delay. Default: 1s.
	Interval caddy.Duration `json:"interval,omitempty"`
	// MaxAttempts is the number of status reads, the first included. Default: 20.
	MaxAttempts int `json:"max_attempts,omitempty"`
	// MaxDelay caps each delay. Default: 5s.
	MaxDelay caddy.Duration `json:"max_delay,omitempty"`
}

// VerdictRateConfig is the per-payer rate of verdict requests.
type VerdictRateConfig struct {
	// Rate is the long-run number of verdict requests per second.
	Rate float64 `json:"rate,omitempty"`
	// Burst is how many may come at once.
	Burst int `json:"burst,omitempty"`
}

// NetworkConfig is one chain of a bundled facilitator.
type NetworkConfig struct {
	// Name is a built-in network (base, base-sepolia), a CAIP-2 id or a chain id, or any
	// name together with ChainID. Required.
	Name string `json:"name"`
	// ChainID is required for a network that is not built in.
	ChainID uint64 `json:"chain_id,omitempty"`
	// RPC is the JSON-RPC URL; a secret when it carries an API key. Required.
	RPC string `json:"rpc,omitempty"`
	// Asset is the EIP-3009 token. Default: the network's USDC (required for a network
	// that is not built in).
	Asset string `json:"asset,omitempty"`
	// AssetName is the token's EIP-712 domain name. Required with a non-default asset.
	AssetName string `json:"asset_name,omitempty"`
	// AssetVersion is the token's EIP-712 domain version. Default: the network USDC's
	// version, or "2" (FiatToken) for a network that is not built in.
	AssetVersion string `json:"asset_version,omitempty"`
	// Decimals of the asset. Default: 6.
	Decimals int `json:"decimals,omitempty"`
	// Symbol of the asset. Default: USDC.
	Symbol string `json:"symbol,omitempty"`
	// MinAmount is the smallest amount accepted, in base units. Default: no minimum.
	MinAmount string `json:"min_amount,omitempty"`
}

// StoreConfig selects the approval store.
type StoreConfig struct {
	// Type is "memory" or "redis". Default: memory.
	Type string `json:"type,omitempty"`
	// MaxEntries bounds a memory store. Default: approval.DefaultMemoryStoreSize.
	MaxEntries int `json:"max_entries,omitempty"`
	// URL is the Redis URL (placeholder; it may hold a password). Required for redis.
	URL string `json:"url,omitempty"`
}

// resolved is a FacilitatorConfig with its placeholders expanded and its values checked.
// It is never logged.
type resolved struct {
	Name           string
	Networks       []facilitator.NetworkConfig
	SignerKey      string
	StoreType      string
	StoreMax       int
	StoreURL       string
	JournalType    string
	JournalPath    string
	JournalDSN     string
	GuardianMode   facilitator.GuardianMode
	VerdictURL     string
	VerdictKey     string
	PricingURL     string
	PollInterval   time.Duration
	PollAttempts   int
	PollMaxDelay   time.Duration
	VerdictRate    float64
	VerdictBurst   int
	ApprovalTTL    time.Duration
	ReceiptTimeout time.Duration
	Reconcile      time.Duration
	Factories      []common.Address

	key *ecdsa.PrivateKey
}

// settings is fc as the facilitator package states its configuration, placeholders
// unexpanded.
func (fc *FacilitatorConfig) settings() facilitator.Settings {
	s := facilitator.Settings{
		SignerKey:         fc.SignerKey,
		GuardianMode:      facilitator.GuardianMode(fc.GuardianMode),
		VerdictURL:        fc.VerdictURL,
		PricingURL:        fc.PricingURL,
		ApprovalTTL:       time.Duration(fc.ApprovalTTL),
		ReceiptTimeout:    time.Duration(fc.ReceiptTimeout),
		ReconcileInterval: time.Duration(fc.ReconcileInterval),
		ERC6492Factories:  fc.ERC6492Factories,
	}
	for _, n := range fc.Networks {
		s.Networks = append(s.Networks, facilitator.NetworkSettings(n))
	}
	if st := fc.Store; st != nil {
		s.StoreType, s.StoreMaxEntries, s.StoreURL = st.Type, st.MaxEntries, st.URL
	}
	if j := fc.Journal; j != nil {
		s.JournalType, s.JournalPath, s.JournalDSN = j.Type, j.Path, j.DSN
	}
	if vp := fc.VerdictPoll; vp != nil {
		s.PollInterval, s.PollAttempts, s.PollMaxDelay = time.Duration(vp.Interval), vp.MaxAttempts, time.Duration(vp.MaxDelay)
	}
	if vr := fc.VerdictRate; vr != nil {
		s.VerdictRate, s.VerdictBurst = vr.Rate, vr.Burst
	}
	return s
}

// Validate checks fc without I/O: its secrets are placeholders, and the rest obeys
// facilitator.Settings.Validate. The Caddyfile adapter calls it too.
func (fc *FacilitatorConfig) Validate() error {
	for _, sec := range []struct{ option, v string }{{"signer_key", fc.SignerKey}, {"verdict_key", fc.VerdictKey}} {
		if err := placeholderOnly(sec.option, sec.v); err != nil {
			return err
		}
	}
	s := fc.settings()
	if err := s.ValidateSecrets(); err != nil {
		return err
	}
	return s.Validate()
}

func (fc *FacilitatorConfig) resolve(name string) (*resolved, error) {
	if err := fc.Validate(); err != nil {
		return nil, err
	}
	repl := caddy.NewReplacer()
	s := fc.settings()
	s.SignerKey = strings.TrimPrefix(resolveSecret(repl, s.SignerKey), "0x")
	if err := expanded("signer_key", fc.SignerKey, s.SignerKey); err != nil {
		return nil, err
	}
	for i := range s.Networks {
		raw := s.Networks[i].RPC
		s.Networks[i].RPC = resolveSecret(repl, raw)
		if err := expanded("network "+s.Networks[i].Name+": rpc", raw, s.Networks[i].RPC); err != nil {
			return nil, err
		}
	}
	for _, v := range []struct {
		option string
		dst    *string
	}{{"store redis", &s.StoreURL}, {"journal postgres", &s.JournalDSN}} {
		raw := *v.dst
		*v.dst = resolveSecret(repl, raw)
		if err := expanded(v.option, raw, *v.dst); err != nil {
			return nil, err
		}
	}
	s.JournalPath = repl.ReplaceKnown(s.JournalPath, "")
	s.VerdictURL = repl.ReplaceKnown(s.VerdictURL, "")
	s.PricingURL = repl.ReplaceKnown(s.PricingURL, "")
	// Expanded, a value may be empty or malformed where its placeholder was not.
	if err := s.Validate(); err != nil {
		return nil, err
	}
	if err := s.ValidateURLs(); err != nil {
		return nil, err
	}
	rc := &resolved{
		Name:           name,
		SignerKey:      s.SignerKey,
		StoreType:      facilitator.StoreMemory,
		StoreMax:       s.StoreMaxEntries,
		JournalType:    facilitator.JournalSQLite,
		JournalPath:    s.JournalPath,
		GuardianMode:   s.GuardianMode,
		VerdictURL:     s.VerdictURL,
		VerdictKey:     resolveSecret(repl, fc.VerdictKey),
		PricingURL:     s.PricingURL,
		PollInterval:   s.PollInterval,
		PollAttempts:   s.PollAttempts,
		PollMaxDelay:   s.PollMaxDelay,
		VerdictRate:    s.VerdictRate,
		VerdictBurst:   s.VerdictBurst,
		ApprovalTTL:    s.ApprovalTTL,
		ReceiptTimeout: s.ReceiptTimeout,
		Reconcile:      s.Reconcile(),
		Factories:      s.Factories(),
	}
	for _, n := range s.Networks {
		nc, err := n.NetworkConfig(n.RPC)
		if err != nil {
			return nil, err
		}
		rc.Networks = append(rc.Networks, nc)
	}
	k, err := crypto.HexToECDSA(rc.SignerKey)
	if err != nil {
		return nil, errors.New("signer_key is not a hex secp256k1 private key") // never quote it
	}
	rc.key = k
	if s.StoreType == facilitator.StoreRedis {
		rc.StoreType, rc.StoreMax, rc.StoreURL = facilitator.StoreRedis, 0, s.StoreURL
	}
	if s.JournalType == facilitator.JournalPostgres {
		rc.JournalType, rc.JournalPath, rc.JournalDSN = facilitator.JournalPostgres, "", s.JournalDSN
	} else if rc.JournalPath == "" {
		rc.JournalPath = defaultJournalPath(name)
	}
	if rc.GuardianMode == "" {
		rc.GuardianMode = facilitator.GuardianOff
	}
	return rc, nil
}

// rate and burst are rc's verdict request rate, with the engine's defaults.
func rate(rc *resolved) float64 {
	if rc.VerdictRate > 0 {
		return rc.VerdictRate
	}
	return facilitator.DefaultVerdictRate
}

func burst(rc *resolved) int {
	if rc.VerdictBurst > 0 {
		return rc.VerdictBurst
	}
	return facilitator.DefaultVerdictBurst
}

// pricing is the fee quote of the pricing service at url, nil without one: a facilitator
// settles only the verification fee its own pricing service quotes.
func pricing(url string, reg *x402.Registry) func(context.Context, *x402.Requirements) (*x402.Requirements, error) {
	if url == "" {
		return nil
	}
	return verdictclient.Pricing(url, reg)
}

// defaultJournalPath is the SQLite journal in Caddy's data dir.
func defaultJournalPath(name string) string {
	if name == DefaultFacilitatorName {
		return filepath.Join(caddy.AppDataDir(), "x402", "journal.db")
	}
	return filepath.Join(caddy.AppDataDir(), "x402", name, "journal.db")
}

// registry is the networks of fc, as gates that use it resolve them: nothing else, so a
// gate naming a network this facilitator does not serve is refused when it is configured.
func (fc *FacilitatorConfig) registry() (*x402.Registry, error) {
	reg := new(x402.Registry)
	for _, n := range fc.Networks {
		net, err := facilitator.NetworkSettings(n).Network()
		if err != nil {
			return nil, err
		}
		if err := reg.Add(net); err != nil {
			return nil, err
		}
	}
	return reg, nil
}

// poolKey identifies the facilitator by name and a fingerprint of its resolved
// configuration: a reload with the same configuration reuses the open facilitator. The
// fingerprint is a hash; it is never logged.
// An error (a field that does not encode) is returned rather than hashed away, so two
// configurations can never share a fingerprint by accident.
func (rc *resolved) poolKey() (string, error) {
	b, err := json.Marshal(rc)
	if err != nil {
		return "", fmt.Errorf("fingerprint of the configuration: %w", err)
	}
	sum := sha256.Sum256(b)
	return "x402.facilitator/" + rc.Name + "/" + hex.EncodeToString(sum[:]), nil
}

// bundle is one open bundled facilitator and the state a reload must keep.
type bundle struct {
	name       string
	engine     *facilitator.Engine
	store      approval.Store
	journal    *journal.DB
	ledger     gate.Ledger // in Redis with store redis, else with the journal
	registry   *x402.Registry
	served     *x402.Registry // only the networks this facilitator serves, for gates' checks
	pricingURL string
	verdictURL string
	// guardianMode is the facilitator's GUARDIAN_MODE, checked against what gates advertise.
	guardianMode facilitator.GuardianMode
	// limiter rate-limits verdict requests across instances (a Redis store); nil: the
	// engine's in-process one.
	limiter facilitator.SubmitLimiter
	// verifyTimeout is the deadline its gates give one /verify (verifyTimeout).
	verifyTimeout time.Duration
	reconcile     time.Duration
	// startOnce starts the networks and the periodic reconcile; the mutex guards closers
	// against start and Destruct running at once.
	startOnce sync.Once
	mu        sync.Mutex
	closers   []func() error
	// unready counts the networks not ready yet, in networksUnavailable.
	unready atomic.Int64
}

// openBundle opens the stores, the journal and the engine of rc. On error everything
// opened so far is closed again.
func openBundle(rc *resolved, log *zap.Logger) (_ *bundle, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), openTimeout)
	defer cancel()
	b := &bundle{name: rc.Name, registry: x402.NewRegistry(), pricingURL: rc.PricingURL, verdictURL: rc.VerdictURL}
	defer func() {
		if err != nil {
			_ = b.Destruct()
		}
	}()
	b.served = new(x402.Registry)
	for _, nc := range rc.Networks {
		if err := b.registry.Add(nc.Network); err != nil {
			return nil, err
		}
		if err := b.served.Add(nc.Network); err != nil {
			return nil, err
		}
	}
	switch rc.StoreType {
	case facilitator.StoreRedis:
		s, err := approval.NewRedisStore(ctx, rc.StoreURL)
		if err != nil {
			return nil, fmt.Errorf("approval store: %w", err)
		}
		b.store = s
		b.closers = append(b.closers, s.Close)
		lim, err := ratelimit.OpenRedis(ctx, rc.StoreURL, approval.DefaultRedisKeyPrefix+"verdict-rate:", rate(rc), burst(rc))
		if err != nil {
			return nil, fmt.Errorf("verdict rate limit: %w", err)
		}
		b.limiter = lim
		b.closers = append(b.closers, lim.Close)
		r, err := redisretry.Open(ctx, rc.StoreURL, "")
		if err != nil {
			return nil, fmt.Errorf("payment ledger: %w", err)
		}
		b.ledger = r
		b.closers = append(b.closers, r.Close)
	default:
		s := approval.NewMemoryStore(rc.StoreMax)
		b.store = s
		b.closers = append(b.closers, s.Close)
	}
	switch rc.JournalType {
	case facilitator.JournalPostgres:
		j, err := journal.OpenPostgres(ctx, rc.JournalDSN)
		if err != nil {
			return nil, fmt.Errorf("journal: %w", err)
		}
		b.journal = j
	default:
		j, err := journal.OpenSQLite(ctx, rc.JournalPath)
		if err != nil {
			return nil, fmt.Errorf("journal: %w", err)
		}
		b.journal = j
	}
	b.closers = append(b.closers, b.journal.Close)
	if b.ledger == nil {
		// store memory: the payment ledger lives with the journal, so a restart keeps it
		// (docs/gate.md#payment-ledger).
		l, err := b.journal.Ledger(ctx)
		if err != nil {
			return nil, err
		}
		b.ledger = &gate.MemoryLedger{Ledger: l, MemoryPassBook: gate.NewMemoryPassBook(0)}
	}
	verdicts, err := newVerdicts(rc, b.registry, log)
	if err != nil {
		return nil, err
	}
	e, err := facilitator.Open(facilitator.Config{
		Networks:         rc.Networks,
		SignerKey:        rc.key,
		Store:            b.store,
		Journal:          b.journal,
		Verdicts:         verdicts,
		Pricing:          pricing(rc.PricingURL, b.registry),
		VerdictRate:      rc.VerdictRate,
		VerdictBurst:     rc.VerdictBurst,
		SubmitLimiter:    b.limiter,
		GuardianMode:     rc.GuardianMode,
		VerdictURL:       rc.VerdictURL,
		ApprovalTTL:      rc.ApprovalTTL,
		ReceiptTimeout:   rc.ReceiptTimeout,
		ERC6492Factories: rc.Factories,
		Logger:           log,
	})
	if err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	b.engine = e
	b.guardianMode = rc.GuardianMode
	b.verifyTimeout = verifyTimeout(rc)
	b.closers = append(b.closers, func() error { e.Close(); return nil })
	b.reconcile = rc.Reconcile
	if validating() {
		if err := checkChainIDs(e, log); err != nil {
			return nil, err
		}
	}
	b.unready.Store(int64(len(rc.Networks)))
	networksUnavailable.Add(float64(len(rc.Networks)))
	b.closers = append(b.closers, func() error {
		networksUnavailable.Sub(float64(b.unready.Swap(0)))
		return nil
	})
	return b, nil
}

// checkChainIDs is the chain id check of `caddy validate`, which never starts the app: a
// network whose RPC endpoint serves another chain fails the validation; one that cannot
// be reached is logged and passes, since the facilitator would wait for it.
func checkChainIDs(e *facilitator.Engine, log *zap.Logger) error {
	ctx, cancel := context.WithTimeout(context.Background(), validateChainTimeout)
	defer cancel()
	unreachable, err := e.CheckChainIDs(ctx)
	for _, n := range unreachable {
		log.Warn("x402 network's RPC endpoint did not answer: its chain id is not checked", zap.String("network", n))
	}
	if err != nil {
		return fmt.Errorf("engine: %w", err)
	}
	return nil
}

// start brings the engine's networks up in the background and starts its periodic
// reconcile, once per bundle however many configs share it; Destruct stops both. The app
// calls it from Start, so `caddy validate`, which only provisions, starts nothing, and
// start-up never waits on a chain (docs/facilitator.md#start-up).
func (b *bundle) start() {
	b.startOnce.Do(func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		if b.closers == nil {
			return // destructed
		}
		ctx, cancel := context.WithCancel(context.Background())
		wait := b.engine.Start(ctx, func(string) {
			b.unready.Add(-1)
			networksUnavailable.Dec()
		})
		done := make(chan struct{})
		go func() {
			defer close(done)
			b.engine.RunReconcile(ctx, b.reconcile)
		}()
		b.closers = append(b.closers, func() error {
			cancel()
			wait()
			<-done
			return nil
		})
	})
}

// Destruct closes the engine, the stores and the journal, in reverse order of opening.
// The UsagePool calls it when the last config holding the facilitator is cleaned up.
func (b *bundle) Destruct() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	var errs []error
	for i := len(b.closers) - 1; i >= 0; i-- {
		if err := b.closers[i](); err != nil {
			errs = append(errs, err)
		}
	}
	b.closers = nil
	return errors.Join(errs...)
}

var _ caddy.Destructor = (*bundle)(nil)
