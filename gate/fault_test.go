package gate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/x402gate/x402gate/facilitator"
	"github.com/x402gate/x402gate/facilitator/httpapi"
	"github.com/x402gate/x402gate/internal/testenv"
	"github.com/x402gate/x402gate/x402"
)

// TestFacilitatorDownIs502: an unreachable facilitator fails a paid request closed with
// 502 facilitator_unavailable; the unpaid challenge needs no facilitator.
func TestFacilitatorDownIs502(t *testing.T) {
	env := newTestEnv(t)
	up := &upstream{}
	srv := serve(t, env.gate(t, env.config(), Options{Facilitator: deadFacilitator(t, env.reg)}), up)
	url := srv.URL + "/r"
	c := fetchChallenge(t, url)
	for _, version := range []int{x402.Version1, x402.Version2} {
		name, value := env.sign(t, version, env.payer, c, tamper{})
		a := present(t, url, name, value)
		if a.status != http.StatusBadGateway || a.err != "facilitator_unavailable" || a.tx != "" {
			t.Errorf("v%d: %+v, want 502 without a settlement header", version, a)
		}
	}
	if up.calls.Load() != 0 {
		t.Error("the upstream ran")
	}
}

// TestSettlementPendingIs502WithTx: when the receipt does not come in time, the answer is
// 502 with the transaction hash in a success:false settle header and a retry token, and
// the upstream does not run. Re-sent with the token while the transaction is unmined, the
// header gets 502 settlement_pending again and keeps its credit; once it is mined, the
// header without the token is refused, with it the upstream runs once (Paid.Retry, the
// same transaction) and no second transfer happens; after that the header is refused,
// token or not.
func TestSettlementPendingIs502WithTx(t *testing.T) {
	env := newTestEnvWith(t, func(c *facilitator.Config) { c.ReceiptTimeout = facilitator.Duration(time.Second) })
	up := &upstream{}
	srv := serve(t, env.gate(t, env.config(), Options{}), up)
	url := srv.URL + "/r"
	name, value := env.sign(t, x402.Version2, env.payer, fetchChallenge(t, url), tamper{})
	before := env.ledger(t, env.payer.Address)
	env.chain.SetAutomine(t, false)
	t.Cleanup(func() { env.chain.SetAutomine(t, true) })
	res := get(t, url, name, value)
	body := readBody(t, res)
	if res.StatusCode != http.StatusBadGateway || errorOf(t, body) != "settlement_pending" {
		t.Fatalf("status %d body %s, want 502 settlement_pending", res.StatusCode, body)
	}
	sr, err := x402.DecodeSettleResponse(res.Header.Get(x402.HeaderPaymentResponse))
	if err != nil || sr.Success || !isTxHash(sr.Transaction) || sr.ErrorReason != "settlement_pending" {
		t.Fatalf("settle header %+v %v", sr, err)
	}
	token := res.Header.Get(HeaderPaymentRetry)
	if !isRetryToken(token) {
		t.Fatalf("pending answer: retry token %q, want 64 hex digits", token)
	}
	if a := presentToken(t, url, name, value, token); a.status != http.StatusBadGateway || a.err != "settlement_pending" || a.tx != sr.Transaction || a.token != "" {
		t.Fatalf("with the token before mining: %+v, want 502 settlement_pending with %s and no new token", a, sr.Transaction)
	}
	env.chain.SetAutomine(t, true)
	env.chain.Mine(t)
	env.expectOnChain(t, sr.Transaction, env.payer.Address)
	if a := present(t, url, name, value); a.status != http.StatusPaymentRequired || a.err != nonceUsed {
		t.Errorf("without the token after mining: %+v, want 402 %s", a, nonceUsed)
	}
	if a := presentToken(t, url, name, value, strings.Repeat("ab", 32)); a.status != http.StatusPaymentRequired {
		t.Errorf("with another token after mining: %+v, want 402", a)
	}
	if up.calls.Load() != 0 {
		t.Fatal("the upstream ran before the pending settlement was confirmed")
	}
	a := presentToken(t, url, name, value, token)
	if a.status != http.StatusOK || a.tx != sr.Transaction {
		t.Fatalf("with the token after mining: %+v, want 200 with %s", a, sr.Transaction)
	}
	if p := up.lastPaid(); p == nil || !p.Retry || p.Settlement.Transaction != sr.Transaction || !p.Settlement.Success {
		t.Errorf("Paid = %+v, want a retry of %s", p, sr.Transaction)
	}
	if a := presentToken(t, url, name, value, token); a.status != http.StatusPaymentRequired || a.err != nonceUsed {
		t.Errorf("with the token again: %+v, want 402 %s", a, nonceUsed)
	}
	if n := up.calls.Load(); n != 1 {
		t.Errorf("upstream ran %d times, want 1", n)
	}
	if n := up.leaked.Load(); n != 0 {
		t.Errorf("%d requests reached the upstream with a payment header or retry token", n)
	}
	env.expectMoved(t, env.payer.Address, before, 1)
}

