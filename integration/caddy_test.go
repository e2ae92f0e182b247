package integration_test

import (
	"encoding/base64"
	"encoding/json"
	"math/big"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/crypto"

	"github.com/x402gate/x402gate/internal/testenv"
)

// gateCaddyfile is the Caddyfile of the end-to-end tests: a legacy JSON API behind a bare
// `x402` and `handle /api/* { reverse_proxy }`, a file_server paywall, and the facilitator
// API, all on one bundled facilitator for the local chain. Secrets come from the environment
// and a key file, never inline. description changes between reloads.
func gateCaddyfile(description string) string {
	return `{
	admin {$CADDY_ADMIN}
	auto_https off
	# Caddy's error logs (http.log.error.*, e.g. a failed reverse_proxy dial) carry the
	# request headers too, and go to the default log: redact it as well.
	log default {
		output stderr
		format x402_redact json
	}
	x402 {
		facilitator {
			` + testChainFacilitator + `
		}
	}
}

http://:{$API_PORT} {
	bind 127.0.0.1
	log {
		output stderr
		format x402_redact json
	}
	x402 {
		price 0.01 USDC
		pay_to {$X402_PAY_TO}
		network base-sepolia
		description "` + description + `"
		mime_type application/json
	}
	handle /api/* {
		reverse_proxy {$UPSTREAM} {
			header_up X-Paid-By {http.x402.payer}
			header_up X-Paid-Tx {http.x402.tx}
			header_up X-Paid-Amount {http.x402.amount}
			header_up X-Paid-Network {http.x402.network}
		}
	}
}

http://:{$SITE_PORT} {
	bind 127.0.0.1
	log {
		output stderr
		format x402_redact json
	}
	x402 {
		price 10000 base
		pay_to {$X402_PAY_TO}
		network base-sepolia
		description "demo page"
		mime_type text/html
	}
	root * {$SITE_ROOT}
	file_server
}

http://:{$RETRY_PORT} {
	bind 127.0.0.1
	log {
		output stderr
		format x402_redact json
	}
	x402 {
		price 0.01 USDC
		pay_to {$X402_PAY_TO}
		network base-sepolia
		retry_max 2
	}
	reverse_proxy 127.0.0.1:{$DEAD_PORT}
}

http://:{$FACILITATOR_PORT} {
	bind 127.0.0.1
	log {
		output stderr
		format x402_redact json
	}
	x402_facilitator {
		api_key {env.X402_FACILITATOR_API_KEY}
	}
}
`
}

// gateEnv is one chain with our token, one upstream and one Caddy, shared by the subtests
// of TestCaddyGate, which run in order and use distinct payers.
type gateEnv struct {
	chain    *testenv.Chain
	tok      *testenv.Token
	caddy    *testenv.Caddy
	up       *upstream
	payTo    common.Address
	api      string // http://127.0.0.1:<port>
	site     string
	fac      string
	retry    string // a route with retry_max 2 whose upstream is down
	siteRoot string
	apiKey   string

	mu          sync.Mutex
	sentHeaders []string // every payment header value sent, to look for in the logs
	retryTokens []string // every X-PAYMENT-RETRY token received
	settled     int      // settlements the tests caused (each moved price)
}

func (e *gateEnv) sent(h string) {
	e.mu.Lock()
	e.sentHeaders = append(e.sentHeaders, h)
	e.mu.Unlock()
}

// retryToken returns the X-PAYMENT-RETRY token of a failed paid answer, failing the test
// when there is none, and records it.
func (e *gateEnv) retryToken(t *testing.T, r httpResult) string {
	t.Helper()
	tok := r.Header.Get("X-PAYMENT-RETRY")
	if len(tok) != 64 {
		t.Fatalf("the failed paid answer (status %d) carries retry token %q, want 64 hex digits", r.Status, tok)
	}
	e.mu.Lock()
	e.retryTokens = append(e.retryTokens, tok)
	e.mu.Unlock()
	return tok
}

func (e *gateEnv) settledOne(n int) {
	e.mu.Lock()
	e.settled += n
	e.mu.Unlock()
}

func startGateEnv(t *testing.T) *gateEnv {
	t.Helper()
	chain, tok := testenv.StartChainWithToken(t)
	e := &gateEnv{chain: chain, tok: tok, up: startUpstream(t), payTo: testenv.NewAccount(t).Address}
	root, err := testenv.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	e.siteRoot = filepath.Join(root, "integration", "demo", "site")
	e.apiKey = canary.facilitatorKey
	apiPort, sitePort, facPort, retryPort := testenv.FreePort(t), testenv.FreePort(t), testenv.FreePort(t), testenv.FreePort(t)
	e.retry = "http://127.0.0.1:" + strconv.Itoa(retryPort)
	e.api = "http://127.0.0.1:" + strconv.Itoa(apiPort)
	e.site = "http://127.0.0.1:" + strconv.Itoa(sitePort)
	e.fac = "http://127.0.0.1:" + strconv.Itoa(facPort)
	e.caddy = testenv.StartCaddy(t, gateCaddyfile("premium data"), testenv.CaddyOptions{
		Env: []string{
			"X402_RPC_URL=" + chain.RPCURL,
			"X402_TOKEN=" + tok.Address.Hex(),
			"X402_PAY_TO=" + e.payTo.Hex(),
			"X402_FACILITATOR_KEY_FILE=" + writeKeyFile(t, chain.FacilitatorAccount()),
			"X402_FACILITATOR_API_KEY=" + e.apiKey,
			"UPSTREAM=" + e.up.srv.URL,
			"API_PORT=" + strconv.Itoa(apiPort),
			"SITE_PORT=" + strconv.Itoa(sitePort),
			"FACILITATOR_PORT=" + strconv.Itoa(facPort),
			"RETRY_PORT=" + strconv.Itoa(retryPort),
			"DEAD_PORT=" + strconv.Itoa(testenv.FreePort(t)), // nothing listens there
			"SITE_ROOT=" + e.siteRoot,
		},
		WaitPorts: []int{apiPort, sitePort, facPort, retryPort},
	})
	return e
}

