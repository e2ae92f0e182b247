package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/ethereum/go-ethereum/common"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/x402gate/x402gate/gate/gatetest"
	"github.com/x402gate/x402gate/internal/testenv"
	"github.com/x402gate/x402gate/x402"
)

// apiTestKey is the FACILITATOR_API_KEY of these tests. Tests assert it never appears in
// an answer, an error or a log line.
const apiTestKey = "fk_test_5c1e7d0b9a4f"

// The handler's tests run on a fake facilitator (gatetest) whose answers they script, to
// inject faults and to count how often the HTTP layer reached the service; the real
// engine is exercised end to end in TestClientHandlerEngineOnAnvil.
var _ Backend = (*gatetest.Facilitator)(nil)

// lastCall is the last call f received; the zero Call when there was none.
func lastCall(f *gatetest.Facilitator) gatetest.Call {
	calls := f.Calls()
	if len(calls) == 0 {
		return gatetest.Call{}
	}
	return calls[len(calls)-1]
}

var apiTestPayTo = common.HexToAddress("0x209693Bc6afc0C5328bA36FaF03C514EF312287C")

// apiTestPayment returns a structurally valid payment and its requirement in x402
// version v on Base Sepolia. Its signature is not a real one: only the scripted service
// sees it.
func apiTestPayment(v int) (*x402.Payment, *x402.Requirements) {
	r := &x402.Requirements{
		Scheme: x402.SchemeExact, Network: x402.BaseSepolia.CAIP2, Amount: big.NewInt(10000),
		Asset: x402.BaseSepolia.USDC.Address, PayTo: apiTestPayTo, MaxTimeoutSeconds: 60,
		Resource: x402.ResourceInfo{URL: "https://api.example.com/premium", Description: "premium", MimeType: "application/json"},
		Extra:    map[string]any{"name": "USDC", "version": "2"},
	}
	var nonce [32]byte
	nonce[31] = byte(v)
	p := &x402.Payment{
		Version: v, Scheme: x402.SchemeExact, Network: r.Network,
		Signature: bytes.Repeat([]byte{0x11}, 65),
		Authorization: x402.Authorization{
			From: common.HexToAddress("0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266"), To: apiTestPayTo,
			Value: big.NewInt(10000), ValidAfter: big.NewInt(0), ValidBefore: big.NewInt(4102444800), Nonce: nonce,
		},
	}
	if v == x402.Version2 {
		acc := *r
		acc.Resource = x402.ResourceInfo{}
		p.Accepted = &acc
		p.Resource = &x402.ResourceInfo{URL: r.Resource.URL}
	}
	return p, r
}

// apiTestBody is a /verify or /settle body in version v, as a reference client sends it.
func apiTestBody(t testing.TB, v int) map[string]any {
	t.Helper()
	p, r := apiTestPayment(v)
	var payload, reqs any
	if v == x402.Version1 {
		pv, err := p.PayloadV1(nil)
		if err != nil {
			t.Fatal(err)
		}
		rv, err := r.V1(nil)
		if err != nil {
			t.Fatal(err)
		}
		payload, reqs = pv, rv
	} else {
		payload, reqs = p.PayloadV2(), r.V2()
	}
	// Round-trip through JSON so a test can edit nested fields as maps.
	var m map[string]any
	b, _ := json.Marshal(map[string]any{"x402Version": v, "paymentPayload": payload, "paymentRequirements": reqs})
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// apiDo sends one request to h and returns the status, the headers and the body.
func apiDo(t testing.TB, h http.Handler, method, path, contentType, body string, hdr map[string]string) (int, http.Header, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req := httptest.NewRequest(method, path, rd)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Code, rec.Header(), rec.Body.String()
}

func decodeMap(t testing.TB, body string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(body), &m); err != nil {
		t.Fatalf("answer is not a JSON object: %v: %s", err, body)
	}
	return m
}

// pricingStub is a pricing service that answers what a test scripts and records what it
// received. It is a fake because a real pricing service cannot be made to fail on demand.
type pricingStub struct {
	*httptest.Server
	hits atomic.Int32
	got  atomic.Value // string: the last request body
}

func newPricingStub(t *testing.T, answer func(w http.ResponseWriter, r *http.Request)) *pricingStub {
	t.Helper()
	p := &pricingStub{}
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.hits.Add(1)
		b, _ := io.ReadAll(r.Body)
		p.got.Store(string(b))
		answer(w, r)
	}))
	t.Cleanup(p.Close)
	return p
}

