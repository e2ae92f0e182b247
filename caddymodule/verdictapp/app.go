// Package verdictapp is the Caddy runtime of the verdict service (docs/verdict-api.md): the
// verdict app (its store, engine and workers, shared across reloads), the
// http.handlers.verdict_api handler that serves its API in a Caddy site, their Caddyfile,
// and the `caddy verdict` operator commands.
package verdictapp

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/big"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/ethclient"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/x402gate/x402gate/caddymodule/internal/caddyconf"
	"github.com/x402gate/x402gate/internal/sqldb"
	"github.com/x402gate/x402gate/verdictserver"
	"github.com/x402gate/x402gate/verdictserver/engine"
	"github.com/x402gate/x402gate/verdictserver/engine/prices"
	"github.com/x402gate/x402gate/verdictserver/store"
	"github.com/x402gate/x402gate/x402"
)

func init() {
	caddy.RegisterModule(VerdictApp{})
}

// VerdictApp is the verdict app (docs/caddy.md#the-verdict-app): the verdict service of
// docs/verdict-api.md with its store, evaluation workers, rate limits, sanctions list and
// prices. It has no listener: the verdict_api directive serves its API in a Caddy site, so
// TLS, access logs, trusted proxies and timeouts are Caddy's. The open store, engine and workers live in a package-level
// caddy.UsagePool keyed by the configuration's fingerprint, so a reload that keeps the
// configuration keeps them (pending evaluations go on), and one that changes it starts new
// ones before the old are closed.
type VerdictApp struct {
	// Store is the database of agents, keys, wallets, policies and transactions.
	// Default: sqlite at <caddy data dir>/verdict/verdict.db.
	Store *caddyconf.DatabaseConfig `json:"store,omitempty"`
	// Redis is the URL of the Redis that holds the rate-limit buckets shared by several
	// instances; an {env.*} or {file.*} placeholder (it may hold a password). Default: none,
	// the buckets are in process.
	Redis string `json:"redis,omitempty"`
	// AdminKey is the admin API's key (header x-admin-key), an {env.*} or {file.*}
	// placeholder. Default: none; only agent keys with an admin scope reach the admin API.
	AdminKey string `json:"admin_key,omitempty"`
	// Workers is how many evaluations run at once. Default: 64 (verdictserver.DefaultWorkers).
	Workers int `json:"workers,omitempty"`
	// Queue bounds the evaluations waiting for a worker. Default: 1024.
	Queue int `json:"queue,omitempty"`
	// RateKey limits the requests of one API key. Default: 20/s, burst 40.
	RateKey *RateConfig `json:"rate_key,omitempty"`
	// RateIP limits the requests of one client IP. Default: 50/s, burst 100.
	RateIP *RateConfig `json:"rate_ip,omitempty"`
	// Sanctions is a sanctions list file: one address per line, or OFAC's
	// SDN_ADVANCED.XML. It is read again on every reload. Default: none, and the
	// sanctions check answers not_checked.
	Sanctions string `json:"sanctions,omitempty"`
	// SanctionsTTL is how long after its date the list counts as fresh. Default: 24h.
	SanctionsTTL caddy.Duration `json:"sanctions_ttl,omitempty"`
	// SanctionsRefresh is how often the sanctions file is checked, and read again when it
	// changed. Default: 1h.
	SanctionsRefresh caddy.Duration `json:"sanctions_refresh,omitempty"`
	// SanctionsOracles are Chainalysis-style sanctions oracles, at most one per chain, each
	// on a chain with an RPC. Default: none.
	SanctionsOracles []VerdictOracleConfig `json:"sanctions_oracles,omitempty"`
	// Prices are USD prices of tokens, besides the built-in stablecoins.
	Prices []VerdictPriceConfig `json:"prices,omitempty"`
	// PriceFeeds are Chainlink-style price feeds of tokens the prices do not list, each on
	// a chain with an RPC. Default: none.
	PriceFeeds []VerdictPriceFeedConfig `json:"price_feeds,omitempty"`
	// RPC are the JSON-RPC endpoints of the chains of PriceFeeds and SanctionsOracles.
	// Default: none.
	RPC []VerdictRPCConfig `json:"rpc,omitempty"`
	// Fee is the verification fee schedule of POST /pricing/quote. Default: none, every
	// quote is null.
	Fee *VerdictFeeConfig `json:"fee,omitempty"`

	svc *verdictService
	key string // pool key held by this config
	log *zap.Logger
}