// TestCaddyGate drives the built Caddy binary, with the bundled facilitator on a local anvil
// chain with our token, with the real npm x402 clients and with headers they built.
func TestCaddyGate(t *testing.T) {
	e := startGateEnv(t)
	payers := e.chain.Accounts[1:] // 1000 USDC each; each subtest takes its own

	t.Run("the 402 carries the v1 body, the v2 header, no-store and the CORS expose headers", func(t *testing.T) {
		testChallenge(t, e)
	})
	t.Run("x402-fetch v1 pays for the proxied JSON API and the upstream sees the placeholders", func(t *testing.T) {
		testClientPaysAPI(t, e, payV1Script, payers[0], "/api/v1-data")
	})
	t.Run("@x402/fetch v2 pays for the proxied JSON API and the upstream sees the placeholders", func(t *testing.T) {
		testClientPaysAPI(t, e, payV2Script, payers[1], "/api/v2-data")
	})
	t.Run("x402-fetch v1 pays for a file_server page", func(t *testing.T) {
		testClientPaysPage(t, e, payV1Script, payers[2], "/")
	})
	t.Run("@x402/fetch v2 pays for a file_server page", func(t *testing.T) {
		testClientPaysPage(t, e, payV2Script, payers[3], "/index.html")
	})
	t.Run("a bare x402 before handle /api/* never lets an unpaid request reach the upstream", func(t *testing.T) {
		testNeverReachedUnpaid(t, e)
	})
	t.Run("a replayed header is refused and charges nothing more", func(t *testing.T) {
		testReplay(t, e, payers[4])
	})
	t.Run("a tampered v1 header is refused with its exact reason and never reaches the upstream", func(t *testing.T) {
		testTamper(t, e, payV1Script, payers[5], 1)
	})
	t.Run("a tampered v2 header is refused with its exact reason and never reaches the upstream", func(t *testing.T) {
		testTamper(t, e, payV2Script, payers[5], 2)
	})
	t.Run("an unfunded payer, an expired or not yet valid authorization are refused with their exact reasons", func(t *testing.T) {
		testChainStateRefusals(t, e)
	})
	t.Run("20 concurrent requests carrying one header make exactly one transfer", func(t *testing.T) {
		testConcurrentOneHeader(t, e, payers[6])
	})
	t.Run("paid but the upstream failed: the same header reaches the upstream again without a second charge", func(t *testing.T) {
		testUpstreamFailedRetry(t, e, payers[7])
	})
	t.Run("paid but the upstream is down: retry_max 2 lets the header retry twice, then it is spent", func(t *testing.T) {
		testUpstreamDownRetryMax(t, e, payers[7])
	})
	t.Run("the facilitator API site answers /supported with its key only", func(t *testing.T) {
		testFacilitatorSite(t, e)
	})
	t.Run("the admin metrics count challenges, verifications and every settled amount", func(t *testing.T) {
		testMetrics(t, e)
	})
	t.Run("a config reload mid-traffic loses nothing: served once or refused uncharged", func(t *testing.T) {
		testReloadMidTraffic(t, e, payers[8])
	})
	t.Run("a retry credit earned before a config reload is honoured after it", func(t *testing.T) {
		testRetryCreditSurvivesReload(t, e, payers[8])
	})
	t.Run("no log line, access or error, holds a payment header value or a key", func(t *testing.T) {
		testAccessLogRedacted(t, e)
	})
}

func testChallenge(t *testing.T, e *gateEnv) {
	before := e.up.count("")
	r := mustDo(t, http.MethodGet, e.api+"/api/quote?symbol=x", nil)
	if r.Status != http.StatusPaymentRequired {
		t.Fatalf("unpaid GET: status %d, want 402: %s", r.Status, r.Body)
	}
	if got := r.Header.Get("Cache-Control"); got != "no-store" {
		t.Errorf("Cache-Control %q, want no-store", got)
	}
	expose := strings.ToUpper(r.Header.Get("Access-Control-Expose-Headers"))
	for _, h := range []string{"PAYMENT-REQUIRED", "PAYMENT-RESPONSE", "X-PAYMENT-RESPONSE", "X-PAYMENT-RETRY"} {
		if !strings.Contains(expose, h) {
			t.Errorf("Access-Control-Expose-Headers %q lacks %s", expose, h)
		}
	}
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("Content-Type %q, want application/json", ct)
	}

	var body struct {
		X402Version int              `json:"x402Version"`
		Error       string           `json:"error"`
		Accepts     []map[string]any `json:"accepts"`
	}
	if err := json.Unmarshal(r.Body, &body); err != nil {
		t.Fatalf("402 body is not JSON: %v: %s", err, r.Body)
	}
	if body.X402Version != 1 || body.Error != "X-PAYMENT header is required" || len(body.Accepts) != 1 {
		t.Fatalf("402 body: %s", r.Body)
	}
	a := body.Accepts[0]
	want := map[string]any{
		"scheme":            "exact",
		"network":           "base-sepolia",
		"maxAmountRequired": "10000",
		"resource":          e.api + "/api/quote",
		"description":       "premium data",
		"mimeType":          "application/json",
		"maxTimeoutSeconds": float64(60),
	}
	for k, v := range want {
		if a[k] != v {
			t.Errorf("accepts[0].%s = %v, want %v", k, a[k], v)
		}
	}
	if s, _ := a["payTo"].(string); !strings.EqualFold(s, e.payTo.Hex()) {
		t.Errorf("accepts[0].payTo = %v, want %s", a["payTo"], e.payTo)
	}
	if s, _ := a["asset"].(string); !strings.EqualFold(s, e.tok.Address.Hex()) {
		t.Errorf("accepts[0].asset = %v, want %s", a["asset"], e.tok.Address)
	}
	if extra, _ := a["extra"].(map[string]any); extra["name"] != "USDC" || extra["version"] != "2" {
		t.Errorf("accepts[0].extra = %v, want name USDC version 2", a["extra"])
	}
	if _, ok := a["outputSchema"]; ok && a["outputSchema"] == nil {
		t.Errorf("accepts[0].outputSchema is null, which x402-fetch 1.2.0 rejects")
	}

	raw, err := base64.StdEncoding.DecodeString(r.Header.Get("PAYMENT-REQUIRED"))
	if err != nil {
		t.Fatalf("PAYMENT-REQUIRED is not standard base64: %v", err)
	}
	var pr struct {
		X402Version int `json:"x402Version"`
		Resource    struct {
			URL string `json:"url"`
		} `json:"resource"`
		Accepts []map[string]any `json:"accepts"`
	}
	if err := json.Unmarshal(raw, &pr); err != nil {
		t.Fatalf("PAYMENT-REQUIRED JSON: %v: %s", err, raw)
	}
	if pr.X402Version != 2 || pr.Resource.URL != e.api+"/api/quote" || len(pr.Accepts) != 1 {
		t.Fatalf("PAYMENT-REQUIRED: %s", raw)
	}
	if pr.Accepts[0]["network"] != "eip155:84532" || pr.Accepts[0]["amount"] != "10000" || pr.Accepts[0]["scheme"] != "exact" {
		t.Errorf("PAYMENT-REQUIRED accepts[0] = %v", pr.Accepts[0])
	}
	if s, _ := pr.Accepts[0]["payTo"].(string); !strings.EqualFold(s, e.payTo.Hex()) {
		t.Errorf("PAYMENT-REQUIRED payTo = %v, want %s", pr.Accepts[0]["payTo"], e.payTo)
	}

	// A browser gets the HTML paywall, still a 402 with the PAYMENT-REQUIRED header.
	b := mustDo(t, http.MethodGet, e.site+"/", map[string]string{
		"Accept":     "text/html,application/xhtml+xml",
		"User-Agent": "Mozilla/5.0 (X11; Linux x86_64)",
	})
	if b.Status != http.StatusPaymentRequired || b.Header.Get("PAYMENT-REQUIRED") == "" ||
		!strings.HasPrefix(b.Header.Get("Content-Type"), "text/html") {
		t.Errorf("browser GET: status %d, Content-Type %q, PAYMENT-REQUIRED set %v; want a 402 HTML paywall with the header",
			b.Status, b.Header.Get("Content-Type"), b.Header.Get("PAYMENT-REQUIRED") != "")
	}
	if n := e.up.count("") - before; n != 0 {
		t.Errorf("unpaid requests reached the upstream %d times", n)
	}
}

