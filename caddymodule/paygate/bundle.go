package paygate

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/ethereum/go-ethereum/common"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/x402gate/x402gate/facilitator"
	"github.com/x402gate/x402gate/facilitator/approval"
	"github.com/x402gate/x402gate/facilitator/journal"
	"github.com/x402gate/x402gate/gate"
	"github.com/x402gate/x402gate/gate/redisretry"
	"github.com/x402gate/x402gate/internal/ratelimit"
	"github.com/x402gate/x402gate/internal/redact"
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

// VerdictRateConfig is the per-payer rate of verdict requests.
type VerdictRateConfig struct {
	// Rate is the long-run number of verdict requests per second.
	Rate float64 `json:"rate,omitempty"`
	// Burst is how many may come at once.
	Burst int `json:"burst,omitempty"`
}

// validateFacilitator checks fc as written in a configuration, without I/O: its secrets
// are placeholders (checkSecrets), and the rest obeys facilitator.Config.Validate. App's
// Validate and the Caddyfile adapter call it.
func validateFacilitator(fc *facilitator.Config) error {
	if err := checkSecrets(fc); err != nil {
		return err
	}
	return fc.Validate()
}

// checkSecrets refuses a secret written into the configuration itself: the signer and
// verdict keys must be placeholders, and an RPC URL, a Redis URL or a PostgreSQL DSN must
// keep its credential in one (docs/caddy.md#secrets). Its errors are
// *facilitator.ConfigError and never quote the value.
func checkSecrets(fc *facilitator.Config) error {
	secrets := []struct{ option, v string }{{"signer_key", fc.SignerKey}, {"verdict_key", fc.VerdictKey}}
	for _, k := range fc.SignerKeys {
		secrets = append(secrets, struct{ option, v string }{"signer_key", k})
	}
	for _, sec := range secrets {
		if err := placeholderOnly(sec.option, sec.v); err != nil {
			return err
		}
	}
	for _, n := range fc.Networks {
		if err := literalSecret(n.Name, "rpc", n.RPC); err != nil {
			return err
		}
	}
	if s := fc.ApprovalStore; s != nil {
		if err := literalSecret("", "store", s.URL); err != nil {
			return err
		}
	}
	if j := fc.SettlementJournal; j != nil {
		return literalSecret("", "journal", j.DSN)
	}
	return nil
}

// literalSecret refuses a URL or DSN written with its credential in the clear: it would
// land in the adapted configuration, the admin API and autosave.json.
func literalSecret(network, option, v string) error {
	if why := redact.LiteralCredential(v); why != "" {
		return &facilitator.ConfigError{Network: network, Option: option,
			Err: fmt.Errorf("carries %s; give the secret as an {env.*} or {file.*} placeholder", why)}
	}
	return nil
}

