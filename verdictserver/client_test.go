package verdictserver

import (
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/x402gate/x402gate/verdict"
	"github.com/x402gate/x402gate/verdictclient"
	"github.com/x402gate/x402gate/x402"
)

// fastPoll polls quickly: the bound is on attempts, never on wall-clock time.
var fastPoll = verdictclient.PollOptions{IntervalMs: 5, MaxAttempts: 400, MaxDelay: 20 * time.Millisecond}

// TestVerdictClientConformance runs verdictclient's own client against this service:
// submit and poll to approved and to rejected, a reused trace id is 409, another agent's
// hash is forbidden, and a key of the wrong shape is unauthorized.
func TestVerdictClientConformance(t *testing.T) {
	e := newEnv(t, nil, nil)
	a := e.agent("alice", common.HexToAddress("0xA11CE00000000000000000000000000000000001"), allowPolicy)
	b := e.agent("bob", common.HexToAddress("0xB0B0000000000000000000000000000000000002"), allowPolicy)
	c, err := verdictclient.New(verdictclient.Config{BaseURL: e.api.URL + "/", APIKey: a.Key})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	for _, tc := range []struct {
		payee common.Address
		want  verdict.Outcome
		code  verdict.ReasonCode
	}{
		{allowedPay, verdict.OutcomeApproved, verdict.ReasonAllowed},
		{strangerPay, verdict.OutcomeRejected, "recipient_not_allowed"},
	} {
		tx, err := c.Submit(ctx, verdictclient.SubmitRequest{EscrowAddress: a.Wallet.Hex(), Prompt: "pay", ProposedTx: payment(tc.payee)})
		if err != nil {
			t.Fatal(err)
		}
		if tx.Status != "PENDING" || tx.ID == "" || tx.Description != "pay" {
			t.Errorf("record = %+v", tx)
		}
		v, err := c.Await(ctx, tx.RequestHash, fastPoll)
		if err != nil {
			t.Fatal(err)
		}
		if v.Outcome != tc.want || v.ReasonCode != tc.code {
			t.Errorf("payee %s: %s %s, want %s %s", tc.payee, v.Outcome, v.ReasonCode, tc.want, tc.code)
		}
		found, err := c.Reconcile(ctx, tx.TraceID)
		if err != nil || found.RequestHash != tx.RequestHash {
			t.Errorf("Reconcile(%s) = %+v, %v; want the submitted record", tx.TraceID, found, err)
		}
		_, err = c.Submit(ctx, verdictclient.SubmitRequest{EscrowAddress: a.Wallet.Hex(), Prompt: "pay", ProposedTx: payment(tc.payee), TraceID: tx.TraceID})
		if !errors.Is(err, verdictclient.ErrConflict) {
			t.Errorf("a reused trace id: %v, want ErrConflict", err)
		}
		cb, _ := c.WithAPIKey(b.Key)
		if _, err := cb.Status(ctx, tx.RequestHash); !errors.Is(err, verdictclient.ErrForbidden) {
			t.Errorf("bob reading alice's hash: %v, want ErrForbidden", err)
		}
		if _, err := cb.Reconcile(ctx, tx.TraceID); !errors.Is(err, verdictclient.ErrNotCreated) {
			t.Errorf("bob reconciling alice's trace id: %v, want ErrNotCreated (his own records only)", err)
		}
	}
	bad, _ := c.WithAPIKey(strings.Repeat("k", 40))
	if _, err := bad.Status(ctx, "0xabc"); !errors.Is(err, verdictclient.ErrUnauthorized) {
		t.Errorf("a wrong key: %v, want ErrUnauthorized", err)
	}
	if _, err := c.Submit(ctx, verdictclient.SubmitRequest{EscrowAddress: b.Wallet.Hex(), Prompt: "pay", ProposedTx: payment(allowedPay)}); !errors.Is(err, verdictclient.ErrForbidden) {
		t.Errorf("another agent's wallet: %v, want ErrForbidden", err)
	}
}

// lossyProxy forwards to the service, but for a POST it is told to lose it either
// drops the answer after the service handled the request, or drops the request before
// forwarding it: the two cases a client cannot tell apart.
type lossyProxy struct {
	target     *url.URL
	rp         *httputil.ReverseProxy
	dropAnswer atomic.Bool
	dropAsk    atomic.Bool
	forwarded  atomic.Int32
	posts      atomic.Int32 // every POST that reached the proxy
}

