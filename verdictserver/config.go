package verdictserver

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"math"
	"math/big"
	"time"

	"github.com/ethereum/go-ethereum/common"

	"github.com/x402gate/x402gate/internal/redact"
	"github.com/x402gate/x402gate/internal/sqldb"
	"github.com/x402gate/x402gate/verdictserver/engine"
	"github.com/x402gate/x402gate/verdictserver/engine/prices"
	"github.com/x402gate/x402gate/x402"
)

// DefaultSanctionsRefresh is how often the sanctions file is checked by default.
const DefaultSanctionsRefresh = time.Hour

// Config is the verdict service's one configuration, everything an operator sets, as JSON
// states it: the Caddy verdict app embeds it (docs/caddy.md#the-verdict-app), and it embeds
// the engine's engine.Config. Validate checks it without I/O; the methods PriceEntries,
// FeeSchedule and ChainData give what it configures. Secrets (the store's DSN, Redis, the
// admin key, the RPC URLs) are the caller's to expand: New takes the expanded copy, and
// the store, the engine and the Redis client the caller opened from it, in Deps.
type Config struct {
	// Store is the database of agents, keys, wallets, policies and transactions.
	// Default: sqlite at a path the caller chooses.
	Store *sqldb.Config `json:"store,omitempty"`
	// Redis is the URL of the Redis that holds the rate-limit buckets shared by several
	// instances (it may hold a password). Default: none, the buckets are in process.
	Redis string `json:"redis,omitempty"`
	// AdminKey is the admin API's key (header x-admin-key), at least 16 characters once
	// expanded (AdminKeyHash checks that, and New calls it). Default: none; only agent keys with an admin scope reach
	// the admin API.
	AdminKey string `json:"admin_key,omitempty"`
	// Workers is how many evaluations run at once, and how many submits are judged at once
	// before they are stored (docs/verdict-api.md#lifecycle). Default: 64 (DefaultWorkers).
	Workers int `json:"workers,omitempty"`
	// Queue bounds the evaluations waiting for a worker. Default: 1024 (DefaultQueue).
	Queue int `json:"queue,omitempty"`
	// RateKey limits the requests of one API key. Default: 20/s, burst 40.
	RateKey *RateConfig `json:"rate_key,omitempty"`
	// RateIP limits the requests of one client IP. Default: 50/s, burst 100.
	RateIP *RateConfig `json:"rate_ip,omitempty"`
	// Config is the engine's: the sanctions list file (sanctions) and how long it counts
	// as fresh (sanctions_ttl).
	engine.Config
	// SanctionsRefresh is how often the sanctions file is checked, and read again when it
	// changed. Default: 1h (DefaultSanctionsRefresh).
	SanctionsRefresh engine.Duration `json:"sanctions_refresh,omitempty"`
	// SanctionsOracles are Chainalysis-style sanctions oracles, at most one per chain, each
	// on a chain with an RPC. Default: none.
	SanctionsOracles []OracleConfig `json:"sanctions_oracles,omitempty"`
	// Prices are USD prices of tokens, besides the built-in stablecoins.
	Prices []PriceConfig `json:"prices,omitempty"`
	// PriceFeeds are Chainlink-style price feeds of tokens the prices do not list, each on
	// a chain with an RPC. Default: none.
	PriceFeeds []PriceFeedConfig `json:"price_feeds,omitempty"`
	// RPC are the JSON-RPC endpoints of the chains of PriceFeeds and SanctionsOracles.
	// Default: none.
	RPC []RPCConfig `json:"rpc,omitempty"`
	// Fee is the verification fee schedule of POST /pricing/quote. Default: none, every
	// quote is null.
	Fee *FeeConfig `json:"fee,omitempty"`
	// SigningConfig signs terminal verdicts (signer_key, signature_ttl;
	// docs/verdict-signing.md). Default: verdicts are not signed.
	SigningConfig
}

// RateConfig is a rate limit: a token bucket (docs/verdict-api.md#rate-limits).
type RateConfig struct {
	// Rate is the long-run number of requests per second.
	Rate float64 `json:"rate,omitempty"`
	// Burst is how many may come at once.
	Burst int `json:"burst,omitempty"`
}

// PriceConfig is one token's USD price.
type PriceConfig struct {
	// ChainID is the token's chain. Required.
	ChainID int64 `json:"chain_id"`
	// Asset is the token contract. Required.
	Asset string `json:"asset"`
	// USD is the price of one whole token, a decimal string. Required.
	USD string `json:"usd"`
	// Decimals of the token. Default: 6.
	Decimals *int `json:"decimals,omitempty"`
	// Symbol names the token in evidence. Default: none.
	Symbol string `json:"symbol,omitempty"`
}

