package facilitator

import (
	"context"
	"crypto/ecdsa"
	"errors"
	"fmt"
	"math/big"
	"net/url"
	"strings"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"go.uber.org/zap"

	"github.com/x402gate/x402gate/facilitator/approval"
	"github.com/x402gate/x402gate/facilitator/journal"
	"github.com/x402gate/x402gate/internal/ratelimit"
	"github.com/x402gate/x402gate/x402"
)

// Store and journal kinds of Config.
const (
	StoreMemory     = "memory"
	StoreRedis      = "redis"
	JournalSQLite   = "sqlite"
	JournalPostgres = "postgres"
)

// Defaults of Config.
const (
	DefaultApprovalTTL    = 5 * time.Minute
	DefaultReceiptTimeout = 30 * time.Second
	DefaultRPCTimeout     = 30 * time.Second
	DefaultBalanceCache   = 30 * time.Second
	DefaultStuckAfter     = 2 * time.Minute
	DefaultTakeoverAfter  = 5 * time.Second
	// DefaultReconcileInterval is how often a running facilitator reconciles its journal.
	DefaultReconcileInterval = time.Minute
	// DefaultMaxFeeFactor: with Config.MaxFeePerGas nil, a settlement's replacements
	// never offer a fee cap above this multiple of its first transaction's cap.
	DefaultMaxFeeFactor = 10
	// DefaultVerdictRate is how many verdict requests per second one payer may make in
	// the long run.
	DefaultVerdictRate = 1.0
	// DefaultVerdictBurst is how many one payer may make at once.
	DefaultVerdictBurst = 10
	// DefaultBalanceCheckInterval is how often the signer pool reads its lanes' gas
	// balances.
	DefaultBalanceCheckInterval = 30 * time.Second
	// DefaultMaxPendingPerSigner is go-ethereum's executable transaction slots per account
	// (txpool AccountSlots): a lane keeps no more settlements in flight.
	DefaultMaxPendingPerSigner = 16
)

