package gate_test

// The authorization flow and CORS preflights (docs/gate.md#payment-flows,
// docs/gate.md#cors-preflights), on the fake facilitator: when the gate settles, what the
// client gets, and what the payment's record lets through afterwards. The same flow
// through the built caddy binary, on anvil, is integration's TestAuthorizationFlow.

import (
	"context"
	"errors"
	"io"
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

// flowServer is a gate in front of an upstream the test sets (upstream), with the fake
// facilitator f. served gets a value each time the gate has finished a request.
type flowServer struct {
	*httptest.Server
	g        *gate.Gate
	f        *gatetest.Facilitator
	upstream atomic.Pointer[http.HandlerFunc]
	calls    atomic.Int32
	served   chan struct{}
}

const premium = `{"data":"the paid answer"}`

// newFlowServer serves cfg with an upstream that answers 200 premium until the test
// sets another.
func newFlowServer(t *testing.T, cfg gate.Config, opts ...gate.Options) *flowServer {
	t.Helper()
	s := &flowServer{f: gatetest.NewFacilitator(x402.BaseSepolia), served: make(chan struct{}, 64)}
	o := gate.Options{}
	if len(opts) > 0 {
		o = opts[0]
	}
	o.Facilitator = s.f
	g, err := gate.New(cfg, o)
	if err != nil {
		t.Fatalf("gate.New: %v", err)
	}
	s.g = g
	s.answer(http.StatusOK, premium)
	up := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.calls.Add(1)
		(*s.upstream.Load())(w, r)
	})
	h := g.Middleware(gate.MiddlewareOptions{})(up)
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() { s.served <- struct{}{} }()
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(s.Close)
	return s
}

// setUpstream makes fn the upstream of later requests.
func (s *flowServer) setUpstream(fn http.HandlerFunc) { s.upstream.Store(&fn) }

// answer makes the upstream answer status with body.
func (s *flowServer) answer(status int, body string) {
	s.setUpstream(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	})
}

