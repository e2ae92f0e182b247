package verdictclient

import (
	"context"
	"encoding/json"
	"errors"
	"math/big"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"

	"github.com/x402gate/x402gate/internal/testenv"
	"github.com/x402gate/x402gate/verdict"
	"github.com/x402gate/x402gate/x402"
)

var (
	testPayer = common.HexToAddress("0x857b06519E91e3A54538791bDbb0E22373e36b66")
	testPayee = common.HexToAddress("0x209693Bc6afc0C5328bA36FaF03C514EF312287C")
)

const testResource = "https://shop.example/report"

// testPayment is a 0.01 USDC payment from testPayer to testPayee on network (CAIP-2 or
// v1 name), with its requirements.
func testPayment(network string) (*x402.Payment, *x402.Requirements) {
	asset := x402.BaseSepolia.USDC.Address
	if network == x402.Base.CAIP2 || network == x402.Base.Name {
		asset = x402.Base.USDC.Address
	}
	r := &x402.Requirements{
		Scheme: x402.SchemeExact, Network: network, Amount: big.NewInt(10_000), Asset: asset, PayTo: testPayee,
		MaxTimeoutSeconds: 60, Resource: x402.ResourceInfo{URL: testResource},
	}
	p := &x402.Payment{
		Version: x402.Version2, Scheme: x402.SchemeExact, Network: network,
		Authorization: x402.Authorization{From: testPayer, To: testPayee, Value: big.NewInt(10_000),
			ValidAfter: big.NewInt(0), ValidBefore: big.NewInt(1 << 40)},
	}
	return p, r
}

func paymentInput() PaymentInput {
	p, r := testPayment(x402.BaseSepolia.CAIP2)
	return PaymentInput{Payment: p, Requirements: r}
}

// submitBody decodes the i-th POST /transactions body the script saw.
func (s *script) submitBody(t *testing.T, i int) map[string]any {
	t.Helper()
	n := 0
	for _, r := range s.requests() {
		if r.method == http.MethodPost && strings.HasPrefix(r.url, "/transactions") {
			if n == i {
				var m map[string]any
				if err := json.Unmarshal(r.body, &m); err != nil {
					t.Fatalf("submit body: %v", err)
				}
				return m
			}
			n++
		}
	}
	t.Fatalf("no submit #%d", i)
	return nil
}

