package console

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/x402gate/x402gate/verdictserver"
)

// TestSignIn: the admin key and agent keys with admin:read or admin:write sign in, with a
// session cookie that is HttpOnly, SameSite=Strict, Secure on TLS, for the console's path
// and short-lived; any other key is refused.
func TestSignIn(t *testing.T) {
	for _, tls := range []bool{false, true} {
		e := newEnv(t, Config{}, tls)
		writer := e.agent("writer", "", verdictserver.ScopeAdminWrite)
		reader := e.agent("reader", "", verdictserver.ScopeAdminRead)
		plain := e.agent("plain", "")
		for _, tc := range []struct {
			name, key, who string
		}{
			{"the admin key", adminKey, "admin key · read and write"},
			{"a key with admin:write", writer.Key, "key " + keyIDOf(t, e, writer.ID) + " · read and write"},
			{"a key with admin:read", reader.Key, "key " + keyIDOf(t, e, reader.ID) + " · read only"},
		} {
			b := e.browser()
			form := b.get("/console/signin")
			p := b.post("/console/signin", url.Values{"key": {tc.key}, "csrf": {form.csrf(t)}})
			if p.status != http.StatusSeeOther || p.header.Get("Location") != "/console/" {
				t.Fatalf("%s (tls %v): %d %q", tc.name, tls, p.status, p.header.Get("Location"))
			}
			ck := sessionCookie(t, p)
			if !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode || ck.Secure != tls || ck.Path != Path ||
				ck.MaxAge <= 0 || ck.MaxAge > int(DefaultSessionTTL.Seconds()) {
				t.Errorf("%s (tls %v): cookie %+v", tc.name, tls, ck)
			}
			if ck.Value == sessionCookie(t, form).Value {
				t.Errorf("%s: the sign-in form's session id lives on after sign-in", tc.name)
			}
			if got := text(b.get("/console/").body); !strings.Contains(got, tc.who) {
				t.Errorf("%s: the agents page does not say %q:\n%s", tc.name, tc.who, got)
			}
		}
		for _, tc := range []struct{ name, key string }{
			{"an agent key without an admin scope", plain.Key},
			{"a key no one issued", "vk_aaaaaaaaaaaa_" + strings.Repeat("A", 43)},
			{"the admin key with a space", adminKey + " "},
			{"no key", ""},
		} {
			b := e.browser()
			p := b.post("/console/signin", url.Values{"key": {tc.key}, "csrf": {b.get("/console/signin").csrf(t)}})
			if p.status != http.StatusUnauthorized || !strings.Contains(p.body, "That key was refused") {
				t.Errorf("%s: %d\n%s", tc.name, p.status, p.body)
			}
			if p := b.get("/console/"); p.status != http.StatusSeeOther || p.header.Get("Location") != "/console/signin" {
				t.Errorf("%s: after a refused sign-in, the console answers %d %q", tc.name, p.status, p.header.Get("Location"))
			}
		}
	}
}

func keyIDOf(t *testing.T, e *env, agentID string) string {
	t.Helper()
	ks, err := e.op.Keys(context.Background(), agentID)
	if err != nil || len(ks) != 1 {
		t.Fatalf("keys of %s: %v %v", agentID, ks, err)
	}
	return ks[0].ID
}

func sessionCookie(t *testing.T, p page) *http.Cookie {
	t.Helper()
	for _, c := range (&http.Response{Header: p.header}).Cookies() {
		if c.Name == cookieName {
			return c
		}
	}
	t.Fatalf("no %s cookie set; headers %v", cookieName, p.header)
	return nil
}

// TestSessionsEnd: a session ends at its TTL, on sign-out, and when its key is revoked or
// loses its admin scope; each time the console sends the browser back to sign in.
func TestSessionsEnd(t *testing.T) {
	e := newEnv(t, Config{}, false)
	reader := e.agent("reader", "", verdictserver.ScopeAdminRead)
	start := time.Now()
	e.clock.set(start)

	expired := e.browser()
	expired.signIn(adminKey)
	e.clock.set(start.Add(DefaultSessionTTL + time.Second))
	wantSignIn(t, "a session past its TTL", expired.get("/console/verdicts"))
	e.clock.set(start)

	out := e.browser()
	out.signIn(adminKey)
	home := out.get("/console/")
	if p := out.post("/console/signout", url.Values{"csrf": {home.csrf(t)}}); p.status != http.StatusSeeOther {
		t.Fatalf("sign out: %d\n%s", p.status, p.body)
	}
	wantSignIn(t, "a signed-out session", out.get("/console/"))

	revoked := e.browser()
	revoked.signIn(reader.Key)
	if p := revoked.get("/console/"); p.status != http.StatusOK {
		t.Fatalf("reader: %d", p.status)
	}
	if err := e.op.RevokeKey(context.Background(), keyIDOf(t, e, reader.ID)); err != nil {
		t.Fatal(err)
	}
	wantSignIn(t, "the session of a revoked key", revoked.get("/console/"))
}