func TestHandlerAPIKeyGuardsEveryRouteButHealth(t *testing.T) {
	verifyBody := testenv.JSON(t, apiTestBody(t, 2))
	quoteBody := `{"resource":{"scheme":"exact","network":"eip155:84532","amount":"10000"}}`
	routes := []struct {
		name, method, path, body string
	}{
		{"verify", http.MethodPost, "/verify", verifyBody},
		{"settle", http.MethodPost, "/settle", verifyBody},
		{"verification quote", http.MethodPost, "/verification/quote", quoteBody},
		{"supported", http.MethodGet, "/supported", ""},
	}
	keys := []struct {
		name   string
		hdr    map[string]string
		status int
	}{
		{"without x-facilitator-key is 401", nil, http.StatusUnauthorized},
		{"with a wrong x-facilitator-key is 401", map[string]string{HeaderFacilitatorKey: apiTestKey + "x"}, http.StatusUnauthorized},
		{"with a key that is a prefix of the right one is 401", map[string]string{HeaderFacilitatorKey: apiTestKey[:5]}, http.StatusUnauthorized},
		{"with the key in Authorization instead is 401", map[string]string{"Authorization": "Bearer " + apiTestKey}, http.StatusUnauthorized},
		{"with the right x-facilitator-key is 200", map[string]string{HeaderFacilitatorKey: apiTestKey}, http.StatusOK},
	}
	for _, rt := range routes {
		for _, k := range keys {
			t.Run(rt.name+" "+k.name, func(t *testing.T) {
				svc := gatetest.NewFacilitator()
				core, logs := observer.New(zapcore.DebugLevel)
				h := NewHandler(svc, HandlerOptions{APIKey: apiTestKey, Logger: zap.New(core)})
				status, _, body := apiDo(t, h, rt.method, rt.path, "application/json", rt.body, k.hdr)
				if status != k.status {
					t.Fatalf("status %d, want %d: %s", status, k.status, body)
				}
				if strings.Contains(body, apiTestKey) {
					t.Fatal("answer contains the API key")
				}
				for _, e := range logs.All() {
					if strings.Contains(testenv.JSON(t, e.ContextMap())+e.Message, apiTestKey) {
						t.Fatal("a log entry contains the API key")
					}
				}
				if k.status == http.StatusUnauthorized {
					if strings.TrimSpace(body) != `{"error":"unauthorized"}` {
						t.Fatalf("401 body %s", body)
					}
					if len(svc.Calls()) != 0 {
						t.Fatal("an unauthorized request reached the service")
					}
				}
			})
		}
	}
	t.Run("health is open without the key", func(t *testing.T) {
		h := NewHandler(gatetest.NewFacilitator(), HandlerOptions{APIKey: apiTestKey})
		status, _, body := apiDo(t, h, http.MethodGet, "/health", "", "", nil)
		if status != http.StatusOK || strings.TrimSpace(body) != `{"status":"ok"}` {
			t.Fatalf("health: %d %s", status, body)
		}
	})
	t.Run("without FACILITATOR_API_KEY the routes are open", func(t *testing.T) {
		h := NewHandler(gatetest.NewFacilitator(), HandlerOptions{})
		if status, _, body := apiDo(t, h, http.MethodPost, "/verify", "application/json", verifyBody, nil); status != http.StatusOK {
			t.Fatalf("verify without key: %d %s", status, body)
		}
	})
}

