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
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/ethereum/go-ethereum/ethclient"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/x402gate/x402gate/caddymodule/internal/caddyconf"
	"github.com/x402gate/x402gate/internal/sqldb"
	"github.com/x402gate/x402gate/verdictserver"
	"github.com/x402gate/x402gate/verdictserver/engine"
	"github.com/x402gate/x402gate/verdictserver/engine/prices"
	"github.com/x402gate/x402gate/verdictserver/store"
)

func init() {
	caddy.RegisterModule(VerdictApp{})
}

// VerdictApp is the verdict app (docs/caddy.md#the-verdict-app): the verdict service of
// docs/verdict-api.md with its store, evaluation workers, rate limits, sanctions list and
// prices. Its JSON is the service's verdictserver.Config, whose secrets (store DSN, redis,
// admin_key, rpc URLs) are {env.*} or {file.*} placeholders that Provision expands; the
// sanctions file is read again on every reload. It has no listener: the verdict_api
// directive serves its API in a Caddy site, so TLS, access logs, trusted proxies and
// timeouts are Caddy's. The open store, engine and workers live in a package-level
// caddy.UsagePool keyed by the configuration's fingerprint, so a reload that keeps the
// configuration keeps them (pending evaluations go on), and one that changes it starts new
// ones before the old are closed.
type VerdictApp struct {
	verdictserver.Config

	svc *verdictService
	key string // pool key held by this config
	log *zap.Logger
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
	cfg     verdictserver.Config // the app's Config, its secrets and sanctions file expanded
	store   sqldb.Config         // expanded, with the default path: the DSN holds a password
	chain   *verdictserver.ChainData
	rpcURLs map[int64]string // expanded: they may hold keys
	refresh time.Duration
	prices  *prices.Table
}

// Validate checks the app's configuration without I/O: secrets are placeholders
// (docs/caddy.md#secrets), and the service's Config is valid.
func (a *VerdictApp) Validate() error {
	secrets := []struct{ option, v string }{{"admin_key", a.AdminKey}, {"redis", a.Redis}, {"signer_key", a.SignerKey}}
	if a.Store != nil && a.Store.Type == sqldb.Postgres.Name {
		secrets = append(secrets, struct{ option, v string }{"store", a.Store.DSN})
	}
	for _, sec := range secrets {
		if err := caddyconf.PlaceholderOnly(sec.v); err != nil {
			return &verdictserver.ConfigError{Option: sec.option, Err: err}
		}
	}
	for i, r := range a.RPC {
		if err := caddyconf.PlaceholderOnly(r.URL); err != nil {
			return &verdictserver.ConfigError{Option: "rpc", Index: i + 1, Err: err}
		}
	}
	return a.Config.Validate()
}

// resolve expands the app's placeholders into a copy of its Config, which the service
// takes as it is, and builds the price table its engine needs.
func (a *VerdictApp) resolve() (*resolvedVerdict, error) {
	if err := a.Validate(); err != nil {
		return nil, err
	}
	repl := caddy.NewReplacer()
	rv := &resolvedVerdict{cfg: a.Config, store: sqldb.Config{Type: sqldb.SQLite.Name, Path: defaultVerdictStorePath()}}
	if err := a.resolveSecrets(repl, rv); err != nil {
		return nil, err
	}
	entries, _ := a.PriceEntries() // valid: checked above
	table, err := prices.New(time.Now(), append(prices.Stablecoins(), entries...)...)
	if err != nil {
		return nil, &verdictserver.ConfigError{Option: "price", Err: err}
	}
	rv.prices = table
	rv.chain, _ = a.ChainData()
	if rv.refresh = time.Duration(a.SanctionsRefresh); rv.refresh == 0 {
		rv.refresh = verdictserver.DefaultSanctionsRefresh
	}
	if rv.rpcURLs, err = resolveRPC(repl, rv.chain); err != nil {
		return nil, err
	}
	rv.cfg.Sanctions = repl.ReplaceKnown(a.Sanctions, "")
	return rv, nil
}

