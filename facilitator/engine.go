// Package facilitator verifies and settles x402 "exact" payments (EIP-3009
// transferWithAuthorization) on EVM chains, consults the policy verdict service according
// to GUARDIAN_MODE, and journals every settlement before it is broadcast (docs/facilitator.md#api).
package facilitator

import (
	"context"
	"crypto/ecdsa"
	"errors"
	"fmt"
	"math/big"
	"net/http"
	"sync"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/ethereum/go-ethereum/ethclient"
	"github.com/ethereum/go-ethereum/rpc"
	"go.uber.org/zap"

	"github.com/x402gate/x402gate/facilitator/approval"
	"github.com/x402gate/x402gate/facilitator/journal"
	"github.com/x402gate/x402gate/internal/ratelimit"
	"github.com/x402gate/x402gate/internal/redact"
	"github.com/x402gate/x402gate/x402"
)

// VerdictMode is the GUARDIAN_MODE setting: when /verify consults the verdict service.
type VerdictMode string

// GUARDIAN_MODE values (docs/caddy.md#modules).
const (
	// VerdictOff never consults the verdict service; /settle needs no approval.
	VerdictOff VerdictMode = "off"
	// VerdictOptional consults it only when /verify carries verificationRequirements.
	// A payment that was sent to the verdict service is never settled without consuming
	// its approval (see Settle).
	VerdictOptional VerdictMode = "optional"
	// VerdictRequired consults it on every /verify; every /settle consumes an approval.
	VerdictRequired VerdictMode = "required"
)

// Defaults of Config.
const (
	DefaultApprovalTTL    = 5 * time.Minute
	DefaultReceiptTimeout = 30 * time.Second
	DefaultRPCTimeout     = 30 * time.Second
	DefaultBalanceCache   = 30 * time.Second
	DefaultStuckAfter     = 2 * time.Minute
	DefaultTakeoverAfter  = 5 * time.Second
	// DefaultMaxFeeFactor: with Config.MaxFeePerGas nil, a settlement's replacements
	// never offer a fee cap above this multiple of its first transaction's cap.
	DefaultMaxFeeFactor = 10
)

// NetworkConfig is one chain the engine verifies and settles on.
type NetworkConfig struct {
	// Network names the chain (v1 name, CAIP-2 id, chain id) and pins the one asset the
	// engine accepts there, with its EIP-712 domain (Network.USDC). Required.
	Network x402.Network
	// RPCURL is the chain's JSON-RPC endpoint. It may carry an API key, so it never appears
	// in a response, an error or a log. Required.
	RPCURL string
	// MinAmount is the smallest requirement amount accepted, in the asset's base units.
	// Default nil: no minimum.
	MinAmount *big.Int
}

// Defaults of the per-payer verdict submission rate.
const (
	// DefaultVerdictRate is how many verdict requests per second one payer may make in
	// the long run.
	DefaultVerdictRate = 1.0
	// DefaultVerdictBurst is how many one payer may make at once.
	DefaultVerdictBurst = 10
)

// SubmitLimiter limits the verdict requests of one payer (the key is its address): anyone
// with a funded address can make /verify submit one for each payment it signs, and each
// costs the verdict service an evaluation (docs/facilitator.md#guardian). An error fails
// the /verify closed.
type SubmitLimiter interface {
	Allow(ctx context.Context, key string) (bool, error)
}

