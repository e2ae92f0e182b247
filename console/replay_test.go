package console

import (
	"context"
	"html"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/x402gate/x402gate/verdict"
	"github.com/x402gate/x402gate/verdictserver"
	"github.com/x402gate/x402gate/verdictserver/engine"
)

// strangerDraft is allowPolicy with the payee swapped: it refuses what allowPolicy approved
// and approves what it refused.
var strangerDraft = strings.Replace(allowPolicy, allowedPay.Hex(), otherPay.Hex(), 1)

// TestReplayPage: a draft replayed on an agent's last N actions shows the newly refused and
// the newly approved, each with the stored and the draft's reasons; nothing is written; a
// read-only session may replay; a bad N or draft shows its problem and replays nothing.
func TestReplayPage(t *testing.T) {
	e := newEnv(t, Config{}, false)
	a := e.agent("agent", allowPolicy)
	reader := e.agent("reader", "", verdictserver.ScopeAdminRead)
	oldest := e.pay(a, allowedPay, "oldest, outside the last 3", nil)
	approved := e.pay(a, allowedPay, "approved today", nil)
	refused := e.pay(a, otherPay, "refused today", nil)
	approved2 := e.pay(a, allowedPay, "approved again", nil)
	before := verdictsOf(t, e, oldest, approved, refused, approved2)

	b := e.browser()
	b.signIn(reader.Key)
	form := b.get("/console/replay?agent=" + a.ID)
	if form.status != http.StatusOK || !strings.Contains(form.body, allowedPay.Hex()) {
		t.Fatalf("the form does not start from the active policy: %d\n%s", form.status, form.body)
	}
	run := func(draft, last string) page {
		return b.post("/console/replay", url.Values{"csrf": {form.csrf(t)}, "agent": {a.ID}, "draft": {draft}, "last": {last}})
	}
	p := run(strangerDraft, "3")
	if p.status != http.StatusOK {
		t.Fatalf("replay: %d\n%s", p.status, p.body)
	}
	got := text(p.body)
	for _, want := range []string{"3 actions replayed as version 2 (enforce mode) against active version 1: 2 newly refused, 1 newly approved, 0 unchanged, 0 skipped",
		"approved allowed (v1)", "rejected recipient_not_allowed", "recipient: recipient " + allowedPay.Hex(), "refused today", "approved again"} {
		if !strings.Contains(got, want) {
			t.Errorf("the report does not show %q:\n%s", want, got)
		}
	}
	refusedAt, approvedAt := strings.Index(got, "Newly refused"), strings.Index(got, "Newly approved")
	for hash, newlyRefused := range map[string]bool{approved: true, approved2: true, refused: false} {
		at := strings.Index(p.body, hash)
		if at < 0 || (at < strings.Index(p.body, "Newly approved")) != newlyRefused {
			t.Errorf("%s is not under %v (refused at %d, approved at %d)", hash, newlyRefused, refusedAt, approvedAt)
		}
	}
	if strings.Contains(p.body, oldest) {
		t.Error("the action before the last 3 was replayed")
	}

	for _, tc := range []struct{ name, draft, last, want string }{
		{"N over the bound", strangerDraft, "10001", "must be a whole number from 1 to 10000"},
		{"N not a number", strangerDraft, "all", "must be a whole number from 1 to 10000"},
		{"a draft the schema refuses", `{"limits": {"perTxUsd": -1}}`, "3", "limits.perTxUsd"},
	} {
		p := run(tc.draft, tc.last)
		if p.status != http.StatusUnprocessableEntity || !strings.Contains(text(p.body), tc.want) || strings.Contains(p.body, `id="report"`) {
			t.Errorf("%s: %d\n%s", tc.name, p.status, text(p.body))
		}
	}
	if n := versions(t, e, a.ID); n != 1 {
		t.Errorf("%d policy versions after replays, want 1", n)
	}
	after := verdictsOf(t, e, oldest, approved, refused, approved2)
	for i := range before {
		if before[i] != after[i] {
			t.Errorf("a stored verdict changed:\n%s\n%s", before[i], after[i])
		}
	}
}

// verdictsOf reads the stored verdicts of hashes.
func verdictsOf(t *testing.T, e *env, hashes ...string) []string {
	t.Helper()
	var out []string
	for _, h := range hashes {
		tx, err := e.op.Transaction(context.Background(), h)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, tx.Status+string(tx.Verdict))
	}
	return out
}

// heldEngine is the real engine, whose evaluations wait while a test holds them, so that a
// replay runs for as long as the test needs (only its Evaluate: the service then never
// judges through the engine's Judge).
type heldEngine struct {
	engine.Engine
	hold    atomic.Pointer[chan struct{}] // nil: not held; else closed to let them go
	entered chan struct{}
}

func (h *heldEngine) Evaluate(ctx context.Context, in engine.Input) *verdict.Verdict {
	if release := h.hold.Load(); release != nil {
		select {
		case h.entered <- struct{}{}:
		default:
		}
		<-*release
	}
	return h.Engine.Evaluate(ctx, in)
}

// TestReplayWhileAnotherRuns: a replay sent while another runs is answered 429 with
// Retry-After and a message that says so, the draft kept in the form; once the other has
// ended, it runs.
func TestReplayWhileAnotherRuns(t *testing.T) {
	held := &heldEngine{entered: make(chan struct{}, 1)}
	e := newEnvWith(t, Config{}, false, func(eng engine.Engine) engine.Engine { held.Engine = eng; return held })
	a := e.agent("agent", allowPolicy)
	e.pay(a, allowedPay, "approved today", nil)
	b := e.browser()
	b.signIn(adminKey)
	form := b.get("/console/replay?agent=" + a.ID)
	run := func() page {
		return b.post("/console/replay", url.Values{"csrf": {form.csrf(t)}, "agent": {a.ID}, "draft": {strangerDraft}, "last": {"1"}})
	}

	release := make(chan struct{})
	held.hold.Store(&release)
	other := make(chan error, 1)
	go func() {
		_, err := e.op.Replay(context.Background(), a.ID, []byte(strangerDraft), 1)
		other <- err
	}()
	<-held.entered // the other replay is judging
	p := run()
	if p.status != http.StatusTooManyRequests || p.header.Get("Retry-After") != "1" ||
		!strings.Contains(text(p.body), "Another replay is running on this service") {
		t.Errorf("a replay while another runs: %d, Retry-After %q\n%s", p.status, p.header.Get("Retry-After"), text(p.body))
	}
	if !strings.Contains(html.UnescapeString(p.body), otherPay.Hex()) || strings.Contains(p.body, `id="report"`) {
		t.Errorf("the busy answer does not keep the draft, or shows a report:\n%s", p.body)
	}
	held.hold.Store(nil)
	close(release)
	if err := <-other; err != nil {
		t.Fatalf("the other replay: %v", err)
	}
	if p := run(); p.status != http.StatusOK || !strings.Contains(p.body, `id="report"`) {
		t.Errorf("a replay once the other ended: %d\n%s", p.status, text(p.body))
	}
}
