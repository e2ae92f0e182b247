package gate_test

// Metering (docs/gate.md#metering) on the fake facilitator: an upto route settles exactly
// what its upstream reports, buffered or streamed, and nothing above the maximum. The same
// through the built caddy binary, on anvil with the real @x402/evm upto client, is
// integration's TestUptoThroughCaddy.

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/x402gate/x402gate/gate"
	"github.com/x402gate/x402gate/gate/gatetest"
	"github.com/x402gate/x402gate/x402"
)

// uptoRoute meters up to 0.01 USDC (10000 base units).
func uptoRoute() gate.Config {
	cfg := rulesRoute()
	cfg.Scheme = gate.SchemeUpto
	return cfg
}

// reporting makes the upstream answer premium with the cost report name: value.
func (s *flowServer) reporting(name, value string) {
	s.setUpstream(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if name != "" {
			w.Header().Set(name, value)
		}
		_, _ = io.WriteString(w, premium)
	})
}

// streaming makes the upstream answer an SSE stream of events, flushed one by one, and
// report its cost in the trailer X402-Cost, which it announces.
func (s *flowServer) streaming(events int, cost string) {
	s.setUpstream(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Trailer", gate.HeaderCost)
		for i := range events {
			_, _ = fmt.Fprintf(w, "data: token %d\n\n", i)
			w.(http.Flusher).Flush()
		}
		w.Header().Set(gate.HeaderCost, cost)
	})
}

// settledAmounts are the amounts of the settle requests the facilitator got.
func (s *flowServer) settledAmounts() []string {
	var out []string
	for _, c := range s.f.Calls() {
		if c.Method == gatetest.MethodSettle {
			out = append(out, c.Requirements.Amount.String())
		}
	}
	return out
}

// paidResponse is the PAYMENT-RESPONSE of res, read as the reference client reads it
// (base64 JSON, no schema).
func paidResponse(t *testing.T, res *http.Response) map[string]any {
	t.Helper()
	b, err := base64.StdEncoding.DecodeString(res.Header.Get(x402.HeaderPaymentResponseV2))
	var sr map[string]any
	if err == nil {
		err = json.Unmarshal(b, &sr)
	}
	if err != nil || res.Header.Get(x402.HeaderPaymentResponse) != res.Header.Get(x402.HeaderPaymentResponseV2) {
		t.Fatalf("PAYMENT-RESPONSE %q (X-PAYMENT-RESPONSE %q): %v", res.Header.Get(x402.HeaderPaymentResponseV2), res.Header.Get(x402.HeaderPaymentResponse), err)
	}
	return sr
}

// TestMetering: the amount an upto route settles for each report, what the client gets,
// and that a refused report moves nothing and leaves the authorization good.
func TestMetering(t *testing.T) {
	for _, tc := range []struct {
		name, header, value string
		free                bool
		want                string // the settled amount; "" for none
	}{
		{"the reported cost, 37% of the maximum", gate.HeaderCost, "0.0037 USDC", false, "3700"},
		{"the reported cost in base units", gate.HeaderCost, "3700 base", false, "3700"},
		{"the reference's Settlement-Overrides as a percentage", gate.HeaderSettlementOverrides, `{"amount":"37%"}`, false, "3700"},
		{"the reference's Settlement-Overrides in base units", gate.HeaderSettlementOverrides, `{"amount":"3700"}`, false, "3700"},
		{"no report: the maximum", "", "", false, "10000"},
		{"no report on an unmetered free route: nothing", "", "", true, ""},
		{"a cost of 0: nothing", gate.HeaderCost, "0", false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := uptoRoute()
			if tc.free {
				cfg.Unmetered = gate.UnmeteredFree
			}
			s := newFlowServer(t, cfg)
			s.reporting(tc.header, tc.value)
			name, value := s.payment(t)
			res, body := s.get(t, name, value)
			if res.StatusCode != http.StatusOK || body != premium {
				t.Fatalf("%d %s, want 200 premium", res.StatusCode, body)
			}
			for _, h := range []string{gate.HeaderCost, gate.HeaderSettlementOverrides} {
				if v := res.Header.Get(h); v != "" {
					t.Errorf("the client got the cost report %s: %s", h, v)
				}
			}
			settled := s.settledAmounts()
			sr := paidResponse(t, res)
			switch {
			case tc.want == "" && (len(settled) != 0 || sr["success"] != true || sr["transaction"] != "" || sr["amount"] != "0"):
				t.Errorf("settled %v, PAYMENT-RESPONSE %v; want nothing settled and success, transaction \"\", amount \"0\"", settled, sr)
			case tc.want != "" && (len(settled) != 1 || settled[0] != tc.want || sr["success"] != true || sr["amount"] != tc.want):
				t.Errorf("settled %v, PAYMENT-RESPONSE %v; want one settlement of %s, reported as amount", settled, sr, tc.want)
			}
			if res, body := s.get(t, name, value); res.StatusCode != http.StatusPaymentRequired {
				t.Errorf("the same payment again: %d %s, want 402: one payment buys one answer", res.StatusCode, body)
			}
			if n := s.calls.Load(); n != 1 {
				t.Errorf("upstream called %d times, want 1", n)
			}
		})
	}
	for _, tc := range []struct {
		name, header, value string
		reason              x402.Reason
	}{
		{"a cost above the maximum", gate.HeaderCost, "0.011 USDC", gate.ReasonCostAboveMaximum},
		{"a percentage above the maximum", gate.HeaderSettlementOverrides, `{"amount":"120%"}`, gate.ReasonCostAboveMaximum},
		{"a cost that cannot be read", gate.HeaderCost, "a lot", gate.ReasonInvalidCost},
	} {
		t.Run(tc.name+" is refused: 502, nothing moves, and the same payment pays later", func(t *testing.T) {
			s := newFlowServer(t, uptoRoute())
			s.reporting(tc.header, tc.value)
			name, value := s.payment(t)
			res, body := s.get(t, name, value)
			if res.StatusCode != http.StatusBadGateway || !strings.Contains(body, string(tc.reason)) || strings.Contains(body, premium) {
				t.Fatalf("%d %s, want 502 %s without the answer", res.StatusCode, body, tc.reason)
			}
			if settled := s.settledAmounts(); len(settled) != 0 {
				t.Fatalf("settled %v, want nothing", settled)
			}
			s.reporting(gate.HeaderCost, "0.005")
			if res, body := s.get(t, name, value); res.StatusCode != http.StatusOK || body != premium {
				t.Fatalf("the same payment with a good report: %d %s, want 200", res.StatusCode, body)
			}
			if settled := s.settledAmounts(); len(settled) != 1 || settled[0] != "5000" {
				t.Errorf("settled %v, want 5000 once", settled)
			}
		})
	}
	t.Run("a failed answer is not charged and its cost report is removed", func(t *testing.T) {
		s := newFlowServer(t, uptoRoute())
		s.setUpstream(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set(gate.HeaderCost, "0.001")
			w.WriteHeader(http.StatusServiceUnavailable)
		})
		name, value := s.payment(t)
		res, _ := s.get(t, name, value)
		if res.StatusCode != http.StatusServiceUnavailable || res.Header.Get(gate.HeaderCost) != "" || len(s.settledAmounts()) != 0 {
			t.Errorf("%d with %s %q, settled %v; want the upstream's 503 without the report, nothing settled",
				res.StatusCode, gate.HeaderCost, res.Header.Get(gate.HeaderCost), s.settledAmounts())
		}
	})
}

