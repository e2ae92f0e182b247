package gate

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/x402gate/x402gate/gate/redisretry"
	"github.com/x402gate/x402gate/internal/testenv"
	"github.com/x402gate/x402gate/x402"
)

// heldUpstream fails its first request (so the payment earns retry credits) and holds
// every later one until release is closed, so the test decides when a retry's upstream
// answers, whatever the scheduling.
type heldUpstream struct {
	calls    atomic.Int32
	inFlight atomic.Int32
	good     atomic.Int32
	release  chan struct{}
}

func (u *heldUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if u.calls.Add(1) == 1 {
		w.WriteHeader(http.StatusInternalServerError)
		return
	}
	u.inFlight.Add(1)
	<-u.release
	u.good.Add(1)
	w.WriteHeader(http.StatusOK)
}

// TestConcurrentRetriesOneGoodAnswer: one payment buys one good answer, however many
// retries with its token arrive at once. The retry that takes the credit holds it (a lease)
// while its upstream runs; the others are refused with 409 retry_in_progress and never
// reach the upstream. Shown for N = 2, 5 and 20 concurrent retries, on the in-process store
// and on Redis shared by two gate instances.
func TestConcurrentRetriesOneGoodAnswer(t *testing.T) {
	env := newTestEnv(t)
	redisURL := testenv.StartRedis(t)
	stores := map[string]func(t *testing.T) (Ledger, Ledger){
		"memory": func(*testing.T) (Ledger, Ledger) {
			s := NewMemoryLedger(0)
			return s, s
		},
		"redis, two instances": func(t *testing.T) (Ledger, Ledger) {
			open := func() Ledger {
				s, err := redisretry.Open(t.Context(), redisURL, "")
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = s.Close() })
				return s
			}
			return open(), open()
		},
	}
	for name, newStores := range stores {
		for _, n := range []int{2, 5, 20} {
			t.Run(fmt.Sprintf("%s, N=%d", name, n), func(t *testing.T) {
				sa, sb := newStores(t)
				up := &heldUpstream{release: make(chan struct{})}
				resource := func(r *http.Request) string { return "https://api.example.com" + r.URL.Path }
				a := httptest.NewServer(env.gate(t, env.config(), Options{Ledger: sa}).Middleware(MiddlewareOptions{Resource: resource})(up))
				defer a.Close()
				b := httptest.NewServer(env.gate(t, env.config(), Options{Ledger: sb}).Middleware(MiddlewareOptions{Resource: resource})(up))
				defer b.Close()
				name, value := env.sign(t, x402.Version2, env.payer, fetchChallenge(t, a.URL+"/r"), tamper{})
				before := env.ledger(t, env.payer.Address)
				first := present(t, a.URL+"/r", name, value)
				if first.status != http.StatusInternalServerError || !isRetryToken(first.token) {
					t.Fatalf("first: %+v, want 500 with a retry token", first)
				}

				statuses := make(chan int, n)
				var wg sync.WaitGroup
				for i := range n {
					url := []string{a.URL, b.URL}[i%2] + "/r"
					wg.Add(1)
					go func() {
						defer wg.Done()
						statuses <- retryStatus(url, name, value, first.token)
					}()
				}
				// Release the upstream once every retry has either answered or reached it.
				deadline := time.Now().Add(30 * time.Second)
				for len(statuses)+int(up.inFlight.Load()) < n && time.Now().Before(deadline) {
					time.Sleep(5 * time.Millisecond)
				}
				close(up.release)
				wg.Wait()
				close(statuses)
				count := map[int]int{}
				for s := range statuses {
					count[s]++
				}
				if count[http.StatusOK] != 1 || count[http.StatusConflict] != n-1 {
					t.Errorf("%d concurrent retries answered %v, want one 200 and %d × 409", n, count, n-1)
				}
				if g := up.good.Load(); g != 1 {
					t.Errorf("the upstream gave %d good answers for one payment, want 1", g)
				}
				env.expectMoved(t, env.payer.Address, before, 1)
			})
		}
	}
}

// retryStatus presents a payment header with its retry token and returns the status; 0
// when the request failed. It is safe to call from any goroutine.
func retryStatus(url, name, value, token string) int {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return 0
	}
	req.Header.Set(name, value)
	req.Header.Set(HeaderPaymentRetry, token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0
	}
	_ = res.Body.Close()
	return res.StatusCode
}

// TestRetryBindsMethodAndQuery: a retry credit is bound to the method and the full
// request URI of the request that earned it. The same header and token on another method,
// another query or no query takes nothing, and the credit is still there for the request
// that earned it.
func TestRetryBindsMethodAndQuery(t *testing.T) {
	env := newTestEnv(t)
	up := &upstream{script: []int{500}}
	srv := serve(t, env.gate(t, env.config(), Options{}), up)
	url := srv.URL + "/r?a=1"
	name, value := env.sign(t, x402.Version2, env.payer, fetchChallenge(t, url), tamper{})
	first := present(t, url, name, value)
	if first.status != http.StatusInternalServerError || !isRetryToken(first.token) {
		t.Fatalf("first: %+v, want 500 with a retry token", first)
	}
	for _, other := range []struct{ method, url string }{
		{http.MethodPost, url},
		{http.MethodGet, srv.URL + "/r?a=2"},
		{http.MethodGet, srv.URL + "/r"},
		{http.MethodGet, srv.URL + "/r?a=1&b=2"},
	} {
		if a := presentAs(t, other.method, other.url, name, value, first.token); a.status != http.StatusPaymentRequired || a.err != nonceUsed {
			t.Errorf("%s %s: %+v, want 402 %s", other.method, other.url, a, nonceUsed)
		}
	}
	if a := presentToken(t, url, name, value, first.token); a.status != http.StatusOK {
		t.Errorf("the request that earned the credit: %+v, want 200", a)
	}
	if n := up.calls.Load(); n != 2 {
		t.Errorf("upstream ran %d times, want 2", n)
	}
}
