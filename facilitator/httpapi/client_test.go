package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/x402gate/x402gate/gate/gatetest"
	"github.com/x402gate/x402gate/x402"
)

// recordingFacilitator is a facilitator stub that records the request and answers what a
// test scripts: a fault injector for statuses and bodies a real facilitator will not
// produce on demand.
type recordingFacilitator struct {
	*httptest.Server
	hits    atomic.Int32
	path    atomic.Value // string
	body    atomic.Value // string
	key     atomic.Value // string
	present atomic.Bool  // x-facilitator-key header sent
}

func newRecordingFacilitator(t *testing.T, answer func(w http.ResponseWriter, r *http.Request)) *recordingFacilitator {
	t.Helper()
	f := &recordingFacilitator{}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.hits.Add(1)
		b, _ := io.ReadAll(r.Body)
		f.path.Store(r.URL.Path)
		f.body.Store(string(b))
		_, ok := r.Header[http.CanonicalHeaderKey(HeaderFacilitatorKey)]
		f.present.Store(ok)
		f.key.Store(r.Header.Get(HeaderFacilitatorKey))
		answer(w, r)
	}))
	t.Cleanup(f.Close)
	return f
}

func answerJSON(status int, body string) func(http.ResponseWriter, *http.Request) {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}
}

func newTestClient(t *testing.T, cfg ClientConfig) *Client {
	t.Helper()
	c, err := NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// assertNoKey fails when err's text holds the API key.
func assertNoKey(t *testing.T, err error) {
	t.Helper()
	if err != nil && strings.Contains(err.Error(), apiTestKey) {
		t.Fatalf("error contains the API key: %v", err)
	}
}

func TestClientSendsRequestsInThePaymentsOriginalVersion(t *testing.T) {
	cases := []struct {
		name  string
		v     int
		check func(t *testing.T, m map[string]any)
	}{
		{"a v1 payment goes out as v1: v1 network names and maxAmountRequired", 1, func(t *testing.T, m map[string]any) {
			p, r := payloadOf(m), reqsOf(m)
			if m["x402Version"] != float64(1) || p["x402Version"] != float64(1) || p["network"] != "base-sepolia" ||
				r["network"] != "base-sepolia" || r["maxAmountRequired"] != "10000" || r["resource"] != "https://api.example.com/premium" {
				t.Fatalf("v1 body %v", m)
			}
		}},
		{"a v2 payment goes out as v2: CAIP-2 networks, amount and accepted", 2, func(t *testing.T, m map[string]any) {
			p, r := payloadOf(m), reqsOf(m)
			acc, _ := p["accepted"].(map[string]any)
			if m["x402Version"] != float64(2) || p["x402Version"] != float64(2) || acc["network"] != "eip155:84532" ||
				r["network"] != "eip155:84532" || r["amount"] != "10000" {
				t.Fatalf("v2 body %v", m)
			}
			if _, ok := r["maxAmountRequired"]; ok {
				t.Fatalf("v2 requirement has a v1 field: %v", r)
			}
		}},
	}
	for _, c := range cases {
		for _, op := range []string{"verify", "settle"} {
			t.Run(op+": "+c.name, func(t *testing.T) {
				f := newRecordingFacilitator(t, answerJSON(200, `{"isValid":true,"success":true,"transaction":"0x01","network":"x"}`))
				cl := newTestClient(t, ClientConfig{URL: f.URL + "/", APIKey: apiTestKey})
				p, r := apiTestPayment(c.v)
				var err error
				if op == "verify" {
					_, err = cl.Verify(context.Background(), x402.VerifyInput{Payment: p, Requirements: r})
				} else {
					_, err = cl.Settle(context.Background(), p, r)
				}
				if err != nil {
					t.Fatal(err)
				}
				if got := f.path.Load(); got != "/"+op {
					t.Fatalf("path %q: the trailing slash of the URL was not removed", got)
				}
				if !f.present.Load() || f.key.Load() != apiTestKey {
					t.Fatal("x-facilitator-key not sent")
				}
				var m map[string]any
				if err := json.Unmarshal([]byte(f.body.Load().(string)), &m); err != nil {
					t.Fatal(err)
				}
				c.check(t, m)
			})
		}
	}
	t.Run("without an APIKey no x-facilitator-key header is sent", func(t *testing.T) {
		f := newRecordingFacilitator(t, answerJSON(200, `{"kinds":[]}`))
		cl := newTestClient(t, ClientConfig{URL: f.URL})
		if _, err := cl.Supported(context.Background()); err != nil {
			t.Fatal(err)
		}
		if f.present.Load() {
			t.Fatal("header sent without a key")
		}
	})
}

func TestClientAnswers(t *testing.T) {
	tx := "0x" + strings.Repeat("ab", 32)
	cases := []struct {
		name      string
		op        string
		status    int
		body      string
		wantErr   error // errors.Is target; nil for no error
		wantHTTP  int   // *HTTPError status, 0 for none
		wantValid bool
		wantTx    string
	}{
		{"verify 200 isValid true", "verify", 200, `{"isValid":true,"payer":"0x01"}`, nil, 0, true, ""},
		{"verify 200 isValid false is a logical failure, not an error", "verify", 200, `{"isValid":false,"invalidReason":"insufficient_funds"}`, nil, 0, false, ""},
		{"verify 500 with isValid returns the result and an HTTPError", "verify", 500, `{"isValid":false,"invalidReason":"unexpected_verify_error"}`, nil, 500, false, ""},
		{"verify 200 without isValid is malformed", "verify", 200, `{"valid":true}`, ErrMalformedResponse, 0, false, ""},
		{"verify 200 that is not JSON is malformed", "verify", 200, `<html>`, ErrMalformedResponse, 0, false, ""},
		{"verify 401 is ErrUnauthorized", "verify", 401, `{"error":"unauthorized"}`, ErrUnauthorized, 401, false, ""},
		{"verify 502 without a result is an HTTPError", "verify", 502, `bad gateway`, nil, 502, false, ""},
		{"settle 200 with transaction fills txHash", "settle", 200, `{"success":true,"transaction":"` + tx + `","network":"eip155:84532"}`, nil, 0, true, tx},
		{"settle 200 with only txHash fills transaction", "settle", 200, `{"success":true,"txHash":"` + tx + `","network":"eip155:84532"}`, nil, 0, true, tx},
		{"settle 200 success without a transaction is malformed", "settle", 200, `{"success":true,"network":"eip155:84532"}`, ErrMalformedResponse, 0, false, ""},
		{"settle 500 with success false returns the result and an HTTPError", "settle", 500, `{"success":false,"errorReason":"unexpected_settle_error","transaction":"","network":"eip155:84532"}`, nil, 500, false, ""},
		{"settle 401 is ErrUnauthorized", "settle", 401, `{"error":"unauthorized"}`, ErrUnauthorized, 401, false, ""},
		{"supported 200 without kinds is malformed", "supported", 200, `{}`, ErrMalformedResponse, 0, false, ""},
		{"supported 500 is an HTTPError", "supported", 500, `{"kinds":[]}`, nil, 500, false, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newRecordingFacilitator(t, answerJSON(c.status, c.body))
			cl := newTestClient(t, ClientConfig{URL: f.URL, APIKey: apiTestKey})
			p, r := apiTestPayment(2)
			var err error
			var valid bool
			var txGot, txHashGot string
			switch c.op {
			case "verify":
				var resp x402.VerifyResponse
				resp, err = cl.Verify(context.Background(), x402.VerifyInput{Payment: p, Requirements: r})
				valid = resp.IsValid
			case "settle":
				var resp x402.SettleResponse
				resp, err = cl.Settle(context.Background(), p, r)
				valid, txGot, txHashGot = resp.Success, resp.Transaction, resp.TxHash
			default:
				_, err = cl.Supported(context.Background())
			}
			assertNoKey(t, err)
			if c.wantErr != nil && !errors.Is(err, c.wantErr) {
				t.Fatalf("err %v, want %v", err, c.wantErr)
			}
			var he *HTTPError
			if c.wantHTTP != 0 {
				if !errors.As(err, &he) || he.StatusCode != c.wantHTTP {
					t.Fatalf("err %v, want *HTTPError %d", err, c.wantHTTP)
				}
			} else if errors.As(err, &he) {
				t.Fatalf("unexpected HTTPError %v", err)
			}
			if c.wantErr == nil && c.wantHTTP == 0 && err != nil {
				t.Fatalf("unexpected error %v", err)
			}
			if valid != c.wantValid || txGot != c.wantTx || txHashGot != c.wantTx {
				t.Fatalf("valid %v tx %q txHash %q", valid, txGot, txHashGot)
			}
		})
	}
	t.Run("the reason of a 500 is kept as a machine code, server prose is not", func(t *testing.T) {
		f := newRecordingFacilitator(t, answerJSON(500, `{"isValid":false,"invalidReason":"stack trace at db.go:12 key `+apiTestKey+`"}`))
		cl := newTestClient(t, ClientConfig{URL: f.URL, APIKey: apiTestKey})
		p, r := apiTestPayment(1)
		_, err := cl.Verify(context.Background(), x402.VerifyInput{Payment: p, Requirements: r})
		assertNoKey(t, err)
		var he *HTTPError
		if !errors.As(err, &he) || he.Reason != "" || strings.Contains(err.Error(), "db.go") {
			t.Fatalf("err %v", err)
		}
	})
}

