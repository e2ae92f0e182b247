package paygate

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/crypto"

	"github.com/x402gate/x402gate/gate"
	"github.com/x402gate/x402gate/internal/testenv"
	"github.com/x402gate/x402gate/x402"
)

// upstream records what reached it: a gate must never let an unpaid request through.
type upstream struct {
	mu    sync.Mutex
	calls []http.Header
	fail  map[string]int // path -> how many more calls answer 503
}

func (u *upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.calls = append(u.calls, r.Header.Clone())
	if u.fail[r.URL.Path] > 0 {
		u.fail[r.URL.Path]--
		http.Error(w, "upstream down", http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte(`{"data":"paid content"}`))
}

func (u *upstream) count() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.calls)
}

func (u *upstream) last() http.Header {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.calls[len(u.calls)-1]
}

// paymentV1 signs an EIP-3009 authorization of value from payer to payTo and encodes it as
// an X-PAYMENT header, as x402-fetch 1.2.0 does.
func paymentV1(t *testing.T, tok *testenv.Token, payer testenv.Account, payTo common.Address, value int64) string {
	t.Helper()
	a := tok.NewAuthorization(t, payer.Address, payTo, big.NewInt(value))
	sig := tok.SignAuthorization(t, payer.Key, a)
	h, err := x402.EncodeHeader(x402.PayloadV1{
		X402Version: 1, Scheme: "exact", Network: "base-sepolia",
		Payload: x402.ExactEVMPayload{
			Signature: hexutil.Encode(sig),
			Authorization: x402.AuthorizationJSON{
				From: a.From.Hex(), To: a.To.Hex(), Value: a.Value.String(),
				ValidAfter: a.ValidAfter.String(), ValidBefore: a.ValidBefore.String(),
				Nonce: hexutil.Encode(a.Nonce[:]),
			},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// metricValue scrapes Caddy's admin /metrics and returns the sample of series (name with
// its labels, as exposed), 0 when absent.
func metricValue(t *testing.T, adminPort int, series string) float64 {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("http://localhost:%d/metrics", adminPort), nil)
	res, body := do(t, req)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("admin /metrics: %d", res.StatusCode)
	}
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				t.Fatalf("metric %s: %v", series, err)
			}
			return f
		}
	}
	return 0
}