// TestVerifyPaymentFailsClosed covers docs/verdict.md#fail-closed: only an
// approved terminal verdict approves; every other case is a non-approved result with the
// right status, and the POST is sent exactly once.
func TestVerifyPaymentFailsClosed(t *testing.T) {
	h := "0xfeedbeef"
	unknownOutcome := testenv.ApprovedVerdict()
	unknownOutcome["outcome"] = "allowed"
	inconsistent := testenv.ApprovedVerdict()
	inconsistent["reasonCode"] = "venue_not_allowed"
	approvedWithFailedCheck := testenv.ApprovedVerdict()
	checkAt(approvedWithFailedCheck, 0)["status"] = "failed"
	pendingWithPolicy := testenv.PendingVerdict()
	pendingWithPolicy["policyVersion"] = 4
	cases := []struct {
		name       string
		submit     []reply
		status     []reply
		attempts   int
		want       verdict.GuardianStatus
		wantGETs   int
		wantReason string // substring of Reason
	}{
		{"approved verdict approves", []reply{created(h)}, []reply{envelope(testenv.ApprovedVerdict())}, 5, verdict.GuardianApproved, 1, "payment within policy"},
		{"approved after pending and null", []reply{created(h)}, []reply{{body: `{"verdict":null}`}, envelope(testenv.PendingVerdict()), envelope(testenv.ApprovedVerdict())}, 5, verdict.GuardianApproved, 3, "payment within policy"},
		{"rejected verdict is not approval", []reply{created(h)}, []reply{envelope(testenv.RejectedVerdict(verdict.CheckRecipient, verdict.ReasonRecipientNotAllowed))}, 5, verdict.GuardianRejected, 1, "payee is not on the allowlist"},
		{"pending at the polling bound is a timeout", []reply{created(h)}, []reply{envelope(testenv.PendingVerdict())}, 4, verdict.GuardianTimeout, 4, h},
		{"verdict missing at the polling bound is a timeout", []reply{created(h)}, []reply{{body: `{"status":"PENDING"}`}}, 3, verdict.GuardianTimeout, 3, h},
		{"malformed json is an error", []reply{created(h)}, []reply{{body: `{"verdict":{"outcome":"approved"`}}, 5, verdict.GuardianError, 1, h},
		{"unknown outcome is an error", []reply{created(h)}, []reply{envelope(unknownOutcome)}, 5, verdict.GuardianError, 1, "unknown outcome"},
		{"inconsistent reasonCode is an error", []reply{created(h)}, []reply{envelope(inconsistent)}, 5, verdict.GuardianError, 1, "reasonCode"},
		{"approved with a failed check is an error", []reply{created(h)}, []reply{envelope(approvedWithFailedCheck)}, 5, verdict.GuardianError, 1, "failed check"},
		{"pending with a policyVersion is an error", []reply{created(h)}, []reply{envelope(pendingWithPolicy)}, 5, verdict.GuardianError, 1, "policyVersion"},
		{"service that stays 503 is an error at the bound", []reply{created(h)}, []reply{statusReply(503)}, 4, verdict.GuardianError, 4, "503"},
		{"service that stays 429 is an error at the bound", []reply{created(h)}, []reply{statusReply(429)}, 3, verdict.GuardianError, 3, "429"},
		{"service that stays unreachable is an error at the bound", []reply{created(h)}, []reply{{hangUp: true}}, 3, verdict.GuardianError, 3, "network failure"},
		{"status 401 stops", []reply{created(h)}, []reply{statusReply(401)}, 5, verdict.GuardianError, 1, "401"},
		{"status 403 stops", []reply{created(h)}, []reply{statusReply(403)}, 5, verdict.GuardianError, 1, "403"},
		{"status 404 stops", []reply{created(h)}, []reply{statusReply(404)}, 5, verdict.GuardianError, 1, "404"},
		{"submit 400 stops", []reply{statusReply(400)}, nil, 5, verdict.GuardianError, 0, "400"},
		{"submit 401 stops", []reply{statusReply(401)}, nil, 5, verdict.GuardianError, 0, "401"},
		{"submit 403 stops", []reply{statusReply(403)}, nil, 5, verdict.GuardianError, 0, "403"},
		{"submit 201 without requestHash and nothing to reconcile", []reply{{status: 201, body: `{"id":"x"}`}}, nil, 3, verdict.GuardianError, 0, "trace id"},
		{"oversized verdict is an error", []reply{created(h)}, []reply{{oversize: MaxResponseBytes + 1}}, 5, verdict.GuardianError, 1, "too large"},
		{"redirected status is an error", []reply{created(h)}, []reply{{status: 302, header: map[string]string{"Location": "/"}}}, 5, verdict.GuardianError, 1, "302"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newScript(t).on(routeSubmit, tc.submit...)
			if tc.status != nil {
				s.on(routeStatus(h), tc.status...)
			}
			res, err := s.guardian(t).Verify(t.Context(), paymentInput(), fast(tc.attempts))
			if err != nil {
				t.Fatalf("Verify returned an error for a buildable action: %v", err)
			}
			if n := s.count(routeSubmit); n != 1 {
				t.Fatalf("POST sent %d times, want exactly 1", n)
			}
			if n := s.count(routeStatus(h)); n != tc.wantGETs {
				t.Fatalf("GET sent %d times, want %d", n, tc.wantGETs)
			}
			if res.Status != tc.want || res.Approved != (tc.want == verdict.GuardianApproved) {
				t.Fatalf("result = %+v, want status %s", res, tc.want)
			}
			if !strings.Contains(res.Reason, tc.wantReason) {
				t.Fatalf("reason %q does not contain %q", res.Reason, tc.wantReason)
			}
			terminal := tc.want == verdict.GuardianApproved || tc.want == verdict.GuardianRejected
			if (res.Verdict != nil) != terminal {
				t.Fatalf("verdict attached = %v, want %v", res.Verdict != nil, terminal)
			}
			if tc.wantGETs > 0 && res.RequestHash != h {
				t.Fatalf("requestHash = %q", res.RequestHash)
			}
		})
	}
}