// FeeConfig is the verification fee schedule: a flat fee, or basis points of the
// merchant amount with a minimum, paid to PayTo in Asset on Network.
type FeeConfig struct {
	// Network is the network fees are paid on (v1 name or CAIP-2 id). Required.
	Network string `json:"network"`
	// Asset is the fee token. Default: the network's USDC.
	Asset string `json:"asset,omitempty"`
	// PayTo receives the fees. Required.
	PayTo string `json:"pay_to"`
	// Flat is a flat fee in base units. Exactly one of Flat and BPS.
	Flat string `json:"flat,omitempty"`
	// BPS is the fee in basis points of the merchant amount.
	BPS int64 `json:"bps,omitempty"`
	// Min is the smallest BPS fee, in base units. Default: none.
	Min string `json:"min,omitempty"`
}

// ConfigError names the option of a Config at fault, as the Caddyfile spells it; Index,
// when > 0, says which line of a repeated option (from 1).
type ConfigError struct {
	Option string
	Index  int
	Err    error
}

// Error names the option and says what is wrong with it.
func (e *ConfigError) Error() string { return e.Option + ": " + e.Err.Error() }

// Unwrap returns the cause, for errors.Is and errors.As.
func (e *ConfigError) Unwrap() error { return e.Err }

// ConfigErr is a ConfigError of option.
func ConfigErr(option, format string, args ...any) error {
	return &ConfigError{Option: option, Err: fmt.Errorf(format, args...)}
}

// configErrAt is a ConfigError of the index-th (from 1) line of a repeated option.
func configErrAt(option string, index int, format string, args ...any) error {
	return &ConfigError{Option: option, Index: index, Err: fmt.Errorf(format, args...)}
}

// Validate checks the configuration without I/O: every number, price, fee, feed and oracle
// is well formed, and each feed and oracle has its chain's RPC.
func (c *Config) Validate() error {
	if err := c.validateStore(); err != nil {
		return err
	}
	switch {
	case c.Workers < 0:
		return ConfigErr("workers", "%d is not a positive number", c.Workers)
	case c.Queue < 0:
		return ConfigErr("workers", "queue %d is not a positive number", c.Queue)
	}
	if err := c.Config.Validate(); err != nil {
		return &ConfigError{Option: "sanctions", Err: err}
	}
	if _, _, err := c.rates(); err != nil {
		return err
	}
	entries, err := c.PriceEntries()
	if err != nil {
		return err
	}
	if _, err := prices.New(time.Now(), append(prices.Stablecoins(), entries...)...); err != nil {
		return &ConfigError{Option: "price", Err: err}
	}
	if _, err := c.ChainData(); err != nil {
		return err
	}
	if err := c.SigningConfig.Validate(); err != nil {
		return err
	}
	_, err = c.FeeSchedule()
	return err
}

func (c *Config) validateStore() error {
	st := c.Store
	if st == nil {
		return nil
	}
	switch st.Type {
	case "", sqldb.SQLite.Name:
		if st.DSN != "" {
			return ConfigErr("store", "a sqlite store takes a path, not a dsn")
		}
	case sqldb.Postgres.Name:
		if st.DSN == "" {
			return ConfigErr("store", "postgres needs a dsn")
		}
	default:
		if !redact.PlainWord(st.Type) {
			return ConfigErr("store", "unknown type (want sqlite or postgres)")
		}
		return ConfigErr("store", "unknown type %q (want sqlite or postgres)", st.Type)
	}
	return nil
}

// rates are the per-key and per-IP rates the config sets, over DefaultPerKey and
// DefaultPerIP.
func (c *Config) rates() (key, ip RateConfig, err error) {
	key, ip = DefaultPerKey, DefaultPerIP
	for _, r := range []struct {
		option string
		cfg    *RateConfig
		dst    *RateConfig
	}{{"key", c.RateKey, &key}, {"ip", c.RateIP, &ip}} {
		if r.cfg == nil {
			continue
		}
		if !(r.cfg.Rate > 0) || math.IsInf(r.cfg.Rate, 0) || r.cfg.Burst < 1 {
			return key, ip, ConfigErr("rate_limit", "%s: needs a positive rate and a burst of at least 1", r.option)
		}
		*r.dst = *r.cfg
	}
	return key, ip, nil
}

// PriceEntries are the config's prices, for prices.New beside prices.Stablecoins.
func (c *Config) PriceEntries() ([]prices.Entry, error) {
	var out []prices.Entry
	for i, p := range c.Prices {
		e, err := p.entry()
		if err != nil {
			return nil, &ConfigError{Option: "price", Err: fmt.Errorf("#%d: %w", i+1, err)}
		}
		out = append(out, e)
	}
	return out, nil
}

