package integration_test

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"path"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/x402gate/x402gate/internal/testenv"
)

// pathsCaddyfile gates /api/* four ways (docs/caddy.md#path-matching): a matcher on the x402
// directive, handle, handle_path and route, each with the strict_paths guard that the docs
// recommend, and once more with handle but without the guard. Each site's free paths go to
// the same upstream as the paid ones (handle_path's stripped upstream is its own), as a legacy
// API that charges for /api/ only would be set up. The facilitator is a remote URL where
// nothing listens: an unpaid request never reaches it.
const pathsCaddyfile = `{
	admin {$CADDY_ADMIN}
	auto_https off
}

# docs/caddy.md#path-matching: refuse, before any route, a path that a lenient upstream could
# read differently from Caddy's matchers.
(strict_paths) {
	@ambiguous path_regexp ` + "`" + `[\x00-\x1f\x7f\\;%]|[. ](/|$)` + "`" + `
	handle @ambiguous {
		respond "ambiguous path" 400
	}
}

(gate) {
	x402 {
		price 0.01 USDC
		pay_to 0x209693Bc6afc0C5328bA36FaF03C514EF312287C
		network base-sepolia
		facilitator http://127.0.0.1:{$DEAD_PORT}
	}
}

http://:{$MATCHER_PORT} {
	bind 127.0.0.1
	import strict_paths
	x402 /api/* {
		price 0.01 USDC
		pay_to 0x209693Bc6afc0C5328bA36FaF03C514EF312287C
		network base-sepolia
		facilitator http://127.0.0.1:{$DEAD_PORT}
	}
	reverse_proxy {$UPSTREAM}
}

http://:{$HANDLE_PORT} {
	bind 127.0.0.1
	import strict_paths
	handle /api/* {
		import gate
		reverse_proxy {$UPSTREAM}
	}
	handle {
		reverse_proxy {$UPSTREAM}
	}
}

http://:{$HANDLE_PATH_PORT} {
	bind 127.0.0.1
	import strict_paths
	handle_path /api/* {
		import gate
		reverse_proxy {$STRIPPED_UPSTREAM}
	}
	handle {
		reverse_proxy {$UPSTREAM}
	}
}

http://:{$UNGUARDED_PORT} {
	bind 127.0.0.1
	handle /api/* {
		import gate
		reverse_proxy {$UPSTREAM}
	}
	handle {
		reverse_proxy {$UPSTREAM}
	}
}

http://:{$ROUTE_PORT} {
	bind 127.0.0.1
	import strict_paths
	route /api/* {
		import gate
		reverse_proxy {$UPSTREAM}
	}
	reverse_proxy {$UPSTREAM}
}
`

// pathSpellings are request targets that a lenient upstream reads as its paid resource
// /api/x (research: the route-matching bypasses the x402 reference fixed, docs/caddy.md#path-matching).
var pathSpellings = []string{
	"/api/x",
	"//api/x",
	"/api//x",
	"///api///x",
	"/api/../api/x",
	"/free/../api/x",
	"/./api/x",
	"/api/./x",
	"/%61pi/x",
	"/%61%70%69/%78",
	"/API/x",
	"/Api/X",
	"/api%2Fx",
	"/api%2fx",
	"/%2Fapi/x",
	"/%2fapi%2fx",
	"/api%5Cx",
	"/%5Capi/x",
	"/%5Capi%5Cx",
	"/api%5C..%5Capi%5Cx",
	`/api\x`,
	`\api\x`,
	"/api/x%0A",
	"/api%0A/x",
	"/api/x%0D%0A",
	"/api/x%00",
	"/api%00/x",
	"/api/x%09",
	"/api/x.",
	"/api./x",
	"/api/x/",
	"/api/x//",
	"/api/x/.",
	"/api/x%20",
	"/api%20/x",
	"/%2e%2e/api/x",
	"/api/%2e%2e/api/x",
	"/api/%2E/x",
	"/api;/x",
	"/api/x;",
	"/api/x?free=1",
	"/api/x#frag",
}

