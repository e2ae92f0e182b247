package console

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"net/http"
	"net/url"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/x402gate/x402gate/verdictserver"
)

// cookieName is the session cookie's name.
const cookieName = "x402gate_console"

// signInTTL is how long the sign-in form's session (no caller yet) lasts.
const signInTTL = 10 * time.Minute

// maxSessions bounds the sessions held at once; expired ones are purged first.
const maxSessions = 10000

// maxFormBytes bounds a form body: a policy document is at most 1 MiB.
const maxFormBytes = 2 << 20

// session is one browser's session: server-side, named by 256 random bits in its cookie,
// with its CSRF token (docs/console.md#security). Neither is ever logged.
type session struct {
	id      string
	csrf    string
	caller  *verdictserver.Caller // nil: the sign-in form's session, not signed in
	expires time.Time
}

// Sessions holds the console's sessions in memory. It outlives a Console, so that a config
// reload that rebuilds the console keeps its sessions; a restart signs everyone out.
type Sessions struct {
	mu sync.Mutex
	m  map[string]*session
}

// NewSessions returns an empty session store.
func NewSessions() *Sessions { return &Sessions{m: map[string]*session{}} }

var errTooManySessions = errors.New("too many sessions")

// create opens a session for caller (nil: the sign-in form's) that ends at expires.
func (ss *Sessions) create(caller *verdictserver.Caller, now, expires time.Time) (*session, error) {
	s := &session{id: random(), csrf: random(), caller: caller, expires: expires}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if len(ss.m) >= maxSessions {
		for id, old := range ss.m {
			if !now.Before(old.expires) {
				delete(ss.m, id)
			}
		}
		if len(ss.m) >= maxSessions {
			return nil, errTooManySessions
		}
	}
	ss.m[s.id] = s
	return s, nil
}

// get returns the unexpired session id names, or nil.
func (ss *Sessions) get(id string, now time.Time) *session {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	s := ss.m[id]
	if s == nil {
		return nil
	}
	if !now.Before(s.expires) {
		delete(ss.m, id)
		return nil
	}
	return s
}

// end deletes the session id names.
func (ss *Sessions) end(id string) {
	ss.mu.Lock()
	delete(ss.m, id)
	ss.mu.Unlock()
}

// random returns 32 random bytes in base64url.
func random() string {
	var b [32]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// session returns the request's unexpired session, or nil.
func (c *Console) session(r *http.Request) *session {
	ck, err := r.Cookie(cookieName)
	if err != nil || ck.Value == "" {
		return nil
	}
	return c.sessions.get(ck.Value, c.now())
}

// setCookie hands s to the browser: HttpOnly, SameSite=Strict, Secure on TLS, for the
// console's path only, expiring with the session.
func (c *Console) setCookie(w http.ResponseWriter, r *http.Request, s *session) {
	http.SetCookie(w, &http.Cookie{
		Name: cookieName, Value: s.id, Path: Path, Expires: s.expires, MaxAge: int(s.expires.Sub(c.now()).Seconds()),
		HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode,
	})
}

// clearCookie tells the browser to drop its session cookie.
func clearCookie(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: "", Path: Path, MaxAge: -1,
		HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
}

// sameOrigin reports whether a state-changing request comes from the console's own pages:
// a browser's Sec-Fetch-Site, when sent, says same-origin (or none, a user's own action),
// and its Origin, when sent, is this host.
func sameOrigin(r *http.Request) bool {
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" && site != "none" {
		return false
	}
	if o := r.Header.Get("Origin"); o != "" {
		u, err := url.Parse(o)
		if err != nil || u.Host != r.Host {
			return false
		}
	}
	return true
}

