package gate_test

// The gate's own rules, tested against a fake facilitator (gatetest): the challenge,
// matching a payment to the route's accepts, retry credits and passes. What the chain
// does with a payment is tested end to end on anvil (gate_test.go, retry_test.go,
// pass_test.go).

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/x402gate/x402gate/gate"
	"github.com/x402gate/x402gate/gate/gatetest"
	"github.com/x402gate/x402gate/x402"
)

const (
	rulesPayTo   = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C"
	rulesPayTo2  = "0x1111111111111111111111111111111111111111"
	rulesPassKey = "rules-pass-key-0123456789abcdef-0123456789"
)

// rulesRoute is the route the rule tests gate: 0.01 USDC on Base Sepolia.
func rulesRoute() gate.Config {
	return gate.Config{
		Network: "base-sepolia", PayTo: rulesPayTo, Price: "0.01 USDC",
		Resource: gate.ResourceConfig{Description: "premium data", MimeType: "application/json"},
	}
}

// rulesServer is a gate on cfg in front of an upstream that answers the statuses of
// script in turn (200 once it runs out), with the fake facilitator f.
type rulesServer struct {
	*httptest.Server
	g     *gate.Gate
	f     *gatetest.Facilitator
	calls atomic.Int32
}

func newRulesServer(t *testing.T, cfg gate.Config, opts gate.Options, script ...int) *rulesServer {
	t.Helper()
	s := &rulesServer{f: gatetest.NewFacilitator(x402.BaseSepolia, x402.Base)}
	opts.Facilitator = s.f
	g, err := gate.New(cfg, opts)
	if err != nil {
		t.Fatalf("gate.New: %v", err)
	}
	s.g = g
	up := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := int(s.calls.Add(1))
		status := http.StatusOK
		if n <= len(script) {
			status = script[n-1]
		}
		w.WriteHeader(status)
		_, _ = io.WriteString(w, `{"data":"premium"}`)
	})
	s.Server = httptest.NewServer(g.Middleware(gate.MiddlewareOptions{})(up))
	t.Cleanup(s.Close)
	return s
}

// offers are the route's requirements for path, as the 402 lists them.
func (s *rulesServer) offers(t *testing.T, path string) []*x402.Requirements {
	t.Helper()
	o, err := s.g.Offers(context.Background(), gate.Input{Resource: s.URL + path})
	if err != nil {
		t.Fatalf("Offers: %v", err)
	}
	return o
}

