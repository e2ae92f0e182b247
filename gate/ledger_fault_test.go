package gate

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/x402gate/x402gate/gate/payledger"
	"github.com/x402gate/x402gate/x402"
)

// faultyLedger is a ledger whose store fails the way a real one may, where a real store
// will not on cue: unreachable for Renew, refusing or failing Settle, failing End.
type faultyLedger struct {
	payledger.Ledger
	// lease, when set, is the lease the store keeps instead of the claim's, so that only
	// the gate's own clock can find it lost.
	lease time.Duration
	// renewFails makes every Renew fail: the store is unreachable.
	renewFails atomic.Bool
	renews     atomic.Int32
	// settleAfter makes Settle wait until Renew was called this often.
	settleAfter int32
	// settle, when set, answers Settle instead of the store.
	settle func() (bool, error)
	// endFails is how many End calls fail before the store answers them.
	endFails atomic.Int32
	ends     atomic.Int32
}

var errStoreDown = errors.New("store unreachable: " + payledger.ErrUnavailable.Error())

func (f *faultyLedger) Begin(ctx context.Context, c payledger.Claim) (payledger.Entry, error) {
	if f.lease > 0 {
		c.Lease = f.lease
	}
	return f.Ledger.Begin(ctx, c)
}

func (f *faultyLedger) Renew(ctx context.Context, key, owner string, lease time.Duration) (bool, error) {
	f.renews.Add(1)
	if f.renewFails.Load() {
		return false, errStoreDown
	}
	if f.lease > 0 {
		lease = f.lease
	}
	return f.Ledger.Renew(ctx, key, owner, lease)
}

func (f *faultyLedger) Settle(ctx context.Context, key, owner string, data []byte) (bool, error) {
	for f.renews.Load() < f.settleAfter {
		time.Sleep(time.Millisecond)
	}
	if f.settle != nil {
		return f.settle()
	}
	return f.Ledger.Settle(ctx, key, owner, data)
}

func (f *faultyLedger) End(ctx context.Context, key, owner string, outcome int, token []byte, credits int, ttl time.Duration) (bool, error) {
	f.ends.Add(1)
	if f.endFails.Add(-1) >= 0 {
		return false, errStoreDown
	}
	return f.Ledger.End(ctx, key, owner, outcome, token, credits, ttl)
}

// cancelledUpstream holds each request until its context is cancelled (it reports that,
// and answers 502 as reverse_proxy does) or release is closed (it answers 200).
type cancelledUpstream struct {
	calls     atomic.Int32
	started   chan struct{}
	cancelled chan struct{}
	release   chan struct{}
}

func (u *cancelledUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if u.calls.Add(1) == 1 {
		close(u.started)
	}
	select {
	case <-r.Context().Done():
		close(u.cancelled)
		w.WriteHeader(http.StatusBadGateway)
	case <-u.release:
		w.WriteHeader(http.StatusOK)
	}
}

// TestLedgerLeaseLostCancelsUpstream is B1 of the ledger's review: while the upstream
// runs, the store becomes unreachable, so the lease cannot be renewed and lapses on the
// store's clock, when another instance may serve the payment. The upstream's context is
// now cancelled before that, so a Go upstream stops: it was left running.
func TestLedgerLeaseLostCancelsUpstream(t *testing.T) {
	v := newTestEnv(t)
	f := &faultyLedger{Ledger: payledger.NewMemory(0, nil)}
	f.renewFails.Store(true)
	up := &cancelledUpstream{started: make(chan struct{}), cancelled: make(chan struct{}), release: make(chan struct{})}
	srv := serve(t, v.shortLease(t, Options{Ledger: f}), up)
	url := srv.URL + "/r"
	name, value := v.sign(t, x402.Version2, v.payer, fetchChallenge(t, url), tamper{})
	answered := make(chan paidAnswer, 1)
	go func() { answered <- presentOnce(url, name, value, "") }()
	<-up.started
	select {
	case <-up.cancelled:
	case <-time.After(30 * time.Second):
		close(up.release)
		t.Fatal("the upstream still ran after its lease could not be renewed")
	}
	if a := <-answered; a.status == http.StatusOK {
		t.Errorf("the cancelled upstream's answer: %d, want a failure", a.status)
	}
}