func TestHandlerRefusesBadEnvelopes(t *testing.T) {
	valid := testenv.JSON(t, apiTestBody(t, 1))
	big := `{"paymentPayload":{"pad":"` + strings.Repeat("a", DefaultMaxBodyBytes) + `"},"paymentRequirements":{}}`
	cases := []struct {
		name, path, contentType, body string
		status                        int
		errCode, reason               string
	}{
		{"a body over MaxBodyBytes is 413", "/verify", "application/json", big, 413, "request_too_large", "body_too_large"},
		{"a settle body over MaxBodyBytes is 413", "/settle", "application/json", big, 413, "request_too_large", "body_too_large"},
		{"malformed JSON is 400 malformed_json", "/verify", "application/json", `{"paymentPayload":`, 400, "invalid_request", "malformed_json"},
		{"a JSON array is 400 malformed_json", "/settle", "application/json", `[1,2]`, 400, "invalid_request", "malformed_json"},
		{"an empty body is 400 malformed_json", "/verify", "application/json", ``, 400, "invalid_request", "malformed_json"},
		{"trailing data after the object is 400 malformed_json", "/verify", "application/json", valid + `{}`, 400, "invalid_request", "malformed_json"},
		{"text/plain is 415", "/verify", "text/plain", valid, 415, "unsupported_media_type", "content_type_not_json"},
		{"a form is 415", "/settle", "application/x-www-form-urlencoded", valid, 415, "unsupported_media_type", "content_type_not_json"},
		{"no Content-Type is 415", "/verify", "", valid, 415, "unsupported_media_type", "content_type_not_json"},
		{"a missing paymentPayload is 400", "/verify", "application/json", `{"x402Version":1,"paymentRequirements":{}}`, 400, "invalid_request", "missing_payment_payload"},
		{"a null paymentRequirements is 400", "/settle", "application/json", `{"x402Version":1,"paymentPayload":{},"paymentRequirements":null}`, 400, "invalid_request", "missing_payment_requirements"},
		{"keys match exactly: PaymentPayload is not paymentPayload", "/verify", "application/json", strings.Replace(valid, `"paymentPayload"`, `"PaymentPayload"`, 1), 400, "invalid_request", "missing_payment_payload"},
		{"a quote body over MaxBodyBytes is 413", "/verification/quote", "application/json", `{"resource":{"pad":"` + strings.Repeat("a", DefaultMaxBodyBytes) + `"}}`, 413, "request_too_large", "body_too_large"},
		{"a quote in text/plain is 415", "/verification/quote", "text/plain", `{"resource":{}}`, 415, "unsupported_media_type", "content_type_not_json"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			svc := gatetest.NewFacilitator()
			h := NewHandler(svc, HandlerOptions{})
			status, hdr, body := apiDo(t, h, http.MethodPost, c.path, c.contentType, c.body, nil)
			if status != c.status {
				t.Fatalf("status %d, want %d: %s", status, c.status, body)
			}
			if ct := hdr.Get("Content-Type"); ct != "application/json" {
				t.Fatalf("Content-Type %q", ct)
			}
			m := decodeMap(t, body)
			if m["error"] != c.errCode || m["reason"] != c.reason {
				t.Fatalf("body %s, want error %q reason %q", body, c.errCode, c.reason)
			}
			if msg, _ := m["message"].(string); msg == "" {
				t.Fatalf("no message: %s", body)
			}
			if len(svc.Calls()) != 0 {
				t.Fatal("a refused envelope reached the service")
			}
		})
	}
	t.Run("a JSON content type with charset is accepted", func(t *testing.T) {
		h := NewHandler(gatetest.NewFacilitator(), HandlerOptions{})
		if status, _, body := apiDo(t, h, http.MethodPost, "/verify", "application/json; charset=utf-8", valid, nil); status != 200 {
			t.Fatalf("%d %s", status, body)
		}
	})
	t.Run("MaxBodyBytes is configurable", func(t *testing.T) {
		h := NewHandler(gatetest.NewFacilitator(), HandlerOptions{MaxBodyBytes: 100})
		if status, _, body := apiDo(t, h, http.MethodPost, "/verify", "application/json", valid, nil); status != 413 {
			t.Fatalf("%d %s", status, body)
		}
	})
}

// edit returns a copy of the body of version v with f applied to it.
func edit(t testing.TB, v int, f func(m map[string]any)) string {
	m := apiTestBody(t, v)
	f(m)
	return testenv.JSON(t, m)
}

func payloadOf(m map[string]any) map[string]any { return m["paymentPayload"].(map[string]any) }
func reqsOf(m map[string]any) map[string]any    { return m["paymentRequirements"].(map[string]any) }

