// Package verdictserver is the verdict service (docs/verdict-api.md): an HTTP API on plain
// net/http where agents submit proposed actions and read back policy verdicts, an admin
// API for operators, and the bounded worker pool that evaluates every record with the
// policy engine. It stores everything through verdictserver/store, so one Server or
// several (on one PostgreSQL) serve the same agents.
package verdictserver

import (
	"cmp"
	"context"
	"errors"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/x402gate/x402gate/verdictserver/engine"
	"github.com/x402gate/x402gate/verdictserver/policy"
	"github.com/x402gate/x402gate/verdictserver/store"
)

// DefaultWorkers is the default Config.Workers. An evaluation takes tens of microseconds
// of CPU but then waits for its verdict's durable write (a group commit: one fsync for
// every verdict waiting), so the workers are many more than the cores: with a few, the
// service judged about 200-360 records/s while it accepted 1,000-2,200 submits/s, and its
// backlog grew (bench/verdict.md#judging).
const DefaultWorkers = 64

// DefaultQueue is the default Config.Queue: how many records may wait for a worker. A
// record that finds the queue full stays PENDING in the store, and the sweeper hands it
// over later.
const DefaultQueue = 1024

// DefaultSweepInterval is the default Deps.SweepInterval: how often the sweeper looks for
// PENDING records that no worker holds (a full queue, a failed evaluation, another
// instance that stopped).
const DefaultSweepInterval = 5 * time.Second

// Deps are what a Server uses besides its Config: the store, the engine and the Redis
// client the caller opened (and closes), a clock, a logger and the request's client IP.
// None of it is an operator's setting; those are all in Config.
type Deps struct {
	// Store holds agents, keys, wallets, policies and transactions. It stays the
	// caller's to close. Required.
	Store *store.Store
	// Engine evaluates each transaction. Required.
	Engine engine.Engine
	// Redis is the client of Config.Redis: it holds the rate-limit buckets so that every
	// instance on it shares them. It stays the caller's to close. Default: none, the
	// buckets are in process.
	Redis redis.UniversalClient
	// ClientIP names the client of a request for the per-IP limit. Default: the host of
	// the connection's remote address.
	ClientIP func(*http.Request) string
	// Logger receives request and evaluation logs; no key is ever a field. Default: none.
	Logger *zap.Logger
	// Now is the clock of record timestamps. Default time.Now.
	Now func() time.Time
	// SweepInterval is the sweeper's tick, on the side of the clock: tests shorten it.
	// Default DefaultSweepInterval.
	SweepInterval time.Duration
}

// Server is the verdict service. Handler serves the public API, AdminHandler the admin
// API; Start runs the workers, Close stops them.
type Server struct {
	store        *store.Store
	engine       engine.Engine
	op           *Operator
	workers      int
	judging      chan struct{} // a token for each submit judged at once (judgeAtSubmit), at most workers
	sweepEvery   time.Duration
	limits       limiters
	fees         *FeeSchedule
	signer       *signer // nil: verdicts are not signed
	adminKeyHash [32]byte
	uses         keyUses // the writes of each agent key's last use (signin.go)
	clientIP     func(*http.Request) string
	log          *zap.Logger
	now          func() time.Time

	queue chan job // records for the workers

	policyMu sync.Mutex
	policies *simplelru.LRU[policyKey, *policy.Document] // parsed policy versions

	mu       sync.Mutex
	inFlight map[string]bool       // queued or being evaluated here
	retry    map[string]retryState // records whose evaluation failed here, and when to try again
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	started  bool
	closed   bool
}

