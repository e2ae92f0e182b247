package facilitator

import (
	"errors"
	"fmt"
	"math/big"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/ethereum/go-ethereum/common"

	"github.com/x402gate/x402gate/internal/redact"
	"github.com/x402gate/x402gate/x402"
)

// Store and journal kinds of Settings.
const (
	StoreMemory     = "memory"
	StoreRedis      = "redis"
	JournalSQLite   = "sqlite"
	JournalPostgres = "postgres"
)

// DefaultReconcileInterval is how often a running facilitator reconciles its journal when
// Settings.ReconcileInterval is zero.
const DefaultReconcileInterval = time.Minute

// Settings is a bundled facilitator's configuration as an operator writes it, before its
// secrets are expanded and its stores opened: the rules every configuration file obeys
// live in its Validate (docs/facilitator.md#configuration). Secret fields may hold
// placeholders until an adapter expands them; Validate checks only that they are set.
type Settings struct {
	// Networks are the chains served. At least one is required.
	Networks []NetworkSettings
	// SignerKey is the signer's key, or the placeholder an adapter expands to it. Required.
	SignerKey string
	// StoreType is StoreMemory or StoreRedis. Default: StoreMemory.
	StoreType string
	// StoreMaxEntries bounds a memory store. Default: DefaultMemoryStoreSize.
	StoreMaxEntries int
	// StoreURL is the Redis URL. Required for StoreRedis.
	StoreURL string
	// JournalType is JournalSQLite or JournalPostgres. Default: JournalSQLite.
	JournalType string
	// JournalPath is the SQLite file. Default: chosen by the adapter.
	JournalPath string
	// JournalDSN is the PostgreSQL DSN. Required for JournalPostgres.
	JournalDSN string
	// VerdictMode is GUARDIAN_MODE. Default: VerdictOff.
	VerdictMode VerdictMode
	// VerdictURL is the verdict service. Required unless VerdictMode is off.
	VerdictURL string
	// PricingURL is the verification fee's pricing service. Default: none.
	PricingURL string
	// PollInterval, PollAttempts and PollMaxDelay bound the wait for a verdict. Default:
	// the verdict client's.
	PollInterval time.Duration
	PollAttempts int
	PollMaxDelay time.Duration
	// VerdictRate and VerdictBurst limit one payer's verdict requests. Default: Config's.
	VerdictRate  float64
	VerdictBurst int
	// ApprovalTTL and ReceiptTimeout are Config's. Default: Config's.
	ApprovalTTL    time.Duration
	ReceiptTimeout time.Duration
	// ReconcileInterval is how often the journal is reconciled while running. Default:
	// DefaultReconcileInterval.
	ReconcileInterval time.Duration
	// ERC6492Factories are Config.ERC6492Factories as 0x-hex addresses. Default: none.
	ERC6492Factories []string
}

// NetworkSettings is one chain of Settings.
type NetworkSettings struct {
	// Name is a built-in network (v1 name, CAIP-2 id or chain id), or any name together
	// with ChainID. Required.
	Name string
	// ChainID is required for a network that is not built in.
	ChainID uint64
	// RPC is the JSON-RPC URL, or its placeholder. Required.
	RPC string
	// Asset is the EIP-3009 token. Default: the network's USDC; required for a network
	// that is not built in.
	Asset string
	// AssetName is the token's EIP-712 name. Required with a non-default Asset.
	AssetName string
	// AssetVersion is the token's EIP-712 version. Default: the network USDC's, or
	// x402.DefaultAssetVersion.
	AssetVersion string
	// Decimals of the asset. Default: the network USDC's, or x402.DefaultAssetDecimals.
	Decimals int
	// Symbol of the asset. Default: the network USDC's, or x402.DefaultAssetSymbol.
	Symbol string
	// MinAmount is the smallest amount accepted, in base units. Default: no minimum.
	MinAmount string
}

// SettingsError is a Settings that Validate refuses. Option is the setting's name as a
// configuration file spells it (rpc, guardian_mode, …); Network names the network whose
// option it is, if any.
type SettingsError struct {
	Network string
	Option  string
	Err     error
}

func (e *SettingsError) Error() string {
	if e.Network != "" {
		return "network " + e.Network + ": " + e.Option + ": " + e.Err.Error()
	}
	return e.Option + ": " + e.Err.Error()
}

func (e *SettingsError) Unwrap() error { return e.Err }

func settingErr(network, option, format string, args ...any) error {
	return &SettingsError{Network: network, Option: option, Err: fmt.Errorf(format, args...)}
}

// builtin resolves the networks every configuration knows.
var builtin = x402.NewRegistry()

