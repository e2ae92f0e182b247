// Package console is the operator's console of the verdict service (docs/console.md):
// server-rendered pages of agents, verdicts, policies and payments, with sign-in, sessions
// and CSRF tokens of its own. It renders with html/template from embedded files, loads no
// script and nothing from another origin, and reads everything through the verdict
// service's Operator, so each rule stays with its owner. The verdict_api handler serves it
// under Path when its console option is set.
package console

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/x402gate/x402gate/facilitator/journal"
	"github.com/x402gate/x402gate/internal/sqldb"
	"github.com/x402gate/x402gate/verdictserver"
	"github.com/x402gate/x402gate/verdictserver/engine"
)

// Path is where the console is served on the verdict_api site (docs/console.md#serving).
const Path = "/console"

// DefaultSessionTTL is the default Config.SessionTTL.
const DefaultSessionTTL = 15 * time.Minute

// MaxSessionTTL bounds Config.SessionTTL: a session is short-lived.
const MaxSessionTTL = 12 * time.Hour

// Config is the console's configuration, the console block of the verdict_api directive
// (docs/console.md#configuration).
type Config struct {
	// Explorer is the URL of a transaction on a block explorer, with {tx} for its hash and
	// optionally {network} for its network name, e.g. https://sepolia.basescan.org/tx/{tx}.
	// Default: none, a hash is shown without a link.
	Explorer string `json:"explorer,omitempty"`
	// Journal is the bundled facilitator's settlement journal, which the Payments page
	// reads: the same `sqlite [<path>]` or `postgres <dsn>` as the facilitator's journal
	// option. Default: none, and no Payments page.
	Journal *sqldb.Config `json:"journal,omitempty"`
	// SessionTTL is how long a session lasts after sign-in, 1m to 12h. Default 15m.
	SessionTTL engine.Duration `json:"session_ttl,omitempty"`
}

// Validate checks c without I/O.
func (c Config) Validate() error {
	if c.Explorer != "" {
		u, err := url.Parse(strings.NewReplacer("{tx}", "0", "{network}", "n").Replace(c.Explorer))
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || !strings.Contains(c.Explorer, "{tx}") {
			return verdictserver.ConfigErr("explorer", "must be an http(s) URL with {tx} where the transaction hash goes")
		}
	}
	if d := time.Duration(c.SessionTTL); d != 0 && (d < time.Minute || d > MaxSessionTTL) {
		return verdictserver.ConfigErr("session_ttl", "must be 1m to %s", MaxSessionTTL)
	}
	if j := c.Journal; j != nil && j.Type != sqldb.SQLite.Name && j.Type != sqldb.Postgres.Name {
		return verdictserver.ConfigErr("journal", "must be sqlite [<path>] or postgres <dsn>")
	}
	return nil
}

// Service is the verdict service as the console uses it; *verdictserver.Server is one.
type Service interface {
	// Operator returns the operator functions every page reads and writes through.
	Operator() *verdictserver.Operator
	// SignIn checks a key given on the sign-in form.
	SignIn(ctx context.Context, key string) (verdictserver.Caller, error)
	// Recheck checks a signed-in caller's key again, on every request.
	Recheck(ctx context.Context, c verdictserver.Caller) (verdictserver.Caller, error)
}

// Journal is the settlement journal as the Payments page reads it; *journal.DB is one.
type Journal interface {
	Recent(ctx context.Context, limit int) ([]journal.Settlement, error)
	Attempts(ctx context.Context, authorizationKey string) ([]journal.Attempt, error)
}

// Deps are what a Console uses besides its Config.
type Deps struct {
	// Service is the verdict service. Required.
	Service Service
	// Journal is the settlement journal of Config.Journal, opened by the caller, who closes
	// it. Default: none, no Payments page.
	Journal Journal
	// Sessions holds the signed-in sessions; a caller that rebuilds the Console on a
	// reload passes the same Sessions to keep them. Default: a new one.
	Sessions *Sessions
	// Logger receives the console's errors; no key, session or token is ever a field.
	// Default: none.
	Logger *zap.Logger
	// Now is the clock of sessions and pages. Default time.Now.
	Now func() time.Time
}

