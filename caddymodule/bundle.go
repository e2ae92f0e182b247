package caddymodule

import (
	"context"
	"crypto/ecdsa"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
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
	"github.com/x402gate/x402gate/x402"
)

// bundles holds the open facilitators, shared by every config that uses the same
// configuration (research/caddy.md §1.6).
var bundles = caddy.NewUsagePool()

// openTimeout bounds opening one facilitator: dialling RPCs, Redis, the database, and the
// startup reconcile.
const openTimeout = 2 * time.Minute

// Store and journal types.
const (
	storeMemory     = "memory"
	storeRedis      = "redis"
	journalSQLite   = "sqlite"
	journalPostgres = "postgres"
)

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
	Journal *JournalConfig `json:"journal,omitempty"`
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

// JournalConfig selects the settlement journal.
type JournalConfig struct {
	// Type is "sqlite" or "postgres". Default: sqlite.
	Type string `json:"type,omitempty"`
	// Path is the SQLite file. Default: in Caddy's data dir.
	Path string `json:"path,omitempty"`
	// DSN is the PostgreSQL DSN (placeholder; it holds a password). Required for postgres.
	DSN string `json:"dsn,omitempty"`
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
	ApprovalTTL    time.Duration
	ReceiptTimeout time.Duration
	Reconcile      time.Duration
	Factories      []common.Address

	key *ecdsa.PrivateKey
}

// placeholderOnly refuses a secret written into the config itself: it would land in the
// adapted JSON, the admin API (GET /config/) and autosave.json. Secrets are {env.*} or
// {file.*} placeholders, expanded at provision.
func placeholderOnly(option, v string) error {
	if v = strings.TrimSpace(v); v != "" && !strings.HasPrefix(v, "{") {
		return fmt.Errorf("%s must be an {env.*} or {file.*} placeholder, never the secret itself", option)
	}
	return nil
}

// resolveSecret expands {env.*} and {file.*} placeholders. A file's trailing newline is
// not part of a secret.
func resolveSecret(repl *caddy.Replacer, s string) string {
	return strings.TrimSpace(repl.ReplaceKnown(s, ""))
}

func (fc *FacilitatorConfig) resolve(name string) (*resolved, error) {
	repl := caddy.NewReplacer()
	rc := &resolved{Name: name}
	if len(fc.Networks) == 0 {
		return nil, errors.New("at least one network is required")
	}
	for i := range fc.Networks {
		nc, err := fc.Networks[i].resolve(repl)
		if err != nil {
			return nil, err
		}
		rc.Networks = append(rc.Networks, nc)
	}
	if strings.TrimSpace(fc.SignerKey) == "" {
		return nil, errors.New("signer_key is required, as an {env.*} or {file.*} placeholder")
	}
	for _, sec := range []struct{ option, v string }{{"signer_key", fc.SignerKey}, {"verdict_key", fc.VerdictKey}} {
		if err := placeholderOnly(sec.option, sec.v); err != nil {
			return nil, err
		}
	}
	rc.SignerKey = strings.TrimPrefix(resolveSecret(repl, fc.SignerKey), "0x")
	if rc.SignerKey == "" {
		return nil, errors.New("signer_key resolved to an empty value")
	}
	k, err := crypto.HexToECDSA(rc.SignerKey)
	if err != nil {
		return nil, errors.New("signer_key is not a hex secp256k1 private key") // never quote it
	}
	rc.key = k

	rc.StoreType = storeMemory
	if s := fc.Store; s != nil {
		switch s.Type {
		case "", storeMemory:
			if s.MaxEntries < 0 {
				return nil, errors.New("store memory: max entries must not be negative")
			}
			rc.StoreMax = s.MaxEntries
		case storeRedis:
			rc.StoreType = storeRedis
			if rc.StoreURL, err = requiredSecret(repl, s.URL, "store redis: url"); err != nil {
				return nil, err
			}
		default:
			return nil, fmt.Errorf("store: unknown type %q (want memory or redis)", s.Type)
		}
	}
	rc.JournalType = journalSQLite
	var jc JournalConfig
	if fc.Journal != nil {
		jc = *fc.Journal
	}
	switch jc.Type {
	case "", journalSQLite:
		rc.JournalPath = repl.ReplaceKnown(jc.Path, "")
		if rc.JournalPath == "" {
			rc.JournalPath = defaultJournalPath(name)
		}
	case journalPostgres:
		rc.JournalType = journalPostgres
		if rc.JournalDSN, err = requiredSecret(repl, jc.DSN, "journal postgres: dsn"); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("journal: unknown type %q (want sqlite or postgres)", jc.Type)
	}
	switch m := facilitator.GuardianMode(fc.GuardianMode); m {
	case "", facilitator.GuardianOff:
		rc.GuardianMode = facilitator.GuardianOff
	case facilitator.GuardianOptional, facilitator.GuardianRequired:
		rc.GuardianMode = m
	default:
		return nil, fmt.Errorf("guardian_mode %q is not off, optional or required", fc.GuardianMode)
	}
	rc.VerdictURL = repl.ReplaceKnown(fc.VerdictURL, "")
	rc.VerdictKey = resolveSecret(repl, fc.VerdictKey)
	rc.PricingURL = repl.ReplaceKnown(fc.PricingURL, "")
	if rc.GuardianMode != facilitator.GuardianOff && rc.VerdictURL == "" {
		// Fail closed: a guardian mode without a verdict service would refuse or,
		// worse, wave through every payment.
		return nil, fmt.Errorf("guardian_mode %s needs verdict_url", rc.GuardianMode)
	}
	for _, u := range []struct{ name, v string }{{"verdict_url", rc.VerdictURL}, {"pricing_url", rc.PricingURL}} {
		if u.v == "" {
			continue
		}
		if p, err := url.Parse(u.v); err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
			return nil, fmt.Errorf("%s must be an absolute http(s) url", u.name)
		}
	}
	if vp := fc.VerdictPoll; vp != nil {
		if vp.Interval < 0 || vp.MaxAttempts < 0 || vp.MaxDelay < 0 {
			return nil, errors.New("verdict_poll values must not be negative")
		}
		if vp.Interval > 0 && vp.Interval < caddy.Duration(time.Millisecond) {
			return nil, errors.New("verdict_poll interval must be at least 1ms")
		}
		rc.PollInterval, rc.PollAttempts, rc.PollMaxDelay = time.Duration(vp.Interval), vp.MaxAttempts, time.Duration(vp.MaxDelay)
	}
	rc.Reconcile = time.Duration(fc.ReconcileInterval)
	switch {
	case rc.Reconcile < 0:
		return nil, errors.New("reconcile_interval must not be negative")
	case rc.Reconcile == 0:
		rc.Reconcile = defaultReconcileInterval
	case rc.Reconcile < time.Second:
		return nil, errors.New("reconcile_interval must be at least 1s")
	}
	rc.ApprovalTTL = time.Duration(fc.ApprovalTTL)
	rc.ReceiptTimeout = time.Duration(fc.ReceiptTimeout)
	if rc.ApprovalTTL < 0 || rc.ReceiptTimeout < 0 {
		return nil, errors.New("approval_ttl and receipt_timeout must not be negative")
	}
	for _, f := range fc.ERC6492Factories {
		if !common.IsHexAddress(f) {
			return nil, fmt.Errorf("erc6492_factories: %q is not an address", f)
		}
		rc.Factories = append(rc.Factories, common.HexToAddress(f))
	}
	return rc, nil
}