// RateConfig is a rate limit: a token bucket.
type RateConfig struct {
	// Rate is the long-run number of requests per second.
	Rate float64 `json:"rate,omitempty"`
	// Burst is how many may come at once.
	Burst int `json:"burst,omitempty"`
}

// VerdictPriceConfig is one token's USD price.
type VerdictPriceConfig struct {
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

// VerdictFeeConfig is the verification fee schedule: a flat fee, or basis points of the
// merchant amount with a minimum, paid to PayTo in Asset on Network.
type VerdictFeeConfig struct {
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

// CaddyModule returns the Caddy module information.
func (VerdictApp) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "verdict",
		New: func() caddy.Module { return new(VerdictApp) },
	}
}

// verdictServices holds the open verdict services, shared across reloads
// (docs/caddy.md#the-verdict-app).
var verdictServices = caddy.NewUsagePool()

// verdictService is one open verdict service: its store, engine, workers and Redis.
type verdictService struct {
	store   *store.Store
	engine  *engine.Evaluator
	server  *verdictserver.Server
	redis   redis.UniversalClient
	handler http.Handler // the public API, with the admin API under /admin/

	startOnce sync.Once // the workers start once, however many configs share the service
	startErr  error
	rpcs      []*ethclient.Client
	stop      context.CancelFunc // ends the scheduled refresh of the sanctions list
}

// Destruct stops the workers and closes the store and Redis: the last config holding the
// service is gone.
func (s *verdictService) Destruct() error {
	if s.stop != nil {
		s.stop()
	}
	for _, c := range s.rpcs {
		c.Close()
	}
	errs := []error{s.server.Close(), s.store.Close()}
	if s.redis != nil {
		errs = append(errs, s.redis.Close())
	}
	return errors.Join(errs...)
}

// resolvedVerdict is a VerdictApp with its placeholders expanded: never logged.
type resolvedVerdict struct {
	storeType, storePath, storeDSN string
	redisURL                       string
	adminKeyHash                   [32]byte
	chain                          *chainData
	rpcURLs                        map[int64]string // resolved: they may hold keys
	refresh                        time.Duration
	opts                           verdictserver.Options
	engineOpts                     engine.Options
}

// Validate checks the app's configuration without I/O: secrets are placeholders, and
// every number, price and fee is well formed.
func (a *VerdictApp) Validate() error {
	_, err := a.settings()
	return err
}

// verdictSettings is what a VerdictApp configures, before its secrets are resolved.
type verdictSettings struct {
	limits verdictserver.Limits
	prices []prices.Entry
	fee    *verdictserver.FeeSchedule
	chain  *chainData
}

// VerdictConfigError names the verdict option at fault; Index, when > 0, says which line of
// a repeated option (from 1).
type VerdictConfigError struct {
	Option string
	Index  int
	Err    error
}

func (e *VerdictConfigError) Error() string { return e.Option + ": " + e.Err.Error() }
func (e *VerdictConfigError) Unwrap() error { return e.Err }

func verdictErr(option, format string, args ...any) error {
	return &VerdictConfigError{Option: option, Err: fmt.Errorf(format, args...)}
}

