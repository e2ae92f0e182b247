package gate

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/x402gate/x402gate/gate/payledger"
	"github.com/x402gate/x402gate/gate/redisretry"
	"github.com/x402gate/x402gate/internal/testenv"
	"github.com/x402gate/x402gate/x402"
)

// goodAnswers is an upstream that fails on a schedule and counts its good answers per
// settlement transaction, so a test can tell how many good answers a payment bought. It
// holds each request a little, so attempts overlap.
type goodAnswers struct {
	mu   sync.Mutex
	rnd  *rand.Rand
	good map[string]int
	inFlight,
	maxInFlight atomic.Int32
}

func newGoodAnswers(seed uint64) *goodAnswers {
	return &goodAnswers{rnd: rand.New(rand.NewPCG(seed, seed)), good: map[string]int{}}
}

func (u *goodAnswers) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := u.inFlight.Add(1)
	defer u.inFlight.Add(-1)
	for m := u.maxInFlight.Load(); n > m && !u.maxInFlight.CompareAndSwap(m, n); m = u.maxInFlight.Load() {
	}
	time.Sleep(10 * time.Millisecond)
	p, _ := FromContext(r.Context())
	u.mu.Lock()
	fail := u.rnd.IntN(2) == 0
	if !fail && p != nil && p.Settlement != nil {
		u.good[p.Settlement.Transaction]++
	}
	u.mu.Unlock()
	if fail {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// idVariants returns a v2 payment header under id X, the same signed payment under id Y,
// and under no id at all: the id is not signed, so anyone holding the header can make
// these.
func idVariants(t *testing.T, value string) (x, y, none string) {
	t.Helper()
	raw, err := base64.StdEncoding.DecodeString(value)
	if err != nil {
		t.Fatal(err)
	}
	variant := func(f func(m map[string]any)) string {
		var m map[string]any
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatal(err)
		}
		f(m)
		b, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return base64.StdEncoding.EncodeToString(b)
	}
	y = variant(func(m map[string]any) {
		m["extensions"].(map[string]any)[PaymentIdentifierExtension].(map[string]any)["info"].(map[string]any)["id"] = "pay_other_id_0000000Y"
	})
	none = variant(func(m map[string]any) { delete(m, "extensions") })
	return value, y, none
}

// twoInstances returns the URLs of two gates in front of up, on the in-process ledger
// (one gate: an instance with itself) or on one Redis (two instances).
func twoInstances(t *testing.T, v *testEnv, cfg Config, up http.Handler, shared string) []string {
	t.Helper()
	public := MiddlewareOptions{Resource: func(*http.Request) string { return "https://api.example/data" }}
	var gates []*Gate
	if shared == "memory" {
		g := v.gate(t, cfg, Options{})
		gates = []*Gate{g, g}
	} else {
		for range 2 {
			rs, err := redisretry.Open(t.Context(), shared, "")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = rs.Close() })
			gates = append(gates, v.gate(t, cfg, Options{Ledger: rs}))
		}
	}
	var urls []string
	for _, g := range gates {
		srv := httptest.NewServer(g.Middleware(public)(up))
		t.Cleanup(srv.Close)
		urls = append(urls, srv.URL+"/data")
	}
	return urls
}

// TestLedgerInterleavings: one payment buys one good answer, whichever way it is
// presented. For several payments, N concurrent requests (N up to 32), across two
// instances, mix the payment under id X, under id Y, under no id, each with or without
// the retry token a failed answer handed out, against an upstream that fails on a random
// schedule. Each payment gets at most one 2xx from the upstream and exactly one transfer.
// On the in-process ledger and on Redis.
func TestLedgerInterleavings(t *testing.T) {
	v := newTestEnv(t)
	redisURL := testenv.StartRedis(t)
	cfg := v.config()
	cfg.PaymentID = PaymentIDOptional
	cfg.Retry.Max = 3
	for _, shared := range []string{"memory", redisURL} {
		name := "redis"
		if shared == "memory" {
			name = shared
		}
		t.Run(name, func(t *testing.T) {
			seed := uint64(time.Now().UnixNano())
			t.Logf("seed %d", seed)
			rnd := rand.New(rand.NewPCG(seed, 1))
			up := newGoodAnswers(seed)
			urls := twoInstances(t, v, cfg, up, shared)
			c := fetchChallenge(t, urls[0])
			for round := range 4 {
				payer := v.chain.Accounts[2+round]
				before := v.ledger(t, payer.Address)
				hname, value := signOffer(t, v.token, x402.Version2, payer, c, 0, withID(c, fmt.Sprintf("pay_interleave_%07d", round)))
				headers := []string{}
				x, y, none := idVariants(t, value)
				headers = append(headers, x, y, none)
				var token atomic.Value
				token.Store("")
				n := 2 + rnd.IntN(31)
				kinds := make([]int, 2*n)
				for i := range kinds {
					kinds[i] = rnd.IntN(6)
				}
				// Two waves: the second can present the token a failed answer of the first
				// handed out.
				for wave := range 2 {
					var wg sync.WaitGroup
					for i := range n {
						k := kinds[wave*n+i]
						wg.Add(1)
						go func() {
							defer wg.Done()
							tok := ""
							if k >= 3 {
								tok, _ = token.Load().(string)
							}
							a := presentOnce(urls[i%2], hname, headers[k%3], tok)
							if a.token != "" {
								token.Store(a.token)
							}
						}()
					}
					wg.Wait()
				}
				v.expectMoved(t, payer.Address, before, 1)
			}
			up.mu.Lock()
			defer up.mu.Unlock()
			for tx, n := range up.good {
				if n > 1 {
					t.Errorf("payment %s got %d good answers from the upstream, want at most 1", tx, n)
				}
			}
		})
	}
}