func TestHandlerPaymentThatDoesNotDecodeIsALogicalFailure(t *testing.T) {
	cases := []struct {
		name   string
		body   string
		reason string // the wire reason, in the request's version
	}{
		{"v1: a signature that is not hex is invalid_payload", edit(t, 1, func(m map[string]any) {
			payloadOf(m)["payload"].(map[string]any)["signature"] = "zz"
		}), "invalid_payload"},
		{"v1: an unsupported scheme answers the v1 enum value unsupported_scheme", edit(t, 1, func(m map[string]any) {
			payloadOf(m)["scheme"] = "upto"
		}), "unsupported_scheme"},
		{"v2: an unsupported scheme answers the v2 string", edit(t, 2, func(m map[string]any) {
			payloadOf(m)["accepted"].(map[string]any)["scheme"] = "escrow"
		}), "invalid_exact_evm_scheme"},
		{"v1: a requirement with a CAIP-2 network is invalid_network", edit(t, 1, func(m map[string]any) {
			reqsOf(m)["network"] = "eip155:84532"
		}), "invalid_network"},
		{"v2: a requirement without amount is invalid_payment_requirements", edit(t, 2, func(m map[string]any) {
			delete(reqsOf(m), "amount")
		}), "invalid_payment_requirements"},
		{"a top-level x402Version 3 is invalid_x402_version", edit(t, 2, func(m map[string]any) {
			m["x402Version"] = 3
		}), "invalid_x402_version"},
		{"a top-level x402Version that disagrees with the payload is invalid_x402_version", edit(t, 1, func(m map[string]any) {
			m["x402Version"] = 2
		}), "invalid_x402_version"},
		{"a top-level x402Version that is a string is invalid_x402_version", edit(t, 1, func(m map[string]any) {
			m["x402Version"] = "1"
		}), "invalid_x402_version"},
		{"a payload that is a string is invalid_payload", edit(t, 2, func(m map[string]any) {
			m["paymentPayload"] = "eyJ4NDAyVmVyc2lvbiI6Mn0="
		}), "invalid_payload"},
		{"without a top-level version the payload's version picks the v1 reason", edit(t, 1, func(m map[string]any) {
			delete(m, "x402Version")
			payloadOf(m)["scheme"] = "upto"
		}), "unsupported_scheme"},
	}
	for _, c := range cases {
		t.Run("verify "+c.name, func(t *testing.T) {
			svc := gatetest.NewFacilitator()
			status, _, body := apiDo(t, NewHandler(svc, HandlerOptions{}), http.MethodPost, "/verify", "application/json", c.body, nil)
			if status != http.StatusOK {
				t.Fatalf("status %d: %s", status, body)
			}
			var got x402.VerifyResponse
			if err := json.Unmarshal([]byte(body), &got); err != nil {
				t.Fatal(err)
			}
			if got.IsValid || got.InvalidReason != c.reason {
				t.Fatalf("got %+v, want isValid false, invalidReason %q", got, c.reason)
			}
			if len(svc.Calls()) != 0 {
				t.Fatal("an undecodable payment reached the service")
			}
		})
		t.Run("settle "+c.name, func(t *testing.T) {
			svc := gatetest.NewFacilitator()
			status, _, body := apiDo(t, NewHandler(svc, HandlerOptions{}), http.MethodPost, "/settle", "application/json", c.body, nil)
			if status != http.StatusOK {
				t.Fatalf("status %d: %s", status, body)
			}
			m := decodeMap(t, body)
			if m["success"] != false || m["errorReason"] != c.reason {
				t.Fatalf("got %s, want success false, errorReason %q", body, c.reason)
			}
			if m["transaction"] != "" || m["txHash"] != "" {
				t.Fatalf("transaction and txHash must both be present and empty: %s", body)
			}
			if _, ok := m["network"]; !ok {
				t.Fatalf("network missing: %s", body)
			}
			if len(svc.Calls()) != 0 {
				t.Fatal("an undecodable payment reached the service")
			}
		})
	}
}

