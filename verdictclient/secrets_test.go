package verdictclient

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/x402gate/x402gate/internal/testenv"
	"github.com/x402gate/x402gate/verdict"
)

// payerKey is a second key (a payer's own, PaymentInput.APIKey).
const payerKey = "vk_payer_9b7d5c3a1e0f2468ace"

// logText renders every captured entry, message and fields, as text.
func logText(t *testing.T, logs *observer.ObservedLogs) string {
	t.Helper()
	var b strings.Builder
	for _, e := range logs.All() {
		enc := zapcore.NewMapObjectEncoder()
		for _, f := range e.Context {
			f.AddTo(enc)
		}
		fields, err := json.Marshal(enc.Fields)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "%s %s %s %s\n", e.Level, e.LoggerName, e.Message, fields)
	}
	return b.String()
}

// TestAPIKeyNeverLeaks: docs/verdict.md#secrets every path (approval, rejection,
// uncertain submit and reconcile, transient failures, 401 with the key echoed by the
// service, a humanReason quoting the key), the key travels only in x-api-key: never in
// a URL, a body, metadata, an error, a result or a log entry.
func TestAPIKeyNeverLeaks(t *testing.T) {
	echo := reply{status: 401, body: `{"statusCode":401,"message":"bad key ` + testKey + `","error":"Unauthorized"}`}
	leakyReason := testenv.RejectedVerdict(verdict.CheckRecipient, verdict.ReasonRecipientNotAllowed)
	leakyReason["humanReason"] = "key " + testKey + " and " + payerKey + " are not allowed"
	checkAt(leakyReason, 4)["humanReason"] = "recipient paid with " + testKey
	checkAt(leakyReason, 4)["triggeringPolicyField"] = "keys." + payerKey
	leakyReason["evidence"].(map[string]any)["observations"] = map[string]any{
		"headers": map[string]any{"x-api-key": testKey, payerKey: []any{1, payerKey}}}
	s := newScript(t).
		on(routeSubmit, created("0xa"), statusReply(503), created("0xc"), echo, created("0xe"), reply{hangUp: true}).
		on(routeReconcile, statusReply(500), reply{body: `{"transactions":[{"requestHash":"0xb"}]}`}, reply{body: `{"transactions":[]}`}).
		on(routeStatus("0xa"), statusReply(429), statusReply(500), reply{hangUp: true}, envelope(testenv.PendingVerdict()), envelope(testenv.ApprovedVerdict())).
		on(routeStatus("0xb"), envelope(testenv.RejectedVerdict(verdict.CheckRecipient, verdict.ReasonRecipientNotAllowed))).
		on(routeStatus("0xc"), echo).
		on(routeStatus("0xe"), envelope(leakyReason))
	core, logs := observer.New(zapcore.DebugLevel)
	g := s.guardian(t, func(c *GuardianOptions) { c.Logger = zap.New(core) })

	var outputs []string
	runs := []struct {
		name string
		key  string // PaymentInput.APIKey
		want verdict.GuardianStatus
	}{
		{"approved after transient failures", "", verdict.GuardianApproved},
		{"uncertain submit reconciled, rejected", "", verdict.GuardianRejected},
		{"status 401 echoing the key", "", verdict.GuardianError},
		{"submit 401 echoing the key", "", verdict.GuardianError},
		{"payer key, humanReason quoting both keys", payerKey, verdict.GuardianRejected},
		{"uncertain submit, not created", "", verdict.GuardianError},
	}
	for _, r := range runs {
		in := paymentInput()
		in.APIKey = r.key
		res, err := g.Verify(t.Context(), in, fast(6))
		if err != nil || res.Status != r.want {
			t.Fatalf("%s: result %+v, %v; want %s", r.name, res, err, r.want)
		}
		b, _ := json.Marshal(res)
		outputs = append(outputs, string(b), res.Reason)
	}
	// Low-level errors too.
	c := s.client(t)
	_, err := c.Status(t.Context(), "0xc")
	var se *StatusError
	if !errors.As(err, &se) || se.Status != 401 {
		t.Fatalf("Status = %v", err)
	}
	outputs = append(outputs, err.Error(), se.Message, fmt.Sprintf("%+v", err))

	logText := logText(t, logs)
	if logs.FilterField(zap.String("requestHash", "0xa")).Len() == 0 || logs.FilterMessageSnippet("submit outcome unknown").Len() != 2 {
		t.Fatalf("expected request and uncertain-submit entries, got:\n%s", logText)
	}
	outputs = append(outputs, logText)
	reqs := s.requests()
	if len(reqs) < 15 {
		t.Fatalf("only %d requests recorded", len(reqs))
	}
	for _, key := range []string{testKey, payerKey} {
		for _, o := range outputs {
			if strings.Contains(o, key) {
				t.Fatalf("key leaked into output: %s", o)
			}
		}
		for _, r := range reqs {
			if strings.Contains(r.url, key) || strings.Contains(string(r.body), key) {
				t.Fatalf("key leaked into %s %s body %s", r.method, r.url, r.body)
			}
			for name, vs := range r.header {
				if strings.EqualFold(name, "x-api-key") {
					continue
				}
				if strings.Contains(strings.Join(vs, ","), key) {
					t.Fatalf("key leaked into header %s", name)
				}
			}
		}
	}
	payerUsed := 0
	for _, r := range reqs {
		k := r.header.Get("x-api-key")
		if k != testKey && k != payerKey {
			t.Fatalf("%s %s sent without the key", r.method, r.url)
		}
		if k == payerKey {
			payerUsed++
		}
		if r.header.Get("Authorization") != "" {
			t.Fatalf("%s %s sent a bearer token beside the key (docs/verdict.md#secrets)", r.method, r.url)
		}
		if r.method == http.MethodGet && (r.contentLength != 0 || len(r.transferEncoding) != 0 || len(r.body) != 0) {
			t.Fatalf("GET %s carries a body (length %d, encoding %v)", r.url, r.contentLength, r.transferEncoding)
		}
		if r.method == http.MethodPost {
			var m map[string]any
			if err := json.Unmarshal(r.body, &m); err != nil {
				t.Fatal(err)
			}
			md, _ := json.Marshal(m["metadata"])
			if strings.Contains(string(md), "Key") || strings.Contains(string(md), "key") {
				t.Fatalf("metadata carries a key field: %s", md)
			}
		}
	}
	if payerUsed != 2 { // the payer's submit and its status read
		t.Fatalf("payer key used on %d requests, want 2", payerUsed)
	}
}

