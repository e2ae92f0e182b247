package verdictclient

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/x402gate/x402gate/internal/testenv"
	"github.com/x402gate/x402gate/verdict"
)

func paymentSubmit() SubmitRequest {
	return SubmitRequest{
		EscrowAddress: "0x857b06519E91e3A54538791bDbb0E22373e36b66",
		Prompt:        "Pay 0.01 USDC to 0x209693Bc6afc0C5328bA36FaF03C514EF312287C",
		ProposedTx: verdict.PaymentAction{Protocol: verdict.ProtocolPayment, Rail: verdict.RailX402, ChainID: 84532,
			PayTo: "0x209693Bc6afc0C5328bA36FaF03C514EF312287C", Asset: "0x036CbD53842c5426634e7929541eC2318f3dCF7e", Amount: "10000"},
	}
}

// docs/verdict.md#fail-closed, Submit column: each status, one POST, and the error class the caller acts on.
func TestSubmitStatusTable(t *testing.T) {
	cases := []struct {
		name      string
		reply     reply
		want      error // sentinel; nil means success
		uncertain bool
	}{
		{"201 with requestHash: keep requestHash", created("0xaaa"), nil, false},
		{"201 without requestHash: uncertain, reconcile", reply{status: 201, body: `{"id":"x"}`}, ErrInvalidResponse, true},
		{"201 with empty requestHash: uncertain", reply{status: 201, body: `{"requestHash":""}`}, ErrInvalidResponse, true},
		{"201 with numeric requestHash: uncertain", reply{status: 201, body: `{"requestHash":12}`}, ErrInvalidResponse, true},
		{"201 with malformed json: uncertain", reply{status: 201, body: `{"requestHash":"0x`}, ErrInvalidResponse, true},
		{"201 as text/html: uncertain", reply{status: 201, body: `{"requestHash":"0xaaa"}`, contentType: "text/html"}, ErrContentType, true},
		{"200 instead of 201: uncertain", reply{status: 200, body: `{"requestHash":"0xaaa"}`}, ErrUnexpectedStatus, true},
		{"302: redirect refused, uncertain", reply{status: 302, header: map[string]string{"Location": "/elsewhere"}}, ErrRedirect, true},
		{"400: correct the request, do not retry", statusReply(400), ErrBadRequest, false},
		{"401: re-authenticate", statusReply(401), ErrUnauthorized, false},
		{"403: correct configuration", statusReply(403), ErrForbidden, false},
		{"404: stop", statusReply(404), ErrNotFound, false},
		{"409: trace id already used", statusReply(409), ErrConflict, false},
		{"429: do not repeat the POST, reconcile", statusReply(429), ErrRateLimited, true},
		{"500: reconcile before resubmitting", statusReply(500), ErrServerError, true},
		{"503: reconcile before resubmitting", statusReply(503), ErrServerError, true},
		{"network failure: reconcile before resubmitting", reply{hangUp: true}, ErrNetwork, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newScript(t).on(routeSubmit, tc.reply)
			tx, err := s.client(t).Submit(t.Context(), paymentSubmit())
			if got := s.count(routeSubmit); got != 1 {
				t.Fatalf("POST sent %d times, want exactly 1", got)
			}
			if tc.want == nil {
				if err != nil {
					t.Fatal(err)
				}
				if tx.RequestHash != "0xaaa" || tx.Status != "PENDING" || len(tx.TraceID) != 32 {
					t.Fatalf("transaction = %+v", tx)
				}
				return
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			var ue *UncertainSubmitError
			if errors.As(err, &ue) != tc.uncertain {
				t.Fatalf("uncertain = %v, want %v (%v)", !tc.uncertain, tc.uncertain, err)
			}
			if tc.uncertain && (ue.TraceID == "" || IsTransient(err)) {
				t.Fatalf("uncertain submit must carry a trace id and never count as retryable: %v", err)
			}
		})
	}
}