// TestLedgerLeaseLostBeforeUpstream is B1 of the ledger's review when the lease is lost
// during the settle: the request is not proxied; it is answered 502 with the settlement,
// asking for the same header again, which another instance then serves once. It was
// proxied.
func TestLedgerLeaseLostBeforeUpstream(t *testing.T) {
	v := newTestEnv(t)
	shared := payledger.NewMemory(0, nil)
	// The store keeps the lease; the gate cannot renew it and the settle outlasts it on
	// the gate's clock (four renewal ticks).
	f := &faultyLedger{Ledger: shared, lease: time.Minute, settleAfter: 4}
	f.renewFails.Store(true)
	up := &upstream{}
	before := v.ledger(t, v.payer.Address)
	p := newPair(t, v, shared, f, up)
	expectResend(t, present(t, p.a, p.name, p.value), up)
	if s := present(t, p.b, p.name, p.value).status; s != http.StatusOK {
		t.Errorf("the same header again on a healthy instance: %d, want 200", s)
	}
	if s := present(t, p.b, p.name, p.value).status; s != http.StatusPaymentRequired {
		t.Errorf("the same header after its answer: %d, want 402", s)
	}
	v.expectMoved(t, v.payer.Address, before, 1)
	if n := up.calls.Load(); n != 1 {
		t.Errorf("the upstream ran %d times, want 1", n)
	}
}

// testLease is the lease of the fault tests: short, so that one lapses quickly; shorter
// than MinRetryLease, so set on the Gate.
const testLease = 150 * time.Millisecond

// shortLease is a gate on the env's route with opts and testLease.
func (v *testEnv) shortLease(t *testing.T, opts Options) *Gate {
	t.Helper()
	g := v.gate(t, v.config(), opts)
	g.lease = testLease
	return g
}

// pair is two instances in front of one upstream, on one in-process ledger, and a payment
// header for them.
type pair struct{ a, b, name, value string }

// newPair serves up on instance a, which reaches the ledger shared through via, and on
// instance b, which reaches it directly, with testLease; the header is v.payer's.
func newPair(t *testing.T, v *testEnv, shared, via payledger.Ledger, up http.Handler) pair {
	t.Helper()
	p := pair{a: servePublic(t, v.shortLease(t, Options{Ledger: via}), up).URL + "/r", b: servePublic(t, v.shortLease(t, Options{Ledger: shared}), up).URL + "/r"}
	p.name, p.value = v.sign(t, x402.Version2, v.payer, fetchChallenge(t, p.a), tamper{})
	return p
}

// servePublic is serve with one public resource URL, so that two instances take the
// same payment for the same request.
func servePublic(t *testing.T, g *Gate, up http.Handler) *httptest.Server {
	t.Helper()
	public := MiddlewareOptions{Resource: func(*http.Request) string { return "https://api.example/r" }}
	srv := httptest.NewServer(g.Middleware(public)(up))
	t.Cleanup(srv.Close)
	return srv
}

// expectResend checks a is the 502 of a settled payment not proxied: the settlement in
// its header, the reason, and no upstream call.
func expectResend(t *testing.T, a paidAnswer, up *upstream) {
	t.Helper()
	if a.status != http.StatusBadGateway || a.err != string(ReasonRetryStoreUnavailable) || !isTxHash(a.tx) {
		t.Errorf("answer %+v, want 502 %s with the settlement's transaction", a, ReasonRetryStoreUnavailable)
	}
	if n := up.calls.Load(); n != 0 {
		t.Errorf("the upstream ran %d times, want 0", n)
	}
}

// TestLedgerSettleNotRecorded is B2 of the ledger's review: the payment settled but the
// ledger did not record it (Settle reports the lease not held, or fails). The request is
// not proxied; it is answered 502 with the settlement, and the same header sent again is
// served once. It was proxied.
func TestLedgerSettleNotRecorded(t *testing.T) {
	v := newTestEnv(t)
	faults := map[string]func() (bool, error){
		"not held":    func() (bool, error) { return false, nil },
		"unavailable": func() (bool, error) { return false, errStoreDown },
	}
	i := 0
	for fault, settle := range faults {
		t.Run(fault, func(t *testing.T) {
			cfg := v.config()
			shared := payledger.NewMemory(0, nil)
			up := &upstream{}
			a := servePublic(t, v.gate(t, cfg, Options{Ledger: &faultyLedger{Ledger: shared, settle: settle}}), up)
			b := servePublic(t, v.gate(t, cfg, Options{Ledger: shared}), up)
			payer := v.chain.Accounts[2+i]
			i++
			before := v.ledger(t, payer.Address)
			name, value := signOffer(t, v.token, x402.Version2, payer, fetchChallenge(t, a.URL+"/r"), 0, nil)
			expectResend(t, present(t, a.URL+"/r", name, value), up)
			if s := present(t, b.URL+"/r", name, value).status; s != http.StatusOK {
				t.Errorf("the same header again: %d, want 200", s)
			}
			if s := present(t, b.URL+"/r", name, value).status; s != http.StatusPaymentRequired {
				t.Errorf("the same header after its answer: %d, want 402", s)
			}
			v.expectMoved(t, payer.Address, before, 1)
			if n := up.calls.Load(); n != 1 {
				t.Errorf("the upstream ran %d times, want 1", n)
			}
		})
	}
}