// presentOnce is presentToken for any goroutine: a failed request is status 0.
func presentOnce(url, name, value, token string) paidAnswer {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return paidAnswer{}
	}
	req.Header.Set(name, value)
	if token != "" {
		req.Header.Set(HeaderPaymentRetry, token)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return paidAnswer{}
	}
	_ = res.Body.Close()
	return paidAnswer{status: res.StatusCode, token: res.Header.Get(HeaderPaymentRetry)}
}

// TestLedgerIDsAndTokenShareOneAnswer is point 1 of "Why" in issue 20: after a paid
// request whose upstream failed, the same signed authorization under a new id Y with the
// retry token, and then under its id X again, drew on two credit pools and got two good
// answers for one transfer. Now both draw on the payment's one record: one good answer,
// then every presentation is refused. On a route that requires an id, too.
func TestLedgerIDsAndTokenShareOneAnswer(t *testing.T) {
	v := newTestEnv(t)
	for i, mode := range []string{PaymentIDOptional, PaymentIDRequired} {
		t.Run(mode, func(t *testing.T) {
			cfg := v.config()
			cfg.PaymentID = mode
			up := &upstream{script: []int{http.StatusServiceUnavailable}}
			srv := serve(t, v.gate(t, cfg, Options{}), up)
			url := srv.URL + "/data"
			c := fetchChallenge(t, url)
			payer := v.chain.Accounts[7+i]
			before := v.ledger(t, payer.Address)
			name, value := signOffer(t, v.token, x402.Version2, payer, c, 0, withID(c, "pay_why_one_00000000X"))
			x, y, _ := idVariants(t, value)
			first := present(t, url, name, x)
			if first.status != http.StatusServiceUnavailable || !isRetryToken(first.token) {
				t.Fatalf("first: %+v, want the upstream's 503 with a retry token", first)
			}
			good := 0
			for _, a := range []paidAnswer{presentToken(t, url, name, y, first.token), present(t, url, name, x), presentToken(t, url, name, x, first.token)} {
				if a.status == http.StatusOK {
					good++
				}
			}
			if good != 1 {
				t.Errorf("%d good answers for one payment (id Y with the token, id X, id X with the token), want 1", good)
			}
			v.expectMoved(t, payer.Address, before, 1)
		})
	}
}