func TestVerifyPaymentUnknownReasonCodePassesThrough(t *testing.T) {
	s := newScript(t).on(routeSubmit, created("0x1")).
		on(routeStatus("0x1"), envelope(testenv.RejectedVerdict(verdict.CheckSanctions, "sanctioned_by_new_list")))
	res, err := s.guardian(t).Verify(t.Context(), paymentInput(), fast(3))
	if err != nil || res.Approved || res.Status != verdict.GuardianRejected {
		t.Fatalf("result = %+v, %v", res, err)
	}
	if res.Verdict == nil || res.Verdict.ReasonCode != "sanctioned_by_new_list" || res.Verdict.ReasonCode.Known() {
		t.Fatalf("verdict = %+v; want the unknown code passed through", res.Verdict)
	}
}

// TestVerifyPaymentUnknownCheckPassesThrough: a check this client does not know (an
// extension such as a newer service's) and its code pass through a rejection; a failed one
// never approves, and a passed one does not stop an approval (docs/verdict.md#checks).
func TestVerifyPaymentUnknownCheckPassesThrough(t *testing.T) {
	withCheck := func(outcome, reason, status string, code any) map[string]any {
		v := testenv.ApprovedVerdict()
		v["outcome"], v["reasonCode"] = outcome, reason
		v["checks"] = append(v["checks"].([]any), map[string]any{
			"checkId": "mev_guard", "status": status, "code": code, "humanReason": "sandwich risk", "triggeringPolicyField": nil})
		return v
	}
	for _, tc := range []struct {
		name    string
		verdict map[string]any
		want    verdict.GuardianStatus
	}{
		{"a failed unknown check's code explains a rejection", withCheck("rejected", "mev_risk", "failed", "mev_risk"), verdict.GuardianRejected},
		{"a passed unknown check approves", withCheck("approved", "allowed", "passed", nil), verdict.GuardianApproved},
		{"an approval with a failed unknown check is an error", withCheck("approved", "allowed", "failed", "mev_risk"), verdict.GuardianError},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newScript(t).on(routeSubmit, created("0x1")).on(routeStatus("0x1"), envelope(tc.verdict))
			res, err := s.guardian(t).Verify(t.Context(), paymentInput(), fast(3))
			if err != nil || res.Status != tc.want || res.Approved != (tc.want == verdict.GuardianApproved) {
				t.Fatalf("result = %+v, %v; want %s", res, err, tc.want)
			}
			if tc.want != verdict.GuardianError && res.Verdict.Checks[len(res.Verdict.Checks)-1].CheckID != "mev_guard" {
				t.Fatalf("checks %+v lost the unknown check", res.Verdict.Checks)
			}
		})
	}
}

func TestVerifyPaymentContextEnds(t *testing.T) {
	t.Run("deadline while pending is a timeout", func(t *testing.T) {
		s := newScript(t).on(routeSubmit, created("0x1")).on(routeStatus("0x1"), envelope(testenv.PendingVerdict()))
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		opts := fast(10)
		opts.Sleep = func(context.Context, time.Duration) error { return context.DeadlineExceeded }
		res, _ := s.guardian(t).Verify(ctx, paymentInput(), opts)
		if res.Status != verdict.GuardianTimeout || res.Approved {
			t.Fatalf("result = %+v", res)
		}
	})
	t.Run("slow status answer cut by the caller's deadline is a timeout", func(t *testing.T) {
		s := newScript(t).on(routeSubmit, created("0x1")).on(routeStatus("0x1"), reply{block: true})
		ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
		defer cancel()
		res, _ := s.guardian(t).Verify(ctx, paymentInput(), fast(10))
		if res.Status != verdict.GuardianTimeout || res.Approved || s.count(routeStatus("0x1")) != 1 {
			t.Fatalf("result = %+v after %d GETs", res, s.count(routeStatus("0x1")))
		}
	})
	t.Run("cancelled before anything is sent is an error", func(t *testing.T) {
		s := newScript(t).on(routeSubmit, created("0x1"))
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		res, _ := s.guardian(t).Verify(ctx, paymentInput(), fast(3))
		if res.Status != verdict.GuardianError || res.Approved || s.count(routeSubmit) != 0 {
			t.Fatalf("result = %+v, %d POSTs", res, s.count(routeSubmit))
		}
	})
}