// activeBundle returns the default bundled facilitator of the running config.
func activeBundle(t *testing.T) *bundle {
	t.Helper()
	a, err := caddy.ActiveContext().App("x402")
	if err != nil {
		t.Fatal(err)
	}
	b, err := a.(*App).bundle("")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestAppAgainstAnvil runs Caddy in this process with the x402 app bundling a
// facilitator on anvil with our EIP-3009 token, an x402-gated reverse_proxy and the
// facilitator API, and checks what a user would: the 402 challenge, a paid request that
// settles on chain before the upstream sees the placeholders, a replay that never reaches
// the upstream, the paid-but-upstream-failed retry, the FACILITATOR_API_KEY rule, the
// metrics on the admin endpoint, and a reload that keeps the same facilitator.
func TestAppAgainstAnvil(t *testing.T) {
	chain, tok := testenv.StartChainWithToken(t)
	isolateCaddy(t)
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "signer.key")
	if err := os.WriteFile(keyFile, []byte(hex.EncodeToString(crypto.FromECDSA(chain.FacilitatorAccount().Key))+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("X402_TEST_RPC", chain.RPCURL)
	t.Setenv("X402_TEST_FACILITATOR_KEY", "test-facilitator-api-key-123")
	// The verdict service answers malformed JSON: a fault a real service cannot be made
	// to produce on demand. GUARDIAN_MODE required must then refuse the payment.
	var verdictMu sync.Mutex
	var verdictKeys []string
	verdictSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		verdictMu.Lock()
		verdictKeys = append(verdictKeys, r.Header.Get("x-api-key"))
		verdictMu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"id": "tx-1", "requestHash": `))
	}))
	defer verdictSrv.Close()
	t.Setenv("X402_TEST_VERDICT_URL", verdictSrv.URL)
	t.Setenv("X402_TEST_VERDICT_KEY", "verdict-agent-key-0123456789abcdef")
	t.Setenv("X402_TEST_GUARDED_SIGNER", "0x"+hex.EncodeToString(crypto.FromECDSA(chain.Accounts[9].Key)))
	up := &upstream{fail: map[string]int{"/api/flaky": 1}}
	upSrv := httptest.NewServer(up)
	defer upSrv.Close()

	merchant := testenv.NewAccount(t).Address
	payer := chain.Accounts[1]
	port, adminPort := freePort(t), freePort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	config := func(freeBody string) string {
		return fmt.Sprintf(`{
	admin localhost:%[1]d
	persist_config off
	auto_https off
	x402 {
		facilitator {
			network base-sepolia {
				rpc {env.X402_TEST_RPC}
				asset %[2]s
				asset_name USDC
				asset_version 2
			}
			signer_key {file.%[3]s}
			journal sqlite %[4]s
		}
		facilitator guarded {
			network base-sepolia {
				rpc {env.X402_TEST_RPC}
				asset %[2]s
				asset_name USDC
				asset_version 2
			}
			signer_key {env.X402_TEST_GUARDED_SIGNER}
			guardian_mode required
			verdict_url {env.X402_TEST_VERDICT_URL}
			verdict_key {env.X402_TEST_VERDICT_KEY}
		}
	}
}
http://127.0.0.1:%[5]d {
	x402 /api/* {
		price 0.01 USDC
		pay_to %[6]s
		network base-sepolia
		description "test api"
		mime_type application/json
	}
	x402 /remote/* {
		price 10000 base
		pay_to %[6]s
		network base-sepolia
		asset %[2]s
		asset_name USDC
		asset_version 2
		facilitator http://127.0.0.1:%[5]d/facilitator
		facilitator_key {env.X402_TEST_FACILITATOR_KEY}
	}
	handle /remote/* {
		reverse_proxy %[7]s
	}
	x402 /guarded/* {
		price 10000 base
		pay_to %[6]s
		network base-sepolia
		facilitator bundled guarded
	}
	handle /guarded/* {
		reverse_proxy %[7]s
	}
	handle /api/* {
		reverse_proxy %[7]s {
			header_up X-Payer {http.x402.payer}
			header_up X-Tx {http.x402.tx}
			header_up X-Amount {http.x402.amount}
			header_up X-Network {http.x402.network}
		}
	}
	handle_path /facilitator/* {
		x402_facilitator {
			api_key {env.X402_TEST_FACILITATOR_KEY}
		}
	}
	respond %[8]q
}`, adminPort, tok.Address.Hex(), keyFile, filepath.Join(dir, "journal.db"), port, merchant.Hex(),
			strings.TrimPrefix(upSrv.URL, "http://"), freeBody)
	}
	stopCaddy(t)
	loadCaddy(t, config("free"))
	first := activeBundle(t)

	const (
		challenges     = "caddy_x402_challenges_total"
		valid          = `caddy_x402_verifications_total{network="eip155:84532",outcome="valid",reason=""}`
		nonceUsed      = `caddy_x402_verifications_total{network="eip155:84532",outcome="invalid",reason="invalid_exact_evm_nonce_already_used"}`
		settled        = `caddy_x402_settlements_total{network="eip155:84532",outcome="success"}`
		verdictRefused = `caddy_x402_verifications_total{network="eip155:84532",outcome="invalid",reason="verdict_not_approved"}`
	)
	amountSeries := fmt.Sprintf(`caddy_x402_settled_amount_total{asset="%s",network="eip155:84532"}`, strings.ToLower(tok.Address.Hex()))
	before := map[string]float64{}
	for _, s := range []string{challenges, valid, nonceUsed, settled, amountSeries, "caddy_x402_verdict_duration_seconds_count", verdictRefused} {
		before[s] = metricValue(t, adminPort, s)
	}

	t.Run("unpaid request gets the challenge for the public URL", func(t *testing.T) {
		req, _ := http.NewRequest(http.MethodGet, base+"/api/data?x=1", nil)
		req.Header.Set("X-Forwarded-Host", "evil.example") // not a trusted proxy: ignored
		req.Header.Set("X-Forwarded-Proto", "https")
		res, body := do(t, req)
		if res.StatusCode != http.StatusPaymentRequired || res.Header.Get("PAYMENT-REQUIRED") == "" {
			t.Fatalf("got %d, PAYMENT-REQUIRED %q; want 402 with the header\n%s", res.StatusCode, res.Header.Get("PAYMENT-REQUIRED"), body)
		}
		var ch struct {
			X402Version int `json:"x402Version"`
			Accepts     []struct {
				Network, Resource, PayTo, MaxAmountRequired, Asset, Description string
			} `json:"accepts"`
		}
		if err := json.Unmarshal([]byte(body), &ch); err != nil || len(ch.Accepts) != 1 {
			t.Fatalf("402 body %s: %v", body, err)
		}
		a := ch.Accepts[0]
		if ch.X402Version != 1 || a.Network != "base-sepolia" || a.Resource != base+"/api/data" ||
			!strings.EqualFold(a.PayTo, merchant.Hex()) || a.MaxAmountRequired != "10000" ||
			!strings.EqualFold(a.Asset, tok.Address.Hex()) || a.Description != "test api" {
			t.Fatalf("402 accepts = %+v", a)
		}
		if up.count() != 0 {
			t.Fatalf("the upstream was called %d times for an unpaid request", up.count())
		}
	})

	t.Run("unpaid path outside the matcher is free", func(t *testing.T) {
		req, _ := http.NewRequest(http.MethodGet, base+"/", nil)
		if res, body := do(t, req); res.StatusCode != http.StatusOK || body != "free" {
			t.Fatalf("got %d %q", res.StatusCode, body)
		}
	})

	header := paymentV1(t, tok, payer, merchant, 10000)
	t.Run("paid request settles before the upstream sees the placeholders", func(t *testing.T) {
		req, _ := http.NewRequest(http.MethodGet, base+"/api/data", nil)
		req.Header.Set("X-PAYMENT", header)
		res, body := do(t, req)
		if res.StatusCode != http.StatusOK || body != `{"data":"paid content"}` || res.Header.Get("X-PAYMENT-RESPONSE") == "" {
			t.Fatalf("got %d %q, X-PAYMENT-RESPONSE %q", res.StatusCode, body, res.Header.Get("X-PAYMENT-RESPONSE"))
		}
		h := up.last()
		if h.Get("X-Payer") != payer.Address.Hex() || h.Get("X-Amount") != "10000" || h.Get("X-Network") != "eip155:84532" {
			t.Fatalf("upstream placeholders: payer %q amount %q network %q", h.Get("X-Payer"), h.Get("X-Amount"), h.Get("X-Network"))
		}
		tx := h.Get("X-Tx")
		rcpt, err := chain.Client.TransactionReceipt(t.Context(), common.HexToHash(tx))
		if err != nil || rcpt.Status != 1 || len(tx) != 66 {
			t.Fatalf("tx %q: receipt %v, %v", tx, rcpt, err)
		}
		if got := tok.BalanceOf(t, merchant); got.Cmp(big.NewInt(10000)) != 0 {
			t.Fatalf("merchant balance = %s, want 10000", got)
		}
	})

	t.Run("a replayed payment never reaches the upstream", func(t *testing.T) {
		n := up.count()
		req, _ := http.NewRequest(http.MethodGet, base+"/api/data", nil)
		req.Header.Set("X-PAYMENT", header)
		res, body := do(t, req)
		if res.StatusCode != http.StatusPaymentRequired || up.count() != n {
			t.Fatalf("replay: got %d %s; upstream calls %d -> %d", res.StatusCode, body, n, up.count())
		}
		if got := tok.BalanceOf(t, merchant); got.Cmp(big.NewInt(10000)) != 0 {
			t.Fatalf("merchant balance = %s after a replay, want 10000", got)
		}
	})

	t.Run("paid but the upstream failed: the same header with its retry token passes again without a second charge", func(t *testing.T) {
		flaky := paymentV1(t, tok, payer, merchant, 10000)
		req, _ := http.NewRequest(http.MethodGet, base+"/api/flaky", nil)
		req.Header.Set("X-PAYMENT", flaky)
		res, body := do(t, req)
		if res.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("first attempt: got %d %q, want the upstream's 503", res.StatusCode, body)
		}
		token := res.Header.Get(gate.HeaderPaymentRetry)
		if len(token) != 64 {
			t.Fatalf("first attempt: retry token %q, want 64 hex digits", token)
		}
		paid := tok.BalanceOf(t, merchant)
		if paid.Cmp(big.NewInt(20000)) != 0 {
			t.Fatalf("merchant balance = %s, want 20000 (settled before the upstream ran)", paid)
		}
		n := up.count()
		// The header alone is public once settled (it is in the transaction's calldata):
		// without the token it is refused, and takes no credit.
		req, _ = http.NewRequest(http.MethodGet, base+"/api/flaky", nil)
		req.Header.Set("X-PAYMENT", flaky)
		if res, body := do(t, req); res.StatusCode != http.StatusPaymentRequired || up.count() != n {
			t.Fatalf("the header without the token: got %d %q, upstream calls %d -> %d; want 402", res.StatusCode, body, n, up.count())
		}
		req, _ = http.NewRequest(http.MethodGet, base+"/api/flaky", nil)
		req.Header.Set("X-PAYMENT", flaky)
		req.Header.Set(gate.HeaderPaymentRetry, token)
		if res, body := do(t, req); res.StatusCode != http.StatusOK || up.count() != n+1 {
			t.Fatalf("retry: got %d %q, upstream calls %d -> %d", res.StatusCode, body, n, up.count())
		}
		if h := up.last(); h.Get(gate.HeaderPaymentRetry) != "" || h.Get("X-PAYMENT") != "" {
			t.Errorf("the upstream received the retry token or the payment header: %v", h)
		}
		if got := tok.BalanceOf(t, merchant); got.Cmp(paid) != 0 {
			t.Fatalf("merchant balance = %s after the retry, want %s (no second charge)", got, paid)
		}
	})

	t.Run("a gate in front of the remote facilitator API settles with its key", func(t *testing.T) {
		n := up.count()
		req, _ := http.NewRequest(http.MethodGet, base+"/remote/item", nil)
		req.Header.Set("X-PAYMENT", paymentV1(t, tok, payer, merchant, 10000))
		if res, body := do(t, req); res.StatusCode != http.StatusOK || up.count() != n+1 {
			t.Fatalf("got %d %q, upstream calls %d -> %d", res.StatusCode, body, n, up.count())
		}
		if got := tok.BalanceOf(t, merchant); got.Cmp(big.NewInt(30000)) != 0 {
			t.Fatalf("merchant balance = %s, want 30000", got)
		}
	})

	t.Run("guardian_mode required refuses a payment when the verdict service fails", func(t *testing.T) {
		n, bal := up.count(), tok.BalanceOf(t, merchant)
		req, _ := http.NewRequest(http.MethodGet, base+"/guarded/item", nil)
		req.Header.Set("X-PAYMENT", paymentV1(t, tok, payer, merchant, 10000))
		res, body := do(t, req)
		if res.StatusCode != http.StatusPaymentRequired || up.count() != n {
			t.Fatalf("got %d %s, upstream calls %d -> %d; want 402 and no upstream call", res.StatusCode, body, n, up.count())
		}
		if got := tok.BalanceOf(t, merchant); got.Cmp(bal) != 0 {
			t.Fatalf("merchant balance moved from %s to %s", bal, got)
		}
		verdictMu.Lock()
		defer verdictMu.Unlock()
		if len(verdictKeys) == 0 || verdictKeys[0] != "verdict-agent-key-0123456789abcdef" {
			t.Fatalf("the verdict service saw keys %q; want the configured verdict_key", verdictKeys)
		}
	})

	t.Run("facilitator API requires FACILITATOR_API_KEY except on /health", func(t *testing.T) {
		for _, tc := range []struct {
			path, key string
			want      int
		}{
			{"/facilitator/supported", "", http.StatusUnauthorized},
			{"/facilitator/supported", "wrong-key-wrong-key", http.StatusUnauthorized},
			{"/facilitator/supported", "test-facilitator-api-key-123", http.StatusOK},
			{"/facilitator/health", "", http.StatusOK},
		} {
			req, _ := http.NewRequest(http.MethodGet, base+tc.path, nil)
			if tc.key != "" {
				req.Header.Set("x-facilitator-key", tc.key)
			}
			if res, body := do(t, req); res.StatusCode != tc.want {
				t.Errorf("%s with key %q: got %d %s, want %d", tc.path, tc.key, res.StatusCode, body, tc.want)
			}
		}
	})

	t.Run("metrics on the admin endpoint", func(t *testing.T) {
		for _, tc := range []struct {
			series string
			delta  float64
		}{
			{challenges, 1},
			{valid, 3}, // the paid request, the flaky one and the remote one
			// the replay, the flaky header without its token and its retry are answered by
			// the payment ledger (docs/gate.md#payment-ledger): none reaches /verify
			{nonceUsed, 0},
			{settled, 3},
			{amountSeries, 30000},
			{"caddy_x402_verdict_duration_seconds_count", 1},
			{verdictRefused, 1},
		} {
			if got := metricValue(t, adminPort, tc.series) - before[tc.series]; got != tc.delta {
				t.Errorf("%s grew by %v, want %v", tc.series, got, tc.delta)
			}
		}
	})

	t.Run("a reload keeps the same facilitator", func(t *testing.T) {
		loadCaddy(t, config("free after reload"))
		status, body := afterReload(t, base+"/")
		if status != http.StatusOK {
			t.Fatalf("the new config is not active: %d %q", status, body)
		}
		if body != "free after reload" {
			t.Fatalf("the new config is not active: %q", body)
		}
		second := activeBundle(t)
		if second != first {
			t.Fatal("the reload opened a second facilitator instead of reusing the first")
		}
		key := ""
		for _, k := range activeApp(t).keys {
			key = k
		}
		if refs, ok := bundles.References(key); !ok || refs != 1 {
			t.Fatalf("pool references after the reload = %d, %v; want 1 (the old config released its hold)", refs, ok)
		}
		req, _ := http.NewRequest(http.MethodGet, base+"/api/data", nil)
		req.Header.Set("X-PAYMENT", paymentV1(t, tok, payer, merchant, 10000))
		if res, body := do(t, req); res.StatusCode != http.StatusOK {
			t.Fatalf("paid request after the reload: %d %s", res.StatusCode, body)
		}
		if got := tok.BalanceOf(t, merchant); got.Cmp(big.NewInt(40000)) != 0 {
			t.Fatalf("merchant balance = %s, want 40000", got)
		}
	})
}

func activeApp(t *testing.T) *App {
	t.Helper()
	a, err := caddy.ActiveContext().App("x402")
	if err != nil {
		t.Fatal(err)
	}
	return a.(*App)
}