// do sends method to the route with the headers given as name, value pairs, under ctx.
func (s *flowServer) do(ctx context.Context, method string, kv ...string) (*http.Response, string, error) {
	req, err := http.NewRequestWithContext(ctx, method, s.URL+"/premium", nil)
	if err != nil {
		return nil, "", err
	}
	for i := 0; i+1 < len(kv); i += 2 {
		req.Header.Set(kv[i], kv[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, "", err
	}
	b, err := io.ReadAll(res.Body)
	_ = res.Body.Close()
	return res, string(b), err
}

// get sends GET with a payment header and waits until the gate has finished with it.
func (s *flowServer) get(t *testing.T, name, value string) (*http.Response, string) {
	t.Helper()
	res, body, err := s.do(context.Background(), http.MethodGet, name, value)
	if err != nil {
		t.Fatalf("GET: %v", err)
	}
	<-s.served
	return res, body
}

// payment is a fresh payer's v2 payment header for the route.
func (s *flowServer) payment(t *testing.T) (name, value string) {
	t.Helper()
	o, err := s.g.Offers(context.Background(), gate.Input{Resource: s.URL + "/premium"})
	if err != nil {
		t.Fatalf("Offers: %v", err)
	}
	return pay(t, newPayer(t), x402.Version2, o[0])
}

// expect checks how often the payment was settled and the upstream called.
func (s *flowServer) expect(t *testing.T, settlements int, upstream int32) {
	t.Helper()
	if n := s.f.Count(gatetest.MethodSettle); n != settlements {
		t.Errorf("settled %d times, want %d", n, settlements)
	}
	if n := s.calls.Load(); n != upstream {
		t.Errorf("upstream calls %d, want %d", n, upstream)
	}
}

// paysOnceItAnswers makes the upstream answer well, and checks that the same payment
// then pays: nothing was spent before.
func (s *flowServer) paysOnceItAnswers(t *testing.T, name, value string) {
	t.Helper()
	s.answer(http.StatusOK, premium)
	if res, body := s.get(t, name, value); res.StatusCode != http.StatusOK || body != premium {
		t.Errorf("the same payment once the upstream answers well: %d %.200s, want 200 %s", res.StatusCode, body, premium)
	}
}

// settleResponse decodes the PAYMENT-RESPONSE of res; nil when it has none.
func settleResponse(t *testing.T, res *http.Response) *x402.SettleResponse {
	t.Helper()
	v := res.Header.Get(x402.HeaderPaymentResponseV2)
	if v == "" {
		return nil
	}
	sr, err := x402.DecodeSettleResponse(v)
	if err != nil {
		t.Fatalf("PAYMENT-RESPONSE: %v", err)
	}
	return sr
}

func authorizationRoute() gate.Config {
	cfg := rulesRoute()
	cfg.Flow = gate.FlowAuthorization
	return cfg
}

// TestAuthorizationFlow: on a route of the authorization flow the upstream runs before
// the payment is settled, and the payment is settled only for an answer below 400; a
// failed upstream leaves the same payment good for a later request; a failed settlement
// never releases the answer; one payment buys one good answer.
func TestAuthorizationFlow(t *testing.T) {
	t.Run("a good answer is settled after the upstream ran, then sent", func(t *testing.T) {
		s := newFlowServer(t, authorizationRoute())
		var ranFirst atomic.Bool
		s.f.OnSettle(func(_ context.Context, p *x402.Payment, r *x402.Requirements) (x402.SettleResponse, error) {
			ranFirst.Store(s.calls.Load() == 1)
			return s.f.Settled(p, r), nil
		})
		name, value := s.payment(t)
		res, body := s.get(t, name, value)
		if sr := settleResponse(t, res); res.StatusCode != http.StatusOK || body != premium || sr == nil || !sr.Success {
			t.Fatalf("%d %s with settle response %+v, want 200 premium with success", res.StatusCode, body, sr)
		}
		if !ranFirst.Load() {
			t.Error("the payment was settled before the upstream answered")
		}
		if res, body := s.get(t, name, value); res.StatusCode != http.StatusPaymentRequired {
			t.Errorf("the same payment again: %d %s, want 402", res.StatusCode, body)
		}
		s.expect(t, 1, 1)
	})
	for _, status := range []int{http.StatusServiceUnavailable, http.StatusNotFound} {
		t.Run("an upstream "+http.StatusText(status)+" settles nothing, and the same payment pays once it recovers", func(t *testing.T) {
			s := newFlowServer(t, authorizationRoute())
			s.answer(status, `{"error":"down"}`)
			name, value := s.payment(t)
			res, body := s.get(t, name, value)
			if res.StatusCode != status || body != `{"error":"down"}` || settleResponse(t, res) != nil || res.Header.Get(gate.HeaderPaymentRetry) != "" {
				t.Fatalf("%d %s (retry token %q), want the upstream's %d as it is, with no settle response or retry token",
					res.StatusCode, body, res.Header.Get(gate.HeaderPaymentRetry), status)
			}
			s.expect(t, 0, 1)
			s.paysOnceItAnswers(t, name, value)
			s.expect(t, 1, 2)
		})
	}
	t.Run("a failed settlement answers 402 with success false and never the answer", func(t *testing.T) {
		s := newFlowServer(t, authorizationRoute())
		s.f.OnSettle(func(_ context.Context, p *x402.Payment, _ *x402.Requirements) (x402.SettleResponse, error) {
			return x402.SettleResponse{ErrorReason: x402.ReasonInsufficientFunds.For(p.Version), Payer: p.Authorization.From.Hex(), Network: p.Network}, nil
		})
		name, value := s.payment(t)
		res, body := s.get(t, name, value)
		sr := settleResponse(t, res)
		if res.StatusCode != http.StatusPaymentRequired || sr == nil || sr.Success || strings.Contains(body, "the paid answer") {
			t.Fatalf("%d %s with settle response %+v, want 402, success false, no answer", res.StatusCode, body, sr)
		}
		s.expect(t, 1, 1)
	})
	t.Run("a settlement whose outcome is unknown answers 502 without the answer, and its token redeems it once confirmed", func(t *testing.T) {
		s := newFlowServer(t, authorizationRoute())
		s.f.OnSettle(func(_ context.Context, p *x402.Payment, r *x402.Requirements) (x402.SettleResponse, error) {
			return x402.SettleResponse{ErrorReason: x402.ReasonSettlementPending.For(p.Version), Transaction: s.f.Settled(p, r).Transaction, Network: r.Network}, nil
		})
		name, value := s.payment(t)
		res, body := s.get(t, name, value)
		token := res.Header.Get(gate.HeaderPaymentRetry)
		if res.StatusCode != http.StatusBadGateway || strings.Contains(body, "the paid answer") || token == "" {
			t.Fatalf("%d %s (retry token %q), want 502 with a token and without the answer", res.StatusCode, body, token)
		}
		s.f.OnSettlementStatus(func(_ context.Context, p *x402.Payment, r *x402.Requirements) (x402.SettleResponse, error) {
			return s.f.Settled(p, r), nil
		})
		r, b, err := s.do(context.Background(), http.MethodGet, name, value, gate.HeaderPaymentRetry, token)
		if err != nil {
			t.Fatal(err)
		}
		<-s.served
		if r.StatusCode != http.StatusOK || b != premium {
			t.Errorf("redeemed once confirmed: %d %s, want 200 %s", r.StatusCode, b, premium)
		}
		s.expect(t, 1, 2)
	})
	long := strings.Repeat("x", gate.MaxAuthorizedAnswer+1)
	for _, up := range []struct {
		name string
		fn   http.HandlerFunc
	}{
		{"an upstream that ignores the refused write", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, long) }},
		{"an upstream that aborts on it, as Caddy's reverse_proxy does", func(w http.ResponseWriter, _ *http.Request) {
			if _, err := io.WriteString(w, long); err != nil {
				panic(http.ErrAbortHandler)
			}
		}},
	} {
		t.Run("an answer longer than the buffer is neither sent nor settled: "+up.name, func(t *testing.T) {
			s := newFlowServer(t, authorizationRoute())
			s.setUpstream(up.fn)
			name, value := s.payment(t)
			res, body := s.get(t, name, value)
			if res.StatusCode != http.StatusBadGateway || !strings.Contains(body, string(gate.ReasonResponseTooLarge)) {
				t.Fatalf("%d %.200s, want 502 %s", res.StatusCode, body, gate.ReasonResponseTooLarge)
			}
			s.expect(t, 0, 1)
			s.paysOnceItAnswers(t, name, value)
		})
	}
	t.Run("a second request with the same payment while the first runs gets no answer", func(t *testing.T) {
		s := newFlowServer(t, authorizationRoute())
		entered, release := make(chan struct{}), make(chan struct{})
		var n atomic.Int32
		s.setUpstream(func(w http.ResponseWriter, _ *http.Request) {
			if n.Add(1) == 1 { // the first request waits inside the upstream
				close(entered)
				<-release
			}
			_, _ = io.WriteString(w, premium)
		})
		name, value := s.payment(t)
		first := make(chan string, 1)
		go func() {
			res, body, err := s.do(context.Background(), http.MethodGet, name, value)
			if err != nil {
				first <- err.Error()
				return
			}
			first <- http.StatusText(res.StatusCode) + " " + body
		}()
		<-entered
		res, body, err := s.do(context.Background(), http.MethodGet, name, value)
		close(release)
		if err != nil {
			t.Errorf("the second request: %v", err)
		} else if res.StatusCode != http.StatusPaymentRequired || strings.Contains(body, "the paid answer") {
			t.Errorf("the second request: %d %s, want 402", res.StatusCode, body)
		}
		if got := <-first; got != "OK "+premium {
			t.Errorf("the first request: %s, want OK %s", got, premium)
		}
		<-s.served
		<-s.served
		s.expect(t, 1, 1)
	})
	t.Run("a client that leaves before the upstream answered is not charged", func(t *testing.T) {
		s := newFlowServer(t, authorizationRoute())
		ctx, cancel := context.WithCancel(context.Background())
		s.setUpstream(func(w http.ResponseWriter, r *http.Request) {
			cancel()
			<-r.Context().Done() // the gate sees the client leave before the answer
			_, _ = io.WriteString(w, premium)
		})
		name, value := s.payment(t)
		if _, _, err := s.do(ctx, http.MethodGet, name, value); err == nil {
			t.Fatal("the request was not cancelled")
		}
		<-s.served
		s.expect(t, 0, 1)
		s.paysOnceItAnswers(t, name, value)
	})
	t.Run("a client that leaves after the upstream answered is charged", func(t *testing.T) {
		s := newFlowServer(t, authorizationRoute())
		ctx, cancel := context.WithCancel(context.Background())
		var request atomic.Pointer[context.Context]
		s.setUpstream(func(w http.ResponseWriter, r *http.Request) {
			rctx := r.Context()
			request.Store(&rctx)
			_, _ = io.WriteString(w, premium)
		})
		var settleCtx atomic.Value
		s.f.OnSettle(func(sctx context.Context, p *x402.Payment, r *x402.Requirements) (x402.SettleResponse, error) {
			cancel()
			<-(*request.Load()).Done() // the server saw the client leave
			settleCtx.Store(sctx.Err() == nil)
			return s.f.Settled(p, r), nil
		})
		name, value := s.payment(t)
		if _, _, err := s.do(ctx, http.MethodGet, name, value); err == nil {
			t.Fatal("the request was not cancelled")
		}
		<-s.served
		s.expect(t, 1, 1)
		if ok, _ := settleCtx.Load().(bool); !ok {
			t.Error("the settlement was cancelled with the client's request")
		}
		if res, body := s.get(t, name, value); res.StatusCode != http.StatusPaymentRequired {
			t.Errorf("the same payment after it was charged: %d %s, want 402", res.StatusCode, body)
		}
	})
	t.Run("Handle refuses the route: only Serve sees the answer", func(t *testing.T) {
		s := newFlowServer(t, authorizationRoute())
		res := s.g.Handle(context.Background(), gate.Input{Resource: s.URL + "/premium", Header: http.Header{}})
		if res.Status != http.StatusInternalServerError || res.Reason != x402.ReasonInvalidRequirements {
			t.Errorf("Handle: %d %s, want 500 %s", res.Status, res.Reason, x402.ReasonInvalidRequirements)
		}
	})
}