// The transport refuses to send the key outside its header, whatever the caller put in
// the request (docs/verdict.md#secrets).
func TestKeyInRequestIsRefused(t *testing.T) {
	cases := []struct {
		name string
		mut  func(*SubmitRequest)
	}{
		{"in the prompt", func(r *SubmitRequest) { r.Prompt = "use " + testKey }},
		{"in metadata", func(r *SubmitRequest) { r.Metadata = map[string]any{"auth": testKey} }},
		{"in context logs", func(r *SubmitRequest) { r.ContextLogs = map[string]any{"env": []any{"X_API_KEY=" + testKey}} }},
		{"in the proposed action", func(r *SubmitRequest) {
			r.ProposedTx = map[string]any{"protocol": "payment", "chainId": 8453, "memo": testKey}
		}},
		{"as the trace id", func(r *SubmitRequest) { r.TraceID = testKey }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newScript(t).on(routeSubmit, created("0xa"))
			req := paymentSubmit()
			tc.mut(&req)
			_, err := s.client(t).Submit(t.Context(), req)
			if !errors.Is(err, ErrInvalidInput) || errors.Is(err, ErrUncertainSubmit) || strings.Contains(err.Error(), testKey) {
				t.Fatalf("err = %v", err)
			}
			if n := len(s.requests()); n != 0 {
				t.Fatalf("%d requests sent", n)
			}
		})
	}
	t.Run("as the requestHash", func(t *testing.T) {
		s := newScript(t)
		_, err := s.client(t).Status(t.Context(), testKey)
		if !errors.Is(err, ErrInvalidInput) || strings.Contains(err.Error(), testKey) || len(s.requests()) != 0 {
			t.Fatalf("err = %v, %d requests", err, len(s.requests()))
		}
	})
	t.Run("a payer key in the prompt override", func(t *testing.T) {
		s := newScript(t).on(routeSubmit, created("0xa"))
		g := s.guardian(t, func(c *GuardianOptions) { c.AllowPromptOverride = true })
		in := paymentInput()
		in.APIKey, in.ArbiterUserPrompt = payerKey, "pay with "+payerKey
		res, _ := g.Verify(t.Context(), in, fast(2))
		if res.Approved || res.Status != verdict.GuardianError || strings.Contains(res.Reason, payerKey) || len(s.requests()) != 0 {
			t.Fatalf("result %+v, %d requests", res, len(s.requests()))
		}
	})
}