func TestVerifyPaymentBuildsTheSubmit(t *testing.T) {
	s := newScript(t).on(routeSubmit, created("0x1")).on(routeStatus("0x1"), envelope(testenv.ApprovedVerdict()))
	if _, err := s.guardian(t).Verify(t.Context(), paymentInput(), fast(2)); err != nil {
		t.Fatal(err)
	}
	body := s.submitBody(t, 0)
	ptx := body["proposedTx"].(map[string]any)
	want := map[string]any{"protocol": "payment", "rail": "x402", "chainId": float64(84532), "payTo": testPayee.Hex(),
		"asset": x402.BaseSepolia.USDC.Address.Hex(), "amount": "10000", "resource": testResource}
	for k, v := range want {
		if ptx[k] != v {
			t.Errorf("proposedTx.%s = %v, want %v", k, ptx[k], v)
		}
	}
	if len(ptx) != len(want) {
		t.Errorf("proposedTx has extra fields: %v", ptx)
	}
	if body["escrowAddress"] != testPayer.Hex() || body["arbiter"] != "policy" {
		t.Errorf("escrowAddress %v, arbiter %v", body["escrowAddress"], body["arbiter"])
	}
	if got := body["prompt"]; got != "Pay 0.01 USDC to "+testPayee.Hex()+" for "+testResource {
		t.Errorf("prompt = %q", got)
	}
	if tr, _ := body["metadata"].(map[string]any)["traceId"].(string); len(tr) != 32 {
		t.Errorf("metadata.traceId = %q", tr)
	}
}

func TestVerifyPaymentInvalidInputIsAnErrorWithoutRequests(t *testing.T) {
	cases := []struct {
		name  string
		mut   func(*PaymentInput)
		field string
	}{
		{"no payment", func(in *PaymentInput) { in.Payment = nil }, "paymentPayload"},
		{"no requirements", func(in *PaymentInput) { in.Requirements = nil }, "paymentRequirements"},
		{"network not Base", func(in *PaymentInput) { in.Requirements.Network, in.Payment.Network = "eip155:1", "eip155:1" }, "paymentRequirements.network"},
		{"zero value", func(in *PaymentInput) { in.Payment.Authorization.Value = big.NewInt(0) }, "paymentPayload.payload.authorization.value"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newScript(t).on(routeSubmit, created("0x1"))
			in := paymentInput()
			tc.mut(&in)
			res, err := s.guardian(t).Verify(t.Context(), in, fast(2))
			var ie *verdict.InputError
			if !errors.As(err, &ie) || ie.Field != tc.field {
				t.Fatalf("err = %v, want an InputError on %s", err, tc.field)
			}
			if res.Approved || res.Status != verdict.GuardianError {
				t.Fatalf("result = %+v; an unbuildable action must still fail closed", res)
			}
			if len(s.requests()) != 0 {
				t.Fatalf("%d requests sent", len(s.requests()))
			}
		})
	}
	t.Run("one-shot VerifyPayment with an invalid config", func(t *testing.T) {
		res, err := VerifyPayment(t.Context(), paymentInput(), GuardianOptions{BaseURL: "ftp://x", APIKey: testKey}, PollOptions{})
		if !errors.Is(err, ErrInvalidInput) || res.Approved || res.Status != verdict.GuardianError {
			t.Fatalf("= %+v, %v", res, err)
		}
	})
}

func TestVerifyPaymentOneShot(t *testing.T) {
	s := newScript(t).on(routeSubmit, created("0x1")).on(routeStatus("0x1"), envelope(testenv.ApprovedVerdict()))
	res, err := VerifyPayment(t.Context(), paymentInput(), GuardianOptions{BaseURL: s.srv.URL + "/", APIKey: testKey}, fast(2))
	if err != nil || !res.Approved || res.Status != verdict.GuardianApproved || res.Verdict.ReasonCode != verdict.ReasonAllowed {
		t.Fatalf("= %+v, %v", res, err)
	}
}