func (a *VerdictApp) settings() (*verdictSettings, error) {
	for _, sec := range []struct{ option, v string }{{"admin_key", a.AdminKey}, {"redis", a.Redis}} {
		if err := caddyconf.PlaceholderOnly(sec.v); err != nil {
			return nil, &VerdictConfigError{Option: sec.option, Err: err}
		}
	}
	if st := a.Store; st != nil {
		switch st.Type {
		case "", "sqlite":
			if st.DSN != "" {
				return nil, verdictErr("store", "a sqlite store takes a path, not a dsn")
			}
		case "postgres":
			if st.DSN == "" {
				return nil, verdictErr("store", "postgres needs a dsn")
			}
			if err := caddyconf.PlaceholderOnly(st.DSN); err != nil {
				return nil, &VerdictConfigError{Option: "store", Err: err}
			}
		default:
			if !caddyconf.PlainWord(st.Type) {
				return nil, verdictErr("store", "unknown type (want sqlite or postgres)")
			}
			return nil, verdictErr("store", "unknown type %q (want sqlite or postgres)", st.Type)
		}
	}
	if a.Workers < 0 {
		return nil, verdictErr("workers", "%d is not a positive number", a.Workers)
	}
	if a.Queue < 0 {
		return nil, verdictErr("workers", "queue %d is not a positive number", a.Queue)
	}
	if a.SanctionsTTL < 0 {
		return nil, verdictErr("sanctions", "ttl is negative")
	}
	s := &verdictSettings{limits: verdictserver.Limits{PerKey: verdictserver.DefaultPerKey, PerIP: verdictserver.DefaultPerIP}}
	for _, r := range []struct {
		option string
		cfg    *RateConfig
		dst    *verdictserver.Rate
	}{{"key", a.RateKey, &s.limits.PerKey}, {"ip", a.RateIP, &s.limits.PerIP}} {
		if r.cfg == nil {
			continue
		}
		if !(r.cfg.Rate > 0) || r.cfg.Burst < 1 {
			return nil, verdictErr("rate_limit", "%s: needs a positive rate and a burst of at least 1", r.option)
		}
		*r.dst = verdictserver.Rate{PerSecond: r.cfg.Rate, Burst: r.cfg.Burst}
	}
	for i, p := range a.Prices {
		e, err := p.entry()
		if err != nil {
			return nil, &VerdictConfigError{Option: "price", Err: fmt.Errorf("#%d: %w", i+1, err)}
		}
		s.prices = append(s.prices, e)
	}
	var err error
	if _, err = prices.New(time.Now(), append(prices.Stablecoins(), s.prices...)...); err != nil {
		return nil, &VerdictConfigError{Option: "price", Err: err}
	}
	if s.chain, err = a.chainData(); err != nil {
		return nil, err
	}
	if a.Fee != nil {
		fee, err := a.Fee.schedule()
		if err != nil {
			return nil, &VerdictConfigError{Option: "fee", Err: err}
		}
		s.fee = fee
	}
	return s, nil
}