// Config is a facilitator's configuration: its JSON is what an operator writes (the x402
// Caddy app's facilitators, docs/facilitator.md#configuration), and Validate holds every
// rule of it. Secret fields (signer_key, verdict_key, a network's rpc, the store's url,
// the journal's dsn) may hold placeholders until an adapter expands them; Validate then
// checks only that they are set. The fields without JSON are tuning and the parts a
// caller opens and hands over (the stores, the journal, the verdict client).
type Config struct {
	// Networks are the chains served. At least one is required.
	Networks []NetworkConfig `json:"networks,omitempty"`
	// SignerKey is the facilitator account's hex private key: it pays gas for every
	// settlement. The facilitator owns this account's nonce, so each instance of a fleet
	// must use its own key (instances that share a key would race for nonces). Required
	// unless Signer is set.
	SignerKey string `json:"signer_key,omitempty"`
	// SignerKeys are more signer keys, each a lane beside SignerKey's, the primary signer
	// (docs/facilitator.md#signer-pool). Default: none, a pool of one.
	SignerKeys []string `json:"signer_keys,omitempty"`
	// MinGasBalance is the gas balance in wei under which a lane leaves the pool
	// (relayer_insufficient_funds). Default DefaultMinGasBalance (0.001 ETH).
	MinGasBalance string `json:"min_gas_balance,omitempty"`
	// BalanceCheckInterval is how often the lanes' gas balances are read. Default 30s.
	BalanceCheckInterval Duration `json:"balance_check_interval,omitempty"`
	// MaxPendingPerSigner bounds the settlements in flight per lane; past it a settle
	// waits for a free lane. Default DefaultMaxPendingPerSigner (16).
	MaxPendingPerSigner int `json:"max_pending_per_signer,omitempty"`
	// ApprovalStore selects the store of approvals and settlement claims. Default: memory.
	ApprovalStore *StoreConfig `json:"store,omitempty"`
	// SettlementJournal selects the settlement journal. Default: SQLite, at a path the
	// adapter chooses.
	SettlementJournal *JournalConfig `json:"journal,omitempty"`
	// VerdictMode is GUARDIAN_MODE: when /verify consults the verdict service. Default
	// VerdictOff.
	VerdictMode VerdictMode `json:"guardian_mode,omitempty"`
	// VerdictURL is the verdict service's base URL, http or https. Required when
	// VerdictMode is optional or required and Verdicts is nil. The Service does not dial
	// it: its caller builds Verdicts (NewVerdictClient), and without one every verdict is
	// an error (fail closed).
	VerdictURL string `json:"verdict_url,omitempty"`
	// VerdictKey is the verdict service's API key. Default: none.
	VerdictKey string `json:"verdict_key,omitempty"`
	// VerdictSigner is the address that signs the verdict service's verdicts
	// (docs/verdict-signing.md#checking-at-the-gate): every verdict must carry its valid,
	// unexpired signature over the payment, or the payment is refused. Default: none,
	// verdicts are not checked for a signature.
	VerdictSigner string `json:"verdict_signer,omitempty"`
	// PricingURL is the pricing service of the verification fee. Default: none.
	PricingURL string `json:"pricing_url,omitempty"`
	// VerdictPoll bounds the wait for a terminal verdict. Default: the verdict client's,
	// the spec's 1s interval and 20 attempts, with delays capped at 5s.
	VerdictPoll *VerdictPollConfig `json:"verdict_poll,omitempty"`
	// VerdictRate limits the verdict requests of one payer. Default: DefaultVerdictRate
	// (1/s) and DefaultVerdictBurst (10). A repeated /verify of a payment asks again and
	// counts like a first (docs/facilitator.md#fresh-verdicts).
	VerdictRate *RateConfig `json:"verdict_rate,omitempty"`
	// ApprovalTTL bounds how long an approval stays usable. Default 5m; an approval never
	// outlives the authorization's validBefore.
	ApprovalTTL Duration `json:"approval_ttl,omitempty"`
	// ReceiptTimeout bounds the wait for a settlement's receipt. Default 30s; after it the
	// settlement is reported as settlement_pending with its transaction hash.
	ReceiptTimeout Duration `json:"receipt_timeout,omitempty"`
	// ReconcileInterval is how often the journal's unfinished settlements are reconciled
	// while the facilitator runs, besides at start. Default DefaultReconcileInterval (1m).
	ReconcileInterval Duration `json:"reconcile_interval,omitempty"`
	// ERC6492Factories lists, as 0x-hex addresses, the wallet factories whose ERC-6492
	// wrapped signatures of not-yet-deployed wallets are accepted. Default: none.
	ERC6492Factories []string `json:"erc6492_factories,omitempty"`

	// Signer is the key of SignerKey, for a caller that holds it already. Default: parsed
	// from SignerKey.
	Signer *ecdsa.PrivateKey `json:"-"`
	// Signers are the keys of SignerKeys, for a caller that holds them already. Default:
	// parsed from SignerKeys.
	Signers []*ecdsa.PrivateKey `json:"-"`
	// OnLaneFunds, when set, is told each time a lane leaves the pool for a low gas balance
	// (funded false) or comes back (true).
	OnLaneFunds func(network string, signer common.Address, funded bool) `json:"-"`
	// Store holds approvals and settlement claims. Use an approval.RedisStore shared by every
	// instance of a fleet. Required.
	Store approval.Store `json:"-"`
	// Journal is the settlement journal. Required.
	Journal journal.Journal `json:"-"`
	// Verdicts is the verdict service client. Default nil: when VerdictMode asks for a
	// verdict, /verify fails closed.
	Verdicts Verdicts `json:"-"`
	// Pricing quotes the verification fee of a merchant requirement: the facilitator's own
	// pricing service (verdictclient.Pricing). A /verify's verificationRequirements are
	// settled only when they equal its quote exactly. Default nil: no verification fee is
	// ever settled, and a /verify that brings one is invalid (FeeNotQuoted).
	Pricing func(ctx context.Context, merchant *x402.Requirements) (*x402.Requirements, error) `json:"-"`
	// SubmitLimiter applies VerdictRate per payer. Default: an in-process ratelimit.Memory;
	// a fleet gives every instance a ratelimit.Redis on one Redis.
	SubmitLimiter SubmitLimiter `json:"-"`
	// MaxMarkersPerPayer bounds, per payer, the optional-mode payments sent for a verdict
	// and not settled yet; a /verify past it is refused without asking. Default
	// DefaultMaxMarkersPerPayer (32).
	MaxMarkersPerPayer int `json:"-"`
	// RPCTimeout bounds each JSON-RPC request over HTTP, whatever its caller's context, so
	// that a node that accepts a request and never answers cannot hold a settle, a
	// reconcile run or a health read forever. Default DefaultRPCTimeout (30 s)
	// (docs/reliability.md#resource-limits).
	RPCTimeout time.Duration `json:"-"`
	// StuckAfter is how long an unmined settlement transaction that is next in the signer's
	// nonce order may wait before Reconcile replaces it with a fee-bumped one, even though
	// its fee cap still covers the base fee (a tip too low to be picked). A transaction whose
	// fee cap is below the base fee is replaced at once. Default 2m; negative: only the
	// base-fee test applies.
	StuckAfter time.Duration `json:"-"`
	// TakeoverAfter is how long a settlement that another instance's signer journaled and
	// never marked broadcast (that instance died between the two) must stay unchanged before
	// SettlementStatus sends its journaled transaction again itself: the same signed bytes
	// and hash, never a new transaction (docs/facilitator.md#takeover). Default
	// DefaultTakeoverAfter (5 s); negative: SettlementStatus never sends anything.
	TakeoverAfter time.Duration `json:"-"`
	// MaxFeePerGas is the highest fee cap (wei per gas) a fee-bumped replacement may offer.
	// Default nil: DefaultMaxFeeFactor (10) times the fee cap of the settlement's first
	// transaction. A settlement that would need more is left pending and reported with
	// ReconcileFeeCeiling.
	MaxFeePerGas *big.Int `json:"-"`
	// BalanceCacheTTL is how long Info caches the signer's native balance. Default 30s.
	BalanceCacheTTL time.Duration `json:"-"`
	// SkipStartupReconcile makes a network ready without the start-up reconcile of its
	// unfinished settlements (New, Start). Default false.
	SkipStartupReconcile bool `json:"-"`
	// Logger receives payer, request hash and transaction hash fields, never keys or RPC
	// URLs. Default zap.NewNop().
	Logger *zap.Logger `json:"-"`
	// Now is the clock. Default time.Now.
	Now func() time.Time `json:"-"`

	// beforeBroadcast, when set, runs after the journal row is written and before the
	// transaction is sent; an error aborts the send. A test seam that simulates a crash.
	beforeBroadcast func(journal.Settlement) error

	factories map[common.Address]bool // ERC6492Factories, parsed by prepare
	minGas    *big.Int                // MinGasBalance, parsed by prepare
}