func TestClientTransportRules(t *testing.T) {
	t.Run("a redirect is refused and never followed", func(t *testing.T) {
		target := newRecordingFacilitator(t, answerJSON(200, `{"isValid":true}`))
		f := newRecordingFacilitator(t, func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, target.URL+"/verify", http.StatusTemporaryRedirect)
		})
		cl := newTestClient(t, ClientConfig{URL: f.URL, APIKey: apiTestKey})
		p, r := apiTestPayment(2)
		resp, err := cl.Verify(context.Background(), x402.VerifyInput{Payment: p, Requirements: r})
		if !errors.Is(err, ErrRedirectRefused) || resp.IsValid {
			t.Fatalf("resp %+v err %v", resp, err)
		}
		assertNoKey(t, err)
		if target.hits.Load() != 0 {
			t.Fatal("the redirect was followed (and carried the key and payment)")
		}
	})
	t.Run("a caller's HTTPClient that follows redirects is not changed, and the copy still refuses", func(t *testing.T) {
		target := newRecordingFacilitator(t, answerJSON(200, `{"kinds":[]}`))
		f := newRecordingFacilitator(t, func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, target.URL+"/supported", http.StatusFound)
		})
		hc := &http.Client{}
		cl := newTestClient(t, ClientConfig{URL: f.URL, HTTPClient: hc})
		if _, err := cl.Supported(context.Background()); !errors.Is(err, ErrRedirectRefused) {
			t.Fatalf("err %v", err)
		}
		if hc.CheckRedirect != nil || target.hits.Load() != 0 {
			t.Fatal("redirect followed or caller's client modified")
		}
	})
	t.Run("an answer over MaxResponseBytes is refused", func(t *testing.T) {
		f := newRecordingFacilitator(t, answerJSON(200, `{"isValid":true,"invalidMessage":"`+strings.Repeat("a", 4096)+`"}`))
		cl := newTestClient(t, ClientConfig{URL: f.URL, MaxResponseBytes: 1024})
		p, r := apiTestPayment(2)
		if _, err := cl.Verify(context.Background(), x402.VerifyInput{Payment: p, Requirements: r}); !errors.Is(err, ErrResponseTooLarge) {
			t.Fatalf("err %v", err)
		}
	})
	t.Run("a streamed answer without Content-Length over the cap is refused", func(t *testing.T) {
		f := newRecordingFacilitator(t, func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			for range 8 {
				_, _ = io.WriteString(w, strings.Repeat(" ", 512))
				w.(http.Flusher).Flush()
			}
			_, _ = io.WriteString(w, `{"kinds":[]}`)
		})
		cl := newTestClient(t, ClientConfig{URL: f.URL, MaxResponseBytes: 1024})
		if _, err := cl.Supported(context.Background()); !errors.Is(err, ErrResponseTooLarge) {
			t.Fatalf("err %v", err)
		}
	})
	t.Run("a facilitator that never answers hits the per-call timeout as ErrUnreachable", func(t *testing.T) {
		release := make(chan struct{})
		f := newRecordingFacilitator(t, func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-r.Context().Done():
			case <-release:
			}
		})
		defer close(release)
		cl := newTestClient(t, ClientConfig{URL: f.URL, APIKey: apiTestKey, Timeout: 50 * time.Millisecond, SettleTimeout: 50 * time.Millisecond})
		p, r := apiTestPayment(2)
		_, err := cl.Settle(context.Background(), p, r)
		if !errors.Is(err, ErrUnreachable) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err %v", err)
		}
		assertNoKey(t, err)
	})
	t.Run("the caller's cancelled context is reported as such", func(t *testing.T) {
		f := newRecordingFacilitator(t, answerJSON(200, `{"kinds":[]}`))
		cl := newTestClient(t, ClientConfig{URL: f.URL})
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := cl.Supported(ctx); !errors.Is(err, context.Canceled) {
			t.Fatalf("err %v", err)
		}
	})
	t.Run("an unreachable facilitator is ErrUnreachable without the URL path", func(t *testing.T) {
		srv := httptest.NewServer(http.NotFoundHandler())
		u := srv.URL
		srv.Close()
		cl := newTestClient(t, ClientConfig{URL: u + "/secret-path", APIKey: apiTestKey})
		p, r := apiTestPayment(1)
		_, err := cl.Verify(context.Background(), x402.VerifyInput{Payment: p, Requirements: r})
		if !errors.Is(err, ErrUnreachable) || strings.Contains(err.Error(), "secret-path") {
			t.Fatalf("err %v", err)
		}
		assertNoKey(t, err)
	})
}