// requiredSecret resolves the connection string of a remote store or journal (which may
// hold a password); what names it in the error when it resolves to nothing.
func requiredSecret(repl *caddy.Replacer, raw, what string) (string, error) {
	v := resolveSecret(repl, raw)
	if v == "" {
		return "", errors.New(what + " is required")
	}
	return v, nil
}

// defaultJournalPath is the SQLite journal in Caddy's data dir.
func defaultJournalPath(name string) string {
	if name == DefaultFacilitatorName {
		return filepath.Join(caddy.AppDataDir(), "x402", "journal.db")
	}
	return filepath.Join(caddy.AppDataDir(), "x402", name, "journal.db")
}

// builtinNetworks resolves the names every config knows.
var builtinNetworks = x402.NewRegistry()

func (n *NetworkConfig) resolve(repl *caddy.Replacer) (facilitator.NetworkConfig, error) {
	if n.Name == "" {
		return facilitator.NetworkConfig{}, errors.New("network: a name is required")
	}
	net, err := n.network()
	if err != nil {
		return facilitator.NetworkConfig{}, err
	}
	nc := facilitator.NetworkConfig{Network: net, RPCURL: resolveSecret(repl, n.RPC)}
	if nc.RPCURL == "" {
		return facilitator.NetworkConfig{}, fmt.Errorf("network %s: rpc is required", n.Name)
	}
	if n.MinAmount != "" {
		m, ok := new(big.Int).SetString(n.MinAmount, 10)
		if !ok || m.Sign() < 0 {
			return facilitator.NetworkConfig{}, fmt.Errorf("network %s: min_amount %q is not a non-negative integer of base units", n.Name, n.MinAmount)
		}
		nc.MinAmount = m
	}
	return nc, nil
}