func TestHandlerBackendErrorsAre500WithoutDetail(t *testing.T) {
	const internal = "dial tcp 10.0.0.7:8545: connection refused; rpc key sk_internal"
	for _, v := range []int{1, 2} {
		wantNetwork := map[int]string{1: "base-sepolia", 2: "eip155:84532"}[v]
		t.Run(fmt.Sprintf("v%d verify error is 500 unexpected_verify_error", v), func(t *testing.T) {
			svc := gatetest.NewFacilitator()
			svc.OnVerify(func(context.Context, x402.VerifyInput) (x402.VerifyResponse, error) {
				return x402.VerifyResponse{}, errors.New(internal)
			})
			status, _, body := apiDo(t, NewHandler(svc, HandlerOptions{}), http.MethodPost, "/verify", "application/json", testenv.JSON(t, apiTestBody(t, v)), nil)
			if status != http.StatusInternalServerError {
				t.Fatalf("status %d", status)
			}
			if strings.TrimSpace(body) != `{"isValid":false,"invalidReason":"unexpected_verify_error"}` {
				t.Fatalf("body %s", body)
			}
		})
		t.Run(fmt.Sprintf("v%d settle error is 500 unexpected_settle_error with network in the request's format", v), func(t *testing.T) {
			svc := gatetest.NewFacilitator()
			svc.OnSettle(func(context.Context, *x402.Payment, *x402.Requirements) (x402.SettleResponse, error) {
				return x402.SettleResponse{}, errors.New(internal)
			})
			status, _, body := apiDo(t, NewHandler(svc, HandlerOptions{}), http.MethodPost, "/settle", "application/json", testenv.JSON(t, apiTestBody(t, v)), nil)
			if status != http.StatusInternalServerError {
				t.Fatalf("status %d", status)
			}
			want := fmt.Sprintf(`{"success":false,"errorReason":"unexpected_settle_error","transaction":"","network":%q,"txHash":""}`, wantNetwork)
			if strings.TrimSpace(body) != want {
				t.Fatalf("body %s\nwant %s", body, want)
			}
		})
	}
	t.Run("supported error is 500 without detail", func(t *testing.T) {
		svc := gatetest.NewFacilitator()
		svc.OnSupported(func(context.Context) (x402.SupportedResponse, error) {
			return x402.SupportedResponse{}, errors.New(internal)
		})
		status, _, body := apiDo(t, NewHandler(svc, HandlerOptions{}), http.MethodGet, "/supported", "", "", nil)
		if status != 500 || strings.Contains(body, "10.0.0.7") || strings.Contains(body, "sk_internal") {
			t.Fatalf("%d %s", status, body)
		}
	})
	t.Run("a settle error that comes with a broadcast hash keeps the hash for reconciliation", func(t *testing.T) {
		tx := "0x" + strings.Repeat("cd", 32)
		svc := gatetest.NewFacilitator()
		svc.OnSettle(func(context.Context, *x402.Payment, *x402.Requirements) (x402.SettleResponse, error) {
			return x402.SettleResponse{Transaction: tx}, errors.New(internal)
		})
		status, _, body := apiDo(t, NewHandler(svc, HandlerOptions{}), http.MethodPost, "/settle", "application/json", testenv.JSON(t, apiTestBody(t, 2)), nil)
		m := decodeMap(t, body)
		if status != 500 || m["transaction"] != tx || m["txHash"] != tx || strings.Contains(body, "sk_internal") {
			t.Fatalf("%d %s", status, body)
		}
	})
}

func TestHandlerSettleAnswerCarriesTransactionAndTxHash(t *testing.T) {
	tx := "0x" + strings.Repeat("ef", 32)
	cases := []struct {
		name        string
		v           int
		resp        x402.SettleResponse
		wantNetwork string
	}{
		{"v1 success with only transaction gets txHash and the v1 network name", 1,
			x402.SettleResponse{Success: true, Transaction: tx}, "base-sepolia"},
		{"v2 success with only txHash gets transaction and the CAIP-2 network", 2,
			x402.SettleResponse{Success: true, TxHash: tx}, "eip155:84532"},
		{"a network the engine set is kept", 2,
			x402.SettleResponse{Success: true, Transaction: tx, Network: "eip155:84532"}, "eip155:84532"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			svc := gatetest.NewFacilitator()
			svc.OnSettle(func(context.Context, *x402.Payment, *x402.Requirements) (x402.SettleResponse, error) {
				return c.resp, nil
			})
			status, _, body := apiDo(t, NewHandler(svc, HandlerOptions{}), http.MethodPost, "/settle", "application/json", testenv.JSON(t, apiTestBody(t, c.v)), nil)
			m := decodeMap(t, body)
			if status != 200 || m["success"] != true || m["transaction"] != tx || m["txHash"] != tx || m["network"] != c.wantNetwork {
				t.Fatalf("%d %s", status, body)
			}
		})
	}
	t.Run("a logical settle failure is 200 with empty transaction and txHash", func(t *testing.T) {
		svc := gatetest.NewFacilitator()
		svc.OnSettle(func(context.Context, *x402.Payment, *x402.Requirements) (x402.SettleResponse, error) {
			return x402.SettleResponse{Success: false, ErrorReason: "insufficient_funds"}, nil
		})
		status, _, body := apiDo(t, NewHandler(svc, HandlerOptions{}), http.MethodPost, "/settle", "application/json", testenv.JSON(t, apiTestBody(t, 1)), nil)
		want := `{"success":false,"errorReason":"insufficient_funds","transaction":"","network":"base-sepolia","txHash":""}`
		if status != 200 || strings.TrimSpace(body) != want {
			t.Fatalf("%d %s", status, body)
		}
	})
}