func wantSignIn(t *testing.T, what string, p page) {
	t.Helper()
	if p.status != http.StatusSeeOther || p.header.Get("Location") != "/console/signin" {
		t.Errorf("%s: %d %q, want a redirect to sign in", what, p.status, p.header.Get("Location"))
	}
}

// TestFormsNeedTheirSessionsToken: a POST is refused (403, nothing written) without the
// CSRF token, with another session's token, or from another site, whatever it carries;
// the same form with its own token, sent from the console, is accepted.
func TestFormsNeedTheirSessionsToken(t *testing.T) {
	e := newEnv(t, Config{}, false)
	a := e.agent("agent", allowPolicy)
	b, other := e.browser(), e.browser()
	b.signIn(adminKey)
	other.signIn(adminKey)
	token, otherToken := b.get("/console/policies/edit?agent="+a.ID).csrf(t), other.get("/console/").csrf(t)
	form := func(csrf string) url.Values {
		v := url.Values{"agent": {a.ID}, "section.venues": {`{"allowed": ["payment"]}`}}
		if csrf != "" {
			v.Set("csrf", csrf)
		}
		return v
	}
	for _, tc := range []struct {
		name    string
		form    url.Values
		headers []string
	}{
		{"without the token", form(""), nil},
		{"with another session's token", form(otherToken), nil},
		{"with a token that is almost its own", form(token[:len(token)-1] + "x"), nil},
		{"from another site (Origin)", form(token), []string{"Origin", "https://evil.example"}},
		{"from another site (Sec-Fetch-Site)", form(token), []string{"Sec-Fetch-Site", "cross-site"}},
		{"from a sibling site (Sec-Fetch-Site)", form(token), []string{"Sec-Fetch-Site", "same-site", "Origin", ""}},
		{"from an opaque origin", form(token), []string{"Origin", "null"}},
	} {
		p := b.post("/console/policies/edit", tc.form, tc.headers...)
		if p.status != http.StatusForbidden || !strings.Contains(text(p.body), "refused") {
			t.Errorf("%s: %d\n%s", tc.name, p.status, p.body)
		}
		if n := versions(t, e, a.ID); n != 1 {
			t.Fatalf("%s: %d policy versions, want 1: the refused form wrote", tc.name, n)
		}
	}
	if p := b.post("/console/policies/edit", form(token)); p.status != http.StatusSeeOther {
		t.Fatalf("the form with its own token: %d\n%s", p.status, p.body)
	}
	if n := versions(t, e, a.ID); n != 2 {
		t.Errorf("%d policy versions after the accepted form, want 2", n)
	}
	// the sign-in form is a form too
	anon := e.browser()
	anon.get("/console/signin")
	if p := anon.post("/console/signin", url.Values{"key": {adminKey}}); p.status != http.StatusForbidden {
		t.Errorf("sign-in without its token: %d", p.status)
	}
	if p := anon.post("/console/signin", url.Values{"key": {adminKey}, "csrf": {token}}); p.status != http.StatusForbidden {
		t.Errorf("sign-in with a signed-in session's token: %d", p.status)
	}
}

func versions(t *testing.T, e *env, agentID string) int {
	t.Helper()
	vs, err := e.op.PolicyVersions(context.Background(), agentID)
	if err != nil {
		t.Fatal(err)
	}
	return len(vs)
}