func testClientPaysAPI(t *testing.T, e *gateEnv, script string, payer testenv.Account, path string) {
	bal := balances(t, e.tok, payer.Address, e.payTo)
	out := payWith(t, script, payer, e.api+path+"?q=1", "X402_TOKEN="+e.tok.Address.Hex())
	if out.Status != http.StatusOK {
		t.Fatalf("%s: status %d, want 200: %s", script, out.Status, out.Body)
	}
	e.settledOne(1)
	var body struct {
		OK   bool   `json:"ok"`
		Path string `json:"path"`
	}
	if err := json.Unmarshal([]byte(out.Body), &body); err != nil || !body.OK || body.Path != path {
		t.Errorf("client received %q, want the upstream's JSON for %s", out.Body, path)
	}
	if out.PaymentResponseHeader == nil {
		t.Fatalf("%s: the paid response has no payment response header", script)
	}
	sr := decodeSettleResponse(t, *out.PaymentResponseHeader)
	if !sr.Success || !strings.EqualFold(sr.Payer, payer.Address.Hex()) {
		t.Errorf("payment response %+v, want success by %s", sr, payer.Address)
	}
	wantNetwork := "base-sepolia"
	if script == payV2Script {
		wantNetwork = "eip155:84532"
	}
	if sr.Network != wantNetwork {
		t.Errorf("payment response network %q, want %q", sr.Network, wantNetwork)
	}
	checkOnChain(t, e.chain, e.tok, sr.Transaction, payer.Address, e.payTo)
	wantDelta(t, e.tok, payer.Address, bal[0], -price)
	wantDelta(t, e.tok, e.payTo, bal[1], price)

	if n := e.up.count(path); n != 1 {
		t.Errorf("the upstream received %s %d times, want 1", path, n)
	}
	hit := e.up.last(t, path)
	if got := hit.Header.Get("X-Paid-By"); !strings.EqualFold(got, payer.Address.Hex()) {
		t.Errorf("upstream X-Paid-By (from {http.x402.payer}) = %q, want %s", got, payer.Address)
	}
	if got := hit.Header.Get("X-Paid-Tx"); !strings.EqualFold(got, sr.Transaction) {
		t.Errorf("upstream X-Paid-Tx (from {http.x402.tx}) = %q, want %s", got, sr.Transaction)
	}
	if got := hit.Header.Get("X-Paid-Amount"); got != "10000" {
		t.Errorf("upstream X-Paid-Amount (from {http.x402.amount}) = %q, want 10000 base units", got)
	}
	if got := hit.Header.Get("X-Paid-Network"); got != "base-sepolia" && got != "eip155:84532" {
		t.Errorf("upstream X-Paid-Network (from {http.x402.network}) = %q, want base-sepolia or eip155:84532", got)
	}
}

func testClientPaysPage(t *testing.T, e *gateEnv, script string, payer testenv.Account, path string) {
	want, err := os.ReadFile(filepath.Join(e.siteRoot, "index.html"))
	if err != nil {
		t.Fatal(err)
	}
	bal := balances(t, e.tok, payer.Address, e.payTo)
	out := payWith(t, script, payer, e.site+path, "X402_TOKEN="+e.tok.Address.Hex())
	if out.Status != http.StatusOK {
		t.Fatalf("%s: status %d, want 200: %s", script, out.Status, out.Body)
	}
	e.settledOne(1)
	if out.Body != string(want) {
		t.Errorf("%s received %q, want the file_server page", script, out.Body)
	}
	if out.PaymentResponseHeader == nil {
		t.Fatalf("%s: the paid page has no payment response header", script)
	}
	sr := decodeSettleResponse(t, *out.PaymentResponseHeader)
	checkOnChain(t, e.chain, e.tok, sr.Transaction, payer.Address, e.payTo)
	wantDelta(t, e.tok, payer.Address, bal[0], -price)
	wantDelta(t, e.tok, e.payTo, bal[1], price)
}

func testNeverReachedUnpaid(t *testing.T, e *gateEnv) {
	before := e.up.count("")
	cases := []struct {
		name    string
		method  string
		rawPath string
		header  map[string]string
		want    []int
	}{
		{"plain GET", http.MethodGet, "/api/secret", nil, []int{402}},
		{"POST", http.MethodPost, "/api/secret", nil, []int{402}},
		{"PUT", http.MethodPut, "/api/secret", nil, []int{402}},
		{"DELETE", http.MethodDelete, "/api/secret", nil, []int{402}},
		{"HEAD", http.MethodHead, "/api/secret", nil, []int{402}},
		// a CORS preflight (Origin and Access-Control-Request-Method) goes to the upstream
		// uncharged (docs/gate.md#cors-preflights, TestAuthorizationFlowThroughCaddy); an
		// OPTIONS that is not one pays like any request
		{"OPTIONS without preflight headers", http.MethodOptions, "/api/secret", map[string]string{"Origin": "http://evil.example"}, []int{402}},
		{"upper-case path", http.MethodGet, "/API/secret", nil, []int{402}},
		{"double slash", http.MethodGet, "//api/secret", nil, []int{402}},
		// docs/gate.md#ambiguous-paths: a dot segment is refused before the payment.
		{"dot segments", http.MethodGet, "/x/../api/secret", nil, []int{400}},
		{"dot slash", http.MethodGet, "/./api/secret", nil, []int{400}},
		{"encoded slash", http.MethodGet, "/api%2Fsecret", nil, []int{402}},
		{"encoded prefix", http.MethodGet, "/%61pi/secret", nil, []int{402}},
		{"query and fragment", http.MethodGet, "/api/secret?x402=paid", nil, []int{402}},
		{"trailing slash", http.MethodGet, "/api/", nil, []int{402}},
		{"outside /api", http.MethodGet, "/other", nil, []int{402}},
		{"garbage X-PAYMENT", http.MethodGet, "/api/secret", map[string]string{"X-PAYMENT": "not base64 !"}, []int{400, 402}},
		{"empty-object X-PAYMENT", http.MethodGet, "/api/secret", map[string]string{"X-PAYMENT": base64.StdEncoding.EncodeToString([]byte("{}"))}, []int{400, 402}},
		{"garbage PAYMENT-SIGNATURE", http.MethodGet, "/api/secret", map[string]string{"PAYMENT-SIGNATURE": "e30="}, []int{400, 402}},
		{"v1 payload in the v2 header", http.MethodGet, "/api/secret", map[string]string{"PAYMENT-SIGNATURE": mustV1HeaderLike(t, e)}, []int{400, 402}},
		{"forged payment response header", http.MethodGet, "/api/secret", map[string]string{"X-PAYMENT-RESPONSE": base64.StdEncoding.EncodeToString([]byte(`{"success":true}`))}, []int{402}},
	}
	for _, c := range cases {
		r, err := do(t, c.method, e.api+"/", c.rawPath, c.header)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		ok := false
		for _, s := range c.want {
			ok = ok || r.Status == s
		}
		if !ok {
			t.Errorf("%s %s (%s): status %d, want one of %v: %s", c.method, c.rawPath, c.name, r.Status, c.want, r.Body)
		}
	}
	if n := e.up.count("") - before; n != 0 {
		var paths []string
		for _, h := range e.up.all()[before:] {
			paths = append(paths, h.Method+" "+h.Path)
		}
		t.Errorf("unpaid requests reached the upstream %d times: %v", n, paths)
	}
}

