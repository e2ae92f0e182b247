package gate

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/x402gate/x402gate/internal/testenv"
	"github.com/x402gate/x402gate/x402"
)

// paidAnswer is what one presentation of a payment header got.
type paidAnswer struct {
	status int
	err    string
	tx     string
}

// present sends the payment header once and reads the answer.
func present(t *testing.T, url, name, value string) paidAnswer {
	t.Helper()
	res := get(t, url, name, value)
	body := readBody(t, res)
	a := paidAnswer{status: res.StatusCode}
	if res.StatusCode >= 400 && res.Header.Get("Content-Type") == "application/json" {
		a.err = errorOf(t, body)
	}
	if v := res.Header.Get(x402.HeaderPaymentResponse); v != "" {
		sr, err := x402.DecodeSettleResponse(v)
		if err != nil {
			t.Fatalf("X-PAYMENT-RESPONSE: %v", err)
		}
		a.tx = sr.Transaction
	}
	return a
}

const nonceUsed = "invalid_exact_evm_nonce_already_used"

// TestRetryAfterUpstreamFailure: the upstream answers 503 after the payment settled; the
// same header then reaches the upstream again without a second transfer, with the first
// settlement's transaction in its response header; once the upstream succeeded, the header
// is refused.
func TestRetryAfterUpstreamFailure(t *testing.T) {
	env := newTestEnv(t)
	for _, version := range []int{x402.Version1, x402.Version2} {
		t.Run(fmt.Sprintf("v%d", version), func(t *testing.T) {
			up := &upstream{script: []int{http.StatusServiceUnavailable, http.StatusOK}}
			srv := serve(t, env.gate(t, env.config(), Options{}), up)
			url := srv.URL + "/r"
			name, value := env.sign(t, version, env.payer, fetchChallenge(t, url), tamper{})
			before := env.ledger(t, env.payer.Address)

			first := present(t, url, name, value)
			if first.status != http.StatusServiceUnavailable || first.tx == "" {
				t.Fatalf("first: %+v, want the upstream's 503 with the settlement header", first)
			}
			env.expectOnChain(t, first.tx, env.payer.Address)
			retry := present(t, url, name, value)
			if retry.status != http.StatusOK || retry.tx != first.tx {
				t.Fatalf("retry: %+v, want 200 with tx %s", retry, first.tx)
			}
			if p := up.lastPaid(); p == nil || !p.Retry || p.Settlement.Transaction != first.tx {
				t.Errorf("retry Paid = %+v", p)
			}
			again := present(t, url, name, value)
			wantErr := nonceUsed
			if version == x402.Version1 {
				wantErr = "invalid_transaction_state"
			}
			if again.status != http.StatusPaymentRequired || again.err != wantErr {
				t.Errorf("after a good retry: %+v, want 402 %s", again, wantErr)
			}
			if n := up.calls.Load(); n != 2 {
				t.Errorf("upstream ran %d times, want 2", n)
			}
			env.expectMoved(t, env.payer.Address, before, 1)
		})
	}
}

// TestRetryAtMostN: with retry.max 2 and an upstream that keeps failing, the header reaches
// the upstream 1+2 times, then is refused; one transfer in all.
func TestRetryAtMostN(t *testing.T) {
	env := newTestEnv(t)
	cfg := env.config()
	cfg.Retry.Max = 2
	up := &upstream{script: []int{502, 500, 504, 500, 500}}
	srv := serve(t, env.gate(t, cfg, Options{}), up)
	url := srv.URL + "/r"
	name, value := env.sign(t, x402.Version2, env.payer, fetchChallenge(t, url), tamper{})
	before := env.ledger(t, env.payer.Address)
	want := []int{502, 500, 504, http.StatusPaymentRequired, http.StatusPaymentRequired}
	for i, w := range want {
		a := present(t, url, name, value)
		if a.status != w {
			t.Fatalf("presentation %d: %+v, want %d", i+1, a, w)
		}
		if w == http.StatusPaymentRequired && a.err != nonceUsed {
			t.Errorf("presentation %d: error %q, want %s", i+1, a.err, nonceUsed)
		}
	}
	if n := up.calls.Load(); n != 3 {
		t.Errorf("upstream ran %d times, want 3", n)
	}
	env.expectMoved(t, env.payer.Address, before, 1)
}