func TestNewClientRefusesUnsafeConfig(t *testing.T) {
	cases := []struct {
		name string
		cfg  ClientConfig
	}{
		{"an empty URL", ClientConfig{}},
		{"a relative URL", ClientConfig{URL: "/facilitator"}},
		{"a non-http scheme", ClientConfig{URL: "ftp://facilitator.example"}},
		{"user info in the URL", ClientConfig{URL: "https://user:" + apiTestKey + "@facilitator.example"}},
		{"a query in the URL", ClientConfig{URL: "https://facilitator.example/?key=" + apiTestKey}},
		{"the key inside the URL path", ClientConfig{URL: "https://facilitator.example/" + apiTestKey, APIKey: apiTestKey}},
		{"a key with a line break", ClientConfig{URL: "https://facilitator.example", APIKey: "a\r\nX-Evil: 1"}},
	}
	for _, c := range cases {
		t.Run(c.name+" is refused without echoing it", func(t *testing.T) {
			_, err := NewClient(c.cfg)
			if err == nil {
				t.Fatal("accepted")
			}
			assertNoKey(t, err)
			if c.cfg.URL != "" && strings.Contains(err.Error(), c.cfg.URL) {
				t.Fatalf("error echoes the URL: %v", err)
			}
		})
	}
}

// TestNewClientPlainHTTPOnlyToLoopback: over plain http a network attacker reads
// x-facilitator-key and can forge success:true, so NewClient takes an http URL only when
// its host is this machine, or when ClientConfig.InsecureHTTP says so explicitly
// (docs/facilitator.md#api).
func TestNewClientPlainHTTPOnlyToLoopback(t *testing.T) {
	cases := []struct {
		name     string
		url      string
		insecure bool
		accepted bool
	}{
		{"https to a remote host is accepted", "https://facilitator.example", false, true},
		{"http to a remote host is refused", "http://facilitator.example", false, false},
		{"http to a remote host with a port and path is refused", "http://facilitator.example:4021/x402", false, false},
		{"http to a private address is refused", "http://10.0.0.7:4021", false, false},
		{"http to the unspecified address is refused", "http://0.0.0.0:4021", false, false},
		{"http to a name that starts like localhost is refused", "http://localhost.facilitator.example", false, false},
		{"http to a name that starts like a loopback address is refused", "http://127.0.0.1.facilitator.example", false, false},
		{"http to 127.0.0.1 is accepted", "http://127.0.0.1:4021", false, true},
		{"http to anywhere in 127.0.0.0/8 is accepted", "http://127.8.9.10", false, true},
		{"http to ::1 is accepted", "http://[::1]:4021", false, true},
		{"http to localhost is accepted", "http://localhost:4021", false, true},
		{"http to LOCALHOST is accepted", "http://LOCALHOST:4021", false, true},
		{"http to a remote host is accepted with InsecureHTTP", "http://facilitator.example", true, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := NewClient(ClientConfig{URL: c.url, APIKey: apiTestKey, InsecureHTTP: c.insecure})
			if c.accepted && err != nil {
				t.Fatalf("refused: %v", err)
			}
			if !c.accepted {
				if err == nil {
					t.Fatal("accepted")
				}
				assertNoKey(t, err)
				if strings.Contains(err.Error(), c.url) {
					t.Fatalf("error echoes the URL: %v", err)
				}
			}
		})
	}
}