// StoreConfig selects the approval store.
type StoreConfig struct {
	// Type is StoreMemory or StoreRedis. Default: StoreMemory.
	Type string `json:"type,omitempty"`
	// MaxEntries bounds a memory store. Default: approval.DefaultMemoryStoreSize.
	MaxEntries int `json:"max_entries,omitempty"`
	// URL is the Redis URL (it may hold a password). Required for StoreRedis.
	URL string `json:"url,omitempty"`
}

// JournalConfig selects the settlement journal.
type JournalConfig struct {
	// Type is JournalSQLite or JournalPostgres. Default: JournalSQLite.
	Type string `json:"type,omitempty"`
	// Path is the SQLite file. Default: chosen by the adapter.
	Path string `json:"path,omitempty"`
	// DSN is the PostgreSQL DSN (it holds a password). Required for JournalPostgres.
	DSN string `json:"dsn,omitempty"`
}

// VerdictPollConfig is how /verify polls the verdict service: the first delay, doubled up
// to MaxDelay, for at most MaxAttempts reads. A verdict still pending at the bound is a
// refusal (fail closed).
type VerdictPollConfig struct {
	// Interval is the first delay. Default: 1s.
	Interval Duration `json:"interval,omitempty"`
	// MaxAttempts is the number of status reads, the first included. Default: 20.
	MaxAttempts int `json:"max_attempts,omitempty"`
	// MaxDelay caps each delay. Default: 5s.
	MaxDelay Duration `json:"max_delay,omitempty"`
}

// RateConfig is a rate of requests: Rate per second in the long run, Burst at once.
type RateConfig struct {
	// Rate is the long-run number of requests per second.
	Rate float64 `json:"rate,omitempty"`
	// Burst is how many may come at once.
	Burst int `json:"burst,omitempty"`
}

// ConfigError is a Config that Validate refuses. Option is the setting's name as a
// configuration file spells it (rpc, guardian_mode, …); Network names the network whose
// option it is, if any.
type ConfigError struct {
	Network string
	Option  string
	Err     error
}

// Error names the option and says what is wrong with it.
func (e *ConfigError) Error() string {
	if e.Network != "" {
		return "network " + e.Network + ": " + e.Option + ": " + e.Err.Error()
	}
	return e.Option + ": " + e.Err.Error()
}