// resolveSecrets expands the store, redis and admin_key placeholders into rv, and checks
// the expanded admin key before anything is opened.
func (a *VerdictApp) resolveSecrets(repl *caddy.Replacer, rv *resolvedVerdict) error {
	if st := a.Store; st != nil {
		if st.Type == sqldb.Postgres.Name {
			rv.store = sqldb.Config{Type: st.Type, DSN: caddyconf.ResolveSecret(repl, st.DSN)}
			if rv.store.DSN == "" {
				return verdictserver.ConfigErr("store", "the postgres dsn resolved to an empty value")
			}
		} else if st.Path != "" {
			rv.store.Path = repl.ReplaceKnown(st.Path, "")
		}
	}
	rv.cfg.Store = &rv.store
	if a.Redis != "" {
		if rv.cfg.Redis = caddyconf.ResolveSecret(repl, a.Redis); rv.cfg.Redis == "" {
			return verdictserver.ConfigErr("redis", "resolved to an empty value")
		}
	}
	if a.AdminKey != "" {
		if rv.cfg.AdminKey = caddyconf.ResolveSecret(repl, a.AdminKey); rv.cfg.AdminKey == "" {
			return verdictserver.ConfigErr("admin_key", "resolved to an empty value")
		}
	}
	if a.SignerKey != "" {
		if rv.cfg.SignerKey = caddyconf.ResolveSecret(repl, a.SignerKey); rv.cfg.SignerKey == "" {
			return verdictserver.ConfigErr("signer_key", "resolved to an empty value")
		}
	}
	_, err := rv.cfg.AdminKeyHash()
	return err
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
	for _, sec := range []string{rv.store.DSN, rv.cfg.Redis, rv.store.Path, rv.cfg.AdminKey, rv.cfg.SignerKey} {
		h.Write([]byte{0})
		h.Write([]byte(sec))
	}
	for _, id := range slices.Sorted(maps.Keys(rv.rpcURLs)) {
		fmt.Fprintf(h, "\x00%d\x00%s", id, rv.rpcURLs[id])
	}
	return "verdict/" + hex.EncodeToString(h.Sum(nil)), nil
}

// openTimeout bounds opening the store, the chains' clients and Redis.
const openTimeout = 2 * time.Minute

// defaultVerdictStorePath is the embedded store's file in Caddy's data dir.
func defaultVerdictStorePath() string {
	return filepath.Join(caddy.AppDataDir(), "verdict", "verdict.db")
}

// openVerdictService opens the store, builds the engine and the server.
func openVerdictService(rv *resolvedVerdict, log *zap.Logger) (*verdictService, error) {
	ctx, cancel := context.WithTimeout(context.Background(), openTimeout)
	defer cancel()
	db, err := rv.store.Open(ctx, "")
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
	edeps := engine.Deps{Prices: rv.prices}
	if svc.rpcs, err = openChainData(ctx, rv.chain, rv.rpcURLs, &edeps); err != nil {
		return fail(err)
	}
	if svc.engine, err = engine.New(rv.cfg.Config, edeps); err != nil {
		return fail(&verdictserver.ConfigError{Option: "sanctions", Err: err})
	}
	deps := verdictserver.Deps{Store: st, Engine: svc.engine, ClientIP: clientIP, Logger: log}
	if rv.cfg.Redis != "" {
		ro, err := redis.ParseURL(rv.cfg.Redis)
		if err != nil {
			return fail(verdictserver.ConfigErr("redis", "is not a redis:// URL")) // never quote it
		}
		svc.redis = redis.NewClient(ro)
		if err := svc.redis.Ping(ctx).Err(); err != nil {
			return fail(errors.New("redis: not reachable")) // the error may carry the URL
		}
		deps.Redis = svc.redis
	}
	if svc.server, err = verdictserver.New(rv.cfg, deps); err != nil {
		return fail(err)
	}
	svc.handler = verdictMux(svc.server)
	if rv.cfg.Sanctions != "" {
		rctx, stop := context.WithCancel(context.Background())
		svc.stop = stop
		go refreshSanctions(rctx, svc.engine, rv.refresh, log)
	}
	log.Info("verdict service ready", zap.String("store", rv.store.Type), zap.Bool("shared_limits", svc.redis != nil))
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
	rv, err := a.resolve()
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
	if err := registerMetrics(ctx, a.svc.server.Collectors()); err != nil {
		return err
	}
	if loaded && a.Sanctions != "" {
		// A reload reads the sanctions list again (docs/caddy.md#the-verdict-app).
		if err := a.svc.engine.LoadSanctions(); err != nil {
			a.log.Warn("sanctions list not reloaded; the previous one stays", zap.Error(err))
		}
	}
	return nil
}

// registerMetrics registers the verdict service's collectors on the config's registry
// (docs/caddy.md#metrics); the registry is new with every config load, and the service's
// counters, shared across loads, keep their values.
func registerMetrics(ctx caddy.Context, cs []prometheus.Collector) error {
	reg := ctx.GetMetricsRegistry()
	if reg == nil {
		return nil
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("verdict metrics: %w", err)
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