// TestLedgerEndRetried is S1 of the ledger's review: the End of a good answer fails (the
// store is briefly unreachable). The lease stays renewed and the End is tried again, so
// the payment is answered: its bare header on another instance is refused. It was left
// settled, its lease lapsed, and the bare header was served a second good answer.
func TestLedgerEndRetried(t *testing.T) {
	v := newTestEnv(t)
	shared := payledger.NewMemory(0, nil)
	f := &faultyLedger{Ledger: shared}
	f.endFails.Store(1)
	up := &upstream{}
	p := newPair(t, v, shared, f, up)
	if s := present(t, p.a, p.name, p.value).status; s != http.StatusOK {
		t.Fatalf("the paid request: %d, want 200", s)
	}
	for deadline := time.Now().Add(10 * time.Second); f.ends.Load() < 2 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(2 * testLease) // past a lease that was not renewed
	if s := present(t, p.b, p.name, p.value).status; s != http.StatusPaymentRequired {
		t.Errorf("the bare header after the good answer: %d, want 402", s)
	}
	if n := up.calls.Load(); n != 1 {
		t.Errorf("the upstream ran %d times, want 1", n)
	}
}

// TestLedgerClientGoneLeaseKept is S2 of the ledger's review, under Serve: the client goes
// away while the upstream still runs (one that does not watch its context). The lease
// stays renewed until the upstream answers, so the bare header on another instance is
// refused meanwhile. Its renewal stopped, the lease lapsed and the header was served
// beside the running upstream.
func TestLedgerClientGoneLeaseKept(t *testing.T) {
	v := newTestEnv(t)
	shared := payledger.NewMemory(0, nil)
	up := &heldUpstream{release: make(chan struct{})}
	up.calls.Store(1) // every call is held, then answers 200
	p := newPair(t, v, shared, shared, up)
	ctx, cancel := context.WithCancel(t.Context())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.a, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(p.name, p.value)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if res, err := http.DefaultClient.Do(req); err == nil {
			_ = res.Body.Close()
		}
	}()
	for up.inFlight.Load() < 1 {
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	<-done
	time.Sleep(3 * testLease) // many leases after the client left
	answered := make(chan int, 1)
	go func() { answered <- presentOnce(p.b, p.name, p.value, "").status }()
	for len(answered) == 0 && up.inFlight.Load() < 2 {
		time.Sleep(5 * time.Millisecond)
	}
	close(up.release)
	if s := <-answered; s != http.StatusPaymentRequired {
		t.Errorf("the bare header while the first upstream ran: %d, want 402", s)
	}
	for deadline := time.Now().Add(10 * time.Second); up.good.Load() < 1 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	if g := up.good.Load(); g != 1 {
		t.Errorf("the upstream gave %d good answers for one payment, want 1", g)
	}
}

// TestLedgerHandleUnreported is S2 of the ledger's review for callers of Handle: one
// whose context ends without ReportUpstream leaves the payment answered (fail closed),
// not a lapsed lease whose bare header is served again.
func TestLedgerHandleUnreported(t *testing.T) {
	v := newTestEnv(t)
	g := v.shortLease(t, Options{})
	up := &upstream{}
	srv := servePublic(t, g, up)
	name, value := v.sign(t, x402.Version2, v.payer, fetchChallenge(t, srv.URL+"/r"), tamper{})
	ctx, cancel := context.WithCancel(t.Context())
	h := http.Header{}
	h.Set(name, value)
	res := g.Handle(ctx, Input{Header: h, Resource: "https://api.example/r", Method: http.MethodGet, RequestURI: "/r"})
	if res.Kind != KindSettled {
		t.Fatalf("Handle: %s %d, want settled", res.Kind, res.Status)
	}
	cancel()
	time.Sleep(3 * testLease) // past a lease that was not renewed
	if s := present(t, srv.URL+"/r", name, value).status; s != http.StatusPaymentRequired {
		t.Errorf("the bare header after an unreported Handle: %d, want 402", s)
	}
	if n := up.calls.Load(); n != 0 {
		t.Errorf("the upstream ran %d times, want 0", n)
	}
}