// network builds the x402.Network of n, without secrets, so the Caddyfile adapter can
// check names too.
func (n *NetworkConfig) network() (x402.Network, error) {
	net, builtin := builtinNetworks.Lookup(n.Name)
	if !builtin {
		id := n.ChainID
		if s, ok := strings.CutPrefix(n.Name, "eip155:"); ok {
			id, _ = strconv.ParseUint(s, 10, 64)
		} else if v, err := strconv.ParseUint(n.Name, 10, 64); err == nil {
			id = v
		}
		if id == 0 {
			return x402.Network{}, fmt.Errorf("network %q is not built in (base, base-sepolia): chain_id is required", n.Name)
		}
		net = x402.Network{Name: n.Name, ChainID: new(big.Int).SetUint64(id), CAIP2: "eip155:" + strconv.FormatUint(id, 10)}
		if strings.HasPrefix(n.Name, "eip155:") {
			net.Name = strconv.FormatUint(id, 10)
		}
	} else if n.ChainID != 0 && new(big.Int).SetUint64(n.ChainID).Cmp(net.ChainID) != 0 {
		return x402.Network{}, fmt.Errorf("network %s: chain_id %d is not the built-in network's %s", n.Name, n.ChainID, net.ChainID)
	}
	if n.Decimals < 0 || n.Decimals > 36 {
		return x402.Network{}, fmt.Errorf("network %s: decimals %d out of range 0..36", n.Name, n.Decimals)
	}
	if n.Asset != "" {
		if !common.IsHexAddress(n.Asset) || !strings.HasPrefix(n.Asset, "0x") {
			return x402.Network{}, fmt.Errorf("network %s: asset %q is not a 0x address", n.Name, n.Asset)
		}
		a := common.HexToAddress(n.Asset)
		if a != net.USDC.Address {
			if n.AssetName == "" {
				return x402.Network{}, fmt.Errorf("network %s: asset_name (the token's EIP-712 name) is required with a non-default asset", n.Name)
			}
			version := net.USDC.Version
			if version == "" {
				version = "2"
			}
			net.USDC = x402.Asset{Address: a, Name: n.AssetName, Version: version, Decimals: 6, Symbol: "USDC"}
		}
	} else if !builtin {
		return x402.Network{}, fmt.Errorf("network %s: asset is required for a network that is not built in", n.Name)
	}
	if n.AssetName != "" {
		net.USDC.Name = n.AssetName
	}
	if n.AssetVersion != "" {
		net.USDC.Version = n.AssetVersion
	}
	if n.Decimals != 0 {
		net.USDC.Decimals = n.Decimals
	}
	if n.Symbol != "" {
		net.USDC.Symbol = n.Symbol
	}
	return net, nil
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
	retries    gate.RetryStore
	registry   *x402.Registry
	pricingURL string
	verdictURL string
	// guardianMode is the facilitator's GUARDIAN_MODE, checked against what gates advertise.
	guardianMode facilitator.GuardianMode
	closers      []func() error
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
	for _, nc := range rc.Networks {
		if err := b.registry.Add(nc.Network); err != nil {
			return nil, err
		}
	}
	switch rc.StoreType {
	case storeRedis:
		s, err := approval.NewRedisStore(ctx, rc.StoreURL)
		if err != nil {
			return nil, fmt.Errorf("approval store: %w", err)
		}
		b.store = s
		b.closers = append(b.closers, s.Close)
		r, err := redisretry.Open(ctx, rc.StoreURL, "")
		if err != nil {
			return nil, fmt.Errorf("retry store: %w", err)
		}
		b.retries = r
		b.closers = append(b.closers, r.Close)
	default:
		s := approval.NewMemoryStore(rc.StoreMax)
		b.store = s
		b.closers = append(b.closers, s.Close)
		b.retries = gate.NewMemoryRetryStore(0)
	}
	switch rc.JournalType {
	case journalPostgres:
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
	verdicts, err := newVerdicts(rc, b.registry, log)
	if err != nil {
		return nil, err
	}
	e, err := facilitator.New(ctx, facilitator.Config{
		Networks:         rc.Networks,
		SignerKey:        rc.key,
		Store:            b.store,
		Journal:          b.journal,
		Verdicts:         verdicts,
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
	b.closers = append(b.closers, func() error { e.Close(); return nil })
	b.closers = append(b.closers, reconcileEvery(e, rc.Reconcile, log))
	return b, nil
}

// defaultReconcileInterval is how often a bundled facilitator reconciles its journal.
const defaultReconcileInterval = time.Minute

// reconcileEvery runs e.ReconcileIdle every interval until the returned stop is called, which
// waits for a run in progress. A run is bounded by the interval plus the receipt waits it
// may make; errors are logged (the journal keeps every row for the next run).
func reconcileEvery(e *facilitator.Engine, interval time.Duration, log *zap.Logger) (stop func() error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			rep, err := e.ReconcileIdle(ctx)
			if err != nil {
				log.Error("periodic reconcile", zap.Error(err))
				continue
			}
			if rep.Checked > 0 {
				log.Info("periodic reconcile", zap.Int("checked", rep.Checked), zap.Int("confirmed", rep.Confirmed),
					zap.Int("failed", rep.Failed), zap.Int("resent", rep.Resent), zap.Int("pending", rep.Pending), zap.Int("bumped", rep.Bumped))
			}
		}
	}()
	return func() error {
		cancel()
		<-done
		return nil
	}
}

// Destruct closes the engine, the stores and the journal, in reverse order of opening.
// The UsagePool calls it when the last config holding the facilitator is cleaned up.
func (b *bundle) Destruct() error {
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