// mustV1HeaderLike builds a well-formed, validly signed v1 payload, to send in the v2 header
// (its inner x402Version does not match the header that carried it).
func mustV1HeaderLike(t *testing.T, e *gateEnv) string {
	h, _ := goV1Header(t, e.tok, testenv.NewAccount(t), e.payTo)
	return h
}

func testReplay(t *testing.T, e *gateEnv, payer testenv.Account) {
	const path = "/api/replay"
	header := signOnly(t, payV1Script, payer, e.api+path)
	e.sent(header)
	bal := balances(t, e.tok, payer.Address, e.payTo)
	first := mustDo(t, http.MethodGet, e.api+path, map[string]string{"X-PAYMENT": header})
	if first.Status != http.StatusOK {
		t.Fatalf("first use: status %d, want 200: %s", first.Status, first.Body)
	}
	e.settledOne(1)
	for i := 0; i < 2; i++ {
		r := mustDo(t, http.MethodGet, e.api+path, map[string]string{"X-PAYMENT": header})
		if r.Status != http.StatusPaymentRequired {
			t.Fatalf("replay %d: status %d, want 402: %s", i+1, r.Status, r.Body)
		}
		var body struct {
			Error string `json:"error"`
		}
		_ = json.Unmarshal(r.Body, &body)
		// v1 enum values: the nonce is used on chain (invalid_transaction_state), or the
		// journal already holds the authorization (duplicate_settlement).
		if body.Error != "invalid_transaction_state" && body.Error != "duplicate_settlement" {
			t.Errorf("replay %d: error %q, want invalid_transaction_state or duplicate_settlement", i+1, body.Error)
		}
	}
	// Same header, other resource of the same route: still the same, spent authorization.
	r := mustDo(t, http.MethodGet, e.api+"/api/replay-elsewhere", map[string]string{"X-PAYMENT": header})
	if r.Status != http.StatusPaymentRequired {
		t.Errorf("replay on another path: status %d, want 402: %s", r.Status, r.Body)
	}
	wantDelta(t, e.tok, payer.Address, bal[0], -price)
	wantDelta(t, e.tok, e.payTo, bal[1], price)
	if n := e.up.count(path); n != 1 {
		t.Errorf("the upstream received %s %d times, want 1", path, n)
	}
	if n := e.up.count("/api/replay-elsewhere"); n != 0 {
		t.Errorf("a replayed header reached the upstream %d times", n)
	}
}