// TestClientAgainstHandler runs the Client against NewHandler, so the two halves of the
// wire agree: what the Client sends decodes to the same payment in the handler, and what
// the handler answers parses in the Client.
func TestClientAgainstHandler(t *testing.T) {
	for _, v := range []int{1, 2} {
		t.Run(fmt.Sprintf("v%d payment round-trips through client and handler", v), func(t *testing.T) {
			svc := gatetest.NewFacilitator()
			srv := httptest.NewServer(NewHandler(svc, HandlerOptions{APIKey: apiTestKey, PathPrefix: "/fac"}))
			t.Cleanup(srv.Close)
			cl := newTestClient(t, ClientConfig{URL: srv.URL + "/fac/", APIKey: apiTestKey})
			p, r := apiTestPayment(v)
			vr, err := cl.Verify(context.Background(), x402.VerifyInput{Payment: p, Requirements: r})
			if err != nil || !vr.IsValid {
				t.Fatalf("verify %+v %v", vr, err)
			}
			got := lastCall(svc).Input.Payment
			if got.Version != v || got.Network != p.Network || got.Authorization.From != p.Authorization.From ||
				got.Authorization.Nonce != p.Authorization.Nonce || got.Authorization.Value.Cmp(p.Authorization.Value) != 0 ||
				string(got.Signature) != string(p.Signature) {
				t.Fatalf("handler decoded %+v, client sent %+v", got, p)
			}
			if gr := lastCall(svc).Input.Requirements; gr.Amount.Cmp(r.Amount) != 0 || gr.PayTo != r.PayTo || gr.Asset != r.Asset || gr.Network != r.Network {
				t.Fatalf("requirements %+v", gr)
			}
			sr, err := cl.Settle(context.Background(), p, r)
			if err != nil || !sr.Success || sr.Transaction == "" || sr.TxHash != sr.Transaction {
				t.Fatalf("settle %+v %v", sr, err)
			}
			wantNet := map[int]string{1: "base-sepolia", 2: "eip155:84532"}[v]
			if sr.Network != wantNet {
				t.Fatalf("settle network %q, want %q", sr.Network, wantNet)
			}
			s, err := cl.Supported(context.Background())
			want, _ := svc.Supported(context.Background())
			if err != nil || len(s.Kinds) != len(want.Kinds) {
				t.Fatalf("supported %+v %v, want the service's %d kinds", s, err, len(want.Kinds))
			}
		})
	}
	t.Run("a wrong key is ErrUnauthorized on every operation and never in the error", func(t *testing.T) {
		svc := gatetest.NewFacilitator()
		srv := httptest.NewServer(NewHandler(svc, HandlerOptions{APIKey: apiTestKey}))
		t.Cleanup(srv.Close)
		wrong := "fk_wrong_" + apiTestKey
		cl := newTestClient(t, ClientConfig{URL: srv.URL, APIKey: wrong})
		p, r := apiTestPayment(2)
		_, e1 := cl.Verify(context.Background(), x402.VerifyInput{Payment: p, Requirements: r})
		_, e2 := cl.Settle(context.Background(), p, r)
		_, e3 := cl.Supported(context.Background())
		for _, err := range []error{e1, e2, e3} {
			if !errors.Is(err, ErrUnauthorized) || strings.Contains(err.Error(), wrong) {
				t.Fatalf("err %v", err)
			}
			assertNoKey(t, err)
		}
		if len(svc.Calls()) != 0 {
			t.Fatal("service reached with a wrong key")
		}
	})
	t.Run("a service failure reaches the client as the 500 result plus an HTTPError", func(t *testing.T) {
		svc := gatetest.NewFacilitator()
		svc.OnSettle(func(context.Context, *x402.Payment, *x402.Requirements) (x402.SettleResponse, error) {
			return x402.SettleResponse{}, errors.New("nonce manager wedged")
		})
		srv := httptest.NewServer(NewHandler(svc, HandlerOptions{}))
		t.Cleanup(srv.Close)
		cl := newTestClient(t, ClientConfig{URL: srv.URL})
		p, r := apiTestPayment(1)
		sr, err := cl.Settle(context.Background(), p, r)
		var he *HTTPError
		if !errors.As(err, &he) || he.StatusCode != 500 || he.Reason != "unexpected_settle_error" ||
			sr.Success || sr.ErrorReason != "unexpected_settle_error" || sr.Network != "base-sepolia" || strings.Contains(err.Error(), "wedged") {
			t.Fatalf("resp %+v err %v", sr, err)
		}
	})
}