// Validate checks s without I/O. Its errors are *SettingsError.
func (s Settings) Validate() error {
	if len(s.Networks) == 0 {
		return settingErr("", "network", "at least one is required")
	}
	seen := map[string]bool{}
	for _, n := range s.Networks {
		if seen[n.Name] {
			return settingErr(n.Name, "network", "is listed twice")
		}
		seen[n.Name] = true
		if err := n.Validate(); err != nil {
			return err
		}
	}
	if strings.TrimSpace(s.SignerKey) == "" {
		return settingErr("", "signer_key", "is required")
	}
	switch s.StoreType {
	case "", StoreMemory:
		if s.StoreMaxEntries < 0 {
			return settingErr("", "store", "max entries %d must not be negative", s.StoreMaxEntries)
		}
	case StoreRedis:
		if s.StoreURL == "" {
			return settingErr("", "store", "redis needs its url")
		}
	default:
		return settingErr("", "store", "unknown type %q (want %s or %s)", s.StoreType, StoreMemory, StoreRedis)
	}
	switch s.JournalType {
	case "", JournalSQLite:
	case JournalPostgres:
		if s.JournalDSN == "" {
			return settingErr("", "journal", "postgres needs its dsn")
		}
	default:
		return settingErr("", "journal", "unknown type %q (want %s or %s)", s.JournalType, JournalSQLite, JournalPostgres)
	}
	switch s.VerdictMode {
	case "", VerdictOff:
	case VerdictOptional, VerdictRequired:
		if s.VerdictURL == "" {
			// docs/facilitator.md#guardian: fail closed, a guardian mode without a verdict
			// service would refuse, or worse wave through, every payment.
			return settingErr("", "guardian_mode", "%s needs verdict_url", s.VerdictMode)
		}
	default:
		return settingErr("", "guardian_mode", "%q is not off, optional or required", s.VerdictMode)
	}
	switch {
	case s.VerdictRate < 0 || s.VerdictBurst < 0:
		return settingErr("", "verdict_rate", "values must not be negative")
	case s.PollInterval < 0 || s.PollAttempts < 0 || s.PollMaxDelay < 0:
		return settingErr("", "verdict_poll", "values must not be negative")
	case s.PollInterval > 0 && s.PollInterval < time.Millisecond:
		return settingErr("", "verdict_poll", "interval must be at least 1ms")
	case s.ReconcileInterval < 0 || (s.ReconcileInterval > 0 && s.ReconcileInterval < time.Second):
		return settingErr("", "reconcile_interval", "must be at least 1s")
	case s.ApprovalTTL < 0:
		return settingErr("", "approval_ttl", "must not be negative")
	case s.ReceiptTimeout < 0:
		return settingErr("", "receipt_timeout", "must not be negative")
	}
	for _, f := range s.ERC6492Factories {
		if _, err := x402.ParseAddress(f); err != nil {
			return settingErr("", "erc6492_factories", "%w", err)
		}
	}
	return nil
}

// ValidateURLs checks that the verdict and pricing URLs are absolute http(s) URLs. An
// adapter calls it once their placeholders are expanded.
func (s Settings) ValidateURLs() error {
	for _, u := range []struct{ option, v string }{{"verdict_url", s.VerdictURL}, {"pricing_url", s.PricingURL}} {
		if u.v == "" {
			continue
		}
		if p, err := url.Parse(u.v); err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
			return settingErr("", u.option, "must be an absolute http(s) url")
		}
	}
	return nil
}

// Reconcile is ReconcileInterval, or its default.
func (s Settings) Reconcile() time.Duration {
	if s.ReconcileInterval == 0 {
		return DefaultReconcileInterval
	}
	return s.ReconcileInterval
}

// Factories returns ERC6492Factories as addresses; s must be valid.
func (s Settings) Factories() []common.Address {
	var out []common.Address
	for _, f := range s.ERC6492Factories {
		out = append(out, common.HexToAddress(f))
	}
	return out
}

// ValidateSecrets checks s as written in a configuration, before its placeholders are
// expanded: an RPC URL, a Redis URL or a PostgreSQL DSN must keep its credential in an
// {env.*} or {file.*} placeholder. Its errors are *SettingsError.
func (s Settings) ValidateSecrets() error {
	for _, n := range s.Networks {
		if err := literalSecret(n.Name, "rpc", n.RPC); err != nil {
			return err
		}
	}
	if err := literalSecret("", "store", s.StoreURL); err != nil {
		return err
	}
	return literalSecret("", "journal", s.JournalDSN)
}

// literalSecret refuses a URL or DSN written with its credential in the clear: it would
// land in the adapted configuration, the admin API and autosave.json
// (docs/caddy.md#secrets). The error never quotes the value.
func literalSecret(network, option, v string) error {
	if why := redact.LiteralCredential(v); why != "" {
		return settingErr(network, option, "carries %s; give the secret as an {env.*} or {file.*} placeholder", why)
	}
	return nil
}