// TestVerdictRequiredWithoutServiceRejects: an engine in GUARDIAN_MODE required with no
// verdict service refuses every payment (verdict_not_approved, v1 invalid_payment), and the
// gate answers rejected without running the upstream or moving money.
func TestVerdictRequiredWithoutServiceRejects(t *testing.T) {
	env := newTestEnvWith(t, func(c *facilitator.Config) {
		c.VerdictMode, c.VerdictURL = facilitator.VerdictRequired, "http://127.0.0.1:1"
	})
	up := &upstream{}
	srv := serve(t, env.gate(t, env.config(), Options{}), up)
	url := srv.URL + "/r"
	c := fetchChallenge(t, url)
	before := env.ledger(t, env.payer.Address)
	for version, want := range map[int]string{1: "invalid_payment", 2: "verdict_not_approved"} {
		name, value := env.sign(t, version, env.payer, c, tamper{})
		if a := present(t, url, name, value); a.status != http.StatusPaymentRequired || a.err != want {
			t.Errorf("v%d: %+v, want 402 %s", version, a, want)
		}
	}
	if up.calls.Load() != 0 {
		t.Error("the upstream ran")
	}
	env.expectMoved(t, env.payer.Address, before, 0)
}

// TestGuardianAdvertised checks the verification section of the 402 body, the pricing
// failure modes, and the X-VERIFICATION-PAYMENT header's checks.
func TestGuardianAdvertised(t *testing.T) {
	env := newTestEnv(t)
	feeTo := testenv.NewAccount(t).Address
	var pricingErr error
	pricing := func(_ context.Context, m *x402.Requirements) (*x402.Requirements, error) {
		if pricingErr != nil {
			return nil, pricingErr
		}
		fee := *m
		fee.Amount, fee.PayTo = big.NewInt(1_000), feeTo
		fee.Resource = x402.ResourceInfo{URL: "https://verdicts.example/fee"}
		return &fee, nil
	}
	for _, mode := range []string{AdvertiseRequired, AdvertiseOptional} {
		t.Run(mode, func(t *testing.T) {
			cfg := env.config()
			cfg.Verdict = &VerdictConfig{Advertise: mode, Fee: true}
			up := &upstream{}
			srv := serve(t, env.gate(t, cfg, Options{Pricing: pricing}), up)
			url := srv.URL + "/r"
			pricingErr = nil
			var body struct {
				Verification struct {
					Mode         string               `json:"mode"`
					Header       string               `json:"header"`
					Requirements *x402.RequirementsV1 `json:"requirements"`
				} `json:"verification"`
			}
			res := get(t, url, "", "")
			b := readBody(t, res)
			if err := json.Unmarshal(b, &body); err != nil || res.StatusCode != 402 {
				t.Fatalf("%d %s", res.StatusCode, b)
			}
			v := body.Verification
			if v.Mode != mode || v.Header != "X-VERIFICATION-PAYMENT" || v.Requirements == nil ||
				v.Requirements.MaxAmountRequired != "1000" || v.Requirements.PayTo != feeTo.Hex() || v.Requirements.Network != "base-sepolia" {
				t.Errorf("verification = %+v (%s)", v, b)
			}

			c := fetchChallenge(t, url)
			name, value := env.sign(t, x402.Version2, env.payer, c, tamper{})
			for _, h := range []http.Header{
				{name: {value}, HeaderVerificationPayment: {"%%%"}},
				{name: {value}, HeaderVerificationPayment: {"a", "b"}},
			} {
				req, _ := http.NewRequest(http.MethodGet, url, nil)
				req.Header = h
				res, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				b := readBody(t, res)
				if res.StatusCode != 400 || errorOf(t, b) != "invalid_payload" {
					t.Errorf("bad %s: %d %s", HeaderVerificationPayment, res.StatusCode, b)
				}
			}

			pricingErr = errors.New("pricing service down")
			res = get(t, url, "", "")
			b = readBody(t, res)
			switch mode {
			case AdvertiseRequired:
				if res.StatusCode != http.StatusBadGateway || errorOf(t, b) != "pricing_unavailable" {
					t.Errorf("pricing down, required: %d %s", res.StatusCode, b)
				}
				if a := present(t, url, name, value); a.status != http.StatusBadGateway || a.err != "pricing_unavailable" {
					t.Errorf("pricing down, required, paid: %+v", a)
				}
			case AdvertiseOptional:
				body.Verification.Requirements = nil
				if err := json.Unmarshal(b, &body); err != nil || res.StatusCode != 402 || body.Verification.Requirements != nil || body.Verification.Mode != mode {
					t.Errorf("pricing down, optional: %d %s", res.StatusCode, b)
				}
			}
			if up.calls.Load() != 0 {
				t.Error("the upstream ran")
			}
		})
	}
}