// TestLedgerLeaseOwnedAndRenewed is point 2 of "Why" in issue 20: a retry whose lease ran
// out while its upstream still ran let a second retry in beside it, and its end released
// the second one's lease, letting a third in. Now the holder renews its lease while its
// upstream runs, and only a lease's owner ends it: one retry of a payment at a time,
// however long the upstream takes.
func TestLedgerLeaseOwnedAndRenewed(t *testing.T) {
	v := newTestEnv(t)
	cfg := v.config()
	cfg.Retry.Max = 3
	g := v.gate(t, cfg, Options{})
	g.lease = 300 * time.Millisecond // below MinRetryLease, to outlive many leases quickly; slack for a loaded machine
	up := &heldUpstream{release: make(chan struct{})}
	srv := serve(t, g, up)
	url := srv.URL + "/r"
	name, value := v.sign(t, x402.Version2, v.payer, fetchChallenge(t, url), tamper{})
	first := present(t, url, name, value)
	if first.status != http.StatusInternalServerError || !isRetryToken(first.token) {
		t.Fatalf("first: %+v, want 500 with a retry token", first)
	}
	results := make(chan int, 3)
	retry := func() { results <- retryStatus(url, name, value, first.token) }
	go retry()
	for up.inFlight.Load() < 1 {
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(5 * g.lease) // the first retry's upstream outlives many leases
	go retry()
	go retry()
	// Each later retry either answers (refused) or reaches the upstream.
	deadline := time.Now().Add(30 * time.Second)
	for len(results)+int(up.inFlight.Load()) < 3 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if n := up.inFlight.Load(); n != 1 {
		t.Errorf("%d retries of one payment ran in the upstream at once, want 1", n)
	}
	close(up.release)
	for range 3 {
		<-results
	}
	if g := up.good.Load(); g != 1 {
		t.Errorf("the upstream gave %d good answers for one payment, want 1", g)
	}
}

// diedAfterSettle is the ledger as an instance that dies after the settle, before its
// answer, leaves it: the record is written and settled, with a lease that has run out by
// the next request, and its end never comes.
type diedAfterSettle struct{ payledger.Ledger }

// diedLease is the lease diedAfterSettle's attempts take in the store.
const diedLease = time.Second

func (d diedAfterSettle) Begin(ctx context.Context, c payledger.Claim) (payledger.Entry, error) {
	c.Lease = diedLease // outlives the settle on a loaded machine, so the settlement is recorded
	return d.Ledger.Begin(ctx, c)
}
func (diedAfterSettle) Renew(context.Context, string, string, time.Duration) (bool, error) {
	return true, nil
}
func (diedAfterSettle) End(context.Context, string, string, int, []byte, int, time.Duration) (bool, error) {
	return false, nil
}

// TestLedgerLostAnswerServedOnce: instance A settles a payment and dies before answering
// (its ledger keeps the record settled, its lease lapses). The same bare header on
// instance B is served once, as the answer that was lost, and then refused as a replay.
// On a route with passes, which offers sign-in-with-x, B asks for the payer's proof: the
// header alone, or with a stranger's proof, is refused; with the payer's, served once.
func TestLedgerLostAnswerServedOnce(t *testing.T) {
	v := newTestEnv(t)
	const host = "shop.example"
	for _, passes := range []bool{false, true} {
		t.Run(fmt.Sprintf("passes %v", passes), func(t *testing.T) {
			cfg := v.config()
			if passes {
				cfg = v.passConfig(testPassKey)
			}
			shared := payledger.NewMemory(0, nil)
			up := &upstream{}
			a := serve(t, v.gate(t, cfg, Options{Ledger: diedAfterSettle{shared}}), up)
			b := serve(t, v.gate(t, cfg, Options{Ledger: &MemoryLedger{shared, NewMemoryPassBook(0)}}), up)
			path := "/premium/lost.html"
			c := readChallenge(t, getWith(t, a.URL+path, host, nil))
			payer := v.chain.Accounts[6]
			before := v.ledger(t, payer.Address)
			name, value := signOffer(t, v.token, x402.Version2, payer, c, 0, nil)
			if res := getWith(t, a.URL+path, host, http.Header{name: {value}}); res.StatusCode != http.StatusOK {
				t.Fatalf("instance A: %d", res.StatusCode)
			}
			time.Sleep(diedLease + 200*time.Millisecond) // past A's lease
			status := func(h http.Header) int {
				h.Set(name, value)
				res := getWith(t, b.URL+path, host, h)
				readBody(t, res)
				return res.StatusCode
			}
			if passes {
				if s := status(http.Header{}); s != http.StatusPaymentRequired {
					t.Errorf("the bare header on a route with sign-in: %d, want 402", s)
				}
				stranger := testenv.NewAccount(t)
				info, _ := siwxChallengeOf(t, getWith(t, b.URL+path, host, nil))
				if s := status(http.Header{HeaderSignInWithX: {siwxProof(t, info, "eip155:84532", stranger.Key, nil)}}); s != http.StatusPaymentRequired {
					t.Errorf("with a stranger's proof: %d, want 402", s)
				}
			}
			h := http.Header{}
			if passes {
				info, _ := siwxChallengeOf(t, getWith(t, b.URL+path, host, nil))
				h.Set(HeaderSignInWithX, siwxProof(t, info, "eip155:84532", payer.Key, nil))
			}
			if s := status(h); s != http.StatusOK {
				t.Fatalf("the lost answer on instance B: %d, want 200", s)
			}
			if s := status(http.Header{}); s != http.StatusPaymentRequired {
				t.Errorf("the header again after the answer: %d, want 402", s)
			}
			v.expectMoved(t, payer.Address, before, 1)
			if n := up.calls.Load(); n != 2 {
				t.Errorf("the upstream ran %d times, want 2 (A's lost answer and B's)", n)
			}
		})
	}
}
