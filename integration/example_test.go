package integration_test

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/x402gate/x402gate/internal/testenv"
)

// TestCaddyfileExampleServesTheDemo runs Caddyfile.example itself, as scripts/run does, on a
// local chain with our token: x402-fetch pays for the legacy API, @x402/fetch for the static
// page, and the facilitator API answers with its key. Only the ports and paths move (through
// the environment variables the example documents).
func TestCaddyfileExampleServesTheDemo(t *testing.T) {
	chain, tok := testenv.StartChainWithToken(t)
	root, err := testenv.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	example, err := os.ReadFile(filepath.Join(root, "Caddyfile.example"))
	if err != nil {
		t.Fatal(err)
	}
	payTo := testenv.NewAccount(t).Address
	apiKeyFile := filepath.Join(t.TempDir(), "facilitator-api.key")
	apiKey := canary.facilitatorKey
	if err := os.WriteFile(apiKeyFile, []byte(apiKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	passKeyFile := filepath.Join(t.TempDir(), "pass.key")
	if err := os.WriteFile(passKeyFile, []byte(canary.passKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	site, api, fac, up, verdictPort := testenv.FreePort(t), testenv.FreePort(t), testenv.FreePort(t), testenv.FreePort(t), testenv.FreePort(t)
	// The operator's part, with the caddy verdict commands against the example itself: an
	// agent owns the two payers' wallets, and its policy lets them pay payTo.
	f := &verdictFleet{dir: t.TempDir(), caddyfile: string(example), env: []string{
		"X402_TOKEN=" + tok.Address.Hex(), "X402_PAY_TO=" + payTo.Hex(),
	}}
	f.env = append(f.env, "X402_VERDICT_DB="+filepath.Join(f.dir, "verdict.db"))
	initVerdictStore(t, filepath.Join(f.dir, "verdict.db"))
	verdictKeyFile := f.demoAgent(t, tok.Address, payTo, chain.Accounts[1].Address, chain.Accounts[2].Address, chain.Accounts[3].Address)
	caddy := testenv.StartCaddy(t, string(example), testenv.CaddyOptions{
		Env: []string{
			"X402_VERDICT_DB=" + filepath.Join(f.dir, "verdict.db"),
			"X402_VERDICT_KEY_FILE=" + verdictKeyFile,
			"X402_DEMO_VERDICT_PORT=" + strconv.Itoa(verdictPort),
			"X402_RPC_URL=" + chain.RPCURL,
			"X402_TOKEN=" + tok.Address.Hex(),
			"X402_PAY_TO=" + payTo.Hex(),
			"X402_FACILITATOR_KEY_FILE=" + writeKeyFile(t, chain.FacilitatorAccount()),
			"X402_FACILITATOR_API_KEY_FILE=" + apiKeyFile,
			"X402_PASS_KEY_FILE=" + passKeyFile,
			"X402_DEMO_SITE_PORT=" + strconv.Itoa(site),
			"X402_DEMO_API_PORT=" + strconv.Itoa(api),
			"X402_DEMO_FACILITATOR_PORT=" + strconv.Itoa(fac),
			"X402_DEMO_UPSTREAM_PORT=" + strconv.Itoa(up),
			"X402_DEMO_ROOT=" + filepath.Join(root, "integration", "demo", "site"),
		},
		WaitPorts: []int{site, api, fac, up, verdictPort},
	})
	base := func(port int) string { return "http://127.0.0.1:" + strconv.Itoa(port) }

	t.Run("x402-fetch pays 0.001 USDC for the legacy API, which learns who paid", func(t *testing.T) {
		payer := chain.Accounts[1]
		bal := balances(t, tok, payer.Address, payTo)
		out := payWith(t, payV1Script, payer, base(api)+"/api/weather")
		if out.Status != http.StatusOK {
			t.Fatalf("status %d, want 200: %s", out.Status, out.Body)
		}
		var body struct {
			City   string `json:"city"`
			PaidBy string `json:"paidBy"`
			Tx     string `json:"tx"`
		}
		if err := json.Unmarshal([]byte(out.Body), &body); err != nil {
			t.Fatalf("the legacy API's answer is not JSON: %v: %q", err, out.Body)
		}
		if body.City != "Lisbon" || !strings.EqualFold(body.PaidBy, payer.Address.Hex()) {
			t.Errorf("legacy API answered %q, want Lisbon paid by %s", out.Body, payer.Address)
		}
		if out.PaymentResponseHeader == nil {
			t.Fatal("no X-PAYMENT-RESPONSE")
		}
		sr := decodeSettleResponse(t, *out.PaymentResponseHeader)
		if !strings.EqualFold(sr.Transaction, body.Tx) {
			t.Errorf("the API saw tx %q, the client was told %q", body.Tx, sr.Transaction)
		}
		wantDelta(t, tok, payer.Address, bal[0], -1000)
		wantDelta(t, tok, payTo, bal[1], 1000)
	})
	t.Run("@x402/fetch pays 0.01 USDC for the static page", func(t *testing.T) {
		payer := chain.Accounts[2]
		bal := balances(t, tok, payer.Address, payTo)
		out := payWith(t, payV2Script, payer, base(site)+"/", "X402_TOKEN="+tok.Address.Hex())
		if out.Status != http.StatusOK || !strings.Contains(out.Body, `id="paid-content"`) {
			t.Fatalf("status %d, body %q; want 200 and the demo page", out.Status, out.Body)
		}
		wantDelta(t, tok, payer.Address, bal[0], -10_000)
		wantDelta(t, tok, payTo, bal[1], 10_000)
	})
	t.Run("one payment for the static page buys a pass to its second page, stylesheet and image", func(t *testing.T) {
		payer := chain.Accounts[3]
		bal := balances(t, tok, payer.Address, payTo)
		header := signOnly(t, payV2Script, payer, base(site)+"/", "X402_TOKEN="+tok.Address.Hex())
		paid := mustDo(t, http.MethodGet, base(site)+"/", map[string]string{"PAYMENT-SIGNATURE": header})
		pass := paid.Header.Get("X-402-PASS")
		if paid.Status != http.StatusOK || pass == "" {
			t.Fatalf("paid page: status %d, a pass: %v", paid.Status, pass != "")
		}
		for _, p := range []string{"/second.html", "/style.css", "/logo.svg", "/"} {
			if r := mustDo(t, http.MethodGet, base(site)+p, map[string]string{"X-402-PASS": pass}); r.Status != http.StatusOK {
				t.Errorf("GET %s with the pass: status %d, want 200", p, r.Status)
			}
			if r := mustDo(t, http.MethodGet, base(site)+p, nil); r.Status != http.StatusPaymentRequired {
				t.Errorf("GET %s without the pass: status %d, want 402", p, r.Status)
			}
		}
		wantDelta(t, tok, payer.Address, bal[0], -10_000)
		wantDelta(t, tok, payTo, bal[1], 10_000)
	})
	t.Run("unpaid requests to the paid sites get 402", func(t *testing.T) {
		for _, u := range []string{base(site) + "/", base(api) + "/api/weather", base(api) + "/elsewhere"} {
			if r := mustDo(t, http.MethodGet, u, nil); r.Status != http.StatusPaymentRequired {
				t.Errorf("GET %s: status %d, want 402", u, r.Status)
			}
		}
	})
	t.Run("the facilitator API needs its key", func(t *testing.T) {
		if r := mustDo(t, http.MethodGet, base(fac)+"/supported", nil); r.Status != http.StatusUnauthorized {
			t.Errorf("/supported without the key: status %d, want 401", r.Status)
		}
		if r := mustDo(t, http.MethodGet, base(fac)+"/supported", map[string]string{"x-facilitator-key": apiKey}); r.Status != http.StatusOK {
			t.Errorf("/supported with the key: status %d, want 200: %s", r.Status, r.Body)
		}
	})
	if strings.Contains(caddy.Logs(), apiKey) {
		t.Errorf("the facilitator API key appears in Caddy's output")
	}
	// A start says what an operator needs once: no info line repeated by every route.
	if n := strings.Count(caddy.Logs(), "verify deadline covers"); n != 0 {
		t.Errorf("the verify deadline note is logged %d times at info", n)
	}
	cfg := mustDo(t, http.MethodGet, caddy.AdminURL+"/config/", nil)
	if cfg.Status != http.StatusOK || strings.Contains(string(cfg.Body), chain.RPCURL) || strings.Contains(string(cfg.Body), apiKey) {
		t.Errorf("admin /config/ (status %d) must hold neither the RPC URL nor the API key, only their placeholders", cfg.Status)
	}
}