// TestRemoteFacilitator runs the gate against the facilitator's HTTP API (a real
// httpapi.Client, an x-facilitator-key, the engine behind httpapi.NewHandler):
// both versions settle, a bad signature keeps its exact reason across the wire, and a
// wrong key fails closed.
func TestRemoteFacilitator(t *testing.T) {
	env := newTestEnv(t)
	const key = "facilitator-key-for-tests"
	api := httptest.NewServer(httpapi.NewHandler(env.engine, httpapi.HandlerOptions{APIKey: key, Registry: env.reg}))
	defer api.Close()
	cfg := env.config()
	g, err := New(cfg, Options{Facilitator: remote(t, api.URL, key, env.reg), Registry: env.reg})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.CheckSupported(t.Context()); err != nil {
		t.Fatalf("CheckSupported: %v", err)
	}
	up := &upstream{}
	srv := serve(t, g, up)
	url := srv.URL + "/r"
	c := fetchChallenge(t, url)
	before := env.ledger(t, env.payer.Address)
	for _, version := range []int{x402.Version1, x402.Version2} {
		name, value := env.sign(t, version, env.payer, c, tamper{})
		res := get(t, url, name, value)
		_ = readBody(t, res)
		if res.StatusCode != 200 {
			t.Fatalf("v%d: status %d", version, res.StatusCode)
		}
		env.expectOnChain(t, settleHeader(t, res, version).Transaction, env.payer.Address)
	}
	env.expectMoved(t, env.payer.Address, before, 2)
	for version, want := range map[int]string{1: "invalid_exact_evm_payload_signature", 2: "invalid_exact_evm_signature"} {
		name, value := env.sign(t, version, env.payer, c, tamper{after: func(sig []byte, _ *x402.AuthorizationJSON, _ *x402.RequirementsV2) { sig[3] ^= 0x80 }})
		if a := present(t, url, name, value); a.status != 402 || a.err != want {
			t.Errorf("v%d bad signature: %+v, want 402 %s", version, a, want)
		}
	}

	bad, err := New(cfg, Options{Facilitator: remote(t, api.URL, "wrong-key", env.reg), Registry: env.reg})
	if err != nil {
		t.Fatal(err)
	}
	badSrv := serve(t, bad, up)
	name, value := env.sign(t, x402.Version2, env.payer, c, tamper{})
	res := get(t, badSrv.URL+"/r", name, value)
	b := readBody(t, res)
	if res.StatusCode != http.StatusBadGateway || errorOf(t, b) != "facilitator_unavailable" || strings.Contains(string(b), "wrong-key") {
		t.Errorf("wrong key: %d %s", res.StatusCode, b)
	}
	if n := up.calls.Load(); n != 2 {
		t.Errorf("upstream ran %d times, want 2", n)
	}
}