// TestRetryWhatCountsAsFailure drives Serve with next functions: a connection failure
// (an error, 502 by default), a panic and a 5xx earn retries; a 4xx, an error mapped to
// 4xx by ErrorStatus, and a success do not; retry.max < 0 turns retries off.
func TestRetryWhatCountsAsFailure(t *testing.T) {
	env := newTestEnv(t)
	errNotFound := errors.New("no such file")
	errorStatus := func(err error) int {
		if errors.Is(err, errNotFound) {
			return http.StatusNotFound
		}
		return http.StatusBadGateway
	}
	type step func(w http.ResponseWriter) error
	write := func(code int) step {
		return func(w http.ResponseWriter) error { w.WriteHeader(code); return nil }
	}
	cases := []struct {
		name    string
		max     int
		first   step
		retried bool
	}{
		{"connection failure", 0, func(http.ResponseWriter) error {
			return errors.New("dial tcp 10.0.0.1:80: connect: connection refused")
		}, true},
		{"panic", 0, func(http.ResponseWriter) error { panic(http.ErrAbortHandler) }, true},
		{"500 written", 0, write(500), true},
		{"404 written", 0, write(404), false},
		{"error mapped to 404", 0, func(http.ResponseWriter) error { return errNotFound }, false},
		{"200 written", 0, write(200), false},
		{"retries off", -1, write(500), false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := env.config()
			cfg.Retry.Max = tc.max
			g := env.gate(t, cfg, Options{ErrorStatus: errorStatus})
			var calls atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_ = g.Serve(w, r, Input{}, func(w http.ResponseWriter, r *http.Request) error {
					if calls.Add(1) == 1 {
						return tc.first(w)
					}
					w.WriteHeader(http.StatusOK)
					return nil
				})
			}))
			srv.Config.ErrorLog = nil
			defer srv.Close()
			url := srv.URL + "/r"
			name, value := env.sign(t, x402.Version2, env.payer, fetchChallenge(t, url), tamper{})
			before := env.ledger(t, env.payer.Address)
			// POST: net/http's client silently resends a GET whose connection dropped (as
			// after a panic), which would itself be the retry.
			req, _ := http.NewRequest(http.MethodPost, url, nil)
			req.Header.Set(name, value)
			if res, err := http.DefaultClient.Do(req); err == nil { // a panic drops the connection
				_ = readBody(t, res)
			}
			a := present(t, url, name, value)
			if tc.retried {
				if a.status != http.StatusOK || calls.Load() != 2 {
					t.Errorf("retry: %+v, upstream calls %d; want 200 and 2", a, calls.Load())
				}
			} else if a.status != http.StatusPaymentRequired || a.err != nonceUsed || calls.Load() != 1 {
				t.Errorf("retry: %+v, upstream calls %d; want 402 %s and 1", a, calls.Load(), nonceUsed)
			}
			env.expectMoved(t, env.payer.Address, before, 1)
		})
	}
}