func (p VerdictPriceConfig) entry() (prices.Entry, error) {
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

func (f *VerdictFeeConfig) schedule() (*verdictserver.FeeSchedule, error) {
	n, ok := x402.NewRegistry().Lookup(f.Network)
	if !ok {
		return nil, fmt.Errorf("unknown network %q", f.Network)
	}
	fs := &verdictserver.FeeSchedule{Network: f.Network, BPS: f.BPS}
	switch {
	case f.Asset != "" && !common.IsHexAddress(f.Asset):
		return nil, fmt.Errorf("asset %q is not an address", f.Asset)
	case f.Asset != "":
		fs.Asset = common.HexToAddress(f.Asset)
	default:
		fs.Asset = n.USDC.Address
	}
	if !common.IsHexAddress(f.PayTo) {
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
	return fs, nil
}

// resolve expands the app's placeholders and builds the options of its service.
func (a *VerdictApp) resolve(log *zap.Logger) (*resolvedVerdict, error) {
	s, err := a.settings()
	if err != nil {
		return nil, err
	}
	repl := caddy.NewReplacer()
	rv := &resolvedVerdict{storeType: "sqlite", storePath: defaultVerdictStorePath()}
	if st := a.Store; st != nil {
		if st.Type == "postgres" {
			rv.storeType, rv.storePath, rv.storeDSN = "postgres", "", caddyconf.ResolveSecret(repl, st.DSN)
			if rv.storeDSN == "" {
				return nil, verdictErr("store", "the postgres dsn resolved to an empty value")
			}
		} else if st.Path != "" {
			rv.storePath = repl.ReplaceKnown(st.Path, "")
		}
	}
	if a.Redis != "" {
		if rv.redisURL = caddyconf.ResolveSecret(repl, a.Redis); rv.redisURL == "" {
			return nil, verdictErr("redis", "resolved to an empty value")
		}
	}
	if a.AdminKey != "" {
		k := caddyconf.ResolveSecret(repl, a.AdminKey)
		if len(k) < 16 {
			return nil, verdictErr("admin_key", "resolved to fewer than 16 characters")
		}
		rv.adminKeyHash = sha256.Sum256([]byte(k))
	}
	var table *prices.Table
	if table, err = prices.New(time.Now(), append(prices.Stablecoins(), s.prices...)...); err != nil {
		return nil, &VerdictConfigError{Option: "price", Err: err}
	}
	rv.chain, rv.refresh = s.chain, time.Duration(a.SanctionsRefresh)
	if rv.refresh == 0 {
		rv.refresh = DefaultSanctionsRefresh
	}
	if rv.rpcURLs, err = s.chain.resolveRPC(repl); err != nil {
		return nil, err
	}
	rv.engineOpts = engine.Options{
		SanctionsFile: repl.ReplaceKnown(a.Sanctions, ""),
		SanctionsTTL:  time.Duration(a.SanctionsTTL),
		Prices:        table,
	}
	rv.opts = verdictserver.Options{
		Workers:      a.Workers,
		Queue:        a.Queue,
		Limits:       s.limits,
		Fees:         s.fee,
		AdminKeyHash: rv.adminKeyHash,
		ClientIP:     clientIP,
		Logger:       log,
	}
	return rv, nil
}

// clientIP is the client of a request for the per-IP rate limit: the address Caddy
// determined with its trusted_proxies, else the connection's peer.
func clientIP(r *http.Request) string {
	if ip, ok := caddyhttp.GetVar(r.Context(), caddyhttp.ClientIPVarKey).(string); ok && ip != "" {
		return ip
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// poolKey identifies the service rv configures; secrets enter it only hashed.
func (rv *resolvedVerdict) poolKey(a *VerdictApp) (string, error) {
	cfg, err := json.Marshal(a)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	h.Write(cfg)
	for _, sec := range []string{rv.storeDSN, rv.redisURL, rv.storePath} {
		h.Write([]byte{0})
		h.Write([]byte(sec))
	}
	for _, id := range slices.Sorted(maps.Keys(rv.rpcURLs)) {
		fmt.Fprintf(h, "\x00%d\x00%s", id, rv.rpcURLs[id])
	}
	h.Write(rv.adminKeyHash[:])
	return "verdict/" + hex.EncodeToString(h.Sum(nil)), nil
}

// openTimeout bounds opening the store, the chains' clients and Redis.
const openTimeout = 2 * time.Minute

// defaultVerdictStorePath is the embedded store's file in Caddy's data dir.
func defaultVerdictStorePath() string {
	return filepath.Join(caddy.AppDataDir(), "verdict", "verdict.db")
}

// openVerdictDB opens the store's database.
func openVerdictDB(ctx context.Context, typ, path, dsn string) (*sqldb.DB, error) {
	if typ == "postgres" {
		return sqldb.OpenPostgres(ctx, dsn)
	}
	return sqldb.OpenSQLite(ctx, path)
}

// openVerdictService opens the store, builds the engine and the server.
func openVerdictService(rv *resolvedVerdict, log *zap.Logger) (*verdictService, error) {
	ctx, cancel := context.WithTimeout(context.Background(), openTimeout)
	defer cancel()
	db, err := openVerdictDB(ctx, rv.storeType, rv.storePath, rv.storeDSN)
	if err != nil {
		return nil, fmt.Errorf("opening the verdict store: %w", err)
	}
	st, err := store.Open(ctx, db)
	if err != nil {
		return nil, fmt.Errorf("opening the verdict store: %w", err)
	}
	svc := &verdictService{store: st}
	fail := func(err error) (*verdictService, error) {
		for _, c := range svc.rpcs {
			c.Close()
		}
		_ = st.Close()
		if svc.redis != nil {
			_ = svc.redis.Close()
		}
		return nil, err
	}
	eopts := rv.engineOpts
	if svc.rpcs, err = openChainData(ctx, rv.chain, rv.rpcURLs, &eopts); err != nil {
		return fail(err)
	}
	if svc.engine, err = engine.New(eopts); err != nil {
		return fail(&VerdictConfigError{Option: "sanctions", Err: err})
	}
	opts := rv.opts
	if rv.redisURL != "" {
		ro, err := redis.ParseURL(rv.redisURL)
		if err != nil {
			return fail(verdictErr("redis", "is not a redis:// URL")) // never quote it
		}
		svc.redis = redis.NewClient(ro)
		if err := svc.redis.Ping(ctx).Err(); err != nil {
			return fail(errors.New("redis: not reachable")) // the error may carry the URL
		}
		opts.Limits.Redis = svc.redis
	}
	opts.Store, opts.Engine = st, svc.engine
	if svc.server, err = verdictserver.New(opts); err != nil {
		return fail(err)
	}
	svc.handler = verdictMux(svc.server)
	if rv.engineOpts.SanctionsFile != "" {
		rctx, stop := context.WithCancel(context.Background())
		svc.stop = stop
		go refreshSanctions(rctx, svc.engine, rv.refresh, log)
	}
	log.Info("verdict service ready", zap.String("store", rv.storeType), zap.Bool("shared_limits", svc.redis != nil))
	return svc, nil
}

// verdictMux serves the public API, and the admin API under /admin/.
func verdictMux(s *verdictserver.Server) http.Handler {
	pub, admin := s.Handler(), s.AdminHandler()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/admin" || strings.HasPrefix(r.URL.Path, "/admin/") {
			admin.ServeHTTP(w, r)
			return
		}
		pub.ServeHTTP(w, r)
	})
}

// Provision resolves the app's secrets and opens (or reuses across a reload) its service.
func (a *VerdictApp) Provision(ctx caddy.Context) error {
	a.log = ctx.Logger()
	rv, err := a.resolve(a.log)
	if err != nil {
		return err
	}
	key, err := rv.poolKey(a)
	if err != nil {
		return err
	}
	v, loaded, err := verdictServices.LoadOrNew(key, func() (caddy.Destructor, error) {
		return openVerdictService(rv, a.log)
	})
	if err != nil {
		return err
	}
	a.key, a.svc = key, v.(*verdictService)
	if loaded && a.Sanctions != "" {
		// A reload reads the sanctions list again (docs/caddy.md#the-verdict-app).
		if err := a.svc.engine.LoadSanctions(); err != nil {
			a.log.Warn("sanctions list not reloaded; the previous one stays", zap.Error(err))
		}
	}
	return nil
}

// Start starts the workers (once per service, whatever the number of configs sharing
// it), which first evaluate every record left pending.
func (a *VerdictApp) Start() error {
	a.svc.startOnce.Do(func() { a.svc.startErr = a.svc.server.Start(context.Background()) })
	if a.svc.startErr != nil {
		return fmt.Errorf("starting the verdict service: %w", a.svc.startErr)
	}
	return nil
}

// Stop implements caddy.App. The service outlives a reload (docs/caddy.md#the-verdict-app):
// it is released in Cleanup.
func (a *VerdictApp) Stop() error { return nil }

// Cleanup releases this config's hold on its service; the last config holding it closes it.
func (a *VerdictApp) Cleanup() error {
	if a.key == "" {
		return nil
	}
	_, err := verdictServices.Delete(a.key)
	return err
}

// Interface guards
var (
	_ caddy.App          = (*VerdictApp)(nil)
	_ caddy.Provisioner  = (*VerdictApp)(nil)
	_ caddy.Validator    = (*VerdictApp)(nil)
	_ caddy.CleanerUpper = (*VerdictApp)(nil)
)