// New checks cfg, whose secrets (the admin key) the caller has expanded, fills the
// defaults of cfg and deps, and returns a Server that is not started yet.
func New(cfg Config, deps Deps) (*Server, error) {
	if deps.Store == nil {
		return nil, errors.New("verdictserver: a store is required")
	}
	if deps.Engine == nil {
		return nil, errors.New("verdictserver: an engine is required")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if deps.SweepInterval < 0 {
		return nil, errors.New("verdictserver: the sweep interval must not be negative")
	}
	adminKeyHash, err := cfg.AdminKeyHash()
	if err != nil {
		return nil, err
	}
	sg, err := cfg.newSigner()
	if err != nil {
		return nil, err
	}
	perKey, perIP, _ := cfg.rates() // valid: checked above
	fees, _ := cfg.FeeSchedule()
	if deps.ClientIP == nil {
		deps.ClientIP = remoteIP
	}
	if deps.Now == nil {
		deps.Now = time.Now
	}
	s := &Server{
		store: deps.Store, engine: deps.Engine, workers: cmp.Or(cfg.Workers, DefaultWorkers),
		sweepEvery: cmp.Or(deps.SweepInterval, DefaultSweepInterval), limits: newLimiters(perKey, perIP, deps.Redis), fees: fees,
		adminKeyHash: adminKeyHash, clientIP: deps.ClientIP, signer: sg,
		log: cmp.Or(deps.Logger, zap.NewNop()).Named("verdict"), now: deps.Now,
		judging: make(chan struct{}, cmp.Or(cfg.Workers, DefaultWorkers)),
		queue:   make(chan job, cmp.Or(cfg.Queue, DefaultQueue)), inFlight: map[string]bool{}, retry: map[string]retryState{},
	}
	s.policies, _ = simplelru.NewLRU[policyKey, *policy.Document](policyCacheSize, nil) // fails only for size <= 0
	s.op = &Operator{store: deps.Store, srv: s}
	return s, nil
}

// Operator returns the operator functions on the server's store, the ones the admin API
// uses.
func (s *Server) Operator() *Operator { return s.op }

// auth says what a route requires of its caller.
type auth int

const (
	authNone  auth = iota // open (health, pricing)
	authAgent             // x-api-key with one of the route's scopes
	authAdmin             // x-admin-key, or x-api-key with one of the route's scopes
)

// route is one method on one path. statuses lists every status it can answer; the
// OpenAPI document must list the same (TestOpenAPIMatchesRoutes).
type route struct {
	method   string
	path     string // a net/http pattern path, e.g. /transactions/{requestHash}/approval-status
	auth     auth
	scopes   []string // any one of them suffices
	limited  bool     // per-IP and per-key rate limits apply
	statuses []int
	serve    func(s *Server, w http.ResponseWriter, r *http.Request, p *principal)
}

// Statuses every route of a kind can answer besides its own.
var (
	agentStatuses = []int{400, 401, 403, 429, 500, 503}
	openStatuses  = []int{429, 500, 503}
)

func (s *Server) publicRoutes() []route {
	read := []string{ScopeReadOwn, ScopeCreateOwn}
	return []route{
		{method: http.MethodPost, path: "/transactions", auth: authAgent, scopes: []string{ScopeCreateOwn}, limited: true,
			statuses: []int{201, 409, 413, 415}, serve: (*Server).serveSubmit},
		{method: http.MethodGet, path: "/transactions", auth: authAgent, scopes: read, limited: true,
			statuses: []int{200}, serve: (*Server).serveByTrace},
		{method: http.MethodGet, path: "/transactions/{requestHash}/approval-status", auth: authAgent, scopes: read, limited: true,
			statuses: []int{200, 404}, serve: (*Server).serveStatus},
		{method: http.MethodPost, path: "/transactions/{requestHash}/execution", auth: authAgent, scopes: []string{ScopeCreateOwn, ScopeReleaseOwn}, limited: true,
			statuses: []int{200, 404, 409, 413, 415}, serve: (*Server).serveExecution},
		{method: http.MethodGet, path: "/health", auth: authNone,
			statuses: []int{200, 503}, serve: (*Server).serveHealth},
		{method: http.MethodPost, path: "/pricing/quote", auth: authNone, limited: true,
			statuses: []int{200, 400, 413, 415}, serve: (*Server).serveQuote},
		{method: http.MethodGet, path: SignerPath, auth: authNone, limited: true,
			statuses: []int{200, 404}, serve: (*Server).serveSigner},
	}
}

// Handler returns the public API (docs/verdict-api.md#routes).
func (s *Server) Handler() http.Handler { return s.mux(s.publicRoutes()) }

// AdminHandler returns the admin API (docs/verdict-api.md#admin-api).
func (s *Server) AdminHandler() http.Handler { return s.mux(s.adminRoutes()) }

// mux serves routes by path, then by method: an unknown path is a JSON 404 and a known
// path with another method a JSON 405 with Allow, never net/http's plain-text answers.
func (s *Server) mux(routes []route) http.Handler {
	m := http.NewServeMux()
	byPath := map[string][]route{}
	var paths []string
	for _, rt := range routes {
		if byPath[rt.path] == nil {
			paths = append(paths, rt.path)
		}
		byPath[rt.path] = append(byPath[rt.path], rt)
	}
	for _, p := range paths {
		rts := byPath[p]
		var allow []string
		for _, rt := range rts {
			allow = append(allow, rt.method)
		}
		sort.Strings(allow)
		m.HandleFunc(p, func(w http.ResponseWriter, r *http.Request) {
			for _, rt := range rts {
				if r.Method == rt.method {
					s.serveRoute(w, r, rt)
					return
				}
			}
			w.Header().Set("Allow", strings.Join(allow, ", "))
			s.logged(w, r, "", func(w http.ResponseWriter) {
				writeCode(w, codeMethodNotAllowed, "method not allowed; see Allow")
			})
		})
	}
	m.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		s.logged(w, r, "", func(w http.ResponseWriter) { writeCode(w, codeNotFound, "no such route") })
	})
	return m
}