// docs/verdict.md#fail-closed, Status column: 400/401/403/404 stop after one GET; 429, 5xx and network
// failures are retried within the bound and then the verdict is read.
func TestStatusTable(t *testing.T) {
	approved := envelope(testenv.ApprovedVerdict())
	cases := []struct {
		name     string
		replies  []reply
		want     error // nil: approved verdict
		wantGETs int
	}{
		{"200: validate and return the terminal verdict", []reply{approved}, nil, 1},
		{"200 missing verdict: poll again", []reply{{body: `{}`}, approved}, nil, 2},
		{"200 null verdict: poll again", []reply{{body: `{"verdict":null}`}, approved}, nil, 2},
		{"200 pending verdict: poll again", []reply{envelope(testenv.PendingVerdict()), approved}, nil, 2},
		{"200 malformed: stop, not approved", []reply{{body: `{"verdict":`}, approved}, ErrInvalidResponse, 1},
		{"400: stop", []reply{statusReply(400), approved}, ErrBadRequest, 1},
		{"401: stop and re-authenticate", []reply{statusReply(401), approved}, ErrUnauthorized, 1},
		{"403: stop and correct configuration", []reply{statusReply(403), approved}, ErrForbidden, 1},
		{"404: stop and reconcile the captured hash", []reply{statusReply(404), approved}, ErrNotFound, 1},
		{"429: bounded GET retry", []reply{statusReply(429), statusReply(429), approved}, nil, 3},
		{"429 with Retry-After: bounded GET retry", []reply{statusReply(429).withHeader("Retry-After", "1"), approved}, nil, 2},
		{"500: retry GET within the bound", []reply{statusReply(500), approved}, nil, 2},
		{"502: retry GET within the bound", []reply{statusReply(502), approved}, nil, 2},
		{"503: retry GET within the bound", []reply{statusReply(503), approved}, nil, 2},
		{"network failure: retry GET within the bound", []reply{{hangUp: true}, approved}, nil, 2},
		{"3xx: redirect refused, stop", []reply{{status: 307, header: map[string]string{"Location": "/x"}}, approved}, ErrRedirect, 1},
		{"200 as text/plain: stop", []reply{{body: testenv.VerdictJSON(map[string]any{"verdict": testenv.ApprovedVerdict()}), contentType: "text/plain"}}, ErrContentType, 1},
		{"204: unexpected, stop", []reply{{status: 204}}, ErrUnexpectedStatus, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newScript(t).on(routeStatus("0xabc"), tc.replies...)
			opts := fast(5)
			v, err := s.client(t).Await(t.Context(), "0xabc", opts)
			if got := s.count(routeStatus("0xabc")); got != tc.wantGETs {
				t.Fatalf("GET sent %d times, want %d", got, tc.wantGETs)
			}
			if tc.want == nil {
				if err != nil || !v.Approved() {
					t.Fatalf("Await = %v, %v; want an approved verdict", v, err)
				}
				return
			}
			if !errors.Is(err, tc.want) || v != nil {
				t.Fatalf("Await = %v, %v; want %v", v, err, tc.want)
			}
		})
	}
}

func TestStatusErrorCarriesNoServerText(t *testing.T) {
	s := newScript(t).on(routeStatus("0xabc"), reply{status: 403, body: `{"statusCode":403,"message":"not authorized for escrow address","error":"Forbidden"}`})
	_, err := s.client(t).Status(t.Context(), "0xabc")
	var se *StatusError
	if !errors.As(err, &se) || se.Status != 403 || se.RequestHash != "0xabc" {
		t.Fatalf("err = %v", err)
	}
	if se.Message != "not authorized for escrow address" {
		t.Fatalf("Message = %q", se.Message)
	}
	if want := "approval status: http 403 Forbidden (request 0xabc)"; err.Error() != want {
		t.Fatalf("Error() = %q, want %q", err.Error(), want)
	}
}

