package paygate

import (
	"fmt"
	"io"
	"net"
	"net/http"
	neturl "net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/prometheus/client_golang/prometheus"

	_ "github.com/x402gate/x402gate/caddymodule/logredact" // the sites' x402_redact logs
)

// freePort returns a TCP port that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// isolateCaddy points Caddy's config and data dirs at temporary directories.
func isolateCaddy(t *testing.T) {
	t.Helper()
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	t.Setenv("XDG_DATA_HOME", t.TempDir())
}

// loadCaddy adapts a Caddyfile, runs it in this process and waits until the bundled
// facilitators' networks are ready (they come up in the background).
func loadCaddy(t *testing.T, caddyfileText string) {
	t.Helper()
	cfg, warn, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(caddyfileText), nil)
	if err != nil {
		t.Fatalf("adapt: %v", err)
	}
	for _, w := range warn {
		t.Logf("adapt warning: %s", w.String())
	}
	if err := caddy.Load(cfg, true); err != nil {
		t.Fatalf("load: %v", err)
	}
	for i := 0; unavailableNetworks(t) != 0; i++ {
		if i == 3000 {
			t.Fatalf("the networks are not ready after 30 s: %v unavailable", unavailableNetworks(t))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// unavailableNetworks reads the gauge caddy_x402_networks_unavailable.
func unavailableNetworks(t *testing.T) float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(networksUnavailable)
	mfs, err := reg.Gather()
	if err != nil || len(mfs) != 1 {
		t.Fatalf("gather the gauge: %v", err)
	}
	return mfs[0].GetMetric()[0].GetGauge().GetValue()
}

func stopCaddy(t *testing.T) {
	t.Cleanup(func() {
		if err := caddy.Stop(); err != nil {
			t.Errorf("caddy stop: %v", err)
		}
	})
}

// do sends a request and returns the response with its body read.
// afterReload waits until the old server's listener is closed and url answers over a
// fresh connection after an in-process reload. Caddy binds each config's listener with
// SO_REUSEPORT and closes the old one only after caddy.Load returns, so until then the
// kernel may queue a new connection on the old socket and reset it when that closes, or
// the old server may close one it accepted just before it stopped (EOF): Caddy's reload,
// not ours. Send only requests that change nothing (no payment header) to url. It returns
// the answer's status and body.
func afterReload(t *testing.T, url string) (int, string) {
	t.Helper()
	u, err := neturl.Parse(url)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; caddy.ListenerUsage("tcp", ":"+u.Port()) > 1; i++ {
		if i == 3000 {
			t.Fatalf("the old listener on :%s is still open 30 s after the reload", u.Port())
		}
		time.Sleep(10 * time.Millisecond)
	}
	c := &http.Client{Timeout: time.Minute, Transport: &http.Transport{DisableKeepAlives: true}}
	for attempt := 1; ; attempt++ {
		res, err := c.Get(url)
		if err == nil {
			b, err := io.ReadAll(res.Body)
			res.Body.Close()
			if err == nil {
				return res.StatusCode, string(b)
			}
		}
		if attempt == 5 {
			t.Fatalf("GET %s after the reload: %v", url, err)
		}
	}
}

func do(t *testing.T, req *http.Request) (*http.Response, string) {
	t.Helper()
	// No keep-alive: a reload closes the old server's idle connections.
	c := &http.Client{Timeout: 2 * time.Minute, Transport: &http.Transport{DisableKeepAlives: true}}
	res, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res, string(b)
}

// TestAccessLogRedactsPaymentHeaders sends a request that carries every secret x402
// header through a Caddy site whose access log uses format x402_redact, and reads the log
// line back: the header values are gone, other headers are still logged.
func TestAccessLogRedactsPaymentHeaders(t *testing.T) {
	isolateCaddy(t)
	port := freePort(t)
	logFile := filepath.Join(t.TempDir(), "access.log")
	stopCaddy(t)
	loadCaddy(t, fmt.Sprintf(`{
	admin off
	persist_config off
	auto_https off
}
http://127.0.0.1:%d {
	log {
		output file %s
		format x402_redact json
	}
	respond "ok"
}`, port, logFile))

	secrets := map[string]string{
		"X-PAYMENT":              "secret-v1-payment-eyJ4NDAy",
		"PAYMENT-SIGNATURE":      "secret-v2-payment-eyJ4NDAy",
		"X-VERIFICATION-PAYMENT": "secret-fee-payment-eyJ4NDAy",
		"X-PAYMENT-RETRY":        "secret-retry-token-0003",
		"x-api-key":              "secret-verdict-api-key-0001",
		"x-facilitator-key":      "secret-facilitator-key-0002",
		"x-admin-key":            "secret-verdict-admin-key-0004",
	}
	req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/paid/resource", port), nil)
	for k, v := range secrets {
		req.Header.Set(k, v)
	}
	req.Header.Set("X-Visible", "visible-control-value")
	if res, body := do(t, req); res.StatusCode != http.StatusOK || body != "ok" {
		t.Fatalf("got %d %q, want 200 ok", res.StatusCode, body)
	}

	var line string
	for i := 0; i < 100 && !strings.Contains(line, "/paid/resource"); i++ {
		b, _ := os.ReadFile(logFile)
		line = string(b)
		time.Sleep(50 * time.Millisecond)
	}
	if !strings.Contains(line, "/paid/resource") || !strings.Contains(line, "visible-control-value") {
		t.Fatalf("the access log has no line of the request with its headers:\n%s", line)
	}
	for k, v := range secrets {
		if strings.Contains(line, v) {
			t.Errorf("the access log carries the value of %s:\n%s", k, line)
		}
	}
}