// docs/verdict.md#paymentaction: the derived prompt unless overrides are allowed and one
// is given.
func TestPromptOverride(t *testing.T) {
	derived := "Pay 0.01 USDC to " + testPayee.Hex() + " for " + testResource
	cases := []struct {
		name    string
		allow   bool
		input   string // PaymentInput.ArbiterUserPrompt
		ext     string // payload extensions.guardian.arbiterUserPrompt, used by VerifyPayment
		want    string
		wantErr bool
		viaMeth bool // call Guardian.VerifyPayment (payload extension) instead of Verify
	}{
		{name: "default: derived from the payment action", want: derived},
		{name: "override given but not allowed", input: "buy the report", want: derived},
		{name: "extension given but not allowed", ext: "buy the report", viaMeth: true, want: derived},
		{name: "allowed and given", allow: true, input: "  buy the weekly report ", want: "buy the weekly report"},
		{name: "allowed through the payload extension", allow: true, ext: "buy the weekly report", viaMeth: true, want: "buy the weekly report"},
		{name: "allowed but blank", allow: true, input: "   ", want: derived},
		{name: "allowed but too long", allow: true, input: strings.Repeat("x", 2001), wantErr: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newScript(t).on(routeSubmit, created("0x1")).on(routeStatus("0x1"), envelope(testenv.ApprovedVerdict()))
			g := s.guardian(t, func(c *GuardianOptions) { c.AllowPromptOverride = tc.allow })
			in := paymentInput()
			in.ArbiterUserPrompt = tc.input
			if tc.ext != "" {
				in.Payment.Extensions = map[string]any{"guardian": map[string]any{"arbiterUserPrompt": tc.ext}}
			}
			var err error
			if tc.viaMeth {
				_, err = g.VerifyPayment(t.Context(), in.Payment, in.Requirements, fast(2))
			} else {
				_, err = g.Verify(t.Context(), in, fast(2))
			}
			if tc.wantErr {
				if !errors.Is(err, ErrInvalidInput) || s.count(routeSubmit) != 0 {
					t.Fatalf("err = %v, %d POSTs", err, s.count(routeSubmit))
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := s.submitBody(t, 0)["prompt"]; got != tc.want {
				t.Fatalf("prompt = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestUncertainSubmitIsReconciledNeverResent: docs/verdict.md#envelope and docs/verdict.md#fail-closed: after
// 429, 5xx or a network failure the POST is not repeated; the trace id is looked up.
func TestUncertainSubmitIsReconciledNeverResent(t *testing.T) {
	found := reply{body: `{"transactions":[{"id":"t1","requestHash":"0xfound","status":"PENDING"}]}`}
	cases := []struct {
		name          string
		submit        reply
		reconcile     []reply
		want          verdict.GuardianStatus
		wantLookups   int
		wantReason    string
		wantStatusGET int
	}{
		{"503, then found: polls the found request", statusReply(503), []reply{found}, verdict.GuardianApproved, 1, "", 1},
		{"429, then found", statusReply(429), []reply{found}, verdict.GuardianApproved, 1, "", 1},
		{"network failure, lookup 503 then found", reply{hangUp: true}, []reply{statusReply(503), found}, verdict.GuardianApproved, 2, "", 1},
		{"unreadable 201, then found", reply{status: 201, body: `{"requestHash":`}, []reply{found}, verdict.GuardianApproved, 1, "", 1},
		{"500, nothing created: error, not resubmitted", statusReply(500), []reply{{body: `{"transactions":[]}`}}, verdict.GuardianError, 1, "no transaction with this trace id", 0},
		{"502, lookup unsupported: error", statusReply(502), []reply{statusReply(404)}, verdict.GuardianError, 1, "does not support trace id lookup", 0},
		{"503, lookup keeps failing: error at the bound", statusReply(503), []reply{statusReply(503)}, verdict.GuardianError, 3, "gave up after 3 attempts", 0},
		{"503, two records for one trace id: error", statusReply(503), []reply{{body: `{"transactions":[{"requestHash":"0xa"},{"requestHash":"0xb"}]}`}}, verdict.GuardianError, 1, "more than one", 0},
		{"503, lookup 401: error", statusReply(503), []reply{statusReply(401)}, verdict.GuardianError, 1, "401", 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newScript(t).on(routeSubmit, tc.submit).on(routeReconcile, tc.reconcile...).
				on(routeStatus("0xfound"), envelope(testenv.ApprovedVerdict()))
			res, err := s.guardian(t).Verify(t.Context(), paymentInput(), fast(3))
			if err != nil {
				t.Fatal(err)
			}
			if n := s.count(routeSubmit); n != 1 {
				t.Fatalf("POST sent %d times, want exactly 1", n)
			}
			if n := s.count(routeReconcile); n != tc.wantLookups {
				t.Fatalf("lookups = %d, want %d", n, tc.wantLookups)
			}
			if n := s.count(routeStatus("0xfound")); n != tc.wantStatusGET {
				t.Fatalf("status GETs = %d, want %d", n, tc.wantStatusGET)
			}
			if res.Status != tc.want || res.Approved != (tc.want == verdict.GuardianApproved) || !strings.Contains(res.Reason, tc.wantReason) {
				t.Fatalf("result = %+v, want %s with reason containing %q", res, tc.want, tc.wantReason)
			}
			// The lookup asks for the trace id the submit carried.
			trace := s.submitBody(t, 0)["metadata"].(map[string]any)["traceId"].(string)
			for _, r := range s.requests() {
				if r.method == http.MethodGet && strings.HasPrefix(r.url, "/transactions?") && r.url != "/transactions?traceId="+trace {
					t.Fatalf("lookup %s does not ask for trace id %s", r.url, trace)
				}
			}
		})
	}
}

// The low-level procedure a Go agent follows: Submit, *UncertainSubmitError, Reconcile
// with its TraceID, then Await on the found request.
func TestReconcileProcedure(t *testing.T) {
	s := newScript(t).on(routeSubmit, statusReply(504)).
		on(routeReconcile, reply{body: `{"transactions":[{"id":"t1","requestHash":"0xfound","description":"Pay","status":"PENDING"}]}`}).
		on(routeStatus("0xfound"), envelope(testenv.ApprovedVerdict()))
	c := s.client(t)
	req := paymentSubmit()
	req.TraceID = "agent-run-42-step-7"
	_, err := c.Submit(t.Context(), req)
	var ue *UncertainSubmitError
	if !errors.As(err, &ue) || !errors.Is(err, ErrUncertainSubmit) || !errors.Is(err, ErrServerError) || ue.TraceID != req.TraceID {
		t.Fatalf("err = %v; want an uncertain submit with trace id %s", err, req.TraceID)
	}
	if !strings.Contains(err.Error(), req.TraceID) || !strings.Contains(err.Error(), "reconcile") {
		t.Fatalf("error %q does not tell the caller to reconcile the trace id", err)
	}
	tx, err := c.Reconcile(t.Context(), ue.TraceID)
	if err != nil || tx.RequestHash != "0xfound" || tx.ID != "t1" || tx.TraceID != req.TraceID {
		t.Fatalf("Reconcile = %+v, %v", tx, err)
	}
	v, err := c.Await(t.Context(), tx.RequestHash, fast(2))
	if err != nil || !v.Approved() {
		t.Fatalf("Await = %v, %v", v, err)
	}
	if s.count(routeSubmit) != 1 {
		t.Fatal("POST repeated")
	}
}

func TestReconcileAnswers(t *testing.T) {
	cases := []struct {
		name  string
		reply reply
		want  error
	}{
		{"empty list: not created", reply{body: `{"transactions":[]}`}, ErrNotCreated},
		{"404: unsupported", statusReply(404), ErrReconcileUnsupported},
		{"405: unsupported", statusReply(405), ErrReconcileUnsupported},
		{"501: unsupported", statusReply(501), ErrReconcileUnsupported},
		{"401: stop", statusReply(401), ErrUnauthorized},
		{"503: transient", statusReply(503), ErrServerError},
		{"no transactions member", reply{body: `{}`}, ErrInvalidResponse},
		{"record without requestHash", reply{body: `{"transactions":[{"id":"t1"}]}`}, ErrInvalidResponse},
		{"two records", reply{body: `{"transactions":[{"requestHash":"0xa"},{"requestHash":"0xb"}]}`}, ErrInvalidResponse},
		{"malformed", reply{body: `{"transactions":[`}, ErrInvalidResponse},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newScript(t).on(routeReconcile, tc.reply)
			tx, err := s.client(t).Reconcile(t.Context(), "trace-00000001")
			if !errors.Is(err, tc.want) || tx != nil {
				t.Fatalf("Reconcile = %+v, %v; want %v", tx, err, tc.want)
			}
			if s.count(routeReconcile) != 1 {
				t.Fatalf("lookups = %d", s.count(routeReconcile))
			}
		})
	}
	t.Run("bad trace id is refused without a request", func(t *testing.T) {
		s := newScript(t)
		if _, err := s.client(t).Reconcile(t.Context(), "x y"); !errors.Is(err, ErrInvalidInput) || len(s.requests()) != 0 {
			t.Fatalf("err = %v", err)
		}
	})
}

// docs/gate.md#guardian.
func TestWithGuardian(t *testing.T) {
	h := "0x1"
	valid := func(context.Context, *x402.Payment, *x402.Requirements) (x402.VerifyResponse, error) {
		return x402.VerifyResponse{IsValid: true, Payer: testPayer.Hex()}, nil
	}
	invalid := func(context.Context, *x402.Payment, *x402.Requirements) (x402.VerifyResponse, error) {
		return x402.VerifyResponse{IsValid: false, InvalidReason: "invalid_exact_evm_payload_signature", Payer: testPayer.Hex()}, nil
	}
	baseErr := errors.New("rpc down")
	failing := func(context.Context, *x402.Payment, *x402.Requirements) (x402.VerifyResponse, error) {
		return x402.VerifyResponse{}, baseErr
	}
	cases := []struct {
		name         string
		base         VerifyFn
		status       []reply
		network      string
		wantValid    bool
		wantReason   string
		wantGuardian verdict.GuardianStatus
		wantGReason  string
		wantRequests int
		wantErr      error
	}{
		{"invalid base result is kept without calling the service", invalid, []reply{envelope(testenv.ApprovedVerdict())}, "",
			false, "invalid_exact_evm_payload_signature", "", "", 0, nil},
		{"base error is kept without calling the service", failing, []reply{envelope(testenv.ApprovedVerdict())}, "",
			false, "", "", "", 0, baseErr},
		{"valid and approved stays valid", valid, []reply{envelope(testenv.ApprovedVerdict())}, "",
			true, "", verdict.GuardianApproved, "payment within policy", 2, nil},
		{"valid but rejected becomes invalid", valid, []reply{envelope(testenv.RejectedVerdict(verdict.CheckRecipient, verdict.ReasonRecipientNotAllowed))}, "",
			false, "verdict_not_approved", verdict.GuardianRejected, "payee is not on the allowlist", 2, nil},
		{"valid but pending at the bound becomes invalid", valid, []reply{envelope(testenv.PendingVerdict())}, "",
			false, "verdict_not_approved", verdict.GuardianTimeout, h, 4, nil},
		{"valid but malformed verdict becomes invalid", valid, []reply{{body: `{"verdict":1}`}}, "",
			false, "verdict_not_approved", verdict.GuardianError, h, 2, nil},
		{"valid but the action cannot be built becomes invalid", valid, nil, "eip155:1",
			false, "verdict_not_approved", verdict.GuardianError, "paymentRequirements.network", 0, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newScript(t).on(routeSubmit, created(h))
			if tc.status != nil {
				s.on(routeStatus(h), tc.status...)
			}
			verify, err := WithGuardian(tc.base, GuardianOptions{BaseURL: s.srv.URL, APIKey: testKey}, fast(3))
			if err != nil {
				t.Fatal(err)
			}
			in := paymentInput()
			if tc.network != "" {
				in.Payment.Network, in.Requirements.Network = tc.network, tc.network
			}
			res, err := verify(t.Context(), in.Payment, in.Requirements)
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			if n := len(s.requests()); n != tc.wantRequests {
				t.Fatalf("verdict service saw %d requests, want %d", n, tc.wantRequests)
			}
			if res.IsValid != tc.wantValid || res.InvalidReason != tc.wantReason || res.GuardianStatus != string(tc.wantGuardian) {
				t.Fatalf("result = %+v", res)
			}
			if !strings.Contains(res.GuardianReason, tc.wantGReason) || (tc.wantGuardian == "") != (res.GuardianReason == "") {
				t.Fatalf("guardianReason = %q, want it to contain %q", res.GuardianReason, tc.wantGReason)
			}
			if tc.wantErr == nil && res.Payer != testPayer.Hex() {
				t.Fatalf("payer lost: %+v", res)
			}
		})
	}
	t.Run("invalid config", func(t *testing.T) {
		if _, err := WithGuardian(valid, GuardianOptions{BaseURL: "https://v.example"}, PollOptions{}); !errors.Is(err, ErrInvalidInput) {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("nil base fails closed", func(t *testing.T) {
		s := newScript(t)
		g := s.guardian(t)
		in := paymentInput()
		res, err := g.Wrap(nil, fast(2))(t.Context(), in.Payment, in.Requirements)
		if err == nil || res.IsValid {
			t.Fatalf("= %+v, %v", res, err)
		}
	})
}
