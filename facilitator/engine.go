// Package facilitator verifies and settles x402 payments on EVM chains: "exact" over EIP-3009
// (transferWithAuthorization) or over Permit2, and metered "upto" over Permit2, through the
// x402 Permit2 proxies (docs/payments.md). It consults the policy verdict service according
// to GUARDIAN_MODE, and journals every settlement before it is broadcast (docs/facilitator.md#api).
package facilitator

import (
	"context"
	"math/big"
	"sync"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"
	"go.uber.org/zap"

	"github.com/x402gate/x402gate/facilitator/txsender"
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

// SubmitLimiter limits the verdict requests of one payer (the key is its address): anyone
// with a funded address can make /verify submit one for each payment it signs, and each
// costs the verdict service an evaluation (docs/facilitator.md#guardian). An error fails
// the /verify closed.
type SubmitLimiter interface {
	Allow(ctx context.Context, key string) (bool, error)
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
	address   common.Address    // the primary signer (Config.SignerKey)
	signers   []common.Address  // every signer of the pool, the primary first
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
	if err := cfg.prepare(); err != nil {
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
		address:   crypto.PubkeyToAddress(cfg.Signer.PublicKey),
		chains:    map[string]*chain{},
		factories: cfg.factories,
		markers:   newMarkerBudget(cfg.MaxMarkersPerPayer),
	}
	for _, k := range cfg.keys() {
		e.signers = append(e.signers, crypto.PubkeyToAddress(k.PublicKey))
	}
	for _, nc := range cfg.Networks {
		c, err := e.dial(nc)
		if err != nil {
			e.Close()
			return nil, err
		}
		e.chains[c.net.CAIP2] = c
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

// dial makes the RPC client of one network, valid (Config.Validate). An http or https
// endpoint is not contacted: the first call connects.
func (e *Service) dial(nc NetworkConfig) (*chain, error) {
	net, err := nc.Network()
	if err != nil {
		return nil, err
	}
	minAmount, err := nc.minAmount()
	if err != nil {
		return nil, err
	}
	permit2Tokens, err := nc.permit2Tokens()
	if err != nil {
		return nil, err
	}
	node, err := txsender.Dial(net.CAIP2, nc.RPC, e.cfg.RPCTimeout, e.log)
	if err != nil {
		return nil, err
	}
	c := &chain{Node: node, minAmount: minAmount, net: net, abi: e.abi, permit2Tokens: permit2Tokens}
	c.pool = newPool(node, net.ChainID, e.cfg.keys(), e.cfg.MaxPendingPerSigner, e.cfg.minGas, e.log)
	c.pool.onFunds = func(addr common.Address, funded bool) { e.laneFunds(c, addr, funded) }
	c.sender = c.pool.primary().sender
	return c, nil
}

// Close releases the RPC clients. It does not close the Store or the Journal.
func (e *Service) Close() {
	for _, c := range e.order {
		c.Node.Close()
	}
}

// Address is the primary signer's address (Config.SignerKey): the account that pays gas
// for upto settlements, and the first lane of the pool.
func (e *Service) Address() common.Address { return e.address }

// Signers are the addresses of every signer lane, the primary first.
func (e *Service) Signers() []common.Address { return e.signers }

// laneFunds logs and reports (Config.OnLaneFunds) a lane of c leaving the pool for a low
// gas balance, or coming back.
func (e *Service) laneFunds(c *chain, addr common.Address, funded bool) {
	if funded {
		e.log.Info("signer pool: lane funded again, back in the pool", zap.String("network", c.net.CAIP2), zap.String("signer", addr.Hex()))
	} else {
		e.log.Warn("signer pool: relayer_insufficient_funds, lane out of the pool", zap.String("network", c.net.CAIP2),
			zap.String("signer", addr.Hex()), zap.String("minGasBalance", e.cfg.minGas.String()))
	}
	if e.cfg.OnLaneFunds != nil {
		e.cfg.OnLaneFunds(c.net.CAIP2, addr, funded)
	}
}

// StartupReconcile returns the report of the start-up reconciles of the networks brought
// up so far, added up (zero when skipped).
func (e *Service) StartupReconcile() ReconcileReport {
	e.reconMu.Lock()
	defer e.reconMu.Unlock()
	return e.lastRecon
}

// Supported lists a v1 kind (v1 network name) and a v2 kind (CAIP-2 id) of scheme "exact"
// for every configured network, a v2 kind of scheme "upto" whose extra.facilitatorAddress
// is the primary signer (the account an upto payer's witness must name,
// docs/payments.md#upto), and every signer of the pool under "eip155:*"
// (docs/facilitator.md#api).
func (e *Service) Supported(ctx context.Context) (x402.SupportedResponse, error) {
	resp := x402.SupportedResponse{
		Kinds:      []x402.SupportedKind{},
		Extensions: []string{},
		Signers:    map[string][]string{"eip155:*": {}},
	}
	for _, a := range e.signers {
		resp.Signers["eip155:*"] = append(resp.Signers["eip155:*"], a.Hex())
	}
	for _, c := range e.order {
		resp.Kinds = append(resp.Kinds,
			x402.SupportedKind{X402Version: x402.Version2, Scheme: x402.SchemeExact, Network: c.net.CAIP2},
			x402.SupportedKind{X402Version: x402.Version1, Scheme: x402.SchemeExact, Network: c.net.Name},
			x402.SupportedKind{X402Version: x402.Version2, Scheme: x402.SchemeUpto, Network: c.net.CAIP2,
				Extra: map[string]any{x402.ExtraFacilitatorAddress: e.address.Hex()}},
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
// facilitator address and its cached balances, the signer lanes, the verdict service URL. It carries no
// RPC URL and no key.
type EngineInfo struct {
	Address     string        `json:"address"`
	VerdictMode string        `json:"guardianMode"`
	VerdictURL  string        `json:"verdictUrl,omitempty"`
	Networks    []NetworkInfo `json:"networks"`
	// Lanes are the signer pool's lanes on every network (docs/facilitator.md#signer-pool).
	Lanes []LaneInfo `json:"lanes"`
}

// Info reports the engine's networks, signer address and cached balances. A balance that
// cannot be read is left empty; Info never fails.
func (e *Service) Info(ctx context.Context) EngineInfo {
	info := EngineInfo{
		Address:     e.address.Hex(),
		VerdictMode: string(e.cfg.VerdictMode),
		VerdictURL:  e.cfg.VerdictURL,
		Networks:    []NetworkInfo{},
		Lanes:       e.Lanes(),
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
		e.log.Warn("read signer balance", zap.String("network", c.net.CAIP2), zap.String("error", c.Redact(err)))
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