func testTamper(t *testing.T, e *gateEnv, script string, payer testenv.Account, version int) {
	path := "/api/tamper-v" + strconv.Itoa(version)
	headerName := "X-PAYMENT"
	if version == 2 {
		headerName = "PAYMENT-SIGNATURE"
	}
	original := signOnly(t, script, payer, e.api+path, "X402_TOKEN="+e.tok.Address.Hex())
	p := decodePaymentJSON(t, original)
	a := p.authorization(t)
	sig, err := hexutil.Decode(p.payload(t)["signature"].(string))
	if err != nil || len(sig) != 65 {
		t.Fatalf("the client's signature is not 65 bytes of hex")
	}
	other := testenv.NewAccount(t).Address

	// The facilitator matches the authorization to the requirements (payTo, then amount)
	// before it checks the signature, as the reference Go facilitator does: a changed amount
	// or payee is refused for what it is, whether or not the payer re-signed it.
	type tamper struct {
		name         string
		edit         func(p paymentJSON)
		v1, v2Reason string
	}
	bad := []tamper{
		{"signature byte flipped", func(p paymentJSON) {
			s := append([]byte(nil), sig...)
			s[31] ^= 0x01
			p.payload(t)["signature"] = hexutil.Encode(s)
		}, "invalid_exact_evm_payload_signature", "invalid_exact_evm_signature"},
		{"amount lowered, signature kept", func(p paymentJSON) {
			b := a
			b.Value = big.NewInt(price - 1)
			p.setAuthorization(t, b, nil)
		}, "invalid_exact_evm_payload_authorization_value", "invalid_exact_evm_payload_authorization_value_mismatch"},
		{"payTo changed, signature kept", func(p paymentJSON) {
			b := a
			b.To = other
			p.setAuthorization(t, b, nil)
		}, "invalid_exact_evm_payload_recipient_mismatch", "invalid_exact_evm_recipient_mismatch"},
		{"amount and payTo kept, validBefore extended", func(p paymentJSON) {
			b := a
			b.ValidBefore = new(big.Int).Add(a.ValidBefore, big.NewInt(30))
			p.setAuthorization(t, b, nil)
		}, "invalid_exact_evm_payload_signature", "invalid_exact_evm_signature"},
		{"payer swapped for another funded account", func(p paymentJSON) {
			b := a
			b.From = e.chain.Accounts[9].Address
			p.setAuthorization(t, b, nil)
		}, "invalid_exact_evm_payload_signature", "invalid_exact_evm_signature"},
		{"amount lowered and re-signed by the payer", func(p paymentJSON) {
			b := a
			b.Value = big.NewInt(price - 1)
			p.setAuthorization(t, b, e.tok.SignAuthorization(t, payer.Key, b))
		}, "invalid_exact_evm_payload_authorization_value", "invalid_exact_evm_payload_authorization_value_mismatch"},
		{"amount raised and re-signed by the payer", func(p paymentJSON) {
			b := a
			b.Value = big.NewInt(price + 1)
			p.setAuthorization(t, b, e.tok.SignAuthorization(t, payer.Key, b))
		}, "invalid_exact_evm_payload_authorization_value", "invalid_exact_evm_payload_authorization_value_mismatch"},
		{"payTo changed and re-signed by the payer", func(p paymentJSON) {
			b := a
			b.To = other
			p.setAuthorization(t, b, e.tok.SignAuthorization(t, payer.Key, b))
		}, "invalid_exact_evm_payload_recipient_mismatch", "invalid_exact_evm_recipient_mismatch"},
	}
	bal := balances(t, e.tok, payer.Address, e.payTo, other)
	before := e.up.count("")
	for _, c := range bad {
		q := p.clone(t)
		c.edit(q)
		h := q.encode(t)
		e.sent(h)
		r := mustDo(t, http.MethodGet, e.api+path, map[string]string{headerName: h})
		if r.Status != http.StatusPaymentRequired {
			t.Errorf("%s: status %d, want 402: %s", c.name, r.Status, r.Body)
			continue
		}
		var body struct {
			Error string `json:"error"`
		}
		if err := json.Unmarshal(r.Body, &body); err != nil {
			t.Errorf("%s: 402 body is not JSON: %s", c.name, r.Body)
		}
		wantBody := c.v1
		if version == 2 {
			wantBody = c.v2Reason
		}
		if body.Error != wantBody {
			t.Errorf("%s: body error %q, want %q", c.name, body.Error, wantBody)
		}
		raw, _ := base64.StdEncoding.DecodeString(r.Header.Get("PAYMENT-REQUIRED"))
		var pr struct {
			Error string `json:"error"`
		}
		_ = json.Unmarshal(raw, &pr)
		if pr.Error != c.v2Reason {
			t.Errorf("%s: PAYMENT-REQUIRED error %q, want %q", c.name, pr.Error, c.v2Reason)
		}
	}
	if n := e.up.count("") - before; n != 0 {
		t.Errorf("refused payments reached the upstream %d times", n)
	}
	wantDelta(t, e.tok, payer.Address, bal[0], 0)
	wantDelta(t, e.tok, e.payTo, bal[1], 0)
	wantDelta(t, e.tok, other, bal[2], 0)
	if e.tok.AuthorizationState(t, payer.Address, a.Nonce) {
		t.Fatalf("a refused tampering consumed the authorization's nonce")
	}

	// The untouched header still pays: the refusals consumed nothing.
	e.sent(original)
	r := mustDo(t, http.MethodGet, e.api+path, map[string]string{headerName: original})
	if r.Status != http.StatusOK {
		t.Fatalf("the untampered header after the refusals: status %d, want 200: %s", r.Status, r.Body)
	}
	e.settledOne(1)
	wantDelta(t, e.tok, payer.Address, bal[0], -price)
	if n := e.up.count(path); n != 1 {
		t.Errorf("the upstream received %s %d times, want 1", path, n)
	}
}

func testChainStateRefusals(t *testing.T, e *gateEnv) {
	const path = "/api/refused"
	funded, unfunded := e.chain.Accounts[9], testenv.NewAccount(t)
	now := time.Now().Unix()
	auth := func(from common.Address, after, before int64) testenv.Authorization {
		return testenv.Authorization{
			From: from, To: e.payTo, Value: big.NewInt(price),
			ValidAfter: big.NewInt(after), ValidBefore: big.NewInt(before), Nonce: testenv.RandomNonce(t),
		}
	}
	cases := []struct {
		name   string
		payer  testenv.Account
		a      testenv.Authorization
		v1, v2 string
	}{
		{"a payer without tokens", unfunded, auth(unfunded.Address, now-600, now+60),
			"insufficient_funds", "invalid_exact_evm_insufficient_balance"},
		{"an authorization that expired", funded, auth(funded.Address, now-600, now-1),
			"invalid_exact_evm_payload_authorization_valid_before", "invalid_exact_evm_payload_authorization_valid_before"},
		{"an authorization valid for 3 more seconds only (under the 6 s margin)", funded, auth(funded.Address, now-600, now+3),
			"invalid_exact_evm_payload_authorization_valid_before", "invalid_exact_evm_payload_authorization_valid_before"},
		{"an authorization valid only from tomorrow", funded, auth(funded.Address, now+86400, now+86460),
			"invalid_exact_evm_payload_authorization_valid_after", "invalid_exact_evm_payload_authorization_valid_after"},
	}
	bal := balances(t, e.tok, funded.Address, e.payTo)
	for _, c := range cases {
		h := goV1HeaderFor(t, e.tok, c.payer, c.a)
		e.sent(h)
		r := mustDo(t, http.MethodGet, e.api+path, map[string]string{"X-PAYMENT": h})
		if r.Status != http.StatusPaymentRequired {
			t.Errorf("%s: status %d, want 402: %s", c.name, r.Status, r.Body)
			continue
		}
		var body struct {
			Error string `json:"error"`
			Payer string `json:"payer"`
		}
		_ = json.Unmarshal(r.Body, &body)
		if body.Error != c.v1 {
			t.Errorf("%s: body error %q, want %q", c.name, body.Error, c.v1)
		}
		raw, _ := base64.StdEncoding.DecodeString(r.Header.Get("PAYMENT-REQUIRED"))
		var pr struct {
			Error string `json:"error"`
		}
		_ = json.Unmarshal(raw, &pr)
		if pr.Error != c.v2 {
			t.Errorf("%s: PAYMENT-REQUIRED error %q, want %q", c.name, pr.Error, c.v2)
		}
	}
	if n := e.up.count(path); n != 0 {
		t.Errorf("refused payments reached the upstream %d times", n)
	}
	wantDelta(t, e.tok, funded.Address, bal[0], 0)
	wantDelta(t, e.tok, e.payTo, bal[1], 0)
}