// TestMeteringNothingIsSettledAndCounted: a metered cost of 0 reaches OnSettle as a
// successful settlement of 0, so metrics count it. Without a verdict the facilitator is not
// asked (Local); after a verdict's approval it is asked to settle 0, so that it reports the
// verdict's spend reservation released (docs/spend-windows.md#reporting).
func TestMeteringNothingIsSettledAndCounted(t *testing.T) {
	for _, approved := range []bool{false, true} {
		t.Run(fmt.Sprintf("approved by a verdict: %v", approved), func(t *testing.T) {
			var mu sync.Mutex
			var events []gate.SettleEvent
			s := newFlowServer(t, uptoRoute(), gate.Options{OnSettle: func(ev gate.SettleEvent) {
				mu.Lock()
				defer mu.Unlock()
				events = append(events, ev)
			}})
			if approved {
				s.f.OnVerify(func(_ context.Context, in x402.VerifyInput) (x402.VerifyResponse, error) {
					return x402.VerifyResponse{IsValid: true, Payer: in.Payment.Authorization.From.Hex(), GuardianStatus: "approved"}, nil
				})
			}
			s.reporting(gate.HeaderCost, "0")
			name, value := s.payment(t)
			if res, body := s.get(t, name, value); res.StatusCode != http.StatusOK || body != premium {
				t.Fatalf("%d %s, want 200 premium", res.StatusCode, body)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(events) != 1 || !events[0].Response.Success || events[0].Requirements.Amount.Sign() != 0 || events[0].Local == approved {
				t.Fatalf("OnSettle saw %+v, want one successful settlement of 0, Local %v", events, !approved)
			}
			if settled := s.settledAmounts(); approved != (len(settled) == 1 && settled[0] == "0") || len(settled) > 1 {
				t.Errorf("the facilitator settled %v; want one settle of 0 only after a verdict's approval", settled)
			}
		})
	}
}

// TestMeteringAStream: an SSE upstream that flushes its events and reports its cost in a
// trailer is buffered whole, settled for the trailer's cost, and then sent complete; the
// trailer never reaches the client.
func TestMeteringAStream(t *testing.T) {
	s := newFlowServer(t, uptoRoute())
	s.streaming(50, "0.0037")
	name, value := s.payment(t)
	res, body := s.get(t, name, value)
	if res.StatusCode != http.StatusOK || strings.Count(body, "data: token") != 50 {
		t.Fatalf("%d %.200s, want 200 with the 50 events", res.StatusCode, body)
	}
	if settled := s.settledAmounts(); len(settled) != 1 || settled[0] != "3700" {
		t.Errorf("settled %v, want 3700 once", settled)
	}
	if v := res.Trailer.Get(gate.HeaderCost) + res.Header.Get(gate.HeaderCost); v != "" {
		t.Errorf("the client got the cost report %q", v)
	}
	if sr := paidResponse(t, res); sr["amount"] != "3700" {
		t.Errorf("PAYMENT-RESPONSE %v, want amount 3700", sr)
	}
}