func (p *lossyProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodPost {
		p.posts.Add(1)
	}
	if r.Method == http.MethodPost && (p.dropAnswer.Load() || p.dropAsk.Load()) {
		if p.dropAnswer.Swap(false) {
			body, _ := io.ReadAll(r.Body)
			req, _ := http.NewRequestWithContext(r.Context(), r.Method, p.target.String()+r.URL.Path, strings.NewReader(string(body)))
			req.Header = r.Header.Clone()
			resp, err := http.DefaultTransport.RoundTrip(req)
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				p.forwarded.Add(1)
			}
		}
		p.dropAsk.Store(false)
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			_ = conn.Close()
		}
		return
	}
	p.rp.ServeHTTP(w, r)
}

// TestReconcileAfterLostPostAnswer: the service recorded a submit whose answer never
// reached the client. The client reports an uncertain submit with its trace id, Reconcile
// finds the record, and the verdict is read as usual; the action is never submitted twice.
// A submit lost before it reached the service reconciles to "not created".
func TestReconcileAfterLostPostAnswer(t *testing.T) {
	e := newEnv(t, nil, nil)
	a := e.agent("alice", common.HexToAddress("0xA11CE00000000000000000000000000000000001"), allowPolicy)
	target, _ := url.Parse(e.api.URL)
	p := &lossyProxy{target: target, rp: httputil.NewSingleHostReverseProxy(target)}
	proxy := httptest.NewServer(p)
	t.Cleanup(proxy.Close)
	c, err := verdictclient.New(verdictclient.Config{BaseURL: proxy.URL, APIKey: a.Key})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	req := verdictclient.SubmitRequest{EscrowAddress: a.Wallet.Hex(), Prompt: "pay", ProposedTx: payment(allowedPay)}

	p.dropAnswer.Store(true)
	_, err = c.Submit(ctx, req)
	var ue *verdictclient.UncertainSubmitError
	if !errors.As(err, &ue) || ue.TraceID == "" {
		t.Fatalf("submit with a lost answer: %v, want an UncertainSubmitError with a trace id", err)
	}
	if p.forwarded.Load() != 1 {
		t.Fatalf("the proxy forwarded %d requests, want 1", p.forwarded.Load())
	}
	tx, err := c.Reconcile(ctx, ue.TraceID)
	if err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
	v, err := c.Await(ctx, tx.RequestHash, fastPoll)
	if err != nil || !v.Approved() {
		t.Fatalf("Await after reconcile = %v, %v; want approved", v, err)
	}
	if n, _ := e.st.Pending(ctx, 10); len(n) != 0 {
		t.Errorf("%d records still pending", len(n))
	}

	p.dropAsk.Store(true)
	_, err = c.Submit(ctx, req)
	if !errors.As(err, &ue) {
		t.Fatalf("submit lost on the way: %v, want an UncertainSubmitError", err)
	}
	if _, err := c.Reconcile(ctx, ue.TraceID); !errors.Is(err, verdictclient.ErrNotCreated) {
		t.Errorf("Reconcile of a request that never arrived: %v, want ErrNotCreated", err)
	}
}