// serveRoute applies the route's rate limits and authentication, then serves it.
func (s *Server) serveRoute(w http.ResponseWriter, r *http.Request, rt route) {
	s.logged(w, r, rt.method+" "+rt.path, func(w http.ResponseWriter) {
		if rt.limited && !s.allow(w, r, s.limits.ip, s.clientIP(r)) {
			return
		}
		var p *principal
		var ae *apiError
		switch rt.auth {
		case authAgent:
			p, ae = s.authenticate(r.Context(), r)
		case authAdmin:
			p, ae = s.authenticateAdmin(r.Context(), r)
		}
		if ae != nil {
			writeError(w, *ae)
			return
		}
		if p != nil {
			if lw, ok := w.(*logWriter); ok {
				lw.p = p
			}
			bucket := p.keyID
			if p.admin {
				bucket = "admin"
			}
			if rt.limited && !s.allow(w, r, s.limits.key, bucket) {
				return
			}
			if !p.has(rt.scopes...) {
				writeCode(w, codeInsufficientScope, "the key lacks the scope this route needs: "+strings.Join(rt.scopes, " or "))
				return
			}
		}
		rt.serve(s, w, r, p)
	})
}

// readBody reads a JSON request body of at most DefaultMaxBodyBytes; on failure it has
// answered and returns false.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	ct := r.Header.Get("Content-Type")
	if mt, _, _ := strings.Cut(ct, ";"); !strings.EqualFold(strings.TrimSpace(mt), "application/json") {
		writeCode(w, codeUnsupportedMediaType, "the body must be application/json")
		return nil, false
	}
	if r.ContentLength > DefaultMaxBodyBytes {
		writeCode(w, codeBodyTooLarge, "the body is too large")
		return nil, false
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, DefaultMaxBodyBytes))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			writeCode(w, codeBodyTooLarge, "the body is too large")
		} else {
			writeFieldError(w, &fieldError{code: codeMalformedJSON, message: "the body could not be read"})
		}
		return nil, false
	}
	return body, true
}

// logWriter records what a request's log entry needs: the status, the caller and the
// requestHash. It never records a header.
type logWriter struct {
	http.ResponseWriter
	status      int
	p           *principal
	requestHash string
}

func (w *logWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *logWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// logged serves f and logs one debug entry: route, method, status, agent, key id and
// requestHash, the identifiers that are not secrets (docs/verdict-api.md#authentication).
// The URL is not logged: its path may hold a requestHash (logged as such) and nothing
// else, its query only a traceId.
func (s *Server) logged(w http.ResponseWriter, r *http.Request, routeName string, f func(w http.ResponseWriter)) {
	lw, ok := w.(*logWriter)
	if !ok {
		lw = &logWriter{ResponseWriter: w}
	}
	defer func() {
		if v := recover(); v != nil {
			s.log.Error("handler panic", zap.String("route", routeName), zap.Any("panic", v))
			if lw.status == 0 {
				writeCode(lw, codeInternal, "internal error")
			}
		}
		ce := s.log.Check(zapcore.DebugLevel, "verdict api request")
		if ce == nil {
			return
		}
		fs := []zap.Field{zap.String("method", r.Method), zap.String("route", routeName), zap.Int("status", lw.status)}
		if lw.p != nil && !lw.p.admin {
			fs = append(fs, zap.String("agent", lw.p.agentID), zap.String("keyId", lw.p.keyID))
		} else if lw.p != nil {
			fs = append(fs, zap.String("caller", "admin key"))
		}
		if lw.requestHash != "" {
			fs = append(fs, zap.String("requestHash", lw.requestHash))
		}
		ce.Write(fs...)
	}()
	f(lw)
}

// setRequestHash names the request's transaction in its log entry.
func setRequestHash(w http.ResponseWriter, h string) {
	if lw, ok := w.(*logWriter); ok {
		lw.requestHash = h
	}
}

func zapError(err error) zap.Field { return zap.Error(err) }

// serveHealth answers GET /health: 200 {"status":"ok"} when the store answers, else 503.
func (s *Server) serveHealth(w http.ResponseWriter, r *http.Request, _ *principal) {
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	if err := s.store.Ping(ctx); err != nil {
		s.log.Warn("health: store unreachable", zapError(err))
		writeCode(w, codeUnavailable, "the store is unreachable")
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"status": "ok", "store": "ok", "queued": len(s.queue), "workers": s.workers})
}