func TestHandlerPassesDecodedPaymentToBackend(t *testing.T) {
	for _, v := range []int{1, 2} {
		t.Run(fmt.Sprintf("v%d verify with a verification fee", v), func(t *testing.T) {
			svc := gatetest.NewFacilitator()
			p, r := apiTestPayment(v)
			fee, feeReq := apiTestPayment(v)
			fee.Authorization.Value = big.NewInt(500)
			feeReq.Amount = big.NewInt(500)
			if v == 2 {
				fee.Accepted.Amount = big.NewInt(500)
			}
			m := apiTestBody(t, v)
			if v == 1 {
				fp, _ := fee.PayloadV1(nil)
				fr, _ := feeReq.V1(nil)
				m["verificationPayment"], m["verificationRequirements"] = fp, fr
			} else {
				m["verificationPayment"], m["verificationRequirements"] = fee.PayloadV2(), feeReq.V2()
			}
			status, _, body := apiDo(t, NewHandler(svc, HandlerOptions{}), http.MethodPost, "/verify", "application/json", testenv.JSON(t, m), nil)
			if status != 200 || decodeMap(t, body)["isValid"] != true {
				t.Fatalf("%d %s", status, body)
			}
			in := lastCall(svc).Input
			if in.Payment.Version != v || in.Payment.Authorization.Nonce != p.Authorization.Nonce || in.Requirements.Amount.Cmp(r.Amount) != 0 {
				t.Fatalf("payment %+v requirements %+v", in.Payment, in.Requirements)
			}
			if in.VerificationPayment == nil || in.VerificationPayment.Authorization.Value.Int64() != 500 ||
				in.VerificationRequirements == nil || in.VerificationRequirements.Amount.Int64() != 500 {
				t.Fatalf("fee not passed: %+v %+v", in.VerificationPayment, in.VerificationRequirements)
			}
		})
	}
	t.Run("a verification payment that does not decode is invalid_payload", func(t *testing.T) {
		svc := gatetest.NewFacilitator()
		m := apiTestBody(t, 2)
		m["verificationPayment"] = map[string]any{"x402Version": 2}
		status, _, body := apiDo(t, NewHandler(svc, HandlerOptions{}), http.MethodPost, "/verify", "application/json", testenv.JSON(t, m), nil)
		if status != 200 || strings.TrimSpace(body) != `{"isValid":false,"invalidReason":"invalid_payload"}` || len(svc.Calls()) != 0 {
			t.Fatalf("%d %s", status, body)
		}
	})
}

func TestHandlerRouting(t *testing.T) {
	cases := []struct {
		name, method, path string
		prefix             string
		status             int
		allow              string
	}{
		{"an unknown path is 404 JSON", http.MethodGet, "/nope", "", 404, ""},
		{"GET /verify is 405 with Allow: POST", http.MethodGet, "/verify", "", 405, "POST"},
		{"PUT /settle is 405 with Allow: POST", http.MethodPut, "/settle", "", 405, "POST"},
		{"GET /verification/quote is 405", http.MethodGet, "/verification/quote", "", 405, "POST"},
		{"POST /health is 405 with Allow: GET, HEAD", http.MethodPost, "/health", "", 405, "GET, HEAD"},
		{"POST /supported is 405", http.MethodPost, "/supported", "", 405, "GET, HEAD"},
		{"HEAD /health is served", http.MethodHead, "/health", "", 200, ""},
		{"with a path prefix the route is served under it", http.MethodGet, "/facilitator/health", "/facilitator/", 200, ""},
		{"with a path prefix the bare route is 404", http.MethodGet, "/health", "/facilitator", 404, ""},
		{"a prefix must end at a path boundary", http.MethodGet, "/facilitatorx/health", "/facilitator", 404, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := NewHandler(gatetest.NewFacilitator(), HandlerOptions{PathPrefix: c.prefix})
			status, hdr, body := apiDo(t, h, c.method, c.path, "", "", nil)
			if status != c.status {
				t.Fatalf("status %d, want %d: %s", status, c.status, body)
			}
			if hdr.Get("Allow") != c.allow {
				t.Fatalf("Allow %q, want %q", hdr.Get("Allow"), c.allow)
			}
			if c.method != http.MethodHead && hdr.Get("Content-Type") != "application/json" {
				t.Fatalf("Content-Type %q", hdr.Get("Content-Type"))
			}
			if status == 404 && strings.TrimSpace(body) != `{"error":"not_found"}` {
				t.Fatalf("404 body %s", body)
			}
		})
	}
}