// TestRetryGraceExpires: a grant lives for retry.grace on the store's clock; after it the
// header is refused.
func TestRetryGraceExpires(t *testing.T) {
	env := newTestEnv(t)
	cfg := env.config()
	cfg.Retry.Grace = time.Minute
	var mu sync.Mutex
	clock := time.Unix(1_900_000_000, 0)
	store := NewMemoryRetryStore(0)
	store.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
	up := &upstream{script: []int{500, 500, 500}}
	srv := serve(t, env.gate(t, cfg, Options{RetryStore: store}), up)
	url := srv.URL + "/r"
	name, value := env.sign(t, x402.Version2, env.payer, fetchChallenge(t, url), tamper{})
	if a := present(t, url, name, value); a.status != 500 {
		t.Fatalf("first: %+v", a)
	}
	mu.Lock()
	clock = clock.Add(59 * time.Second)
	mu.Unlock()
	if a := present(t, url, name, value); a.status != 500 {
		t.Fatalf("retry within grace: %+v, want the upstream's 500", a)
	}
	mu.Lock()
	clock = clock.Add(2 * time.Second)
	mu.Unlock()
	if a := present(t, url, name, value); a.status != http.StatusPaymentRequired || a.err != nonceUsed {
		t.Fatalf("retry after grace: %+v, want 402", a)
	}
	if n := up.calls.Load(); n != 2 {
		t.Errorf("upstream ran %d times, want 2", n)
	}
}

// TestRetryIsPerResource: a credit earned on one resource does not open another.
func TestRetryIsPerResource(t *testing.T) {
	env := newTestEnv(t)
	up := &upstream{script: []int{500}}
	srv := serve(t, env.gate(t, env.config(), Options{}), up)
	name, value := env.sign(t, x402.Version2, env.payer, fetchChallenge(t, srv.URL+"/a"), tamper{})
	if a := present(t, srv.URL+"/a", name, value); a.status != 500 {
		t.Fatalf("first: %+v", a)
	}
	// The v2 payload names /a as its resource, but the gate keys credits on the URL asked.
	if a := present(t, srv.URL+"/b", name, value); a.status != http.StatusPaymentRequired {
		t.Fatalf("other resource: %+v, want 402", a)
	}
	if a := present(t, srv.URL+"/a", name, value); a.status != http.StatusOK {
		t.Fatalf("same resource: %+v, want 200", a)
	}
}

