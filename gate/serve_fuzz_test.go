package gate

import (
	"context"
	"encoding/base64"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/x402gate/x402gate/x402"
)

// refusingFacilitator is the oracle of FuzzServeHeaders: it refuses every payment it is asked
// to verify and counts settles, which must never happen for a refused payment.
type refusingFacilitator struct {
	verifies, settles atomic.Int64
}

func (f *refusingFacilitator) Verify(_ context.Context, in x402.VerifyInput) (x402.VerifyResponse, error) {
	f.verifies.Add(1)
	return x402.VerifyResponse{IsValid: false, InvalidReason: string(x402.ReasonInvalidSignature)}, nil
}

func (f *refusingFacilitator) Settle(context.Context, *x402.Payment, *x402.Requirements) (x402.SettleResponse, error) {
	f.settles.Add(1)
	return x402.SettleResponse{Success: false, ErrorReason: string(x402.ReasonInvalidSignature)}, nil
}

func (f *refusingFacilitator) Supported(context.Context) (x402.SupportedResponse, error) {
	return x402.SupportedResponse{}, nil
}

func (f *refusingFacilitator) SettlementStatus(context.Context, *x402.Payment, *x402.Requirements) (x402.SettleResponse, error) {
	return x402.SettleResponse{}, errors.ErrUnsupported
}

// FuzzServeHeaders sends a request whose payment, retry, pass, cookie and sign-in-with-x
// headers are all fuzzed through a gate with passes, retries and payment ids on, in front
// of a facilitator that refuses every payment. Whatever the header bytes, the upstream is
// never called, nothing is settled, and the answer is a refusal with a machine-readable
// reason: 402, 400 or 409 (docs/gate.md#results).
func FuzzServeHeaders(f *testing.F) {
	v1 := base64.StdEncoding.EncodeToString([]byte(`{"x402Version":1,"scheme":"exact","network":"base-sepolia","payload":{"signature":"0x` + strings.Repeat("11", 65) + `","authorization":{"from":"0x70997970C51812dc3A010C7d01b50e0d17dc79C8","to":"0x209693Bc6afc0C5328bA36FaF03C514EF312287C","value":"10000","validAfter":"0","validBefore":"9999999999","nonce":"0x` + strings.Repeat("22", 32) + `"}}}`))
	v2 := base64.StdEncoding.EncodeToString([]byte(`{"x402Version":2,"accepted":{"scheme":"exact","network":"eip155:84532","amount":"10000","asset":"0x036CbD53842c5426634e7929541eC2318f3dCF7e","payTo":"0x209693Bc6afc0C5328bA36FaF03C514EF312287C","maxTimeoutSeconds":60,"extra":{"name":"USDC","version":"2"}},"payload":{"signature":"0x` + strings.Repeat("11", 65) + `","authorization":{"from":"0x70997970C51812dc3A010C7d01b50e0d17dc79C8","to":"0x209693Bc6afc0C5328bA36FaF03C514EF312287C","value":"10000","validAfter":"0","validBefore":"9999999999","nonce":"0x` + strings.Repeat("22", 32) + `"}},"extensions":{"payment-identifier":{"info":{"id":"pay_0123456789abcdef"}}}}`))
	f.Add("", "", "", "", "", "")
	f.Add(v1, "", "", "", "", "")
	f.Add("", v2, "", "", "", "")
	f.Add(v1, v2, strings.Repeat("ab", 32), "", "", "")
	f.Add("", "", "", "p1.abc.e30.AAAA", "x402_pass=p1.abc.e30.AAAA; x402_pass=x", "e30=")
	f.Add("not base64 !", "e30=", "zz", "p1...", "=;;=", "eyJkb21haW4iOiJ4In0=")

	cfg := Config{
		Network:   "base-sepolia",
		PayTo:     "0x209693Bc6afc0C5328bA36FaF03C514EF312287C",
		Price:     testPrice,
		Resource:  ResourceConfig{Description: "premium data", MimeType: "application/json"},
		Retry:     RetryConfig{Max: 2},
		PaymentID: PaymentIDOptional,
		Pass:      PassConfig{Duration: time.Hour, Scope: "/premium/", Keys: []string{testPassKey}},
	}
	fac := &refusingFacilitator{}
	g, err := New(cfg, Options{Facilitator: fac, Registry: x402.NewRegistry()})
	if err != nil {
		f.Fatal(err)
	}
	// The oracle is reached: a well-formed v1 and v2 header are decoded and verified.
	for _, h := range []string{x402.HeaderPayment, x402.HeaderPaymentSignature} {
		r := httptest.NewRequest(http.MethodGet, "https://shop.example/premium/a.html", nil)
		r.Header.Set(h, map[string]string{x402.HeaderPayment: v1, x402.HeaderPaymentSignature: v2}[h])
		before := fac.verifies.Load()
		_ = g.Serve(httptest.NewRecorder(), r, Input{}, func(http.ResponseWriter, *http.Request) error { return nil })
		if fac.verifies.Load() == before {
			f.Fatalf("the %s seed never reached Verify", h)
		}
	}
	f.Fuzz(func(t *testing.T, xPayment, paymentSignature, retry, pass, cookie, siwx string) {
		r := httptest.NewRequest(http.MethodGet, "https://shop.example/premium/a.html", nil)
		for name, v := range map[string]string{
			x402.HeaderPayment: xPayment, x402.HeaderPaymentSignature: paymentSignature,
			HeaderPaymentRetry: retry, HeaderPass: pass, "Cookie": cookie, HeaderSignInWithX: siwx,
		} {
			if v != "" {
				r.Header.Set(name, v)
			}
		}
		w := httptest.NewRecorder()
		called := false
		err := g.Serve(w, r, Input{}, func(http.ResponseWriter, *http.Request) error {
			called = true
			return nil
		})
		if called {
			t.Fatalf("the upstream ran for an unpaid request (status %d)", w.Code)
		}
		if n := fac.settles.Load(); n != 0 {
			t.Fatalf("%d settles for payments the facilitator refused", n)
		}
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
		switch w.Code {
		case http.StatusPaymentRequired, http.StatusBadRequest, http.StatusConflict:
		default:
			t.Fatalf("status %d, want a refusal: %s", w.Code, w.Body.Bytes())
		}
		if w.Code != http.StatusPaymentRequired && !strings.Contains(w.Body.String(), `"error"`) {
			t.Fatalf("status %d without a machine-readable error: %s", w.Code, w.Body.Bytes())
		}
	})
}
