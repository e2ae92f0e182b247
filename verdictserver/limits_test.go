package verdictserver

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/ethereum/go-ethereum/common"
	"github.com/redis/go-redis/v9"

	"github.com/x402gate/x402gate/internal/testenv"
)

// TestBurstIsRateLimited: past its burst a key gets 429 with Retry-After (whole seconds,
// at least 1) and the X-RateLimit-* headers, on reads and submits alike; another key
// still has its own budget. Past the per-IP burst, even a request without a key is 429.
func TestBurstIsRateLimited(t *testing.T) {
	slow := 0.001 // one event per 1000 s: nothing refills during the test
	t.Run("per key", func(t *testing.T) {
		e := newEnv(t, nil, func(c *Config, _ *Deps) { c.RateKey = &RateConfig{Rate: slow, Burst: 3} })
		a := e.agent("alice", common.HexToAddress("0xA11CE00000000000000000000000000000000001"), allowPolicy)
		b := e.agent("bob", common.HexToAddress("0xB0B0000000000000000000000000000000000002"), allowPolicy)
		unknown := "0x" + "00000000000000000000000000000000000000000000000000000000000000ff"
		for i := range 3 {
			r := e.status(a.Key, unknown)
			if r.status != 404 {
				t.Fatalf("read %d = %d, want 404 within the burst", i, r.status)
			}
			if got := r.header.Get("X-RateLimit-Remaining"); got != strconv.Itoa(2-i) {
				t.Errorf("read %d: X-RateLimit-Remaining = %q, want %d", i, got, 2-i)
			}
			if r.header.Get("X-RateLimit-Limit") != "3" {
				t.Errorf("X-RateLimit-Limit = %q, want 3", r.header.Get("X-RateLimit-Limit"))
			}
		}
		for _, r := range []answer{e.status(a.Key, unknown), e.submit(a.Key, submitBody(a.Wallet, allowedPay, ""))} {
			wantError(t, r, http.StatusTooManyRequests, codeRateLimited)
			ra, err := strconv.Atoi(r.header.Get("Retry-After"))
			if err != nil || ra < 1 || ra > 1000 {
				t.Errorf("Retry-After = %q, want 1 to 1000 seconds", r.header.Get("Retry-After"))
			}
			if r.header.Get("X-RateLimit-Remaining") != "0" || r.header.Get("X-RateLimit-Reset") == "" {
				t.Errorf("X-RateLimit headers = %v", r.header)
			}
		}
		if r := e.status(b.Key, unknown); r.status != 404 {
			t.Errorf("another key = %d, want its own budget (404)", r.status)
		}
	})
	t.Run("per ip", func(t *testing.T) {
		e := newEnv(t, nil, func(c *Config, _ *Deps) { c.RateIP = &RateConfig{Rate: slow, Burst: 2} })
		for range 2 {
			if r := call(t, "POST", e.api.URL+"/transactions", `{}`); r.status != 401 {
				t.Fatalf("within the IP burst = %d, want 401", r.status)
			}
		}
		wantError(t, call(t, "POST", e.api.URL+"/transactions", `{}`), 429, codeRateLimited)
		if r := call(t, "GET", e.api.URL+"/health", nil); r.status != 200 {
			t.Errorf("health past the IP limit = %d, want 200 (not limited)", r.status)
		}
	})
}

// TestRateLimitsAcrossInstances: two servers on one store and one Redis share a key's
// budget: the burst holds for the fleet, not for each instance. With Redis gone, a
// limited route fails closed with 503.
func TestRateLimitsAcrossInstances(t *testing.T) {
	rs := testenv.StartRedisServer(t, testenv.RedisConfig{})
	o, err := redis.ParseURL(rs.URL)
	if err != nil {
		t.Fatal(err)
	}
	rc := redis.NewClient(o)
	t.Cleanup(func() { _ = rc.Close() })
	limits := func(c *Config, d *Deps) {
		c.RateKey, c.RateIP, d.Redis = &RateConfig{Rate: 0.001, Burst: 4}, &RateConfig{Rate: 1000, Burst: 1000}, rc
	}
	e := newEnv(t, nil, limits)
	a := e.agent("alice", common.HexToAddress("0xA11CE00000000000000000000000000000000001"), allowPolicy)
	srv2, err := New(Config{RateKey: &RateConfig{Rate: 0.001, Burst: 4}}, Deps{Store: e.st, Engine: e.srv.engine, Redis: rc})
	if err != nil {
		t.Fatal(err)
	}
	api2 := httptest.NewServer(srv2.Handler())
	t.Cleanup(api2.Close)
	unknown := "/transactions/0x" + "00000000000000000000000000000000000000000000000000000000000000ff" + "/approval-status"
	var got []int
	for i := range 6 {
		base := e.api.URL
		if i%2 == 1 {
			base = api2.URL
		}
		got = append(got, call(t, "GET", base+unknown, nil, "x-api-key", a.Key).status)
	}
	want := []int{404, 404, 404, 404, 429, 429}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("statuses across two instances = %v, want %v", got, want)
		}
	}
	rs.Stop()
	wantError(t, call(t, "GET", e.api.URL+unknown, nil, "x-api-key", a.Key), 503, codeUnavailable)
}

// TestRateLimitHeadersCostOneAllocation: the X-RateLimit-* headers are set under the keys
// net/http writes on the wire (its canonical form), with their values, in one allocation
// for the three (small numbers have no digits to allocate): a limited read sets them on
// every answer.
func TestRateLimitHeadersCostOneAllocation(t *testing.T) {
	for _, k := range []string{headerRateLimit, headerRateRemaining, headerRateReset} {
		if c := http.CanonicalHeaderKey(k); c != k {
			t.Errorf("header key %q, want net/http's canonical %q", k, c)
		}
	}
	h := http.Header{}
	if n := testing.AllocsPerRun(100, func() { setRateLimitHeaders(h, 60, 59, 1) }); n > 1 {
		t.Errorf("setRateLimitHeaders: %v allocations, want at most 1", n)
	}
	for k, want := range map[string]string{"X-RateLimit-Limit": "60", "X-RateLimit-Remaining": "59", "X-RateLimit-Reset": "1"} {
		if got := h.Values(k); len(got) != 1 || got[0] != want {
			t.Errorf("%s = %q, want [%s]", k, got, want)
		}
	}
}