func testConcurrentOneHeader(t *testing.T, e *gateEnv, payer testenv.Account) {
	const path, n = "/api/concurrent", 20
	header := signOnly(t, payV2Script, payer, e.api+path, "X402_TOKEN="+e.tok.Address.Hex())
	e.sent(header)
	bal := balances(t, e.tok, payer.Address, e.payTo)
	from := blockNumber(t, e.chain)

	var start sync.WaitGroup
	start.Add(1)
	results := make([]httpResult, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			start.Wait()
			results[i], errs[i] = do(t, http.MethodGet, e.api+path, "", map[string]string{"PAYMENT-SIGNATURE": header})
		}(i)
	}
	start.Done()
	wg.Wait()

	ok, refused := 0, 0
	for i := range results {
		switch {
		case errs[i] != nil:
			t.Errorf("request %d: %v", i, errs[i])
		case results[i].Status == http.StatusOK:
			ok++
		case results[i].Status == http.StatusPaymentRequired:
			refused++
		default:
			t.Errorf("request %d: status %d, want 200 or 402: %s", i, results[i].Status, results[i].Body)
		}
	}
	if ok != 1 || refused != n-1 {
		t.Errorf("%d requests with one header: %d served, %d refused; want 1 and %d", n, ok, refused, n-1)
	}
	e.settledOne(1)
	if got := len(transfers(t, e.chain, e.tok, payer.Address, e.payTo, from+1)); got != 1 {
		t.Errorf("%d Transfer events from the payer, want exactly 1", got)
	}
	wantDelta(t, e.tok, payer.Address, bal[0], -price)
	wantDelta(t, e.tok, e.payTo, bal[1], price)
	if c := e.up.count(path); c != 1 {
		t.Errorf("the upstream received %s %d times, want 1", path, c)
	}
}

func testUpstreamFailedRetry(t *testing.T, e *gateEnv, payer testenv.Account) {
	const path = "/api/flaky-report"
	header := signOnly(t, payV1Script, payer, e.api+path)
	e.sent(header)
	bal := balances(t, e.tok, payer.Address, e.payTo)

	first := mustDo(t, http.MethodGet, e.api+path, map[string]string{"X-PAYMENT": header})
	if first.Status != http.StatusServiceUnavailable {
		t.Fatalf("first attempt: status %d, want the upstream's 503: %s", first.Status, first.Body)
	}
	e.settledOne(1)
	wantDelta(t, e.tok, payer.Address, bal[0], -price) // settled before the upstream ran
	firstTx := e.up.last(t, path).Header.Get("X-Paid-Tx")
	if !isHash(firstTx) {
		t.Fatalf("the upstream's first request carried X-Paid-Tx %q", firstTx)
	}
	if h := first.Header.Get("X-PAYMENT-RESPONSE"); h != "" {
		if sr := decodeSettleResponse(t, h); sr.Transaction != firstTx {
			t.Errorf("503's payment response names tx %s, the upstream saw %s", sr.Transaction, firstTx)
		}
	}

	token := e.retryToken(t, first)

	// The header alone is public once settled (the authorization and its signature are in
	// the transaction's calldata): without the token, or with another, it is refused as
	// spent and takes no credit.
	for _, h := range []map[string]string{
		{"X-PAYMENT": header},
		{"X-PAYMENT": header, "X-PAYMENT-RETRY": strings.Repeat("0", 64)},
	} {
		if r := mustDo(t, http.MethodGet, e.api+path, h); r.Status != http.StatusPaymentRequired || r.Header.Get("X-PAYMENT-RETRY") != "" {
			t.Fatalf("the header without its token: status %d, want 402: %s", r.Status, r.Body)
		}
	}
	if n := e.up.count(path); n != 1 {
		t.Fatalf("the upstream received %s %d times, want 1", path, n)
	}

	second := mustDo(t, http.MethodGet, e.api+path, map[string]string{"X-PAYMENT": header, "X-PAYMENT-RETRY": token})
	if second.Status != http.StatusOK {
		t.Fatalf("retry with the same header and its token: status %d, want 200: %s", second.Status, second.Body)
	}
	if n := e.up.count(path); n != 2 {
		t.Errorf("the upstream received %s %d times, want 2", path, n)
	}
	last := e.up.last(t, path).Header
	if got := last.Get("X-Paid-Tx"); !strings.EqualFold(got, firstTx) {
		t.Errorf("the retry carried X-Paid-Tx %q, want the first settlement %s", got, firstTx)
	}
	if last.Get("X-PAYMENT-RETRY") != "" || last.Get("X-PAYMENT") != "" {
		t.Errorf("the upstream received the retry token or the payment header")
	}
	if h := second.Header.Get("X-PAYMENT-RESPONSE"); h == "" {
		t.Errorf("the retried response has no X-PAYMENT-RESPONSE")
	} else if sr := decodeSettleResponse(t, h); !sr.Success || !strings.EqualFold(sr.Transaction, firstTx) {
		t.Errorf("the retried response's payment response %+v, want success with tx %s", sr, firstTx)
	}

	// The payment bought one good answer: after it, the header is spent, token or not.
	third := mustDo(t, http.MethodGet, e.api+path, map[string]string{"X-PAYMENT": header, "X-PAYMENT-RETRY": token})
	if third.Status != http.StatusPaymentRequired {
		t.Errorf("the header after a successful retry: status %d, want 402: %s", third.Status, third.Body)
	}
	if n := e.up.count(path); n != 2 {
		t.Errorf("the upstream received %s %d times, want 2", path, n)
	}
	wantDelta(t, e.tok, payer.Address, bal[0], -price)
	wantDelta(t, e.tok, e.payTo, bal[1], price)
}

func testUpstreamDownRetryMax(t *testing.T, e *gateEnv, payer testenv.Account) {
	header, _ := goV1Header(t, e.tok, payer, e.payTo)
	e.sent(header)
	bal := balances(t, e.tok, payer.Address, e.payTo)
	// The first attempt settles, then the proxy cannot connect (502: Caddy answers the
	// handler's error, with the retry token the gate set); each of the two retry credits
	// reaches the proxy again without a charge; then the header is spent.
	hdr := map[string]string{"X-PAYMENT": header}
	for i := 0; i < 3; i++ {
		r := mustDo(t, http.MethodGet, e.retry+"/report", hdr)
		if r.Status != http.StatusBadGateway {
			t.Fatalf("attempt %d: status %d, want the proxy's 502: %s", i+1, r.Status, r.Body)
		}
		if i == 0 {
			e.settledOne(1)
			hdr["X-PAYMENT-RETRY"] = e.retryToken(t, r)
		} else if r.Header.Get("X-PAYMENT-RETRY") != "" {
			t.Errorf("attempt %d: a failed retry earned a new token", i+1)
		}
		if h := r.Header.Get("X-PAYMENT-RESPONSE"); h == "" {
			t.Errorf("attempt %d: the 502 after settlement carries no X-PAYMENT-RESPONSE", i+1)
		} else if sr := decodeSettleResponse(t, h); !sr.Success || !isHash(sr.Transaction) {
			t.Errorf("attempt %d: payment response %+v, want the settlement", i+1, sr)
		}
	}
	r := mustDo(t, http.MethodGet, e.retry+"/report", hdr)
	if r.Status != http.StatusPaymentRequired {
		t.Errorf("after retry_max retries: status %d, want 402: %s", r.Status, r.Body)
	}
	wantDelta(t, e.tok, payer.Address, bal[0], -price)
	wantDelta(t, e.tok, e.payTo, bal[1], price)
}