// Validate checks one price.
func (p PriceConfig) Validate() error {
	_, err := p.entry()
	return err
}

func (p PriceConfig) entry() (prices.Entry, error) {
	if p.ChainID <= 0 {
		return prices.Entry{}, fmt.Errorf("chain id %d is not positive", p.ChainID)
	}
	if !common.IsHexAddress(p.Asset) {
		return prices.Entry{}, fmt.Errorf("asset %q is not an address", p.Asset)
	}
	if r, ok := new(big.Rat).SetString(p.USD); !ok || r.Sign() < 0 {
		return prices.Entry{}, fmt.Errorf("usd %q is not a price in USD", p.USD)
	}
	dec := 6
	if p.Decimals != nil {
		dec = *p.Decimals
	}
	return prices.Entry{ChainID: p.ChainID, Asset: common.HexToAddress(p.Asset), USD: p.USD, Decimals: dec, Symbol: p.Symbol}, nil
}

// baseUnits parses a non-negative integer amount of base units.
func baseUnits(what, s string) (*big.Int, error) {
	n, ok := new(big.Int).SetString(s, 10)
	if !ok || n.Sign() < 0 {
		return nil, fmt.Errorf("%s %q is not a whole number of base units", what, s)
	}
	return n, nil
}

// MinAdminKeyLen is the fewest characters an admin key has.
const MinAdminKeyLen = 16

// AdminKeyHash is the SHA-256 of the (expanded) admin key, what the admin API compares;
// zero without one. A key shorter than MinAdminKeyLen is a ConfigError of admin_key.
func (c *Config) AdminKeyHash() ([32]byte, error) {
	switch {
	case c.AdminKey == "":
		return [32]byte{}, nil
	case len(c.AdminKey) < MinAdminKeyLen:
		return [32]byte{}, ConfigErr("admin_key", "resolved to fewer than %d characters", MinAdminKeyLen)
	}
	return sha256.Sum256([]byte(c.AdminKey)), nil
}

// FeeSchedule is the fee schedule the config sets; nil without a fee.
func (c *Config) FeeSchedule() (*FeeSchedule, error) {
	if c.Fee == nil {
		return nil, nil
	}
	fs, err := c.Fee.schedule()
	if err != nil {
		return nil, &ConfigError{Option: "fee", Err: err}
	}
	return fs, nil
}

// Validate checks the fee schedule.
func (f *FeeConfig) Validate() error {
	_, err := f.schedule()
	return err
}

func (f *FeeConfig) schedule() (*FeeSchedule, error) {
	n, ok := x402.NewRegistry().Lookup(f.Network)
	if !ok {
		return nil, fmt.Errorf("unknown network %q", f.Network)
	}
	fs := &FeeSchedule{Network: n.CAIP2, BPS: f.BPS}
	switch {
	case f.Asset != "" && !nonZeroAddress(f.Asset):
		return nil, fmt.Errorf("asset %q is not an address", f.Asset)
	case f.Asset != "":
		fs.Asset = common.HexToAddress(f.Asset)
	default:
		fs.Asset = n.USDC.Address
	}
	if !nonZeroAddress(f.PayTo) {
		return nil, fmt.Errorf("pay_to %q is not an address", f.PayTo)
	}
	fs.PayTo = common.HexToAddress(f.PayTo)
	if (f.Flat == "") == (f.BPS == 0) {
		return nil, errors.New("give exactly one of flat and bps")
	}
	if f.Flat != "" {
		v, err := baseUnits("flat", f.Flat)
		if err != nil {
			return nil, err
		}
		if v.Sign() == 0 {
			return nil, errors.New("flat 0 is no fee: give a positive flat fee, or no fee")
		}
		fs.Flat = v
	}
	if f.BPS < 0 || f.BPS > 10_000 {
		return nil, fmt.Errorf("bps %d is not within 0..10000", f.BPS)
	}
	if f.Min != "" {
		if f.BPS == 0 {
			return nil, errors.New("min applies to a bps fee only")
		}
		v, err := baseUnits("min", f.Min)
		if err != nil {
			return nil, err
		}
		fs.Min = v
	}
	if fs.Asset == n.USDC.Address && n.USDC.Name != "" {
		fs.Extra = map[string]any{"name": n.USDC.Name, "version": n.USDC.Version}
	}
	return fs, nil
}

// nonZeroAddress reports whether s is a hex address other than the zero address.
func nonZeroAddress(s string) bool {
	return common.IsHexAddress(s) && common.HexToAddress(s) != (common.Address{})
}