// TestReadOnlySessionCannotChange: an admin:read session sees the policy but gets no edit
// form, and its POST of a valid form with its own token is refused with nothing written.
func TestReadOnlySessionCannotChange(t *testing.T) {
	e := newEnv(t, Config{}, false)
	a := e.agent("agent", allowPolicy)
	reader := e.agent("reader", "", verdictserver.ScopeAdminRead)
	b := e.browser()
	b.signIn(reader.Key)
	p := b.get("/console/policies?agent=" + a.ID)
	if p.status != http.StatusOK || !strings.Contains(p.body, "payment") || strings.Contains(p.body, `id="edit"`) {
		t.Fatalf("policies page of a reader: %d\n%s", p.status, p.body)
	}
	if p := b.get("/console/policies/edit?agent=" + a.ID); p.status != http.StatusForbidden {
		t.Errorf("the edit form for a reader: %d", p.status)
	}
	p = b.post("/console/policies/edit", url.Values{"csrf": {p.csrf(t)}, "agent": {a.ID}, "section.venues": {`{"allowed": []}`}})
	if p.status != http.StatusForbidden || !strings.Contains(p.body, "admin:read") {
		t.Errorf("a reader's POST: %d\n%s", p.status, p.body)
	}
	if n := versions(t, e, a.ID); n != 1 {
		t.Errorf("%d policy versions, want 1", n)
	}
}

// TestEveryPageSendsTheSecurityHeaders: every answer of the console, pages, errors and the
// stylesheet, carries the strict CSP, X-Frame-Options DENY, nosniff and no-store.
func TestEveryPageSendsTheSecurityHeaders(t *testing.T) {
	e := newEnv(t, Config{}, false)
	a := e.agent("agent", allowPolicy)
	hash := e.pay(a, allowedPay, "weather", nil)
	b := e.browser()
	anon := b.get("/console/signin")
	b.signIn(adminKey)
	pages := map[string]page{"signin": anon, "unsigned": e.browser().get("/console/verdicts")}
	for _, path := range []string{"/console/", "/console/verdicts", "/console/verdicts/" + hash, "/console/verdicts/0xdead",
		"/console/policies", "/console/policies?agent=" + a.ID, "/console/policies/diff?agent=" + a.ID + "&a=1&b=1",
		"/console/policies/edit?agent=" + a.ID, "/console/payments", "/console/static/console.css", "/console/nowhere", "/console"} {
		pages[path] = b.get(path)
	}
	pages["refused post"] = b.post("/console/policies/edit", url.Values{})
	for name, p := range pages {
		h := p.header
		if h.Get("Content-Security-Policy") != contentSecurityPolicy || h.Get("X-Frame-Options") != "DENY" ||
			h.Get("X-Content-Type-Options") != "nosniff" || h.Get("Cache-Control") != "no-store" || h.Get("Referrer-Policy") != "same-origin" {
			t.Errorf("%s (%d): headers %v", name, p.status, h)
		}
	}
	if !strings.Contains(contentSecurityPolicy, "default-src 'none'") || strings.Contains(contentSecurityPolicy, "script-src") ||
		!strings.Contains(contentSecurityPolicy, "frame-ancestors 'none'") {
		t.Errorf("the CSP allows more than it should: %s", contentSecurityPolicy)
	}
}

// TestTheKeyIsNowhere: the key signed in with is in no answer, no URL the console sends
// the browser to, and no log entry of the service or the console.
func TestTheKeyIsNowhere(t *testing.T) {
	e := newEnv(t, Config{}, false)
	writer := e.agent("writer", "", verdictserver.ScopeAdminWrite)
	for _, key := range []string{adminKey, writer.Key, writer.Key + "x"} {
		b := e.browser()
		p := b.post("/console/signin", url.Values{"key": {key}, "csrf": {b.get("/console/signin").csrf(t)}})
		for _, s := range []string{p.body, p.header.Get("Location"), p.header.Get("Set-Cookie"), b.get("/console/").body} {
			if strings.Contains(s, key) {
				t.Errorf("the key is in an answer: %q", s)
			}
		}
	}
	for _, entry := range e.logs.All() {
		for _, f := range entry.Context {
			if strings.Contains(f.String, writer.Key) || strings.Contains(f.String, adminKey) || strings.Contains(entry.Message, adminKey) {
				t.Errorf("a log entry holds a key: %s %v", entry.Message, entry.Context)
			}
		}
	}
	if len(e.logs.FilterMessage("console sign-in").All()) != 2 {
		t.Errorf("want two sign-in log entries, got %v", e.logs.All())
	}
}