// TestKeysNeverReachLogsOrAnswers: across successes and every kind of failure, no log
// entry of the service or the client (at debug level) and no answer but the one that
// creates a key carries an agent key or the admin key.
func TestKeysNeverReachLogsOrAnswers(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	e := newEnv(t, nil, func(c *Config, d *Deps) {
		d.Logger = zap.New(core)
		c.RateKey = &RateConfig{Rate: 0.001, Burst: 12}
	})
	a := e.agent("alice", common.HexToAddress("0xA11CE00000000000000000000000000000000001"), allowPolicy)
	b := e.agent("bob", common.HexToAddress("0xB0B0000000000000000000000000000000000002"), allowPolicy)
	created := call(t, "POST", e.admin.URL+"/admin/agents/"+a.ID+"/keys", map[string]any{}, "x-admin-key", e.adminKey)
	newKey, _ := created.body["key"].(string)
	if created.status != 201 || !wellFormedKey(newKey) {
		t.Fatalf("create key = %d %s", created.status, created.raw)
	}
	secrets := []string{a.Key, b.Key, newKey, e.adminKey}
	c, err := verdictclient.New(verdictclient.Config{BaseURL: e.api.URL, APIKey: a.Key, Logger: zap.New(core)})
	if err != nil {
		t.Fatal(err)
	}
	tx, err := c.Submit(t.Context(), verdictclient.SubmitRequest{EscrowAddress: a.Wallet.Hex(), Prompt: "pay " + a.Key[:8], ProposedTx: payment(allowedPay)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Await(t.Context(), tx.RequestHash, fastPoll); err != nil {
		t.Fatal(err)
	}
	var answers []answer
	for _, key := range []string{a.Key, newKey} {
		answers = append(answers,
			e.submit(key, submitBody(b.Wallet, allowedPay, "")),
			e.submit(key, `{"escrowAddress":`),
			e.status(key, "0x"+strings.Repeat("cd", 32)),
			call(t, "GET", e.api.URL+"/transactions/"+tx.RequestHash+"/approval-status", nil, "x-api-key", key, "Authorization", "Bearer "+key),
		)
	}
	answers = append(answers,
		e.status(b.Key, tx.RequestHash),
		e.status(a.Key[:len(a.Key)-1]+"A", tx.RequestHash),
		call(t, "GET", e.admin.URL+"/admin/agents", nil, "x-admin-key", e.adminKey+"x"),
		call(t, "GET", e.admin.URL+"/admin/agents", nil, "x-admin-key", e.adminKey, "x-api-key", a.Key),
	)
	for range 14 { // past the burst: 429s
		answers = append(answers, e.status(a.Key, tx.RequestHash))
	}
	if answers[len(answers)-1].status != 429 {
		t.Fatalf("the burst did not end in 429: %d", answers[len(answers)-1].status)
	}
	for i, ans := range answers {
		for _, s := range secrets {
			if strings.Contains(string(ans.raw), s) || strings.Contains(fmt.Sprint(ans.header), s) {
				t.Errorf("answer %d (%d) carries a key: %s", i, ans.status, ans.raw)
			}
		}
	}
	if logs.Len() == 0 {
		t.Fatal("no log entries: the test would prove nothing")
	}
	for _, entry := range logs.All() {
		text := entry.Message + " " + fmt.Sprint(entry.ContextMap())
		for _, s := range secrets {
			if strings.Contains(text, s) || strings.Contains(text, s[len(s)-20:]) {
				t.Errorf("log entry carries a key: %s", text)
			}
		}
	}
}

// TestGuardianReconcilesALostSubmit: verdictclient's Guardian (what the facilitator calls
// for every payment) verifies payments against this service: an allowed payee is approved,
// a stranger rejected with recipient_not_allowed; and when the answer to its POST is lost
// it reconciles by trace id, finds the one record the service made, and returns its
// verdict without submitting again.
func TestGuardianReconcilesALostSubmit(t *testing.T) {
	e := newEnv(t, nil, nil)
	a := e.agent("alice", common.HexToAddress("0xA11CE00000000000000000000000000000000001"), allowPolicy)
	target, _ := url.Parse(e.api.URL)
	p := &lossyProxy{target: target, rp: httputil.NewSingleHostReverseProxy(target)}
	proxy := httptest.NewServer(p)
	t.Cleanup(proxy.Close)
	g, err := verdictclient.NewGuardian(verdictclient.GuardianOptions{BaseURL: proxy.URL, APIKey: a.Key})
	if err != nil {
		t.Fatal(err)
	}
	pay := func(to common.Address) verdictclient.PaymentInput {
		return verdictclient.PaymentInput{
			Payment: &x402.Payment{Version: 2, Scheme: "exact", Network: "eip155:84532",
				Authorization: x402.Authorization{From: a.Wallet, To: to, Value: big.NewInt(10_000)}},
			Requirements: merchant(10_000, to, "eip155:84532"),
		}
	}
	ctx := t.Context()
	for _, tc := range []struct {
		name   string
		to     common.Address
		lose   bool
		status verdict.GuardianStatus
		code   verdict.ReasonCode
	}{
		{"approved", allowedPay, false, verdict.GuardianApproved, verdict.ReasonAllowed},
		{"rejected", strangerPay, false, verdict.GuardianRejected, "recipient_not_allowed"},
		{"approved after a lost answer", allowedPay, true, verdict.GuardianApproved, verdict.ReasonAllowed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := p.posts.Load()
			p.dropAnswer.Store(tc.lose)
			res, err := g.Verify(ctx, pay(tc.to), fastPoll)
			if err != nil {
				t.Fatal(err)
			}
			if res.Status != tc.status || res.Verdict == nil || res.Verdict.ReasonCode != tc.code {
				t.Fatalf("result = %+v, want %s %s", res, tc.status, tc.code)
			}
			if n := p.posts.Load() - before; n != 1 {
				t.Errorf("%d submits sent, want exactly 1", n)
			}
			if tx, err := e.st.TransactionByHash(ctx, res.RequestHash); err != nil || tx.AgentID != a.ID {
				t.Errorf("the result's requestHash %q is not alice's record: %v", res.RequestHash, err)
			}
		})
	}
	if p.forwarded.Load() != 1 {
		t.Errorf("the proxy lost %d answers, want 1", p.forwarded.Load())
	}
}
