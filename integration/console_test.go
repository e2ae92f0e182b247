package integration_test

import (
	"html"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"testing"
)

// consoleBlock turns the console on in the verdict API's site of verdictCaddyfile: the
// bundled facilitator's journal at its default path, and explorer links.
const consoleBlock = `verdict_api {
		console {
			journal sqlite
			explorer https://sepolia.basescan.org/tx/{tx}
		}
	}`

// TestConsoleThroughCaddy runs the console in the built Caddy, on the site of the verdict
// API, over a real paid request and a refused one (docs/console.md): the admin key signs
// in; the Verdicts page shows the refusal's reason; the Payments page reads the bundled
// facilitator's journal at the default path (`journal sqlite` alone) and links the
// settlement's transaction; a reload keeps the session; the API beside it still answers;
// the admin key reaches no log. Without the console option, /console is an unknown route.
func TestConsoleThroughCaddy(t *testing.T) {
	f := newVerdictFleet(t, verdictSetup{})
	plain := f.caddyfile
	f.caddyfile = strings.Replace(f.caddyfile, "\tverdict_api\n", "\t"+consoleBlock+"\n", 1)
	if f.caddyfile == plain {
		t.Fatal("the verdict Caddyfile has no bare verdict_api line to replace")
	}
	in := f.start(t)
	if ok := payWith(t, payV1Script, f.payer, in.api+"/allowed/report", "X402_TOKEN="+f.tok.Address.Hex()); ok.Status != http.StatusOK {
		t.Fatalf("paying an allowed payee: %d %s", ok.Status, ok.Body)
	}
	if denied := payWith(t, payV1Script, f.payer, in.api+"/denied/report", "X402_TOKEN="+f.tok.Address.Hex()); denied.Status != http.StatusPaymentRequired {
		t.Fatalf("paying a refused payee: %d %s", denied.Status, denied.Body)
	}

	b := newConsoleBrowser(t, in.verdictAPI)
	b.signIn(f.adminKey)
	verdicts := b.get("/console/verdicts?outcome=rejected")
	for _, want := range []string{"recipient_not_allowed", f.denied.Hex() + " is not in recipients.allowed"} {
		if !strings.Contains(verdicts, want) {
			t.Errorf("the Verdicts page does not show %q:\n%s", want, verdicts)
		}
	}
	payments := b.get("/console/payments")
	for _, want := range []string{"settled", `href="https://sepolia.basescan.org/tx/0x`, `<svg id="revenue"`, strings.ToLower(f.okPayTo.Hex())[:8]} {
		if !strings.Contains(strings.ToLower(payments), strings.ToLower(want)) {
			t.Errorf("the Payments page does not show %q:\n%s", want, payments)
		}
	}
	in.caddy.Reload(t, strings.Replace(f.caddyfile, "auto_https off", "auto_https off\n\tgrace_period 1s", 1))
	b.c.Transport = &http.Transport{DisableKeepAlives: true}
	if got := b.get("/console/"); !strings.Contains(got, "buyer") {
		t.Errorf("after a reload, the session is gone or the Agents page lacks the agent:\n%s", got)
	}
	if r := mustDo(t, http.MethodGet, in.verdictAPI+"/health", nil); r.Status != http.StatusOK {
		t.Errorf("the API beside the console: /health %d", r.Status)
	}
	f.noSecretsIn(t, in.caddy.Logs())

	f.caddyfile = plain
	off := f.start(t)
	if r := mustDo(t, http.MethodGet, off.verdictAPI+"/console/signin", nil); r.Status != http.StatusNotFound || !strings.Contains(string(r.Body), `"code"`) {
		t.Errorf("without the console option, /console/signin answers %d %s; want the API's JSON 404", r.Status, r.Body)
	}
}

// consoleBrowser is an HTTP client with cookies that posts the console's forms as a
// browser does, with their CSRF token and Origin.
type consoleBrowser struct {
	t    *testing.T
	c    *http.Client
	base string
}

func newConsoleBrowser(t *testing.T, base string) *consoleBrowser {
	jar, _ := cookiejar.New(nil)
	return &consoleBrowser{t: t, base: base, c: &http.Client{Jar: jar, Timeout: requestBound}}
}

func (b *consoleBrowser) read(res *http.Response, err error) string {
	b.t.Helper()
	if err != nil {
		b.t.Fatal(err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		b.t.Fatal(err)
	}
	if res.StatusCode != http.StatusOK || res.Header.Get("X-Frame-Options") != "DENY" ||
		!strings.HasPrefix(res.Header.Get("Content-Security-Policy"), "default-src 'none'") {
		b.t.Fatalf("%s: %d, headers %v\n%s", res.Request.URL.Path, res.StatusCode, res.Header, raw)
	}
	return string(raw)
}

func (b *consoleBrowser) get(path string) string {
	b.t.Helper()
	return b.read(b.c.Get(b.base + path))
}

var consoleCSRF = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// signIn posts key on the sign-in form and expects to land on the Agents page.
func (b *consoleBrowser) signIn(key string) {
	b.t.Helper()
	m := consoleCSRF.FindStringSubmatch(b.get("/console/signin"))
	if m == nil {
		b.t.Fatal("the sign-in page has no csrf field")
	}
	form := url.Values{"key": {key}, "csrf": {html.UnescapeString(m[1])}}
	req, _ := http.NewRequest(http.MethodPost, b.base+"/console/signin", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", b.base)
	if page := b.read(b.c.Do(req)); !strings.Contains(page, "admin key · read and write") {
		b.t.Fatalf("sign-in did not land on the console:\n%s", page)
	}
}