// Config configures a Service.
type Config struct {
	// Networks lists the chains to serve. At least one is required.
	Networks []NetworkConfig
	// SignerKey is the facilitator account's key: it pays gas for every settlement. The
	// engine owns this account's nonce, so each engine instance of a fleet must use its own
	// key (instances that share a key would race for nonces). Required.
	SignerKey *ecdsa.PrivateKey
	// Store holds approvals and settlement claims. Use an approval.RedisStore shared by every
	// instance of a fleet. Required.
	Store approval.Store
	// Journal is the settlement journal. Required.
	Journal journal.Journal
	// Verdicts is the verdict service client. Default nil: when VerdictMode requires a
	// verdict, /verify fails closed.
	Verdicts Verdicts
	// VerdictMode is GUARDIAN_MODE. Default VerdictOff.
	VerdictMode VerdictMode
	// Pricing quotes the verification fee of a merchant requirement: the facilitator's own
	// pricing service (verdictclient.Pricing). A /verify's verificationRequirements are
	// settled only when they equal its quote exactly. Default nil: no verification fee is
	// ever settled, and a /verify that brings one is invalid (FeeNotQuoted).
	Pricing func(ctx context.Context, merchant *x402.Requirements) (*x402.Requirements, error)
	// MaxMarkersPerPayer bounds, per payer, the optional-mode payments sent for a verdict
	// and not settled yet; a /verify past it is refused without asking. Default
	// DefaultMaxMarkersPerPayer (32).
	MaxMarkersPerPayer int
	// VerdictRate and VerdictBurst rate-limit the verdict requests of one payer (per
	// second, and at once). Default DefaultVerdictRate (1/s) and DefaultVerdictBurst (10).
	// A repeated /verify of a payment asks again and counts like a first
	// (docs/facilitator.md#fresh-verdicts).
	VerdictRate  float64
	VerdictBurst int
	// SubmitLimiter applies VerdictRate and VerdictBurst per payer. Default: an in-process
	// ratelimit.Memory; a fleet gives every instance a ratelimit.Redis on one Redis.
	SubmitLimiter SubmitLimiter
	// VerdictURL is the verdict service's base URL, reported by Info only.
	VerdictURL string
	// ApprovalTTL bounds how long an approval stays usable. Default 5m; an approval never
	// outlives the authorization's validBefore.
	ApprovalTTL time.Duration
	// ReceiptTimeout bounds the wait for a settlement's receipt. Default 30s; after it the
	// settlement is reported as settlement_pending with its transaction hash.
	ReceiptTimeout time.Duration
	// RPCTimeout bounds each JSON-RPC request over HTTP, whatever its caller's context, so
	// that a node that accepts a request and never answers cannot hold a settle, a
	// reconcile run or a health read forever. Default DefaultRPCTimeout (30 s)
	// (docs/reliability.md#resource-limits).
	RPCTimeout time.Duration
	// StuckAfter is how long an unmined settlement transaction that is next in the signer's
	// nonce order may wait before Reconcile replaces it with a fee-bumped one, even though
	// its fee cap still covers the base fee (a tip too low to be picked). A transaction whose
	// fee cap is below the base fee is replaced at once. Default 2m; negative: only the
	// base-fee test applies.
	StuckAfter time.Duration
	// TakeoverAfter is how long a settlement that another instance's signer journaled and
	// never marked broadcast (that instance died between the two) must stay unchanged before
	// SettlementStatus sends its journaled transaction again itself: the same signed bytes
	// and hash, never a new transaction (docs/facilitator.md#takeover). Default
	// DefaultTakeoverAfter (5 s); negative: SettlementStatus never sends anything.
	TakeoverAfter time.Duration
	// MaxFeePerGas is the highest fee cap (wei per gas) a fee-bumped replacement may offer.
	// Default nil: DefaultMaxFeeFactor (10) times the fee cap of the settlement's first
	// transaction. A settlement that would need more is left pending and reported with
	// ReconcileFeeCeiling.
	MaxFeePerGas *big.Int
	// ERC6492Factories lists the wallet factories whose ERC-6492 wrapped signatures of
	// not-yet-deployed wallets are accepted. Default empty: none.
	ERC6492Factories []common.Address
	// BalanceCacheTTL is how long Info caches the signer's native balance. Default 30s.
	BalanceCacheTTL time.Duration
	// SkipStartupReconcile makes a network ready without the start-up reconcile of its
	// unfinished settlements (New, Start). Default false.
	SkipStartupReconcile bool
	// Logger receives payer, request hash and transaction hash fields, never keys or RPC
	// URLs. Default zap.NewNop().
	Logger *zap.Logger
	// Now is the clock. Default time.Now.
	Now func() time.Time

	// beforeBroadcast, when set, runs after the journal row is written and before the
	// transaction is sent; an error aborts the send. A test seam that simulates a crash.
	beforeBroadcast func(journal.Settlement) error
}