// Console serves the console's pages under Path.
type Console struct {
	cfg      Config
	svc      Service
	op       *verdictserver.Operator
	journal  Journal
	sessions *Sessions
	ttl      time.Duration
	log      *zap.Logger
	now      func() time.Time
	mux      *http.ServeMux
}

// New checks cfg and returns the console.
func New(cfg Config, deps Deps) (*Console, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if deps.Service == nil {
		return nil, errors.New("console: the verdict service is required")
	}
	c := &Console{
		cfg: cfg, svc: deps.Service, op: deps.Service.Operator(), journal: deps.Journal,
		sessions: cmp.Or(deps.Sessions, NewSessions()), ttl: cmp.Or(time.Duration(cfg.SessionTTL), DefaultSessionTTL),
		log: cmp.Or(deps.Logger, zap.NewNop()).Named("console"), now: deps.Now,
	}
	if c.now == nil {
		c.now = time.Now
	}
	c.mux = c.routes()
	return c, nil
}

// ServeHTTP serves one request under Path with the console's security headers.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	// docs/console.md#security: no script, no frame, nothing from another origin.
	h.Set("Content-Security-Policy", contentSecurityPolicy)
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin") // not no-referrer: a browser then sends Origin: null on the console's own forms
	h.Set("Cache-Control", "no-store")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	c.mux.ServeHTTP(w, r)
}

// contentSecurityPolicy allows the console's own stylesheet and forms and nothing else:
// no script at all, inline SVG only as markup.
const contentSecurityPolicy = "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; " +
	"frame-ancestors 'none'; base-uri 'none'"

// Under reports whether path is the console's.
func Under(path string) bool { return path == Path || strings.HasPrefix(path, Path+"/") }

// handler is a page handler; s is the signed-in session.
type handler func(w http.ResponseWriter, r *http.Request, s *session)

// routes maps every page to its handler (docs/console.md#pages).
func (c *Console) routes() *http.ServeMux {
	m := http.NewServeMux()
	m.HandleFunc("GET "+Path, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, Path+"/", http.StatusSeeOther)
	})
	m.Handle("GET "+Path+"/static/", staticFiles())
	m.HandleFunc("GET "+Path+"/signin", c.signInPage)
	m.HandleFunc("POST "+Path+"/signin", c.signIn)
	m.HandleFunc("POST "+Path+"/signout", c.signedIn(c.signOut))
	m.HandleFunc("GET "+Path+"/{$}", c.signedIn(c.agentsPage))
	m.HandleFunc("GET "+Path+"/verdicts", c.signedIn(c.verdictsPage))
	m.HandleFunc("GET "+Path+"/verdicts/{requestHash}", c.signedIn(c.verdictPage))
	m.HandleFunc("GET "+Path+"/policies", c.signedIn(c.policiesPage))
	m.HandleFunc("GET "+Path+"/policies/diff", c.signedIn(c.diffPage))
	m.HandleFunc("GET "+Path+"/policies/edit", c.signedIn(c.writes(c.editPage)))
	m.HandleFunc("POST "+Path+"/policies/edit", c.signedIn(c.writes(c.savePolicy)))
	m.HandleFunc("GET "+Path+"/payments", c.signedIn(c.paymentsPage))
	m.HandleFunc("GET "+Path+"/replay", c.signedIn(c.replayPage))
	m.HandleFunc("POST "+Path+"/replay", c.signedIn(c.runReplay))
	m.HandleFunc(Path+"/", func(w http.ResponseWriter, r *http.Request) {
		c.fail(w, r, nil, http.StatusNotFound, "no such page")
	})
	return m
}

// fail renders an error page with status and a message for people.
func (c *Console) fail(w http.ResponseWriter, r *http.Request, s *session, status int, msg string) {
	c.render(w, r, s, status, "error", "Error", map[string]any{"Status": status, "Message": msg})
}

// failed logs err and renders a 500 or, for what the operator asked for that is not
// there, a 404.
func (c *Console) failed(w http.ResponseWriter, r *http.Request, s *session, what string, err error) {
	if notFound(err) {
		c.fail(w, r, s, http.StatusNotFound, what+": not found")
		return
	}
	c.log.Error(what, zap.Error(err))
	c.fail(w, r, s, http.StatusInternalServerError, fmt.Sprintf("%s failed; see the server log", what))
}