// TestPreflight: a CORS preflight (OPTIONS with Origin and Access-Control-Request-Method)
// reaches the upstream uncharged; an OPTIONS that is not a preflight, and a preflight on
// a route that charges them, get the challenge.
func TestPreflight(t *testing.T) {
	origin := []string{"Origin", "https://app.example", "Access-Control-Request-Method", "GET", "Access-Control-Request-Headers", "payment-signature"}
	for _, tc := range []struct {
		name      string
		preflight string
		kv        []string
		status    int
		upstream  int32
	}{
		{"a preflight reaches the upstream uncharged", "", origin, http.StatusNoContent, 1},
		{"a preflight reaches the upstream uncharged with preflight pass", gate.PreflightPass, origin, http.StatusNoContent, 1},
		{"an OPTIONS without Access-Control-Request-Method is charged", "", origin[:2], http.StatusPaymentRequired, 0},
		{"an OPTIONS without Origin is charged", "", origin[2:4], http.StatusPaymentRequired, 0},
		{"a preflight is charged with preflight charge", gate.PreflightCharge, origin, http.StatusPaymentRequired, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := rulesRoute()
			cfg.Preflight = tc.preflight
			s := newFlowServer(t, cfg)
			s.answer(http.StatusNoContent, "")
			res, body, err := s.do(context.Background(), http.MethodOptions, tc.kv...)
			if err != nil {
				t.Fatal(err)
			}
			<-s.served
			if res.StatusCode != tc.status {
				t.Errorf("%d %s, want %d", res.StatusCode, body, tc.status)
			}
			if n := s.f.Count(gatetest.MethodVerify); n != 0 {
				t.Errorf("verified %d times", n)
			}
			s.expect(t, 0, tc.upstream)
		})
	}
}

// TestFlowConfig: flow and preflight take only their values, and the authorization flow
// does not combine with passes; each refusal names its option.
func TestFlowConfig(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*gate.Config)
		option string
	}{
		{"an unknown flow", func(c *gate.Config) { c.Flow = "escrow" }, "flow"},
		{"the authorization flow with passes", func(c *gate.Config) {
			c.Flow = gate.FlowAuthorization
			c.Pass = gate.PassConfig{Duration: time.Hour, Keys: []string{rulesPassKey}}
		}, "flow"},
		{"an unknown preflight", func(c *gate.Config) { c.Preflight = "free" }, "preflight"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := rulesRoute()
			tc.mutate(&cfg)
			var ce *gate.ConfigError
			if err := cfg.Validate(nil); !errors.As(err, &ce) || ce.Option != tc.option {
				t.Errorf("Validate: %v, want a ConfigError of %s", err, tc.option)
			}
		})
	}
	for _, flow := range []string{"", gate.FlowUpfront, gate.FlowAuthorization} {
		cfg := rulesRoute()
		cfg.Flow = flow
		if err := cfg.Validate(nil); err != nil {
			t.Errorf("flow %q: %v", flow, err)
		}
	}
}
