package verdictclient

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/x402gate/x402gate/x402"
)

const routePricing = "POST /price"

func merchantRequirements() x402.RequirementsV2 {
	_, r := testPayment(x402.BaseSepolia.CAIP2)
	return r.V2()
}

// docs/facilitator.md#verification-fee: post {resource}, read requirements or null;
// non-2xx throws; the shared JSON transport rejects redirects and oversized answers.
func TestFetchVerificationRequirements(t *testing.T) {
	fee := `{"scheme":"exact","network":"eip155:84532","amount":"1000","asset":"0x036CbD53842c5426634e7929541eC2318f3dCF7e","payTo":"0x1111111111111111111111111111111111111111","maxTimeoutSeconds":60}`
	cases := []struct {
		name    string
		reply   reply
		wantFee bool
		want    error // nil: success
	}{
		{"fee requirements", reply{body: `{"requirements":` + fee + `}`}, true, nil},
		{"null: no fee applies", reply{body: `{"requirements":null}`}, false, nil},
		{"requirements missing", reply{body: `{"fee":` + fee + `}`}, false, ErrInvalidResponse},
		{"requirements in another case", reply{body: `{"Requirements":` + fee + `}`}, false, ErrInvalidResponse},
		{"requirements a string", reply{body: `{"requirements":"1000"}`}, false, ErrInvalidResponse},
		{"requirements of the wrong shape", reply{body: `{"requirements":{"amount":1000}}`}, false, ErrInvalidResponse},
		{"malformed json", reply{body: `{"requirements":`}, false, ErrInvalidResponse},
		{"top-level array", reply{body: `[]`}, false, ErrInvalidResponse},
		{"400 throws", statusReply(400), false, ErrBadRequest},
		{"404 throws", statusReply(404), false, ErrNotFound},
		{"500 throws", statusReply(500), false, ErrServerError},
		{"503 throws, no retry", statusReply(503), false, ErrServerError},
		{"redirect refused", reply{status: 307, header: map[string]string{"Location": "/elsewhere"}}, false, ErrRedirect},
		{"oversized answer", reply{oversize: MaxResponseBytes + 1}, false, ErrResponseTooLarge},
		{"not json", reply{body: `{"requirements":null}`, contentType: "text/html"}, false, ErrContentType},
		{"connection dropped", reply{hangUp: true}, false, ErrNetwork},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newScript(t).on(routePricing, tc.reply)
			got, err := FetchVerificationRequirements(t.Context(), s.srv.URL+"/price", merchantRequirements(), 0)
			if n := s.count(routePricing); n != 1 {
				t.Fatalf("pricing service saw %d requests, want 1", n)
			}
			if tc.want != nil {
				if !errors.Is(err, tc.want) || got != nil {
					t.Fatalf("= %+v, %v; want %v", got, err, tc.want)
				}
				return
			}
			if err != nil || (got != nil) != tc.wantFee {
				t.Fatalf("= %+v, %v", got, err)
			}
			if tc.wantFee && (got.Amount != "1000" || got.PayTo != "0x1111111111111111111111111111111111111111") {
				t.Fatalf("requirements = %+v", got)
			}
			r := s.requests()[0]
			if r.header.Get("Content-Type") != "application/json" || r.header.Get("x-api-key") != "" {
				t.Fatalf("headers %v", r.header)
			}
			var body struct {
				Resource x402.RequirementsV2 `json:"resource"`
			}
			if err := json.Unmarshal(r.body, &body); err != nil || body.Resource.Amount != "10000" || body.Resource.Network != "eip155:84532" {
				t.Fatalf("body = %s (%v)", r.body, err)
			}
		})
	}
	t.Run("raw requirements", func(t *testing.T) {
		s := newScript(t).on(routePricing, reply{body: `{"requirements":` + fee + `}`})
		got, err := FetchVerificationRequirements(t.Context(), s.srv.URL+"/price", json.RawMessage(`{"scheme":"exact"}`), 0)
		if err != nil || got == nil || len(*got) == 0 {
			t.Fatalf("= %s, %v", *got, err)
		}
	})
	t.Run("redirect target never contacted", func(t *testing.T) {
		target := newScript(t).on(routePricing, reply{body: `{"requirements":` + fee + `}`})
		s := newScript(t).on(routePricing, reply{status: 308, header: map[string]string{"Location": target.srv.URL + "/price"}})
		if _, err := FetchVerificationRequirements(t.Context(), s.srv.URL+"/price", merchantRequirements(), 0); !errors.Is(err, ErrRedirect) {
			t.Fatalf("err = %v", err)
		}
		if target.count(routePricing) != 0 {
			t.Fatal("redirect followed")
		}
	})
	t.Run("timeout bounds a slow answer", func(t *testing.T) {
		s := newScript(t).on(routePricing, reply{block: true})
		_, err := FetchVerificationRequirements(t.Context(), s.srv.URL+"/price", merchantRequirements(), 30*time.Millisecond)
		if !errors.Is(err, ErrNetwork) {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("the caller's context bounds a slow answer", func(t *testing.T) {
		s := newScript(t).on(routePricing, reply{block: true})
		ctx, cancel := context.WithCancel(t.Context())
		go func() {
			for s.count(routePricing) == 0 {
				time.Sleep(time.Millisecond)
			}
			cancel()
		}()
		_, err := FetchVerificationRequirements(ctx, s.srv.URL+"/price", merchantRequirements(), 0)
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("bad input is refused without a request", func(t *testing.T) {
		for _, u := range []string{"", "ftp://p.example/price", "https://user:pw@p.example/price", "https://p.example/price?key=1", "/price"} {
			if _, err := FetchVerificationRequirements(t.Context(), u, merchantRequirements(), 0); !errors.Is(err, ErrInvalidInput) {
				t.Fatalf("url %q: err = %v", u, err)
			}
		}
		if _, err := FetchVerificationRequirements(t.Context(), "https://p.example/price", merchantRequirements(), -1); !errors.Is(err, ErrInvalidInput) {
			t.Fatal("negative timeout accepted")
		}
		if _, err := FetchVerificationRequirements(t.Context(), "https://p.example/price", func() {}, 0); !errors.Is(err, ErrInvalidInput) {
			t.Fatal("unencodable resource accepted")
		}
	})
}

// TestPricing: the gate's fee lookup asks in the v2 wire form and hands back normalised
// requirements decoded strictly against the caller's networks; null is no fee; an answer
// on a network the caller does not know is an error, never a fee to settle.
func TestPricing(t *testing.T) {
	fee := `{"scheme":"exact","network":"eip155:84532","amount":"1000","asset":"0x036CbD53842c5426634e7929541eC2318f3dCF7e","payTo":"0x1111111111111111111111111111111111111111","maxTimeoutSeconds":60}`
	_, merchant := testPayment(x402.BaseSepolia.CAIP2)
	for _, tc := range []struct {
		name, body string
		wantFee    bool
		wantErr    bool
	}{
		{"a fee", `{"requirements":` + fee + `}`, true, false},
		{"no fee", `{"requirements":null}`, false, false},
		{"a fee on an unknown network", `{"requirements":` + strings.Replace(fee, "eip155:84532", "eip155:999999", 1) + `}`, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newScript(t).on(routePricing, reply{body: tc.body})
			got, err := Pricing(s.srv.URL+"/price", x402.NewRegistry())(t.Context(), merchant)
			if (err != nil) != tc.wantErr || (got != nil) != tc.wantFee {
				t.Fatalf("= %+v, %v", got, err)
			}
			if tc.wantFee && (got.Amount.Int64() != 1000 || got.PayTo.Hex() != "0x1111111111111111111111111111111111111111" || got.Network != "eip155:84532") {
				t.Fatalf("requirements = %+v", got)
			}
		})
	}
}