// Validate checks n without I/O. Its errors are *SettingsError.
func (n NetworkSettings) Validate() error {
	if n.Name == "" {
		return settingErr("", "network", "a name is required")
	}
	if n.RPC == "" {
		return settingErr(n.Name, "rpc", "is required")
	}
	if n.MinAmount != "" {
		if _, err := n.minAmount(); err != nil {
			return err
		}
	}
	_, err := n.Network()
	return err
}

// Network builds the x402.Network of n: a built-in network with the asset options
// applied, or a network that is not built in from ChainID and the asset options.
func (n NetworkSettings) Network() (x402.Network, error) {
	net, ok := builtin.Lookup(n.Name)
	if !ok {
		id := n.ChainID
		if s, isCAIP2 := strings.CutPrefix(n.Name, "eip155:"); isCAIP2 {
			id, _ = strconv.ParseUint(s, 10, 64)
		} else if v, err := strconv.ParseUint(n.Name, 10, 64); err == nil {
			id = v
		}
		if id == 0 {
			return x402.Network{}, settingErr(n.Name, "chain_id", "is required for a network that is not one of %s", strings.Join(builtin.Names(), ", "))
		}
		net = x402.Network{Name: n.Name, ChainID: new(big.Int).SetUint64(id), CAIP2: "eip155:" + strconv.FormatUint(id, 10)}
		if strings.HasPrefix(n.Name, "eip155:") {
			net.Name = strconv.FormatUint(id, 10)
		}
	} else if n.ChainID != 0 && new(big.Int).SetUint64(n.ChainID).Cmp(net.ChainID) != 0 {
		return x402.Network{}, settingErr(n.Name, "chain_id", "%d is not the built-in network's %s", n.ChainID, net.ChainID)
	}
	if n.Decimals < 0 || n.Decimals > x402.MaxDecimals {
		return x402.Network{}, settingErr(n.Name, "decimals", "%d is not in 0..%d", n.Decimals, x402.MaxDecimals)
	}
	if n.Asset != "" {
		a, err := x402.ParseAddress(n.Asset)
		if err != nil {
			return x402.Network{}, &SettingsError{Network: n.Name, Option: "asset", Err: err}
		}
		if a != net.USDC.Address {
			if n.AssetName == "" {
				return x402.Network{}, settingErr(n.Name, "asset_name", "the token's EIP-712 name is required with a non-default asset")
			}
			version := net.USDC.Version
			if version == "" {
				version = x402.DefaultAssetVersion
			}
			net.USDC = x402.Asset{Address: a, Name: n.AssetName, Version: version, Decimals: x402.DefaultAssetDecimals, Symbol: x402.DefaultAssetSymbol}
		}
	} else if !ok {
		return x402.Network{}, settingErr(n.Name, "asset", "is required for a network that is not built in")
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

// NetworkConfig is the engine's NetworkConfig of n, with rpc the expanded RPC URL.
func (n NetworkSettings) NetworkConfig(rpc string) (NetworkConfig, error) {
	net, err := n.Network()
	if err != nil {
		return NetworkConfig{}, err
	}
	if rpc == "" {
		return NetworkConfig{}, settingErr(n.Name, "rpc", "is required")
	}
	nc := NetworkConfig{Network: net, RPCURL: rpc}
	if n.MinAmount != "" {
		if nc.MinAmount, err = n.minAmount(); err != nil {
			return NetworkConfig{}, err
		}
	}
	return nc, nil
}

func (n NetworkSettings) minAmount() (*big.Int, error) {
	m, ok := new(big.Int).SetString(n.MinAmount, 10)
	if !ok || m.Sign() < 0 {
		return nil, settingErr(n.Name, "min_amount", "%q is not a non-negative integer of base units", n.MinAmount)
	}
	return m, nil
}

// CheckAdvertise refuses a gate's guardian advertisement that a facilitator in mode m
// would not keep: a 402 that promises a verdict check no /verify makes misleads the
// payer's agent. Off never asks; optional asks only when /verify carries verification
// requirements, which a gate sends only with its fee on and a fee quoted, so it keeps an
// "optional" advertisement with the fee on, never a "required" one
// (docs/facilitator.md#guardian).
func (m VerdictMode) CheckAdvertise(advertise string, fee bool) error {
	switch {
	case advertise == "":
		return nil
	case m == VerdictOff || m == "":
		return fmt.Errorf("advertise %s, but the facilitator's guardian_mode is off: no verdict would ever be asked", advertise)
	case m == VerdictOptional && advertise == "required":
		// Optional mode asks only when the gate sends verification requirements, and the
		// gate has none to send when the pricing service quotes no fee: a "required"
		// advertisement would then be a promise no /verify keeps.
		return errors.New("advertise required needs the facilitator's guardian_mode required: with optional, a payment the pricing service quotes no fee for would settle without a verdict")
	case m == VerdictOptional && !fee:
		return errors.New("advertise " + advertise + " with guardian_mode optional needs fee on: without verification requirements no verdict is asked")
	}
	return nil
}