// Unwrap returns the cause, for errors.Is and errors.As.
func (e *ConfigError) Unwrap() error { return e.Err }

func configErr(network, option, format string, args ...any) error {
	return &ConfigError{Network: network, Option: option, Err: fmt.Errorf(format, args...)}
}

// Validate checks c without I/O: every rule of a facilitator's configuration lives here.
// A value that still holds a placeholder ({env.*}, {file.*}) is checked only for being
// set; an adapter calls Validate again once it has expanded them. Its errors are
// *ConfigError.
func (c *Config) Validate() error {
	if err := c.validateNetworks(); err != nil {
		return err
	}
	switch k := strings.TrimSpace(c.SignerKey); {
	case k == "" && c.Signer == nil:
		return configErr("", "signer_key", "is required")
	case k != "" && !strings.Contains(k, "{"):
		if _, err := parseSignerKey(k); err != nil {
			return err
		}
	}
	if err := c.validatePool(); err != nil {
		return err
	}
	if err := c.validateStores(); err != nil {
		return err
	}
	if err := c.validateVerdicts(); err != nil {
		return err
	}
	switch {
	case c.ReconcileInterval < 0 || (c.ReconcileInterval > 0 && c.ReconcileInterval < Duration(time.Second)):
		return configErr("", "reconcile_interval", "must be at least 1s")
	case c.ApprovalTTL < 0:
		return configErr("", "approval_ttl", "must not be negative")
	case c.ReceiptTimeout < 0:
		return configErr("", "receipt_timeout", "must not be negative")
	case c.MaxFeePerGas != nil && c.MaxFeePerGas.Sign() <= 0:
		return configErr("", "max_fee_per_gas", "must be positive")
	}
	for _, f := range c.ERC6492Factories {
		if _, err := x402.ParseAddress(f); err != nil {
			return configErr("", "erc6492_factories", "%w", err)
		}
	}
	return nil
}

// validateNetworks checks that there is at least one network, each valid and listed once.
func (c *Config) validateNetworks() error {
	if len(c.Networks) == 0 {
		return configErr("", "network", "at least one is required")
	}
	seen := map[string]bool{}
	for _, n := range c.Networks {
		if err := n.validate(); err != nil {
			return err
		}
		net, _ := n.Network()
		if seen[n.Name] || seen[net.CAIP2] {
			return configErr(n.Name, "network", "is listed twice")
		}
		seen[n.Name], seen[net.CAIP2] = true, true
	}
	return nil
}

// validateStores checks the approval store and the journal.
func (c *Config) validateStores() error {
	s, j := c.ApprovalStore, c.SettlementJournal
	if s == nil {
		s = &StoreConfig{}
	}
	if j == nil {
		j = &JournalConfig{}
	}
	switch s.Type {
	case "", StoreMemory:
		if s.MaxEntries < 0 {
			return configErr("", "store", "max entries %d must not be negative", s.MaxEntries)
		}
	case StoreRedis:
		if s.URL == "" {
			return configErr("", "store", "redis needs its url")
		}
	default:
		return configErr("", "store", "unknown type %q (want %s or %s)", s.Type, StoreMemory, StoreRedis)
	}
	switch j.Type {
	case "", JournalSQLite:
	case JournalPostgres:
		if j.DSN == "" {
			return configErr("", "journal", "postgres needs its dsn")
		}
	default:
		return configErr("", "journal", "unknown type %q (want %s or %s)", j.Type, JournalSQLite, JournalPostgres)
	}
	return nil
}