func testRetryCreditSurvivesReload(t *testing.T, e *gateEnv, payer testenv.Account) {
	const path = "/api/flaky-across-reload"
	header, _ := goV1Header(t, e.tok, payer, e.payTo)
	e.sent(header)
	bal := balances(t, e.tok, payer.Address, e.payTo)
	first := mustDo(t, http.MethodGet, e.api+path, map[string]string{"X-PAYMENT": header})
	if first.Status != http.StatusServiceUnavailable {
		t.Fatalf("first attempt: status %d, want the upstream's 503: %s", first.Status, first.Body)
	}
	e.settledOne(1)
	token := e.retryToken(t, first)
	e.caddy.Reload(t, gateCaddyfile("premium data, after the retry credit"))
	r := mustDo(t, http.MethodGet, e.api+path, map[string]string{"X-PAYMENT": header, "X-PAYMENT-RETRY": token})
	if r.Status != http.StatusOK {
		t.Errorf("retry after the reload: status %d, want 200 (the credit was lost in the reload): %s", r.Status, r.Body)
	}
	if n := e.up.count(path); n != 2 && r.Status == http.StatusOK {
		t.Errorf("the upstream received %s %d times, want 2", path, n)
	}
	wantDelta(t, e.tok, payer.Address, bal[0], -price)
	wantDelta(t, e.tok, e.payTo, bal[1], price)
}

func testFacilitatorSite(t *testing.T, e *gateEnv) {
	if r := mustDo(t, http.MethodGet, e.fac+"/supported", nil); r.Status != http.StatusUnauthorized {
		t.Errorf("/supported without x-facilitator-key: status %d, want 401", r.Status)
	}
	if r := mustDo(t, http.MethodGet, e.fac+"/supported", map[string]string{"x-facilitator-key": "wrong"}); r.Status != http.StatusUnauthorized {
		t.Errorf("/supported with a wrong key: status %d, want 401", r.Status)
	}
	r := mustDo(t, http.MethodGet, e.fac+"/supported", map[string]string{"x-facilitator-key": e.apiKey})
	if r.Status != http.StatusOK {
		t.Fatalf("/supported with the key: status %d: %s", r.Status, r.Body)
	}
	var sup struct {
		Kinds []struct {
			X402Version int    `json:"x402Version"`
			Scheme      string `json:"scheme"`
			Network     string `json:"network"`
		} `json:"kinds"`
	}
	if err := json.Unmarshal(r.Body, &sup); err != nil {
		t.Fatalf("/supported body: %v: %s", err, r.Body)
	}
	var v1, v2 bool
	for _, k := range sup.Kinds {
		v1 = v1 || (k.X402Version == 1 && k.Network == "base-sepolia" && k.Scheme == "exact")
		v2 = v2 || (k.X402Version == 2 && k.Network == "eip155:84532" && k.Scheme == "exact")
	}
	if !v1 || !v2 {
		t.Errorf("/supported kinds lack exact on base-sepolia (v1) and eip155:84532 (v2): %s", r.Body)
	}
	if h := mustDo(t, http.MethodGet, e.fac+"/health", nil); h.Status != http.StatusOK {
		t.Errorf("/health without a key: status %d, want 200", h.Status)
	}
}

func testMetrics(t *testing.T, e *gateEnv) {
	// One of each, so that this subtest also stands alone: a challenge, a refusal for a bad
	// signature, a settlement.
	const path = "/api/metrics"
	payer := e.chain.Accounts[9]
	if r := mustDo(t, http.MethodGet, e.api+path, nil); r.Status != http.StatusPaymentRequired {
		t.Fatalf("unpaid: status %d, want 402", r.Status)
	}
	bad, a := goV1Header(t, e.tok, payer, e.payTo)
	p := decodePaymentJSON(t, bad)
	p.payload(t)["signature"] = hexutil.Encode(e.tok.SignAuthorization(t, testenv.NewAccount(t).Key, a))
	bad = p.encode(t)
	e.sent(bad)
	if r := mustDo(t, http.MethodGet, e.api+path, map[string]string{"X-PAYMENT": bad}); r.Status != http.StatusPaymentRequired {
		t.Fatalf("signed by someone else: status %d, want 402", r.Status)
	}
	good, _ := goV1Header(t, e.tok, payer, e.payTo)
	e.sent(good)
	if r := mustDo(t, http.MethodGet, e.api+path, map[string]string{"X-PAYMENT": good}); r.Status != http.StatusOK {
		t.Fatalf("paid: status %d, want 200: %s", r.Status, r.Body)
	}
	e.settledOne(1)

	m := e.caddy.Metrics(t)
	e.mu.Lock()
	settled := e.settled
	e.mu.Unlock()
	if v, n := metricSum(m, "caddy_x402_challenges_total"); n == 0 || v < 1 {
		t.Errorf("caddy_x402_challenges_total = %v over %d series, want >= 1", v, n)
	}
	if v, n := metricSum(m, "caddy_x402_verifications_total"); n == 0 || v < float64(settled) {
		t.Errorf("caddy_x402_verifications_total = %v over %d series, want >= %d", v, n, settled)
	}
	if _, n := metricSum(m, "caddy_x402_verifications_total", `reason="invalid_exact_evm_signature"`); n == 0 {
		t.Errorf("caddy_x402_verifications_total has no series with reason invalid_exact_evm_signature")
	}
	if _, n := metricSum(m, "caddy_x402_settlements_total", `network=`); n == 0 {
		t.Errorf("caddy_x402_settlements_total{network,outcome} is missing")
	}
	if v, _ := metricSum(m, "caddy_x402_settled_amount_total"); v != float64(settled*price) {
		t.Errorf("caddy_x402_settled_amount_total sums to %v, want %d (%d settlements of %d)", v, settled*price, settled, price)
	}
	for _, name := range []string{"caddy_x402_settle_duration_seconds_count"} {
		if _, n := metricSum(m, name); n == 0 {
			t.Errorf("%s is missing", name)
		}
	}
	if strings.Contains(strings.ToLower(m), strings.ToLower(e.chain.Accounts[1].Address.Hex())) {
		t.Errorf("metrics are labelled with a payer address")
	}
}