func TestHandlerHealth(t *testing.T) {
	details := HealthDetails{
		FacilitatorAddress: "0x70997970C51812dc3A010C7d01b50e0d17dc79C8", VerdictMode: "required",
		VerdictServiceURL: "https://verdict.example",
		Networks: []HealthNetwork{{Network: "eip155:84532", Name: "base-sepolia", ChainID: 84532, Scheme: "exact",
			Asset: x402.BaseSepolia.USDC.Address.Hex(), Balances: HealthBalances{Native: "1000000000000000000", Asset: "5000000"}}},
	}
	cases := []struct {
		name     string
		detailed bool
		infoErr  error
		status   int
		want     map[string]any
		calls    int32
	}{
		{"default health is status ok and reads nothing", false, nil, 200, map[string]any{"status": "ok"}, 0},
		{"detailed health adds network, chain, scheme, asset, address, balances and verdict URL", true, nil, 200, map[string]any{
			"status": "ok", "facilitatorAddress": "0x70997970C51812dc3A010C7d01b50e0d17dc79C8", "guardianMode": "required",
			"verdictServiceUrl": "https://verdict.example",
			"networks": []any{map[string]any{"network": "eip155:84532", "name": "base-sepolia", "chainId": float64(84532), "scheme": "exact",
				"asset": x402.BaseSepolia.USDC.Address.Hex(), "balances": map[string]any{"native": "1000000000000000000", "asset": "5000000"}}},
		}, 1},
		{"detailed health whose details fail is 503 degraded without detail", true, errors.New("rpc http://10.0.0.7 down"), 503, map[string]any{"status": "degraded"}, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var calls atomic.Int32
			svc := gatetest.NewFacilitator()
			h := NewHandler(svc, HandlerOptions{APIKey: apiTestKey, HealthDetailed: c.detailed,
				HealthInfo: func(context.Context) (HealthDetails, error) {
					calls.Add(1)
					return details, c.infoErr
				}})
			status, _, body := apiDo(t, h, http.MethodGet, "/health", "", "", nil)
			if status != c.status {
				t.Fatalf("status %d: %s", status, body)
			}
			if got := testenv.JSON(t, decodeMap(t, body)); got != testenv.JSON(t, c.want) {
				t.Fatalf("body %s\nwant %s", got, testenv.JSON(t, c.want))
			}
			if calls.Load() != c.calls {
				t.Fatalf("HealthInfo called %d times, want %d", calls.Load(), c.calls)
			}
			if len(svc.Calls()) != 0 {
				t.Fatal("health reached the service")
			}
		})
	}
}

func TestHandlerSupportedPassesBackendAnswer(t *testing.T) {
	svc := gatetest.NewFacilitator()
	status, _, body := apiDo(t, NewHandler(svc, HandlerOptions{}), http.MethodGet, "/supported", "", "", nil)
	want, _ := svc.Supported(context.Background())
	if status != 200 || strings.TrimSpace(body) != testenv.JSON(t, want) {
		t.Fatalf("%d %s", status, body)
	}
	t.Run("empty lists are [] and {} rather than null", func(t *testing.T) {
		svc := gatetest.NewFacilitator()
		svc.OnSupported(func(context.Context) (x402.SupportedResponse, error) { return x402.SupportedResponse{}, nil })
		_, _, body := apiDo(t, NewHandler(svc, HandlerOptions{}), http.MethodGet, "/supported", "", "", nil)
		if strings.TrimSpace(body) != `{"kinds":[],"extensions":[],"signers":{}}` {
			t.Fatalf("%s", body)
		}
	})
}