// lenientPath is how a forgiving framework behind the proxy reads a request path: every escape
// decoded (%2F and %5C included), backslashes as slashes, control characters, spaces and
// trailing dots of a segment dropped, ";params" cut, lower case, slashes merged, dot segments
// resolved and a trailing slash trimmed. It is harsher than any one framework, on purpose.
func lenientPath(raw string) string {
	p := raw
	if i := strings.IndexAny(p, "?#"); i >= 0 {
		p = p[:i]
	}
	if d, err := url.PathUnescape(p); err == nil {
		p = d
	}
	p = strings.ReplaceAll(p, `\`, "/")
	p = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return -1
		}
		return r
	}, p)
	p = strings.ToLower(p)
	segs := strings.Split(p, "/")
	for i, s := range segs {
		if j := strings.IndexByte(s, ';'); j >= 0 {
			s = s[:j]
		}
		s = strings.TrimSpace(s)
		if s != "." && s != ".." {
			s = strings.TrimRight(s, ". ")
		}
		segs[i] = s
	}
	p = path.Clean("/" + strings.Join(segs, "/"))
	return p
}

// countingUpstream records, for each request, the path it was sent (escaped, as on the wire)
// and how a lenient framework would read it.
type countingUpstream struct {
	srv  *httptest.Server
	mu   sync.Mutex
	seen []string // escaped paths, in order
}

func startCountingUpstream(t *testing.T) *countingUpstream {
	u := &countingUpstream{}
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.seen = append(u.seen, r.URL.EscapedPath())
		u.mu.Unlock()
		_, _ = w.Write([]byte(`{"ok":true}`))
	}))
	t.Cleanup(u.srv.Close)
	return u
}

// reads returns the paths received since index from that a lenient framework reads as want.
func (u *countingUpstream) reads(from int, want string) []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	var out []string
	for _, p := range u.seen[from:] {
		if want == "" || lenientPath(p) == want {
			out = append(out, p)
		}
	}
	return out
}

func (u *countingUpstream) len() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.seen)
}

func TestLenientPath(t *testing.T) {
	for _, s := range pathSpellings {
		if got := lenientPath(s); got != "/api/x" {
			t.Errorf("lenientPath(%q) = %q, want /api/x", s, got)
		}
	}
	for _, s := range []string{"/free", "/apix", "/api/y", "/ap/x", "/x"} {
		if got := lenientPath(s); got == "/api/x" {
			t.Errorf("lenientPath(%q) = /api/x", s)
		}
	}
}

// TestGatedRouteUnreachableByPathSpelling sends every spelling of /api/x, unpaid, to the four
// ways of gating /api/* with Caddy, through the built binary. A spelling is either refused
// (402, or 400/404 for what Caddy or the gate cannot read) or served for free as something
// other than the paid resource: the upstream never receives a path a lenient framework would
// read as /api/x, and the stripped upstream behind handle_path receives nothing at all.
func TestGatedRouteUnreachableByPathSpelling(t *testing.T) {
	up, stripped := startCountingUpstream(t), startCountingUpstream(t)
	ports := map[string]int{}
	env := []string{
		"UPSTREAM=" + up.srv.URL,
		"STRIPPED_UPSTREAM=" + stripped.srv.URL,
		"DEAD_PORT=" + strconv.Itoa(testenv.FreePort(t)),
	}
	var wait []int
	for _, site := range []string{"MATCHER", "HANDLE", "HANDLE_PATH", "ROUTE", "UNGUARDED"} {
		p := testenv.FreePort(t)
		ports[site] = p
		wait = append(wait, p)
		env = append(env, site+"_PORT="+strconv.Itoa(p))
	}
	testenv.StartCaddy(t, pathsCaddyfile, testenv.CaddyOptions{Env: env, WaitPorts: wait})

	sites := []struct {
		name, port string
	}{
		{"x402 /api/*", "MATCHER"},
		{"handle /api/*", "HANDLE"},
		{"handle_path /api/*", "HANDLE_PATH"},
		{"route /api/*", "ROUTE"},
	}
	for _, site := range sites {
		t.Run(site.name, func(t *testing.T) {
			base := "http://127.0.0.1:" + strconv.Itoa(ports[site.port])

			// The free part of the site is served: the upstream is reachable, so a zero
			// count below means the gate held, not that nothing could get through.
			before := up.len()
			r := mustDo(t, http.MethodGet, base+"/free", nil)
			if r.Status != http.StatusOK || len(up.reads(before, "/free")) != 1 {
				t.Fatalf("GET /free: status %d, upstream saw %v; want 200 and one call", r.Status, up.reads(before, ""))
			}

			upBefore, strippedBefore := up.len(), stripped.len()
			for _, target := range pathSpellings {
				for _, method := range []string{http.MethodGet, http.MethodPost} {
					r, err := do(t, method, base+"/", target, nil)
					if err != nil {
						t.Errorf("%s %q: %v", method, target, err)
						continue
					}
					if target == "/api/x" && r.Status != http.StatusPaymentRequired {
						t.Errorf("%s /api/x: status %d, want the 402 challenge: %s", method, r.Status, r.Body)
					}
					switch r.Status {
					case http.StatusPaymentRequired, http.StatusBadRequest, http.StatusNotFound:
					case http.StatusOK:
						// Served for free: only right if the upstream did not read it as /api/x,
						// which the counts below check.
					default:
						t.Errorf("%s %q: status %d, want 402 (or 400/404, or a free answer that is not /api/x): %s", method, target, r.Status, r.Body)
					}
				}
			}
			if got := up.reads(upBefore, "/api/x"); len(got) != 0 {
				t.Errorf("unpaid requests reached the upstream's /api/x %d times, as %q", len(got), got)
			}
			if got := stripped.reads(strippedBefore, ""); len(got) != 0 {
				t.Errorf("unpaid requests reached the stripped upstream %d times, as %q", len(got), got)
			}
		})
	}

	// Without the guard, Caddy's matchers and a lenient upstream disagree: a spelling that
	// /api/* does not match goes to the free route, and the upstream reads it as /api/x. This
	// is why docs/caddy.md#path-matching asks for the guard (or gating by default).
	t.Run("handle /api/* without the guard", func(t *testing.T) {
		base := "http://127.0.0.1:" + strconv.Itoa(ports["UNGUARDED"])
		for _, target := range []string{"/api%5Cx", "/api;/x", "/api%00/x", "/api./x"} {
			before := up.len()
			r, err := do(t, http.MethodGet, base+"/", target, nil)
			if err != nil {
				t.Fatalf("GET %q: %v", target, err)
			}
			if r.Status != http.StatusOK || len(up.reads(before, "/api/x")) != 1 {
				t.Errorf("GET %q without the guard: status %d, upstream read %q; want it served free as /api/x (the hazard the guard closes)", target, r.Status, up.reads(before, ""))
			}
		}
	})
}