// TestRetrySharedThroughRedis: two Gate instances share a RedisRetryStore; a payment whose
// upstream failed behind one is retried behind the other, without a second transfer, and
// the N credits are counted across both.
func TestRetrySharedThroughRedis(t *testing.T) {
	env := newTestEnv(t)
	url := testenv.StartRedis(t)
	newStore := func() *RedisRetryStore {
		s, err := OpenRedisRetryStore(t.Context(), url, "")
		if err != nil {
			t.Fatalf("OpenRedisRetryStore: %v", err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	cfg := env.config()
	cfg.Retry.Max = 2
	up := &upstream{script: []int{500, 503, 500, 500}}
	// Both instances answer for the same public resource.
	resource := func(r *http.Request) string { return "https://api.example.com" + r.URL.Path }
	a := httptest.NewServer(env.gate(t, cfg, Options{RetryStore: newStore()}).Middleware(MiddlewareOptions{Resource: resource})(up))
	defer a.Close()
	b := httptest.NewServer(env.gate(t, cfg, Options{RetryStore: newStore()}).Middleware(MiddlewareOptions{Resource: resource})(up))
	defer b.Close()

	name, value := env.sign(t, x402.Version2, env.payer, fetchChallenge(t, a.URL+"/r"), tamper{})
	before := env.ledger(t, env.payer.Address)
	steps := []struct {
		srv  *httptest.Server
		want int
	}{{a, 500}, {b, 503}, {a, 500}, {b, http.StatusPaymentRequired}, {a, http.StatusPaymentRequired}}
	var tx string
	for i, s := range steps {
		got := present(t, s.srv.URL+"/r", name, value)
		if got.status != s.want {
			t.Fatalf("step %d: %+v, want %d", i+1, got, s.want)
		}
		if s.want >= 500 {
			if tx == "" {
				tx = got.tx
			}
			if got.tx != tx {
				t.Errorf("step %d: tx %s, want %s", i+1, got.tx, tx)
			}
		}
	}
	if n := up.calls.Load(); n != 3 {
		t.Errorf("upstream ran %d times, want 3", n)
	}
	env.expectOnChain(t, tx, env.payer.Address)
	env.expectMoved(t, env.payer.Address, before, 1)

	t.Run("retry succeeds behind the other instance", func(t *testing.T) {
		up2 := &upstream{script: []int{502}}
		a2 := httptest.NewServer(env.gate(t, cfg, Options{RetryStore: newStore()}).Middleware(MiddlewareOptions{Resource: resource})(up2))
		defer a2.Close()
		b2 := httptest.NewServer(env.gate(t, cfg, Options{RetryStore: newStore()}).Middleware(MiddlewareOptions{Resource: resource})(up2))
		defer b2.Close()
		name, value := env.sign(t, x402.Version1, env.payer, fetchChallenge(t, a2.URL+"/s"), tamper{})
		before := env.ledger(t, env.payer.Address)
		if got := present(t, a2.URL+"/s", name, value); got.status != 502 {
			t.Fatalf("first: %+v", got)
		}
		if got := present(t, b2.URL+"/s", name, value); got.status != 200 {
			t.Fatalf("retry: %+v, want 200", got)
		}
		if got := present(t, a2.URL+"/s", name, value); got.status != http.StatusPaymentRequired {
			t.Fatalf("after a good retry: %+v, want 402", got)
		}
		env.expectMoved(t, env.payer.Address, before, 1)
	})
}

// TestRetryStoreDownFailsClosed: when Redis is gone, a retry presentation is answered 503
// retry_store_unavailable and nothing reaches the upstream.
func TestRetryStoreDownFailsClosed(t *testing.T) {
	env := newTestEnv(t)
	rs := testenv.StartRedisServer(t, testenv.RedisConfig{})
	store, err := OpenRedisRetryStore(t.Context(), rs.URL, "")
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	up := &upstream{script: []int{500}}
	srv := serve(t, env.gate(t, env.config(), Options{RetryStore: store}), up)
	url := srv.URL + "/r"
	name, value := env.sign(t, x402.Version2, env.payer, fetchChallenge(t, url), tamper{})
	if a := present(t, url, name, value); a.status != 500 {
		t.Fatalf("first: %+v", a)
	}
	rs.Stop()
	a := present(t, url, name, value)
	if a.status != http.StatusServiceUnavailable || a.err != "retry_store_unavailable" {
		t.Fatalf("store down: %+v, want 503 retry_store_unavailable", a)
	}
	if n := up.calls.Load(); n != 1 {
		t.Errorf("upstream ran %d times, want 1", n)
	}
	if _, err := OpenRedisRetryStore(t.Context(), "redis://:hunter2@"+rs.Addr+"/0", ""); err == nil || !errors.Is(err, ErrRetryStoreUnavailable) || containsSecret(err, "hunter2") {
		t.Errorf("open a down store: %v", err)
	}
	if _, err := OpenRedisRetryStore(t.Context(), "http://:hunter2@x", ""); err == nil || containsSecret(err, "hunter2") {
		t.Errorf("open a bad URL: %v", err)
	}
}

func containsSecret(err error, s string) bool {
	return err != nil && strings.Contains(err.Error(), s)
}

// TestRetryStores checks both stores' contract: Use takes exactly n credits under
// concurrency, a grant is never refilled, Revoke empties it, and the grant expires.
func TestRetryStores(t *testing.T) {
	url := testenv.StartRedis(t)
	rs, err := OpenRedisRetryStore(t.Context(), url, "test:")
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	for _, tc := range []struct {
		name  string
		store RetryStore
	}{{"memory", NewMemoryRetryStore(0)}, {"redis", rs}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			s := tc.store
			if _, ok, err := s.Use(ctx, "none"); ok || err != nil {
				t.Fatalf("Use of an unknown key: %v %v", ok, err)
			}
			if err := s.Grant(ctx, "k", 3, time.Hour, []byte("data")); err != nil {
				t.Fatal(err)
			}
			var got atomic.Int32
			var wg sync.WaitGroup
			for i := 0; i < 20; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					d, ok, err := s.Use(ctx, "k")
					if err != nil {
						t.Error(err)
					}
					if ok {
						got.Add(1)
						if string(d) != "data" {
							t.Errorf("data %q", d)
						}
					}
				}()
			}
			wg.Wait()
			if got.Load() != 3 {
				t.Fatalf("%d credits taken, want 3", got.Load())
			}
			if err := s.Grant(ctx, "k", 3, time.Hour, []byte("data")); err != nil {
				t.Fatal(err)
			}
			if _, ok, _ := s.Use(ctx, "k"); ok {
				t.Error("a used-up grant was refilled")
			}
			_ = s.Grant(ctx, "r", 2, time.Hour, []byte("x"))
			if err := s.Revoke(ctx, "r"); err != nil {
				t.Fatal(err)
			}
			_ = s.Grant(ctx, "r", 2, time.Hour, []byte("x"))
			if _, ok, _ := s.Use(ctx, "r"); ok {
				t.Error("a revoked grant was refilled")
			}
			if err := s.Grant(ctx, "zero", 0, time.Hour, nil); err != nil {
				t.Fatal(err)
			}
			if _, ok, _ := s.Use(ctx, "zero"); ok {
				t.Error("a grant of 0 credits gave one")
			}
		})
	}
	t.Run("redis ttl", func(t *testing.T) {
		ctx := context.Background()
		if err := rs.Grant(ctx, "ttl", 1, 90*time.Second, []byte("x")); err != nil {
			t.Fatal(err)
		}
		o, _ := redis.ParseURL(url)
		c := redis.NewClient(o)
		defer c.Close()
		ttl, err := c.PTTL(ctx, "test:ttl").Result()
		if err != nil || ttl <= 0 || ttl > 90*time.Second {
			t.Fatalf("PTTL %v %v, want within (0, 90s]", ttl, err)
		}
	})
	t.Run("memory expiry and bound", func(t *testing.T) {
		ctx := context.Background()
		clock := time.Unix(1_900_000_000, 0)
		s := NewMemoryRetryStore(2)
		s.now = func() time.Time { return clock }
		_ = s.Grant(ctx, "a", 1, time.Minute, []byte("x"))
		_ = s.Grant(ctx, "b", 1, 2*time.Minute, []byte("x"))
		if err := s.Grant(ctx, "c", 1, time.Minute, []byte("x")); !errors.Is(err, ErrRetryStoreUnavailable) {
			t.Errorf("full store: %v", err)
		}
		clock = clock.Add(time.Minute)
		if _, ok, _ := s.Use(ctx, "a"); ok {
			t.Error("an expired grant gave a credit")
		}
		if err := s.Grant(ctx, "c", 1, time.Minute, []byte("x")); err != nil {
			t.Errorf("grant after expiry freed room: %v", err)
		}
		if _, ok, _ := s.Use(ctx, "b"); !ok {
			t.Error("an unexpired grant gave no credit")
		}
	})
	t.Run("redis down", func(t *testing.T) {
		srv := testenv.StartRedisServer(t, testenv.RedisConfig{})
		o, _ := redis.ParseURL(srv.URL)
		c := redis.NewClient(o)
		defer c.Close()
		s := NewRedisRetryStore(c, "")
		srv.Stop()
		ctx := context.Background()
		if err := s.Grant(ctx, "k", 1, time.Minute, nil); !errors.Is(err, ErrRetryStoreUnavailable) {
			t.Errorf("Grant: %v", err)
		}
		if _, _, err := s.Use(ctx, "k"); !errors.Is(err, ErrRetryStoreUnavailable) {
			t.Errorf("Use: %v", err)
		}
		if err := s.Revoke(ctx, "k"); !errors.Is(err, ErrRetryStoreUnavailable) {
			t.Errorf("Revoke: %v", err)
		}
	})
}