func TestHandlerVerificationQuote(t *testing.T) {
	const resource = `{"scheme":"exact","network":"eip155:84532","amount":"10000","asset":"0x036CbD53842c5426634e7929541eC2318f3dCF7e","payTo":"0x209693Bc6afc0C5328bA36FaF03C514EF312287C","maxTimeoutSeconds":60}`
	const fee = `{"scheme":"exact","network":"eip155:84532","amount":"500","asset":"0x036CbD53842c5426634e7929541eC2318f3dCF7e","payTo":"0x90F79bf6EB2c4f870365E785982E1f101E93b906","maxTimeoutSeconds":60}`
	const upstreamDetail = "pricing db password=hunter2 at 10.1.2.3"
	jsonAnswer := func(status int, body string) func(http.ResponseWriter, *http.Request) {
		return func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			_, _ = io.WriteString(w, body)
		}
	}
	redirectTarget := newPricingStub(t, jsonAnswer(200, `{"requirements":`+fee+`}`))
	closed := httptest.NewServer(http.NotFoundHandler())
	closedURL := closed.URL
	closed.Close()

	cases := []struct {
		name       string
		body       string
		pricing    func(http.ResponseWriter, *http.Request) // nil: no pricing URL configured
		pricingURL string                                   // overrides the stub's URL
		status     int
		want       string
		forwarded  bool
	}{
		{"a missing resource is 400", `{}`, nil, "", 400, "", false},
		{"a null resource is 400", `{"resource":null}`, nil, "", 400, "", false},
		{"a resource that is not an object is 400", `{"resource":"x"}`, nil, "", 400, "", false},
		{"without a pricing URL the requirements are null", `{"resource":` + resource + `}`, nil, "", 200, `{"requirements":null}`, false},
		{"the pricing answer's requirements pass through", `{"resource":` + resource + `}`, jsonAnswer(200, `{"requirements":`+fee+`}`), "", 200, `{"requirements":` + fee + `}`, true},
		{"a pricing answer of null requirements passes through", `{"resource":` + resource + `}`, jsonAnswer(200, `{"requirements":null}`), "", 200, `{"requirements":null}`, true},
		{"a pricing 500 is 502 pricing_unavailable without upstream detail", `{"resource":` + resource + `}`, jsonAnswer(500, `{"message":"`+upstreamDetail+`"}`), "", 502, `{"error":"pricing_unavailable"}`, true},
		{"a pricing 503 whose body looks like an answer is still 502", `{"resource":` + resource + `}`, jsonAnswer(503, `{"requirements":`+fee+`}`), "", 502, `{"error":"pricing_unavailable"}`, true},
		{"a pricing 404 is 502", `{"resource":` + resource + `}`, jsonAnswer(404, upstreamDetail), "", 502, `{"error":"pricing_unavailable"}`, true},
		{"malformed pricing JSON is 502", `{"resource":` + resource + `}`, jsonAnswer(200, `{"requirements":`+upstreamDetail), "", 502, `{"error":"pricing_unavailable"}`, true},
		{"a pricing answer without requirements is 502", `{"resource":` + resource + `}`, jsonAnswer(200, fee), "", 502, `{"error":"pricing_unavailable"}`, true},
		{"a pricing answer whose requirements are a string is 502", `{"resource":` + resource + `}`, jsonAnswer(200, `{"requirements":"`+upstreamDetail+`"}`), "", 502, `{"error":"pricing_unavailable"}`, true},
		{"an oversized pricing answer is 502", `{"resource":` + resource + `}`, jsonAnswer(200, `{"requirements":{"pad":"`+strings.Repeat("a", maxPricingResponseBytes)+`"}}`), "", 502, `{"error":"pricing_unavailable"}`, true},
		{"a pricing redirect is refused and not followed", `{"resource":` + resource + `}`, func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, redirectTarget.URL, http.StatusTemporaryRedirect)
		}, "", 502, `{"error":"pricing_unavailable"}`, true},
		{"an unreachable pricing service is 502", `{"resource":` + resource + `}`, nil, closedURL, 502, `{"error":"pricing_unavailable"}`, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			opts := HandlerOptions{APIKey: apiTestKey, PricingURL: c.pricingURL}
			var stub *pricingStub
			if c.pricing != nil {
				stub = newPricingStub(t, c.pricing)
				opts.PricingURL = stub.URL + "/quote"
			}
			core, logs := observer.New(zapcore.DebugLevel)
			opts.Logger = zap.New(core)
			h := NewHandler(gatetest.NewFacilitator(), opts)
			status, _, body := apiDo(t, h, http.MethodPost, "/verification/quote", "application/json", c.body,
				map[string]string{HeaderFacilitatorKey: apiTestKey})
			if status != c.status {
				t.Fatalf("status %d, want %d: %s", status, c.status, body)
			}
			if status == 400 {
				if m := decodeMap(t, body); m["error"] != "invalid_request" {
					t.Fatalf("400 body %s", body)
				}
			} else if strings.TrimSpace(body) != c.want {
				t.Fatalf("body %s\nwant %s", body, c.want)
			}
			if strings.Contains(body, "hunter2") || strings.Contains(body, "10.1.2.3") {
				t.Fatal("upstream detail reached the caller")
			}
			for _, e := range logs.All() {
				if strings.Contains(testenv.JSON(t, e.ContextMap()), "hunter2") {
					t.Fatal("the pricing answer's body was logged")
				}
			}
			if stub != nil {
				if c.forwarded != (stub.hits.Load() == 1) {
					t.Fatalf("pricing hits %d", stub.hits.Load())
				}
				got, _ := stub.got.Load().(string)
				if got != `{"resource":`+resource+`}` {
					t.Fatalf("pricing received %s", got)
				}
				if strings.Contains(got, apiTestKey) {
					t.Fatal("the facilitator key was forwarded to pricing")
				}
			}
		})
	}
	if redirectTarget.hits.Load() != 0 {
		t.Fatal("the redirect target was reached")
	}
}