// Service is the in-process facilitator. It satisfies gate.Facilitator, so a resource gate
// runs on it directly, and httpapi.Backend, so httpapi.NewHandler serves it over HTTP
// (docs/facilitator.md#api). The guards sit in gate's tests, since this package imports
// neither.
type Service struct {
	cfg       Config
	log       *zap.Logger
	now       func() time.Time
	abi       *tokenABI
	address   common.Address
	chains    map[string]*chain // by CAIP-2 id
	order     []*chain          // configuration order
	factories map[common.Address]bool
	markers   *markerBudget
	proofs    proofs     // what in-process Verify calls proved, for their Settle
	reconMu   sync.Mutex // guards lastRecon: networks come up concurrently
	lastRecon ReconcileReport
}

// Open checks cfg and builds the engine without any I/O: the RPC clients are made (an
// HTTP endpoint is not contacted until a call) and no network is ready. Start brings the
// networks up in the background (docs/facilitator.md#start-up). The Store and Journal
// stay owned by the caller; Close releases only the RPC clients.
func Open(cfg Config) (*Service, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	t, err := loadTokenABI()
	if err != nil {
		return nil, err
	}
	e := &Service{
		cfg:       cfg,
		log:       cfg.Logger,
		now:       cfg.Now,
		abi:       t,
		address:   crypto.PubkeyToAddress(cfg.SignerKey.PublicKey),
		chains:    map[string]*chain{},
		factories: map[common.Address]bool{},
		markers:   newMarkerBudget(cfg.MaxMarkersPerPayer),
	}
	for _, f := range cfg.ERC6492Factories {
		e.factories[f] = true
	}
	for _, nc := range cfg.Networks {
		c, err := e.dial(nc)
		if err != nil {
			e.Close()
			return nil, err
		}
		e.chains[nc.Network.CAIP2] = c
		e.order = append(e.order, c)
	}
	return e, nil
}

// New is Open, then brings every network up once, in order, before it returns: it checks
// that each RPC endpoint reports the configured chain id and, unless
// cfg.SkipStartupReconcile, reconciles the settlements a previous process left
// unfinished. An endpoint that cannot be reached or serves another chain is an error.
func New(ctx context.Context, cfg Config) (*Service, error) {
	e, err := Open(cfg)
	if err != nil {
		return nil, err
	}
	for _, c := range e.order {
		if err := e.bringUp(ctx, c); err != nil {
			e.Close()
			return nil, err
		}
	}
	return e, nil
}