// get sends GET path with the headers given as name, value pairs.
func (s *rulesServer) get(t *testing.T, path string, kv ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, s.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(kv); i += 2 {
		req.Header.Set(kv[i], kv[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	b, err := io.ReadAll(res.Body)
	_ = res.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	return res, string(b)
}

// payForToken pays path once with a fresh payer and expects the answer status with a
// retry token; it returns the payment header and the token.
func (s *rulesServer) payForToken(t *testing.T, path string, status int) (name, value, token string) {
	t.Helper()
	name, value = pay(t, newPayer(t), x402.Version2, s.offers(t, path)[0])
	res, body := s.get(t, path, name, value)
	token = res.Header.Get(gate.HeaderPaymentRetry)
	if res.StatusCode != status || token == "" {
		t.Fatalf("first answer: %d %s with retry token %q, want %d with a token", res.StatusCode, body, token, status)
	}
	return name, value, token
}

// expectCounts checks how often the payment was settled and the upstream called.
func (s *rulesServer) expectCounts(t *testing.T, settlements int, upstream int32) {
	t.Helper()
	if n := s.f.Count(gatetest.MethodSettle); n != settlements {
		t.Errorf("settled %d times, want %d", n, settlements)
	}
	if n := s.calls.Load(); n != upstream {
		t.Errorf("upstream calls %d, want %d", n, upstream)
	}
}

func newPayer(t *testing.T) *gatetest.Payer {
	t.Helper()
	p, err := gatetest.NewPayer()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func pay(t *testing.T, p *gatetest.Payer, version int, req *x402.Requirements) (string, string) {
	t.Helper()
	name, value, err := p.Pay(version, req, nil)
	if err != nil {
		t.Fatalf("pay: %v", err)
	}
	return name, value
}

// TestRulesChallenge: an unpaid request is answered 402 with the route's requirement in
// the v2 PAYMENT-REQUIRED header and the v1 body, and never reaches the facilitator or the
// upstream.
func TestRulesChallenge(t *testing.T) {
	s := newRulesServer(t, rulesRoute(), gate.Options{})
	res, body := s.get(t, "/premium")
	if res.StatusCode != http.StatusPaymentRequired {
		t.Fatalf("status %d, want 402: %s", res.StatusCode, body)
	}
	pr, err := x402.DecodePaymentRequired(res.Header.Get(x402.HeaderPaymentRequired))
	if err != nil {
		t.Fatalf("PAYMENT-REQUIRED: %v", err)
	}
	want := x402.RequirementsV2{Scheme: "exact", Network: "eip155:84532", Amount: "10000", PayTo: rulesPayTo,
		Asset: x402.BaseSepolia.USDC.Address.Hex(), MaxTimeoutSeconds: 60}
	if len(pr.Accepts) != 1 {
		t.Fatalf("accepts %+v, want one entry like %+v", pr.Accepts, want)
	}
	got := pr.Accepts[0]
	if got.Scheme != want.Scheme || got.Network != want.Network || got.Amount != want.Amount || got.PayTo != want.PayTo ||
		!strings.EqualFold(got.Asset, want.Asset) || got.MaxTimeoutSeconds != want.MaxTimeoutSeconds {
		t.Errorf("accepts entry %+v, want %+v", got, want)
	}
	if pr.Resource == nil || pr.Resource.URL != s.URL+"/premium" {
		t.Errorf("resource %+v, want %s/premium", pr.Resource, s.URL)
	}
	if !strings.Contains(body, `"accepts"`) || !strings.Contains(body, `"base-sepolia"`) {
		t.Errorf("v1 body %s lacks the accepts on base-sepolia", body)
	}
	if n := len(s.f.Calls()); n != 0 || s.calls.Load() != 0 {
		t.Errorf("facilitator calls %d, upstream calls %d; want none", n, s.calls.Load())
	}
}

// TestRulesAcceptMatching: a payment is matched exactly against the accept it names, on
// another network or on the same one at another price and payee, and verified and settled
// as that accept's requirement; a payment that matches none is refused 402 before the
// facilitator is asked.
func TestRulesAcceptMatching(t *testing.T) {
	cfg := rulesRoute()
	cfg.Accepts = []gate.AcceptConfig{{}, {Network: "base", Price: "0.02", PayTo: rulesPayTo2}, {Price: "0.05", PayTo: rulesPayTo2}}
	for _, version := range []int{x402.Version1, x402.Version2} {
		for _, want := range []struct {
			i               int
			network, amount string
		}{{1, "eip155:8453", "20000"}, {2, "eip155:84532", "50000"}} {
			i := want.i
			t.Run(fmt.Sprintf("v%d accept %d", version, i+1), func(t *testing.T) {
				s := newRulesServer(t, cfg, gate.Options{})
				offers := s.offers(t, "/premium")
				if len(offers) != 3 {
					t.Fatalf("%d offers, want 3", len(offers))
				}
				payer := newPayer(t)
				name, value := pay(t, payer, version, offers[i])
				if res, body := s.get(t, "/premium", name, value); res.StatusCode != http.StatusOK {
					t.Fatalf("paying accept %d: %d %s", i+1, res.StatusCode, body)
				}
				calls := s.f.Calls()
				if len(calls) != 2 || calls[1].Method != gatetest.MethodSettle {
					t.Fatalf("facilitator calls %+v, want Verify and Settle", calls)
				}
				if got := calls[1].Requirements; got.Network != want.network || got.Amount.String() != want.amount || got.PayTo.Hex() != rulesPayTo2 {
					t.Errorf("settled against %s %s to %s, want accept %d", got.Network, got.Amount, got.PayTo.Hex(), i+1)
				}

				wrong := *offers[0]
				wrong.Amount = big.NewInt(1)
				name, value = pay(t, payer, version, &wrong)
				res, body := s.get(t, "/premium", name, value)
				if want := x402.ReasonValueMismatch.For(version); res.StatusCode != http.StatusPaymentRequired || !strings.Contains(body, `"error":"`+want+`"`) {
					t.Errorf("a payment of 1 base unit: %d %s, want 402 %s", res.StatusCode, body, want)
				}
				if n := len(s.f.Calls()); n != 2 {
					t.Errorf("the refused payment reached the facilitator (%d calls)", n)
				}
				s.expectCounts(t, 1, 1)
			})
		}
	}
}

// TestRulesRetryCredit: a paid request whose upstream fails is answered with a retry
// token; the same header with that token is served again without a second settlement,
// and once it was answered well the header is refused as a replay.
func TestRulesRetryCredit(t *testing.T) {
	s := newRulesServer(t, rulesRoute(), gate.Options{}, http.StatusInternalServerError)
	name, value, token := s.payForToken(t, "/premium", http.StatusInternalServerError)
	if res, body := s.get(t, "/premium", name, value, gate.HeaderPaymentRetry, token); res.StatusCode != http.StatusOK {
		t.Fatalf("retry with the token: %d %s", res.StatusCode, body)
	}
	if res, body := s.get(t, "/premium", name, value, gate.HeaderPaymentRetry, token); res.StatusCode != http.StatusPaymentRequired {
		t.Errorf("replay after a good answer: %d %s, want 402", res.StatusCode, body)
	}
	s.expectCounts(t, 1, 2)
}

// TestRulesPendingSettlement: a settlement whose outcome is unknown is answered 502 with
// a retry token; the same header with it is served once the facilitator reports the
// settlement confirmed, without a second settlement.
func TestRulesPendingSettlement(t *testing.T) {
	s := newRulesServer(t, rulesRoute(), gate.Options{})
	s.f.OnSettle(func(_ context.Context, p *x402.Payment, r *x402.Requirements) (x402.SettleResponse, error) {
		return x402.SettleResponse{ErrorReason: x402.ReasonSettlementPending.For(p.Version), Transaction: s.f.Settled(p, r).Transaction, Network: r.Network}, nil
	})
	name, value, token := s.payForToken(t, "/premium", http.StatusBadGateway)
	if res, body := s.get(t, "/premium", name, value, gate.HeaderPaymentRetry, token); res.StatusCode != http.StatusBadGateway {
		t.Fatalf("still pending: %d %s, want 502", res.StatusCode, body)
	}
	s.f.OnSettlementStatus(func(_ context.Context, p *x402.Payment, r *x402.Requirements) (x402.SettleResponse, error) {
		return s.f.Settled(p, r), nil
	})
	if res, body := s.get(t, "/premium", name, value, gate.HeaderPaymentRetry, token); res.StatusCode != http.StatusOK {
		t.Fatalf("confirmed: %d %s, want 200", res.StatusCode, body)
	}
	s.expectCounts(t, 1, 1)
}

// TestRulesFacilitatorDownFailsClosed: when the facilitator cannot verify, the request is
// answered 502 facilitator_unavailable and never proxied.
func TestRulesFacilitatorDownFailsClosed(t *testing.T) {
	s := newRulesServer(t, rulesRoute(), gate.Options{})
	s.f.OnVerify(func(context.Context, x402.VerifyInput) (x402.VerifyResponse, error) {
		return x402.VerifyResponse{}, errors.New("connection refused")
	})
	name, value := pay(t, newPayer(t), x402.Version1, s.offers(t, "/premium")[0])
	res, body := s.get(t, "/premium", name, value)
	if res.StatusCode != http.StatusBadGateway || !strings.Contains(body, string(gate.ReasonFacilitatorUnavailable)) {
		t.Errorf("%d %s, want 502 %s", res.StatusCode, body, gate.ReasonFacilitatorUnavailable)
	}
	s.expectCounts(t, 0, 0)
}

// TestRulesPass: one payment buys a pass; the pass lets its holder in without paying
// until it expires, and is then refused with a new challenge.
func TestRulesPass(t *testing.T) {
	var offset atomic.Int64
	now := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	cfg := rulesRoute()
	cfg.Pass = gate.PassConfig{Duration: time.Hour, Scope: "/premium/", Keys: []string{rulesPassKey}}
	s := newRulesServer(t, cfg, gate.Options{Now: now})
	name, value := pay(t, newPayer(t), x402.Version2, s.offers(t, "/premium/a")[0])
	res, body := s.get(t, "/premium/a", name, value)
	pass := res.Header.Get(gate.HeaderPass)
	if res.StatusCode != http.StatusOK || pass == "" {
		t.Fatalf("paid request: %d %s with pass %q, want 200 with a pass", res.StatusCode, body, pass)
	}
	if res, body := s.get(t, "/premium/b", gate.HeaderPass, pass); res.StatusCode != http.StatusOK {
		t.Fatalf("with the pass: %d %s", res.StatusCode, body)
	}
	if res, _ := s.get(t, "/other", gate.HeaderPass, pass); res.StatusCode != http.StatusPaymentRequired {
		t.Errorf("outside the pass's scope: %d, want 402", res.StatusCode)
	}
	offset.Store(int64(time.Hour + time.Minute))
	res, _ = s.get(t, "/premium/b", gate.HeaderPass, pass)
	if res.StatusCode != http.StatusPaymentRequired || res.Header.Get(gate.HeaderPassRefused) != string(gate.PassExpired) {
		t.Errorf("expired pass: %d, %s %q; want 402 %s", res.StatusCode, gate.HeaderPassRefused, res.Header.Get(gate.HeaderPassRefused), gate.PassExpired)
	}
	s.expectCounts(t, 1, 2)
}
