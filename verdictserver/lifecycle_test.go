package verdictserver

import (
	"context"
	"errors"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"

	"github.com/x402gate/x402gate/verdict"
	"github.com/x402gate/x402gate/verdictserver/engine"
	"github.com/x402gate/x402gate/verdictserver/store"
)

// deferredPolicy is allowPolicy with a spend window no test fills: its records are judged by
// the workers, not at the submit (docs/verdict-api.md#lifecycle), so the tests of the
// pending path use it.
var deferredPolicy = windowPolicy(`{"period": "day", "capUsd": 1000000}`)

// TestRestartCompletesPending: records submitted to a server whose workers never ran (under
// a policy with spend windows, judged by the workers) are durable and PENDING; a new Server on the same database (the SQLite file, or the same
// PostgreSQL database) evaluates every one of them when it starts.
func TestRestartCompletesPending(t *testing.T) {
	for name, open := range map[string]func(t *testing.T) storeOpener{
		"sqlite": func(t *testing.T) storeOpener { return sqliteAt(filepath.Join(t.TempDir(), "verdict.db")) },
		"postgres": func(t *testing.T) storeOpener {
			dsn := postgresDSN(t)
			return func(t testing.TB) *store.Store { return postgresAt(t, dsn) }
		},
	} {
		t.Run(name, func(t *testing.T) { restartCompletesPending(t, open(t)) })
	}
}

func restartCompletesPending(t *testing.T, open storeOpener) {
	st1 := open(t)
	e1 := newEnv(t, st1, nil)
	// stop the workers and sweeper at once: nothing submitted from here on is evaluated
	// by this process
	if err := e1.srv.Close(); err != nil {
		t.Fatal(err)
	}
	a := e1.agent("alice", common.HexToAddress("0xA11CE00000000000000000000000000000000001"), deferredPolicy)
	var hashes []string
	for i, payee := range []common.Address{allowedPay, strangerPay, allowedPay} {
		r := e1.submit(a.Key, submitBody(a.Wallet, payee, ""))
		if r.status != http.StatusCreated {
			t.Fatalf("submit %d = %d %s", i, r.status, r.raw)
		}
		hashes = append(hashes, r.body["requestHash"].(string))
	}
	for _, h := range hashes {
		if got := e1.status(a.Key, h); got.body["verdict"] != nil || got.status != 200 {
			t.Fatalf("before the restart %s = %s, want a null verdict", h, got.raw)
		}
	}
	e1.api.Close()
	if err := st1.Close(); err != nil {
		t.Fatal(err)
	}

	e2 := newEnv(t, open(t), nil)
	want := []verdict.Outcome{verdict.OutcomeApproved, verdict.OutcomeRejected, verdict.OutcomeApproved}
	for i, h := range hashes {
		if v := e2.await(a.Key, h); v.Outcome != want[i] {
			t.Errorf("record %d after the restart: %s, want %s", i, v.Outcome, want[i])
		}
	}
}

// TestTwoInstancesShareOnePostgres: two servers on one PostgreSQL database, each with its
// workers and sweeper, take submits in turn; every record completes once, readable from
// either instance, and none stays pending.
func TestTwoInstancesShareOnePostgres(t *testing.T) {
	dsn := postgresDSN(t)
	e1 := newEnv(t, postgresAt(t, dsn), nil)
	e2 := newEnv(t, postgresAt(t, dsn), nil)
	a := e1.agent("alice", common.HexToAddress("0xA11CE00000000000000000000000000000000001"), allowPolicy)
	var hashes []string
	for i := range 20 {
		e := []*env{e1, e2}[i%2]
		payee := []common.Address{allowedPay, strangerPay}[i%3%2]
		r := e.submit(a.Key, submitBody(a.Wallet, payee, ""))
		if r.status != http.StatusCreated {
			t.Fatalf("submit %d = %d %s", i, r.status, r.raw)
		}
		hashes = append(hashes, r.body["requestHash"].(string))
	}
	for i, h := range hashes {
		v1, v2 := e1.await(a.Key, h), e2.await(a.Key, h)
		if v1.Outcome != v2.Outcome || !v1.Timestamp.Equal(v2.Timestamp) {
			t.Errorf("record %d reads differently on the two instances", i)
		}
	}
	if n, err := e1.st.CountPending(t.Context()); err != nil || n != 0 {
		t.Errorf("pending = %d %v, want 0", n, err)
	}
}

// gatedEngine holds every evaluation until the gate opens: the fault a real engine does
// not produce on demand (a slow evaluation that fills the queue).
type gatedEngine struct {
	engine.Engine
	gate chan struct{}
	mu   sync.Mutex
	n    int
}