// TestLedgerResumedRunNeedsProof is S3 of the ledger's review: on a route with passes, a
// payment settled by an attempt that could not record it (its record stays reserved) is
// the answer that was lost, like a settled record's: its bare header is refused, and it is
// served once to the payer's sign-in-with-x proof. The bare header was served.
func TestLedgerResumedRunNeedsProof(t *testing.T) {
	v := newTestEnv(t)
	const host, path = "shop.example", "/premium/resumed.html"
	cfg := v.passConfig(testPassKey)
	shared := payledger.NewMemory(0, nil)
	notHeld := &faultyLedger{Ledger: shared, settle: func() (bool, error) { return false, nil }}
	up := &upstream{}
	a := serve(t, v.gate(t, cfg, Options{Ledger: &MemoryLedger{notHeld, NewMemoryPassBook(0)}}), up)
	b := serve(t, v.gate(t, cfg, Options{Ledger: &MemoryLedger{shared, NewMemoryPassBook(0)}}), up)
	payer := v.chain.Accounts[6]
	before := v.ledger(t, payer.Address)
	name, value := signOffer(t, v.token, x402.Version2, payer, readChallenge(t, getWith(t, a.URL+path, host, nil)), 0, nil)
	status := func(url string, h http.Header) int {
		h.Set(name, value)
		res := getWith(t, url+path, host, h)
		readBody(t, res)
		return res.StatusCode
	}
	if s := status(a.URL, http.Header{}); s != http.StatusBadGateway {
		t.Fatalf("the unrecorded settlement on instance A: %d, want 502", s)
	}
	if s := status(b.URL, http.Header{}); s != http.StatusPaymentRequired {
		t.Errorf("the bare header on instance B: %d, want 402", s)
	}
	info, _ := siwxChallengeOf(t, getWith(t, b.URL+path, host, nil))
	if s := status(b.URL, http.Header{HeaderSignInWithX: {siwxProof(t, info, "eip155:84532", payer.Key, nil)}}); s != http.StatusOK {
		t.Errorf("with the payer's proof: %d, want 200", s)
	}
	if s := status(b.URL, http.Header{}); s != http.StatusPaymentRequired {
		t.Errorf("the header again after the answer: %d, want 402", s)
	}
	v.expectMoved(t, payer.Address, before, 1)
	if n := up.calls.Load(); n != 1 {
		t.Errorf("the upstream ran %d times, want 1", n)
	}
}

// blankBegin is a ledger whose Begin answers an Entry it did not fill in.
type blankBegin struct{ payledger.Ledger }

func (blankBegin) Begin(context.Context, payledger.Claim) (payledger.Entry, error) {
	return payledger.Entry{}, nil
}

// TestLedgerBlankEntryRefused is S4 of the ledger's review: the zero Status is no status,
// so a store's answer it did not fill in fails closed (503 retry_store_unavailable, nothing
// paid or served). It read as New: the payment was paid and served without a record.
func TestLedgerBlankEntryRefused(t *testing.T) {
	v := newTestEnv(t)
	up := &upstream{}
	srv := serve(t, v.gate(t, v.config(), Options{Ledger: blankBegin{payledger.NewMemory(0, nil)}}), up)
	before := v.ledger(t, v.payer.Address)
	name, value := v.sign(t, x402.Version2, v.payer, fetchChallenge(t, srv.URL+"/r"), tamper{})
	if a := present(t, srv.URL+"/r", name, value); a.status != http.StatusServiceUnavailable || a.err != string(ReasonRetryStoreUnavailable) {
		t.Errorf("answer %+v, want 503 %s", a, ReasonRetryStoreUnavailable)
	}
	v.expectMoved(t, v.payer.Address, before, 0)
	if n := up.calls.Load(); n != 0 {
		t.Errorf("the upstream ran %d times, want 0", n)
	}
}

// TestLedgerLeaseMinimum is S5 of the ledger's review: a lease shorter than MinRetryLease
// is a configuration error naming the option; it was taken, and lapsed between renewals.
func TestLedgerLeaseMinimum(t *testing.T) {
	v := newTestEnv(t)
	cfg := v.config()
	cfg.Retry.Lease = 100 * time.Millisecond
	_, err := New(cfg, Options{Facilitator: v.engine, Registry: v.reg})
	var ce *ConfigError
	if !errors.As(err, &ce) || ce.Option != "retry_lease" {
		t.Errorf("New with a %s lease: %v, want a retry_lease config error", cfg.Retry.Lease, err)
	}
	cfg.Retry.Lease = MinRetryLease
	if _, err := New(cfg, Options{Facilitator: v.engine, Registry: v.reg}); err != nil {
		t.Errorf("New with a %s lease: %v", cfg.Retry.Lease, err)
	}
}