// validateVerdicts checks the verdict mode, the verdict and pricing services, the poll
// bounds and the rate.
func (c *Config) validateVerdicts() error {
	switch c.VerdictMode {
	case "", VerdictOff:
	case VerdictOptional, VerdictRequired:
		if c.VerdictURL == "" && c.Verdicts == nil {
			// docs/facilitator.md#guardian: fail closed, a guardian mode without a verdict
			// service would refuse, or worse wave through, every payment.
			return configErr("", "guardian_mode", "%s needs verdict_url", c.VerdictMode)
		}
	default:
		return configErr("", "guardian_mode", "%q is not off, optional or required", c.VerdictMode)
	}
	for _, u := range []struct{ option, v string }{{"verdict_url", c.VerdictURL}, {"pricing_url", c.PricingURL}} {
		if u.v == "" || strings.Contains(u.v, "{") {
			continue // a placeholder: checked once expanded
		}
		if p, err := url.Parse(u.v); err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
			return configErr("", u.option, "must be an absolute http(s) url")
		}
	}
	switch s := c.VerdictSigner; {
	case s == "":
	case !common.IsHexAddress(s) || common.HexToAddress(s) == (common.Address{}):
		return configErr("", "verdict_signer", "must be a non-zero address: 0x and 40 hex digits")
	case c.VerdictURL == "" && c.Verdicts == nil:
		return configErr("", "verdict_signer", "needs verdict_url: it checks the verdicts of that service")
	}
	if r := c.VerdictRate; r != nil && (r.Rate < 0 || r.Burst < 0) {
		return configErr("", "verdict_rate", "values must not be negative")
	}
	if p := c.VerdictPoll; p != nil {
		switch {
		case p.Interval < 0 || p.MaxAttempts < 0 || p.MaxDelay < 0:
			return configErr("", "verdict_poll", "values must not be negative")
		case p.Interval > 0 && p.Interval < Duration(time.Millisecond):
			return configErr("", "verdict_poll", "interval must be at least 1ms")
		}
	}
	return nil
}

// Reconcile is ReconcileInterval, or its default.
func (c *Config) Reconcile() time.Duration {
	if c.ReconcileInterval == 0 {
		return DefaultReconcileInterval
	}
	return time.Duration(c.ReconcileInterval)
}

// Rate is VerdictRate with its defaults: requests per second, and at once.
func (c *Config) Rate() (float64, int) {
	rate, burst := DefaultVerdictRate, DefaultVerdictBurst
	if r := c.VerdictRate; r != nil && r.Rate > 0 {
		rate = r.Rate
	}
	if r := c.VerdictRate; r != nil && r.Burst > 0 {
		burst = r.Burst
	}
	return rate, burst
}

// prepare validates c, checks the parts a caller hands over, parses the signer key and
// the factories, and fills the defaults.
func (c *Config) prepare() error {
	if err := c.Validate(); err != nil {
		return fmt.Errorf("facilitator config: %w", err)
	}
	switch {
	case c.Store == nil:
		return errors.New("facilitator config: approval store is required")
	case c.Journal == nil:
		return errors.New("facilitator config: journal is required")
	}
	if c.Signer == nil {
		k, err := parseSignerKey(c.SignerKey)
		if err != nil {
			return fmt.Errorf("facilitator config: %w", err)
		}
		c.Signer = k
	}
	if c.Signers == nil {
		for _, ks := range c.SignerKeys {
			k, err := parseSignerKey(ks)
			if err != nil {
				return fmt.Errorf("facilitator config: %w", err)
			}
			c.Signers = append(c.Signers, k)
		}
	}
	if err := c.checkDistinctKeys(); err != nil {
		return err
	}
	minGas, err := c.minGasBalance()
	if err != nil {
		return fmt.Errorf("facilitator config: %w", err)
	}
	c.minGas = minGas
	c.factories = map[common.Address]bool{}
	for _, f := range c.ERC6492Factories {
		c.factories[common.HexToAddress(f)] = true
	}
	if c.VerdictMode == "" {
		c.VerdictMode = VerdictOff
	}
	c.fillDefaults()
	return nil
}

// fillDefaults sets every unset field that has a default.
func (c *Config) fillDefaults() {
	for _, d := range []struct {
		v   *time.Duration
		def time.Duration
	}{
		{(*time.Duration)(&c.ApprovalTTL), DefaultApprovalTTL}, {(*time.Duration)(&c.ReceiptTimeout), DefaultReceiptTimeout},
		{&c.RPCTimeout, DefaultRPCTimeout}, {&c.BalanceCacheTTL, DefaultBalanceCache},
	} {
		if *d.v <= 0 {
			*d.v = d.def
		}
	}
	if c.BalanceCheckInterval <= 0 {
		c.BalanceCheckInterval = Duration(DefaultBalanceCheckInterval)
	}
	if c.MaxPendingPerSigner <= 0 {
		c.MaxPendingPerSigner = DefaultMaxPendingPerSigner
	}
	if c.StuckAfter == 0 {
		c.StuckAfter = DefaultStuckAfter
	}
	if c.TakeoverAfter == 0 {
		c.TakeoverAfter = DefaultTakeoverAfter
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	if c.SubmitLimiter == nil {
		c.SubmitLimiter = ratelimit.NewMemory(c.Rate())
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}