func (g *gatedEngine) Evaluate(ctx context.Context, in engine.Input) *verdict.Verdict {
	select {
	case <-g.gate:
	case <-ctx.Done():
	}
	g.mu.Lock()
	g.n++
	g.mu.Unlock()
	return g.Engine.Evaluate(ctx, in)
}

// TestFullQueueLosesNothing: with one worker held and a queue of one, further records (of a
// policy with spend windows, judged by the workers) find the queue full; they stay PENDING and the sweeper hands them over, so every one is
// evaluated once the worker is free, and each exactly once.
func TestFullQueueLosesNothing(t *testing.T) {
	eng, err := engine.New(engine.Config{}, engine.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	g := &gatedEngine{Engine: eng, gate: make(chan struct{})}
	e := newEnv(t, nil, func(c *Config, d *Deps) { d.Engine, c.Workers, c.Queue = g, 1, 1 })
	a := e.agent("alice", common.HexToAddress("0xA11CE00000000000000000000000000000000001"), deferredPolicy)
	var hashes []string
	for range 6 {
		r := e.submit(a.Key, submitBody(a.Wallet, allowedPay, ""))
		if r.status != http.StatusCreated {
			t.Fatalf("submit = %d %s", r.status, r.raw)
		}
		hashes = append(hashes, r.body["requestHash"].(string))
	}
	n, err := e.st.CountPending(t.Context())
	if err != nil || n != 6 {
		t.Fatalf("pending = %d %v, want all 6 while the worker is held", n, err)
	}
	close(g.gate)
	for _, h := range hashes {
		if v := e.await(a.Key, h); v.Outcome != verdict.OutcomeApproved {
			t.Errorf("%s: %s, want approved", h, v.Outcome)
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.n != 6 {
		t.Errorf("%d evaluations for 6 records, want one each", g.n)
	}
}

// TestTerminalVerdictIsImmutable: a completed record keeps its verdict; a second
// completion is refused by the store and the API still answers the first.
func TestTerminalVerdictIsImmutable(t *testing.T) {
	e := newEnv(t, nil, nil)
	a := e.agent("alice", common.HexToAddress("0xA11CE00000000000000000000000000000000001"), allowPolicy)
	r := e.submit(a.Key, submitBody(a.Wallet, strangerPay, ""))
	h := r.body["requestHash"].(string)
	first := e.await(a.Key, h)
	// a policy that now allows the stranger does not change the recorded verdict
	if _, err := e.srv.Operator().SetPolicy(t.Context(), a.ID, []byte(allowBothPolicy), "test"); err != nil {
		t.Fatal(err)
	}
	e.srv.evaluate(t.Context(), job{hash: h})
	if err := e.st.Complete(t.Context(), h, "APPROVED", []byte(`{}`), nil); !errors.Is(err, store.ErrTerminal) {
		t.Errorf("a second completion: %v, want store.ErrTerminal", err)
	}
	if again := e.await(a.Key, h); again.Outcome != first.Outcome || !again.Timestamp.Equal(first.Timestamp) {
		t.Errorf("verdict changed: %s at %v, then %s at %v", first.Outcome, first.Timestamp, again.Outcome, again.Timestamp)
	}
}

// allowBothPolicy is allowPolicy that also allows strangerPay.
var allowBothPolicy = strings.Replace(allowPolicy, `"recipients": {"allowed": [`, `"recipients": {"allowed": ["`+strangerPay.Hex()+`", `, 1)

// TestANewPolicyVersionAppliesToTheNextSubmit: a submit is judged against the agent's newest
// policy version as it is then, though the Server keeps the versions it parsed: a payment the
// first version refuses is approved under the second, with its number.
func TestANewPolicyVersionAppliesToTheNextSubmit(t *testing.T) {
	e := newEnv(t, nil, nil)
	a := e.agent("alice", common.HexToAddress("0xA11CE00000000000000000000000000000000001"), allowPolicy)
	for i, want := range []verdict.Outcome{verdict.OutcomeRejected, verdict.OutcomeApproved} {
		if i == 1 {
			if _, err := e.srv.Operator().SetPolicy(t.Context(), a.ID, []byte(allowBothPolicy), "test"); err != nil {
				t.Fatal(err)
			}
		}
		r := e.submit(a.Key, submitBody(a.Wallet, strangerPay, ""))
		if r.status != http.StatusCreated {
			t.Fatalf("submit %d = %d %s", i, r.status, r.raw)
		}
		v := e.await(a.Key, r.body["requestHash"].(string))
		var named int64 // the verdict's policyVersion, 0 for null
		if v.PolicyVersion != nil {
			named = *v.PolicyVersion
		}
		if v.Outcome != want || named != int64(i+1) {
			t.Fatalf("under policy version %d: %s, want %s (the verdict names version %d)", i+1, v.Outcome, want, named)
		}
	}
}

// panickyEngine panics on every evaluation: the fault of a broken decoder.
type panickyEngine struct{ calls atomic.Int32 }

func (p *panickyEngine) Evaluate(context.Context, engine.Input) *verdict.Verdict {
	p.calls.Add(1)
	panic("decoder bug")
}

// TestPanickingEngineLeavesPending: an engine that panics does not stop the service, at the
// submit or in a worker; the record is stored and stays PENDING (the client fails closed at its bound) and the API keeps answering.
func TestPanickingEngineLeavesPending(t *testing.T) {
	pe := &panickyEngine{}
	e := newEnv(t, nil, func(_ *Config, d *Deps) { d.Engine = pe })
	a := e.agent("alice", common.HexToAddress("0xA11CE00000000000000000000000000000000001"), allowPolicy)
	r := e.submit(a.Key, submitBody(a.Wallet, allowedPay, ""))
	if r.status != http.StatusCreated {
		t.Fatalf("submit = %d %s", r.status, r.raw)
	}
	for i := 0; pe.calls.Load() < 2 && i < 500; i++ {
		time.Sleep(10 * time.Millisecond) // until the sweeper has tried it again
	}
	if pe.calls.Load() < 2 {
		t.Fatalf("%d evaluations, want the record retried after the panic", pe.calls.Load())
	}
	if s := e.status(a.Key, r.body["requestHash"].(string)); s.status != 200 || s.body["verdict"] != nil {
		t.Errorf("status after panics = %d %s, want 200 with a null verdict", s.status, s.raw)
	}
}

// stuckEngine holds every evaluation until gate closes, then panics on the actions of one
// wallet (a decoder bug those records keep hitting) and evaluates the others for real.
type stuckEngine struct {
	engine.Engine
	gate  chan struct{}
	stuck common.Address
}

func (s *stuckEngine) Evaluate(ctx context.Context, in engine.Input) *verdict.Verdict {
	select {
	case <-s.gate:
	case <-ctx.Done():
	}
	if in.Escrow == s.stuck {
		panic("decoder bug")
	}
	return s.Engine.Evaluate(ctx, in)
}

// TestFailingRecordsDoNotStarveNewOnes: records whose evaluation keeps failing wait longer
// after each failure, and the sweeper lists past them, so a newer record that found the
// queue full is still evaluated (without the backoff the sweeper lists only the oldest,
// failing ones, again and again).
func TestFailingRecordsDoNotStarveNewOnes(t *testing.T) {
	eng, err := engine.New(engine.Config{}, engine.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	stuckWallet := common.HexToAddress("0xB0B0000000000000000000000000000000000002")
	se := &stuckEngine{Engine: eng, gate: make(chan struct{}), stuck: stuckWallet}
	e := newEnv(t, nil, func(c *Config, d *Deps) { d.Engine, c.Workers, c.Queue = se, 1, 1 })
	bob := e.agent("bob", stuckWallet, deferredPolicy)
	alice := e.agent("alice", common.HexToAddress("0xA11CE00000000000000000000000000000000001"), deferredPolicy)
	for range 3 {
		if r := e.submit(bob.Key, submitBody(bob.Wallet, allowedPay, "")); r.status != http.StatusCreated {
			t.Fatalf("submit = %d %s", r.status, r.raw)
		}
	}
	r := e.submit(alice.Key, submitBody(alice.Wallet, allowedPay, ""))
	if r.status != http.StatusCreated {
		t.Fatalf("submit = %d %s", r.status, r.raw)
	}
	close(se.gate)
	if v := e.await(alice.Key, r.body["requestHash"].(string)); v.Outcome != verdict.OutcomeApproved {
		t.Fatalf("the newer record: %s, want approved", v.Outcome)
	}
}

// TestSubmitStoresItsVerdict: with no worker running, a submit under a policy without spend
// windows is judged before it is stored and written with its terminal verdict in its own
// commit: the 201 shows the record as accepted (PENDING, no policy version), the first
// approval-status read finds the verdict, the store holds no PENDING record, and the metrics
// count it once. A record under spend windows is still stored PENDING for the workers.
func TestSubmitStoresItsVerdict(t *testing.T) {
	for name, open := range map[string]func(t testing.TB) *store.Store{
		"sqlite":   sqliteStore,
		"postgres": func(t testing.TB) *store.Store { return postgresAt(t, postgresDSN(t)) },
	} {
		t.Run(name, func(t *testing.T) { submitStoresItsVerdict(t, open(t)) })
	}
}

func submitStoresItsVerdict(t *testing.T, st *store.Store) {
	e := newEnv(t, st, nil)
	if err := e.srv.Close(); err != nil { // no worker judges anything from here on
		t.Fatal(err)
	}
	a := e.agent("alice", common.HexToAddress("0xA11CE00000000000000000000000000000000001"), allowPolicy)
	for _, c := range []struct {
		payee  common.Address
		status string
		want   verdict.Outcome
		reason verdict.ReasonCode
	}{
		{allowedPay, store.StatusApproved, verdict.OutcomeApproved, verdict.ReasonAllowed},
		{strangerPay, store.StatusRejected, verdict.OutcomeRejected, verdict.ReasonRecipientNotAllowed},
	} {
		var r answer
		checkDeltas(t, []delta{{"verdicts", []string{string(c.want), "enforce", string(c.reason)}, 1}, {"decision", nil, 1}}, func() {
			r = e.submit(a.Key, submitBody(a.Wallet, c.payee, ""))
		})
		if r.status != http.StatusCreated || r.body["status"] != store.StatusPending || r.body["policyVersion"] != nil {
			t.Fatalf("submit = %d %s, want 201 with the record as accepted", r.status, r.raw)
		}
		h := r.body["requestHash"].(string)
		s := e.status(a.Key, h)
		v, _ := s.body["verdict"].(map[string]any)
		if s.status != http.StatusOK || v == nil || v["outcome"] != string(c.want) {
			t.Fatalf("first approval-status read = %d %s, want the %s verdict", s.status, s.raw, c.want)
		}
		rec, err := e.st.TransactionByHash(t.Context(), h)
		if err != nil || rec.Status != c.status || rec.PolicyVersion == nil || *rec.PolicyVersion != 1 {
			t.Fatalf("stored record = %s %v, %v; want %s under policy version 1", rec.Status, rec.PolicyVersion, err, c.status)
		}
	}
	w := e.agent("bob", common.HexToAddress("0xB0B0000000000000000000000000000000000002"), deferredPolicy)
	r := e.submit(w.Key, submitBody(w.Wallet, allowedPay, ""))
	if r.status != http.StatusCreated {
		t.Fatalf("submit under spend windows = %d %s", r.status, r.raw)
	}
	if s := e.status(w.Key, r.body["requestHash"].(string)); s.status != http.StatusOK || s.body["verdict"] != nil {
		t.Fatalf("approval-status under spend windows with no worker = %d %s, want a null verdict", s.status, s.raw)
	}
	if n, err := e.st.CountPending(t.Context()); err != nil || n != 1 {
		t.Fatalf("pending = %d %v, want only the record under spend windows", n, err)
	}
}

// TestSubmitsJudgedAtOnceAreBoundedByWorkers: with Workers submits already being judged
// at submit, the next one is not judged in its request but stored PENDING for the workers,
// so judging at submit runs no more evaluations at once than the workers do.
func TestSubmitsJudgedAtOnceAreBoundedByWorkers(t *testing.T) {
	e := newEnv(t, nil, func(c *Config, _ *Deps) { c.Workers = 2 })
	if err := e.srv.Close(); err != nil { // no worker judges anything from here on
		t.Fatal(err)
	}
	a := e.agent("alice", common.HexToAddress("0xA11CE00000000000000000000000000000000001"), allowPolicy)
	for range cap(e.srv.judging) {
		e.srv.judging <- struct{}{} // two submits being judged
	}
	r := e.submit(a.Key, submitBody(a.Wallet, allowedPay, ""))
	if r.status != http.StatusCreated {
		t.Fatalf("submit = %d %s", r.status, r.raw)
	}
	if s := e.status(a.Key, r.body["requestHash"].(string)); s.status != http.StatusOK || s.body["verdict"] != nil {
		t.Fatalf("approval-status with every judging slot taken = %d %s, want a null verdict (left to the workers)", s.status, s.raw)
	}
	<-e.srv.judging // one judging submit is done
	r = e.submit(a.Key, submitBody(a.Wallet, allowedPay, ""))
	if s := e.status(a.Key, r.body["requestHash"].(string)); s.body["verdict"] == nil {
		t.Fatalf("approval-status with a judging slot free = %d %s, want the verdict", s.status, s.raw)
	}
	if n, err := e.st.CountPending(t.Context()); err != nil || n != 1 {
		t.Fatalf("pending = %d %v, want the one submit that found no slot", n, err)
	}
}