func testReloadMidTraffic(t *testing.T, e *gateEnv, payer testenv.Account) {
	const path, total, workers = "/api/reload", 32, 4
	reloadAt := []int32{4, 12, 20}
	type job struct {
		header string
		auth   testenv.Authorization
	}
	jobs := make(chan job, total)
	all := make([]job, 0, total)
	for i := 0; i < total; i++ {
		h, a := goV1Header(t, e.tok, payer, e.payTo)
		j := job{h, a}
		all = append(all, j)
		jobs <- j
		e.sent(h)
	}
	close(jobs)
	bal := balances(t, e.tok, payer.Address, e.payTo)

	status := make(map[string]int, total) // header -> status (0: transport error)
	var mu sync.Mutex
	var done, inFlight atomic.Int32
	quiet := make(chan int, len(reloadAt)) // reloads that began with no request in flight
	reloaded := make(chan error, 1)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				inFlight.Add(1)
				r, err := do(t, http.MethodGet, e.api+path, "", map[string]string{"X-PAYMENT": j.header})
				inFlight.Add(-1)
				mu.Lock()
				if err != nil {
					status[j.header] = 0
				} else {
					status[j.header] = r.Status
				}
				mu.Unlock()
				done.Add(1)
			}
		}()
	}
	// Reload three times while the workers run: each reload starts when a number of
	// requests have been answered, so requests are in flight on both sides of it.
	go func() {
		var err error
		for i, at := range reloadAt {
			for done.Load() < at && done.Load() < total {
				time.Sleep(10 * time.Millisecond)
			}
			if inFlight.Load() == 0 {
				quiet <- i + 1
			}
			if lerr := e.caddy.Load(gateCaddyfile("premium data, config " + strconv.Itoa(i+1))); lerr != nil && err == nil {
				err = lerr
			}
		}
		reloaded <- err
	}()
	wg.Wait()
	if err := <-reloaded; err != nil {
		t.Fatalf("reload: %v", err)
	}
	close(quiet)
	for i := range quiet {
		t.Errorf("reload %d began with no paid request in flight: the test did not exercise a reload mid-traffic", i)
	}

	served := 0
	for _, j := range all {
		s := status[j.header]
		used := e.tok.AuthorizationState(t, payer.Address, j.auth.Nonce)
		switch {
		case s == http.StatusOK && used:
			served++
		case s == http.StatusOK && !used:
			t.Errorf("a request was served but its authorization was never settled")
		case s != http.StatusOK && used:
			t.Errorf("a request was charged (nonce used on chain) but answered %d", s)
		}
	}
	e.settledOne(served)
	t.Logf("%d paid requests across 3 reloads: %d served, %d refused uncharged", total, served, total-served)
	if served == 0 {
		t.Errorf("no paid request was served across the reloads")
	}
	wantDelta(t, e.tok, payer.Address, bal[0], -int64(served)*price)
	wantDelta(t, e.tok, e.payTo, bal[1], int64(served)*price)
	if n := e.up.count(path); n != served {
		t.Errorf("the upstream received %d requests, %d were served", n, served)
	}

	// The last config is live, and it still pays.
	r := mustDo(t, http.MethodGet, e.api+path, nil)
	var body struct {
		Accepts []struct {
			Description string `json:"description"`
		} `json:"accepts"`
	}
	if err := json.Unmarshal(r.Body, &body); err != nil || len(body.Accepts) != 1 || body.Accepts[0].Description != "premium data, config 3" {
		t.Errorf("after the reloads the 402 is %s, want the description of config 3", r.Body)
	}
	h, _ := goV1Header(t, e.tok, payer, e.payTo)
	e.sent(h)
	if r := mustDo(t, http.MethodGet, e.api+path, map[string]string{"X-PAYMENT": h}); r.Status != http.StatusOK {
		t.Errorf("a paid request after the reloads: status %d, want 200: %s", r.Status, r.Body)
	} else {
		e.settledOne(1)
	}
}

func testAccessLogRedacted(t *testing.T, e *gateEnv) {
	logs := e.caddy.Logs()
	access := 0
	for _, line := range strings.Split(logs, "\n") {
		if !strings.Contains(line, `"http.log.access`) {
			continue
		}
		access++
		var entry struct {
			Request struct {
				Headers map[string][]string `json:"headers"`
			} `json:"request"`
		}
		if err := json.Unmarshal([]byte(line), &entry); err != nil {
			t.Errorf("access log line is not JSON: %v", err)
			continue
		}
		for k := range entry.Request.Headers {
			switch strings.ToLower(k) {
			case "x-payment", "payment-signature", "x-payment-retry", "x-api-key", "x-facilitator-key":
				t.Errorf("the access log keeps the %s request header", k)
			}
		}
	}
	if access == 0 {
		t.Fatalf("no access log entry found: the test cannot see what is logged")
	}
	e.mu.Lock()
	sent := append([]string(nil), e.sentHeaders...)
	e.mu.Unlock()
	if len(sent) == 0 {
		t.Fatal("no payment header was recorded")
	}
	leaked := 0
	lower := strings.ToLower(logs)
	for _, h := range sent {
		// The header as sent, or the signature it carries, decoded by someone and logged.
		sig, _ := decodePaymentJSON(t, h).payload(t)["signature"].(string)
		if strings.Contains(logs, h) || (len(sig) > 2 && strings.Contains(lower, strings.ToLower(sig[2:]))) {
			leaked++
		}
	}
	if leaked > 0 {
		t.Errorf("%d of %d payment header values appear in Caddy's output", leaked, len(sent))
	}
	e.mu.Lock()
	tokens := append([]string(nil), e.retryTokens...)
	e.mu.Unlock()
	if len(tokens) == 0 {
		t.Fatal("no retry token was recorded")
	}
	// No log line or field may hold a retry token: x402_redact deletes it from the request
	// headers and from the failed answer's response headers.
	for _, tok := range tokens {
		if strings.Contains(strings.ToLower(logs), tok) {
			t.Errorf("a retry token appears in Caddy's output")
		}
	}
	key := hexutil.Encode(crypto.FromECDSA(e.chain.FacilitatorAccount().Key))
	if strings.Contains(strings.ToLower(logs), strings.ToLower(key[2:])) {
		t.Errorf("the facilitator's signer key appears in Caddy's output")
	}
	if strings.Contains(logs, e.apiKey) {
		t.Errorf("the facilitator API key appears in Caddy's output")
	}
	// The RPC URL may carry a provider key; given as {env.X402_RPC_URL} it must stay out of
	// the logs and out of the config the admin endpoint serves.
	if strings.Contains(logs, e.chain.RPCURL) {
		t.Errorf("the RPC URL appears in Caddy's output")
	}
	cfg := mustDo(t, http.MethodGet, e.caddy.AdminURL+"/config/", nil)
	if cfg.Status != http.StatusOK {
		t.Fatalf("admin /config/: status %d", cfg.Status)
	}
	for what, secret := range map[string]string{"RPC URL": e.chain.RPCURL, "API key": e.apiKey, "signer key": key[2:]} {
		if strings.Contains(strings.ToLower(string(cfg.Body)), strings.ToLower(secret)) {
			t.Errorf("the %s appears in the config served by admin /config/", what)
		}
	}
}