// check validates cfg and fills its defaults.
func (cfg *Config) check() error {
	if len(cfg.Networks) == 0 {
		return errors.New("facilitator config: no networks")
	}
	if cfg.SignerKey == nil {
		return errors.New("facilitator config: signer key is required")
	}
	if cfg.Store == nil {
		return errors.New("facilitator config: approval store is required")
	}
	if cfg.Journal == nil {
		return errors.New("facilitator config: journal is required")
	}
	switch cfg.VerdictMode {
	case "":
		cfg.VerdictMode = VerdictOff
	case VerdictOff, VerdictOptional, VerdictRequired:
	default:
		return fmt.Errorf("facilitator config: unknown guardian mode %q (want off, optional or required)", cfg.VerdictMode)
	}
	seen := map[string]bool{}
	for i, nc := range cfg.Networks {
		n := nc.Network
		if n.ChainID == nil || n.ChainID.Sign() <= 0 || n.CAIP2 != "eip155:"+n.ChainID.String() {
			return fmt.Errorf("facilitator config: network %d (%q): chain id and CAIP-2 id must agree", i, n.Name)
		}
		if n.USDC.Address == (common.Address{}) || n.USDC.Name == "" || n.USDC.Version == "" {
			return fmt.Errorf("facilitator config: network %q: asset address and EIP-712 name and version are required", n.CAIP2)
		}
		if nc.RPCURL == "" {
			return fmt.Errorf("facilitator config: network %q: rpc url is required", n.CAIP2)
		}
		if seen[n.CAIP2] {
			return fmt.Errorf("facilitator config: network %q listed twice", n.CAIP2)
		}
		seen[n.CAIP2] = true
	}
	if cfg.ApprovalTTL <= 0 {
		cfg.ApprovalTTL = DefaultApprovalTTL
	}
	if cfg.ReceiptTimeout <= 0 {
		cfg.ReceiptTimeout = DefaultReceiptTimeout
	}
	if cfg.RPCTimeout <= 0 {
		cfg.RPCTimeout = DefaultRPCTimeout
	}
	if cfg.StuckAfter == 0 {
		cfg.StuckAfter = DefaultStuckAfter
	}
	if cfg.TakeoverAfter == 0 {
		cfg.TakeoverAfter = DefaultTakeoverAfter
	}
	if cfg.MaxFeePerGas != nil && cfg.MaxFeePerGas.Sign() <= 0 {
		return errors.New("facilitator config: max fee per gas must be positive")
	}
	if cfg.BalanceCacheTTL <= 0 {
		cfg.BalanceCacheTTL = DefaultBalanceCache
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.VerdictRate <= 0 {
		cfg.VerdictRate = DefaultVerdictRate
	}
	if cfg.VerdictBurst <= 0 {
		cfg.VerdictBurst = DefaultVerdictBurst
	}
	if cfg.SubmitLimiter == nil {
		cfg.SubmitLimiter = ratelimit.NewMemory(cfg.VerdictRate, cfg.VerdictBurst)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return nil
}

// dial makes the RPC client of one network. The endpoint is http or https (Settings), so
// this sends nothing: the first call connects.
func (e *Service) dial(nc NetworkConfig) (*chain, error) {
	red := redact.URL(nc.RPCURL, "rpc")
	rt := &countingTransport{next: http.DefaultTransport}
	rc, err := rpc.DialOptions(context.Background(), nc.RPCURL, rpc.WithHTTPClient(&http.Client{Timeout: e.cfg.RPCTimeout, Transport: rt}))
	if err != nil {
		return nil, fmt.Errorf("network %s: dial: %w: %s", nc.Network.CAIP2, errRPCUnavailable, red.Replace(err.Error()))
	}
	client := ethclient.NewClient(rc)
	c := &chain{cfg: nc, net: nc.Network, client: client, rpcTimeout: e.cfg.RPCTimeout, abi: e.abi, redactor: red, requests: &rt.n, log: e.log}
	c.sender = newSender(c, e.cfg.SignerKey, e.log)
	return c, nil
}

// Close releases the RPC clients. It does not close the Store or the Journal.
func (e *Service) Close() {
	for _, c := range e.order {
		c.client.Close()
	}
}

// Address is the facilitator signer's address: the account that pays gas.
func (e *Service) Address() common.Address { return e.address }

// StartupReconcile returns the report of the start-up reconciles of the networks brought
// up so far, added up (zero when skipped).
func (e *Service) StartupReconcile() ReconcileReport {
	e.reconMu.Lock()
	defer e.reconMu.Unlock()
	return e.lastRecon
}

// Supported lists a v1 kind (v1 network name) and a v2 kind (CAIP-2 id) of scheme "exact"
// for every configured network, and the signer address under "eip155:*"
// (docs/facilitator.md#api).
func (e *Service) Supported(ctx context.Context) (x402.SupportedResponse, error) {
	resp := x402.SupportedResponse{
		Kinds:      []x402.SupportedKind{},
		Extensions: []string{},
		Signers:    map[string][]string{"eip155:*": {e.address.Hex()}},
	}
	for _, c := range e.order {
		resp.Kinds = append(resp.Kinds,
			x402.SupportedKind{X402Version: x402.Version2, Scheme: x402.SchemeExact, Network: c.net.CAIP2},
			x402.SupportedKind{X402Version: x402.Version1, Scheme: x402.SchemeExact, Network: c.net.Name},
		)
	}
	return resp, nil
}

// NetworkInfo describes one configured network for detailed health.
type NetworkInfo struct {
	Name         string `json:"name"`    // v1 name
	CAIP2        string `json:"network"` // CAIP-2 id
	ChainID      string `json:"chainId"`
	Scheme       string `json:"scheme"`
	Asset        string `json:"asset"`
	AssetName    string `json:"assetName"`    // EIP-712 domain name
	AssetVersion string `json:"assetVersion"` // EIP-712 domain version
	// State is the network's readiness: starting, wrong_chain_id or ready
	// (docs/facilitator.md#start-up).
	State string `json:"state"`
	// Balance is the signer's native balance in wei, read at most once per
	// Config.BalanceCacheTTL; empty when the RPC endpoint could not be read.
	Balance string `json:"balance,omitempty"`
	// AssetBalance is the signer's balance of the asset in its base units, cached and
	// read like Balance.
	AssetBalance string `json:"assetBalance,omitempty"`
}

// EngineInfo is what detailed /health may show (docs/facilitator.md#api): networks, the
// facilitator address and its cached balances, the verdict service URL. It carries no
// RPC URL and no key.
type EngineInfo struct {
	Address     string        `json:"address"`
	VerdictMode string        `json:"guardianMode"`
	VerdictURL  string        `json:"verdictUrl,omitempty"`
	Networks    []NetworkInfo `json:"networks"`
}

// Info reports the engine's networks, signer address and cached balances. A balance that
// cannot be read is left empty; Info never fails.
func (e *Service) Info(ctx context.Context) EngineInfo {
	info := EngineInfo{
		Address:     e.address.Hex(),
		VerdictMode: string(e.cfg.VerdictMode),
		VerdictURL:  e.cfg.VerdictURL,
		Networks:    []NetworkInfo{},
	}
	for _, c := range e.order {
		ni := NetworkInfo{
			Name: c.net.Name, CAIP2: c.net.CAIP2, ChainID: c.net.ChainID.String(), Scheme: x402.SchemeExact,
			Asset: c.net.USDC.Address.Hex(), AssetName: c.net.USDC.Name, AssetVersion: c.net.USDC.Version,
			State: c.state.get(),
		}
		if ni.State != NetworkReady {
			info.Networks = append(info.Networks, ni) // no balances from an endpoint not known to serve this chain
			continue
		}
		native, asset := e.cachedBalance(ctx, c)
		if native != nil {
			ni.Balance = native.String()
		}
		if asset != nil {
			ni.AssetBalance = asset.String()
		}
		info.Networks = append(info.Networks, ni)
	}
	return info
}

// cachedBalance returns the signer's native and asset balances on c, read at most once
// per TTL (one JSON-RPC batch). A failed read keeps the previous values (nil when never
// read).
func (e *Service) cachedBalance(ctx context.Context, c *chain) (native, asset *big.Int) {
	c.balanceMu.Lock()
	defer c.balanceMu.Unlock()
	now := e.now().UnixNano()
	if c.balance != nil && now-c.balanceAt < int64(e.cfg.BalanceCacheTTL) {
		return c.balance, c.assetBalance
	}
	n, a, err := c.signerBalances(ctx, e.address)
	if err != nil {
		e.log.Warn("read signer balance", zap.String("network", c.net.CAIP2), zap.String("error", c.redact(err)))
		return c.balance, c.assetBalance // stale is better than nothing
	}
	c.balance, c.assetBalance, c.balanceAt = n, a, now
	return n, a
}

// chainFor returns the configured chain of a CAIP-2 id.
func (e *Service) chainFor(caip2 string) (*chain, bool) {
	c, ok := e.chains[caip2]
	return c, ok
}

// networkName is the network as a response of the given version names it: the v1 name
// for v1, the CAIP-2 id for v2.
func (e *Service) networkName(caip2 string, version int) string {
	if c, ok := e.chains[caip2]; ok && version == x402.Version1 {
		return c.net.Name
	}
	return caip2
}