func TestSubmitBody(t *testing.T) {
	s := newScript(t).on(routeSubmit, created("0xaaa"))
	req := paymentSubmit()
	req.Metadata = map[string]any{"environment": "test"}
	req.TraceID = "trace-0001-abcdef"
	if _, err := s.client(t).Submit(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	r := s.requests()[0]
	if r.method != http.MethodPost || r.url != "/transactions" {
		t.Fatalf("%s %s", r.method, r.url)
	}
	if r.header.Get("Content-Type") != "application/json" || r.header.Get("x-api-key") != testKey || r.header.Get("Authorization") != "" {
		t.Fatalf("headers: content-type %q, key set %v, authorization %q", r.header.Get("Content-Type"), r.header.Get("x-api-key") == testKey, r.header.Get("Authorization"))
	}
	var body map[string]any
	if err := json.Unmarshal(r.body, &body); err != nil {
		t.Fatal(err)
	}
	md := body["metadata"].(map[string]any)
	ptx := body["proposedTx"].(map[string]any)
	if body["arbiter"] != "policy" || md["traceId"] != "trace-0001-abcdef" || md["environment"] != "test" ||
		ptx["protocol"] != "payment" || ptx["chainId"] != float64(84532) || body["escrowAddress"] != req.EscrowAddress {
		t.Fatalf("body = %s", r.body)
	}
}

func TestSubmitRefusesInvalidRequestsWithoutSending(t *testing.T) {
	cases := []struct {
		name string
		mut  func(*SubmitRequest)
	}{
		{"empty prompt", func(r *SubmitRequest) { r.Prompt = "  " }},
		{"no escrow address", func(r *SubmitRequest) { r.EscrowAddress = "" }},
		{"proposedTx without protocol", func(r *SubmitRequest) { r.ProposedTx = map[string]any{"chainId": 1} }},
		{"proposedTx without chainId", func(r *SubmitRequest) { r.ProposedTx = map[string]any{"protocol": "uniswap"} }},
		{"proposedTx not an object", func(r *SubmitRequest) { r.ProposedTx = []int{1} }},
		{"metadata traceId is reserved", func(r *SubmitRequest) { r.Metadata = map[string]any{"traceId": "x"} }},
		{"trace id too short", func(r *SubmitRequest) { r.TraceID = "abc" }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newScript(t).on(routeSubmit, created("0xaaa"))
			req := paymentSubmit()
			tc.mut(&req)
			_, err := s.client(t).Submit(t.Context(), req)
			if !errors.Is(err, ErrInvalidInput) || errors.Is(err, ErrUncertainSubmit) {
				t.Fatalf("err = %v, want ErrInvalidInput", err)
			}
			if n := s.count(routeSubmit); n != 0 {
				t.Fatalf("sent %d requests", n)
			}
		})
	}
}

// docs/verdict.md#fail-closed, Status column, one read: Status never retries by itself; it reports whether
// the failure is one that Await may retry (IsTransient) or one that stops.
func TestStatusSingleReadTable(t *testing.T) {
	cases := []struct {
		name      string
		reply     reply
		want      error // nil: a valid envelope
		transient bool
		verdict   bool
	}{
		{"200 with a verdict", envelope(testenv.ApprovedVerdict()), nil, false, true},
		{"200 without a verdict", reply{body: `{}`}, nil, false, false},
		{"200 malformed", reply{body: `{"verdict":[`}, ErrInvalidResponse, false, false},
		{"400", statusReply(400), ErrBadRequest, false, false},
		{"401", statusReply(401), ErrUnauthorized, false, false},
		{"403", statusReply(403), ErrForbidden, false, false},
		{"404", statusReply(404), ErrNotFound, false, false},
		{"429", statusReply(429), ErrRateLimited, true, false},
		{"500", statusReply(500), ErrServerError, true, false},
		{"504", statusReply(504), ErrServerError, true, false},
		{"network failure", reply{hangUp: true}, ErrNetwork, true, false},
		{"301", reply{status: 301, header: map[string]string{"Location": "/"}}, ErrRedirect, false, false},
		{"418", statusReply(418), ErrUnexpectedStatus, false, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newScript(t).on(routeStatus("0xabc"), tc.reply)
			env, err := s.client(t).Status(t.Context(), "0xabc")
			if n := s.count(routeStatus("0xabc")); n != 1 {
				t.Fatalf("GET sent %d times, want 1", n)
			}
			if tc.want == nil {
				if err != nil || (env.Verdict != nil) != tc.verdict {
					t.Fatalf("Status = %+v, %v", env, err)
				}
				return
			}
			if !errors.Is(err, tc.want) || env != nil || IsTransient(err) != tc.transient {
				t.Fatalf("Status = %+v, %v; want %v (transient %v)", env, err, tc.want, tc.transient)
			}
			if !strings.Contains(err.Error(), "0xabc") {
				t.Fatalf("error %q does not name the requestHash", err)
			}
		})
	}
}