// checkForm reads a POST's form and refuses it unless it is same-origin and carries s's
// CSRF token; on refusal it has answered.
func (c *Console) checkForm(w http.ResponseWriter, r *http.Request, s *session) bool {
	if !sameOrigin(r) {
		c.fail(w, r, s, http.StatusForbidden, "refused: the form was not sent from this console")
		return false
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	if err := r.ParseForm(); err != nil {
		c.fail(w, r, s, http.StatusBadRequest, "the form could not be read")
		return false
	}
	got := r.PostForm.Get("csrf")
	if s == nil || got == "" || subtle.ConstantTimeCompare([]byte(got), []byte(s.csrf)) != 1 {
		c.fail(w, r, s, http.StatusForbidden, "refused: the form's token is missing or not this session's; reload the page")
		return false
	}
	return true
}

// signedIn serves h to a signed-in session whose key is still valid; a POST must also
// pass checkForm. Anyone else goes to the sign-in page.
func (c *Console) signedIn(h handler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s := c.session(r)
		if s == nil || s.caller == nil {
			if r.Method != http.MethodGet {
				c.fail(w, r, nil, http.StatusForbidden, "refused: sign in first")
				return
			}
			http.Redirect(w, r, Path+"/signin", http.StatusSeeOther)
			return
		}
		caller, err := c.svc.Recheck(r.Context(), *s.caller)
		if errors.Is(err, verdictserver.ErrSignIn) {
			c.sessions.end(s.id)
			clearCookie(w, r)
			http.Redirect(w, r, Path+"/signin", http.StatusSeeOther)
			return
		} else if err != nil {
			c.failed(w, r, nil, "checking the session's key", err)
			return
		}
		cs := *s
		cs.caller = &caller
		if r.Method == http.MethodPost && !c.checkForm(w, r, &cs) {
			return
		}
		h(w, r, &cs)
	}
}

// writes refuses h to a caller that may only read (admin:read).
func (c *Console) writes(h handler) handler {
	return func(w http.ResponseWriter, r *http.Request, s *session) {
		if !s.caller.Write {
			c.fail(w, r, s, http.StatusForbidden, "refused: this key has admin:read; changing needs the admin key or admin:write")
			return
		}
		h(w, r, s)
	}
}

// signInPage shows the sign-in form in a session of its own, whose CSRF token the form
// carries.
func (c *Console) signInPage(w http.ResponseWriter, r *http.Request) {
	if s := c.session(r); s != nil && s.caller != nil {
		http.Redirect(w, r, Path+"/", http.StatusSeeOther)
		return
	}
	c.showSignIn(w, r, http.StatusOK, "")
}

// showSignIn renders the sign-in form in a fresh form session, with problem when not "".
func (c *Console) showSignIn(w http.ResponseWriter, r *http.Request, status int, problem string) {
	now := c.now()
	s, err := c.sessions.create(nil, now, now.Add(signInTTL))
	if err != nil {
		c.fail(w, r, nil, http.StatusServiceUnavailable, "too many sessions; try again later")
		return
	}
	c.setCookie(w, r, s)
	c.render(w, r, s, status, "signin", "Sign in", map[string]any{"Problem": problem})
}

// signIn checks the key posted with the form's token; a key that signs in gets a new
// session (the form's ends, so no session id outlives the sign-in). The key is in no log,
// no URL and no answer.
func (c *Console) signIn(w http.ResponseWriter, r *http.Request) {
	form := c.session(r)
	if !c.checkForm(w, r, form) {
		return
	}
	c.sessions.end(form.id)
	caller, err := c.svc.SignIn(r.Context(), r.PostForm.Get("key"))
	if errors.Is(err, verdictserver.ErrSignIn) {
		c.showSignIn(w, r, http.StatusUnauthorized, "That key was refused: give the admin key or an agent key with admin:read or admin:write.")
		return
	} else if err != nil {
		c.failed(w, r, nil, "sign in", err)
		return
	}
	now := c.now()
	s, err := c.sessions.create(&caller, now, now.Add(c.ttl))
	if err != nil {
		c.fail(w, r, nil, http.StatusServiceUnavailable, "too many sessions; try again later")
		return
	}
	c.log.Info("console sign-in", zap.Bool("adminKey", caller.Admin), zap.String("keyId", caller.KeyID), zap.Bool("write", caller.Write))
	c.setCookie(w, r, s)
	http.Redirect(w, r, Path+"/", http.StatusSeeOther)
}

// signOut ends the session.
func (c *Console) signOut(w http.ResponseWriter, r *http.Request, s *session) {
	c.sessions.end(s.id)
	clearCookie(w, r)
	http.Redirect(w, r, Path+"/signin", http.StatusSeeOther)
}