// expand is a copy of fc, valid (validateFacilitator), with its placeholders expanded and
// the journal's default path filled in; the copy is checked again, since a value may
// expand to nothing or to something malformed. It is never logged.
func expand(name string, fc *facilitator.Config) (*facilitator.Config, error) {
	if err := validateFacilitator(fc); err != nil {
		return nil, err
	}
	repl := caddy.NewReplacer()
	c := *fc
	c.Networks = slices.Clone(fc.Networks)
	c.SignerKeys = slices.Clone(fc.SignerKeys)
	c.ApprovalStore, c.SettlementJournal = &facilitator.StoreConfig{}, &facilitator.JournalConfig{}
	if fc.ApprovalStore != nil {
		*c.ApprovalStore = *fc.ApprovalStore
	}
	if fc.SettlementJournal != nil {
		*c.SettlementJournal = *fc.SettlementJournal
	}
	secrets := []struct {
		option string
		dst    *string
	}{{"signer_key", &c.SignerKey}, {"store redis", &c.ApprovalStore.URL}, {"journal postgres", &c.SettlementJournal.DSN}}
	for i := range c.SignerKeys {
		secrets = append(secrets, struct {
			option string
			dst    *string
		}{"signer_key", &c.SignerKeys[i]})
	}
	for i := range c.Networks {
		secrets = append(secrets, struct {
			option string
			dst    *string
		}{"network " + c.Networks[i].Name + ": rpc", &c.Networks[i].RPC})
	}
	for _, v := range secrets {
		raw := *v.dst
		*v.dst = resolveSecret(repl, raw)
		if err := expanded(v.option, raw, *v.dst); err != nil {
			return nil, err
		}
	}
	c.VerdictKey = resolveSecret(repl, c.VerdictKey)
	c.SettlementJournal.Path = repl.ReplaceKnown(c.SettlementJournal.Path, "")
	c.VerdictURL = repl.ReplaceKnown(c.VerdictURL, "")
	c.PricingURL = repl.ReplaceKnown(c.PricingURL, "")
	if c.SettlementJournal.Type != facilitator.JournalPostgres && c.SettlementJournal.Path == "" {
		c.SettlementJournal.Path = defaultJournalPath(name)
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return &c, nil
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

// poolKey identifies the facilitator by name and a fingerprint of its expanded
// configuration c: a reload with the same configuration reuses the open facilitator. The
// fingerprint is a hash; it is never logged. An error (a field that does not encode) is
// returned rather than hashed away, so two configurations can never share a fingerprint
// by accident.
func poolKey(name string, c *facilitator.Config) (string, error) {
	b, err := json.Marshal(c)
	if err != nil {
		return "", fmt.Errorf("fingerprint of the configuration: %w", err)
	}
	sum := sha256.Sum256(b)
	return "x402.facilitator/" + name + "/" + hex.EncodeToString(sum[:]), nil
}

// bundle is one open bundled facilitator and the state a reload must keep.
type bundle struct {
	name       string
	engine     *facilitator.Service
	store      approval.Store
	journal    *journal.DB
	ledger     gate.Ledger // in Redis with store redis, else with the journal
	registry   *x402.Registry
	served     *x402.Registry // only the networks this facilitator serves, for gates' checks
	pricingURL string
	verdictURL string
	// verdictMode is the facilitator's GUARDIAN_MODE, checked against what gates advertise.
	verdictMode facilitator.VerdictMode
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
	// lanesOut counts the signer lanes out of the pool for a low gas balance, in
	// relayerInsufficientFunds.
	lanesOut atomic.Int64
}

// laneFunds is the engine's Config.OnLaneFunds: it counts the signer lanes out of the
// pool for a low gas balance in the relayer_insufficient_funds gauge.
func (b *bundle) laneFunds(_ string, _ common.Address, funded bool) {
	if funded {
		b.lanesOut.Add(-1)
		relayerInsufficientFunds.Dec()
		return
	}
	b.lanesOut.Add(1)
	relayerInsufficientFunds.Inc()
}

// dropLanesOut takes the bundle's lanes out of the relayer_insufficient_funds gauge when
// it closes: its engine no longer has a pool.
func (b *bundle) dropLanesOut() error {
	relayerInsufficientFunds.Sub(float64(b.lanesOut.Swap(0)))
	return nil
}

// openBundle opens the stores, the journal and the engine of the facilitator name, whose
// configuration c is expanded (expand). On error everything opened so far is closed again.
func openBundle(name string, c *facilitator.Config, log *zap.Logger) (_ *bundle, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), openTimeout)
	defer cancel()
	cfg := *c // the engine's own copy, given the parts opened here
	b := &bundle{name: name, registry: x402.NewRegistry(), pricingURL: cfg.PricingURL, verdictURL: cfg.VerdictURL}
	defer func() {
		if err != nil {
			_ = b.Destruct()
		}
	}()
	if b.served, err = cfg.Registry(); err != nil {
		return nil, err
	}
	for _, net := range b.served.Networks() {
		if err := b.registry.Add(net); err != nil {
			return nil, err
		}
	}
	rate, burst := cfg.Rate()
	switch cfg.ApprovalStore.Type {
	case facilitator.StoreRedis:
		url := cfg.ApprovalStore.URL
		s, err := approval.NewRedisStore(ctx, url)
		if err != nil {
			return nil, fmt.Errorf("approval store: %w", err)
		}
		b.store = s
		b.closers = append(b.closers, s.Close)
		lim, err := ratelimit.OpenRedis(ctx, url, approval.DefaultRedisKeyPrefix+"verdict-rate:", rate, burst)
		if err != nil {
			return nil, fmt.Errorf("verdict rate limit: %w", err)
		}
		b.limiter = lim
		b.closers = append(b.closers, lim.Close)
		r, err := redisretry.Open(ctx, url, "")
		if err != nil {
			return nil, fmt.Errorf("payment ledger: %w", err)
		}
		b.ledger = r
		b.closers = append(b.closers, r.Close)
	default:
		s := approval.NewMemoryStore(cfg.ApprovalStore.MaxEntries)
		b.store = s
		b.closers = append(b.closers, s.Close)
	}
	switch cfg.SettlementJournal.Type {
	case facilitator.JournalPostgres:
		j, err := journal.OpenPostgres(ctx, cfg.SettlementJournal.DSN)
		if err != nil {
			return nil, fmt.Errorf("journal: %w", err)
		}
		b.journal = j
	default:
		j, err := journal.OpenSQLite(ctx, cfg.SettlementJournal.Path)
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
	if cfg.Verdicts, err = newVerdicts(&cfg, b.registry, log); err != nil {
		return nil, err
	}
	cfg.Store, cfg.Journal, cfg.SubmitLimiter, cfg.Logger = b.store, b.journal, b.limiter, log
	cfg.Pricing = pricing(cfg.PricingURL, b.registry)
	cfg.OnLaneFunds = b.laneFunds
	b.closers = append(b.closers, b.dropLanesOut)
	e, err := facilitator.Open(cfg)
	if err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	b.engine = e
	b.verdictMode = cfg.VerdictMode
	b.verifyTimeout = verifyTimeout(&cfg)
	b.closers = append(b.closers, func() error { e.Close(); return nil })
	b.reconcile = cfg.Reconcile()
	if validating() {
		if err := checkChainIDs(e, log); err != nil {
			return nil, err
		}
	}
	b.unready.Store(int64(len(cfg.Networks)))
	networksUnavailable.Add(float64(len(cfg.Networks)))
	b.closers = append(b.closers, func() error {
		networksUnavailable.Sub(float64(b.unready.Swap(0)))
		return nil
	})
	return b, nil
}

// checkChainIDs is the chain id check of `caddy validate`, which never starts the app: a
// network whose RPC endpoint serves another chain fails the validation; one that cannot
// be reached is logged and passes, since the facilitator would wait for it.
func checkChainIDs(e *facilitator.Service, log *zap.Logger) error {
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