// TestLogsCarryNoSecrets: the gate's logs name the payer, the reason and the transaction,
// never a payment header, a signature, a retry token or the facilitator key.
func TestLogsCarryNoSecrets(t *testing.T) {
	env := newTestEnv(t)
	const key = "facilitator-secret-key-42"
	api := httptest.NewServer(httpapi.NewHandler(env.engine, httpapi.HandlerOptions{APIKey: key, Registry: env.reg}))
	defer api.Close()
	core, logs := observer.New(zapcore.DebugLevel)
	cfg := env.config()
	up := &upstream{script: []int{500}}
	g, err := New(cfg, Options{Facilitator: remote(t, api.URL, key, env.reg), Registry: env.reg, Logger: zap.New(core)})
	if err != nil {
		t.Fatal(err)
	}
	srv := serve(t, g, up)
	url := srv.URL + "/r"
	c := fetchChallenge(t, url)
	name, value := env.sign(t, x402.Version2, env.payer, c, tamper{})
	secrets := []string{key, value}
	first := present(t, url, name, value) // settled, upstream 500: retry granted
	if !isRetryToken(first.token) {
		t.Fatalf("first: %+v, want a retry token", first)
	}
	secrets = append(secrets, first.token)
	if a := presentToken(t, url, name, value, first.token); a.status != http.StatusOK { // retried
		t.Fatalf("retry: %+v", a)
	}
	presentToken(t, url, name, value, first.token) // refused
	bad, badValue := env.sign(t, x402.Version1, env.payer, c, tamper{after: func(sig []byte, _ *x402.AuthorizationJSON, _ *x402.RequirementsV2) { sig[5] ^= 1 }})
	present(t, url, bad, badValue)
	secrets = append(secrets, badValue)
	wrongKey := "wrong-" + key
	wrong, err := New(cfg, Options{Facilitator: remote(t, api.URL, wrongKey, env.reg), Registry: env.reg, Logger: zap.New(core)})
	if err != nil {
		t.Fatal(err)
	}
	wsrv := serve(t, wrong, up)
	_, v3 := env.sign(t, x402.Version2, env.payer, c, tamper{})
	present(t, wsrv.URL+"/r", name, v3)
	secrets = append(secrets, v3, wrongKey)

	var settled bool
	for _, e := range logs.All() {
		line := e.Message + fmt.Sprint(e.ContextMap())
		for _, s := range secrets {
			if strings.Contains(line, s) || len(s) > 40 && strings.Contains(line, s[len(s)-40:]) {
				t.Errorf("log %q carries a secret", e.Message)
			}
		}
		if strings.Contains(line, "0x") && strings.Contains(strings.ToLower(line), "signature\":\"0x") {
			t.Errorf("log %q carries a signature", e.Message)
		}
		if e.Message == "x402 payment settled" {
			m := e.ContextMap()
			settled = m["payer"] == env.payer.Address.Hex() && isTxHash(fmt.Sprint(m["tx"]))
		}
	}
	if !settled {
		t.Errorf("no settlement log with payer and tx among %d entries", logs.Len())
	}
}

// remote is a facilitator client of the facilitator API at url.
func remote(t *testing.T, url, key string, reg *x402.Registry) *httpapi.Client {
	t.Helper()
	c, err := httpapi.NewClient(httpapi.ClientConfig{URL: url, APIKey: key, Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	return c
}
