package paygate

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"

	"github.com/x402gate/x402gate/internal/testenv"
	"github.com/x402gate/x402gate/x402"
)

// guardianTestKey is the verdict service key of TestGuardianVerdictsThroughCaddy; no log
// line and no response body may carry it.
const guardianTestKey = "vk-guardian-caddy-0123456789abcdef"

// scriptedVerdicts is an httptest verdict service (docs/verdict.md#envelope): POST /transactions creates
// request "0xreq<n>", GET /transactions/0xreq<n>/approval-status answers with the
// current script. It records the key and body of every request. A real verdict service
// cannot be made to answer malformed JSON or stay pending on demand; that is why it is
// scripted here.
type scriptedVerdicts struct {
	srv     *httptest.Server
	mu      sync.Mutex
	status  func() (int, string)
	n       int
	submits []map[string]any
	gets    int
	keys    []string
	bearer  int
}

func newScriptedVerdicts(t *testing.T) *scriptedVerdicts {
	t.Helper()
	s := &scriptedVerdicts{}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		s.keys = append(s.keys, r.Header.Get("x-api-key"))
		if r.Header.Get("Authorization") != "" {
			s.bearer++
		}
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.Method == http.MethodPost && r.URL.Path == "/transactions":
			s.n++
			n := s.n
			var m map[string]any
			if err := json.Unmarshal(body, &m); err != nil {
				m = map[string]any{"unparsable": string(body)}
			}
			s.submits = append(s.submits, m)
			s.mu.Unlock()
			w.WriteHeader(http.StatusCreated)
			fmt.Fprintf(w, `{"id":"t%d","requestHash":"0xreq%d","description":"pay","status":"PENDING"}`, n, n)
		case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/transactions/0xreq") &&
			strings.HasSuffix(r.URL.Path, "/approval-status"):
			s.gets++
			status := s.status
			s.mu.Unlock()
			code, b := status()
			w.WriteHeader(code)
			_, _ = io.WriteString(w, b)
		default:
			s.mu.Unlock()
			w.WriteHeader(http.StatusNotFound)
			_, _ = io.WriteString(w, `{"statusCode":404}`)
		}
	}))
	t.Cleanup(s.srv.Close)
	return s
}

// script sets the approval-status answer and forgets what was recorded so far.
func (s *scriptedVerdicts) script(status func() (int, string)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.status, s.submits, s.gets, s.keys, s.bearer = status, nil, 0, nil, 0
}

// seen returns what the service received since the last script.
func (s *scriptedVerdicts) seen() (submits []map[string]any, gets int, keys []string, bearer int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]map[string]any(nil), s.submits...), s.gets, append([]string(nil), s.keys...), s.bearer
}

// guardianVerdict answers the approval-status GET with testenv.Verdict(outcome, code,
// human).
func guardianVerdict(outcome, code, human string) func() (int, string) {
	body := testenv.VerdictEnvelope(testenv.Verdict(outcome, code, human))
	return func() (int, string) { return http.StatusOK, body }
}

// verdictLogStatuses returns the status field of every "verdict" entry the bundled
// facilitator wrote to Caddy's log, in order.
func verdictLogStatuses(t *testing.T, logFile string) []string {
	t.Helper()
	b, err := os.ReadFile(logFile)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 64*1024), 4<<20)
	for sc.Scan() {
		var e struct {
			Msg    string `json:"msg"`
			Status string `json:"status"`
		}
		if json.Unmarshal(sc.Bytes(), &e) == nil && e.Msg == "verdict" {
			out = append(out, e.Status)
		}
	}
	return out
}

// awaitVerdictLog waits until Caddy's log holds n verdict entries and returns the last.
func awaitVerdictLog(t *testing.T, logFile string, n int) string {
	t.Helper()
	var got []string
	for i := 0; i < 100; i++ {
		if got = verdictLogStatuses(t, logFile); len(got) >= n {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if len(got) != n {
		t.Fatalf("Caddy's log holds %d verdict entries %q, want %d", len(got), got, n)
	}
	return got[n-1]
}

// TestGuardianVerdictsThroughCaddy runs Caddy in this process with a bundled facilitator in
// guardian_mode required whose verdict_url is a scripted verdict service and whose
// verdict_key comes from {env.*}, an x402 route in front of a recording upstream, and the
// facilitator API. Only an approved verdict lets a payment settle and reach the upstream;
// a rejected or malformed verdict is a 402 that moves no money and never calls the
// upstream (docs/verdict.md#fail-closed). The verdict key reaches the service in x-api-key only:
// never Caddy's logs, never a response body.
func TestGuardianVerdictsThroughCaddy(t *testing.T) {
	chain, tok := testenv.StartChainWithToken(t)
	isolateCaddy(t)
	dir := t.TempDir()
	runtimeLog, accessLog := filepath.Join(dir, "caddy.log"), filepath.Join(dir, "access.log")
	svc := newScriptedVerdicts(t)
	t.Setenv("X402_G_RPC", chain.RPCURL)
	t.Setenv("X402_G_SIGNER", hex.EncodeToString(crypto.FromECDSA(chain.FacilitatorAccount().Key)))
	t.Setenv("X402_G_VERDICT_URL", svc.srv.URL)
	t.Setenv("X402_G_VERDICT_KEY", guardianTestKey)
	up := &upstream{}
	upSrv := httptest.NewServer(up)
	defer upSrv.Close()

	merchant := testenv.NewAccount(t).Address
	payer := chain.Accounts[3]
	port := freePort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	stopCaddy(t)
	loadCaddy(t, fmt.Sprintf(`{
	admin off
	persist_config off
	auto_https off
	log {
		output file %[1]s
		format json
		level DEBUG
	}
	x402 {
		facilitator {
			network base-sepolia {
				rpc {env.X402_G_RPC}
				asset %[2]s
				asset_name USDC
				asset_version 2
			}
			signer_key {env.X402_G_SIGNER}
			guardian_mode required
			verdict_url {env.X402_G_VERDICT_URL}
			verdict_key {env.X402_G_VERDICT_KEY}
			verdict_poll 20ms 3 40ms
		}
	}
}
http://127.0.0.1:%[3]d {
	log {
		output file %[4]s
		format x402_redact json
	}
	x402 /api/* {
		price 0.01 USDC
		pay_to %[5]s
		network base-sepolia
	}
	handle /api/* {
		reverse_proxy %[6]s
	}
	handle_path /facilitator/* {
		x402_facilitator {
			api_key off
		}
	}
	respond "free"
}`, runtimeLog, tok.Address.Hex(), port, accessLog, merchant.Hex(), strings.TrimPrefix(upSrv.URL, "http://")))

	var bodies []string // every response body: none may carry the key
	send := func(req *http.Request) (*http.Response, string) {
		t.Helper()
		res, body := do(t, req)
		bodies = append(bodies, body)
		return res, body
	}
	// The route's v1 requirement, for the facilitator API's /verify.
	req, _ := http.NewRequest(http.MethodGet, base+"/api/item", nil)
	res, body := send(req)
	var challenge struct {
		Accepts []json.RawMessage `json:"accepts"`
	}
	if res.StatusCode != http.StatusPaymentRequired || json.Unmarshal([]byte(body), &challenge) != nil || len(challenge.Accepts) != 1 {
		t.Fatalf("unpaid request: %d %s", res.StatusCode, body)
	}
	if _, _, keys, _ := svc.seen(); len(keys) != 0 {
		t.Fatalf("an unpaid request reached the verdict service %d times", len(keys))
	}
	verdicts := 0 // verdict entries expected in Caddy's log so far

	// paidRefused sends a fresh payment through the gate and checks the refusal: a 402
	// whose body names the payer and whose errors are verdict_not_approved, no upstream
	// call, no money moved, one submit, and the facilitator's log names the status.
	paidRefused := func(t *testing.T, wantStatus string) (guardianReason string) {
		t.Helper()
		n, merchantBefore, payerBefore := up.count(), tok.BalanceOf(t, merchant), tok.BalanceOf(t, payer.Address)
		req, _ := http.NewRequest(http.MethodGet, base+"/api/item", nil)
		req.Header.Set("X-PAYMENT", paymentV1(t, tok, payer, merchant, 10000))
		res, body := send(req)
		var rb struct {
			X402Version int    `json:"x402Version"`
			Error       string `json:"error"`
			Payer       string `json:"payer"`
			Guardian    struct {
				Status string `json:"status"`
				Reason string `json:"reason"`
			} `json:"guardian"`
		}
		if res.StatusCode != http.StatusPaymentRequired || json.Unmarshal([]byte(body), &rb) != nil ||
			rb.X402Version != 1 || rb.Error != x402.ReasonVerdictNotApproved.V1() || rb.Payer != payer.Address.Hex() {
			t.Fatalf("got %d %s; want 402 with error %q and the payer", res.StatusCode, body, x402.ReasonVerdictNotApproved.V1())
		}
		if rb.Guardian.Status != wantStatus {
			t.Fatalf("402 body guardian status %q, want %q: %s", rb.Guardian.Status, wantStatus, body)
		}
		pr, err := x402.DecodePaymentRequired(res.Header.Get("PAYMENT-REQUIRED"))
		if err != nil || pr.Error != x402.ReasonVerdictNotApproved.V2() {
			t.Fatalf("PAYMENT-REQUIRED: %+v, %v; want error %q", pr, err, x402.ReasonVerdictNotApproved.V2())
		}
		if res.Header.Get("X-PAYMENT-RESPONSE") != "" {
			t.Fatalf("a refused payment carries X-PAYMENT-RESPONSE %q", res.Header.Get("X-PAYMENT-RESPONSE"))
		}
		if up.count() != n {
			t.Fatalf("the upstream was called %d times for a refused payment", up.count()-n)
		}
		if got := tok.BalanceOf(t, merchant); got.Cmp(merchantBefore) != 0 {
			t.Fatalf("merchant balance moved from %s to %s", merchantBefore, got)
		}
		if got := tok.BalanceOf(t, payer.Address); got.Cmp(payerBefore) != 0 {
			t.Fatalf("payer balance moved from %s to %s", payerBefore, got)
		}
		if submits, _, _, _ := svc.seen(); len(submits) != 1 {
			t.Fatalf("the verdict service saw %d submits, want 1", len(submits))
		}
		verdicts++
		if got := awaitVerdictLog(t, runtimeLog, verdicts); got != wantStatus {
			t.Fatalf("the facilitator logged verdict status %q, want %q", got, wantStatus)
		}
		return rb.Guardian.Reason
	}

	// apiVerify asks the facilitator API under Caddy to /verify a fresh payment and returns
	// its answer: the guardian status and reason travel in the /verify body (docs/facilitator.md#api).
	apiVerify := func(t *testing.T) (isValid bool, invalidReason, guardianStatus, guardianReason string) {
		t.Helper()
		h := paymentV1(t, tok, payer, merchant, 10000)
		payload, err := base64.StdEncoding.DecodeString(h)
		if err != nil {
			t.Fatal(err)
		}
		env, _ := json.Marshal(map[string]any{"x402Version": 1, "paymentPayload": json.RawMessage(payload), "paymentRequirements": challenge.Accepts[0]})
		req, _ := http.NewRequest(http.MethodPost, base+"/facilitator/verify", bytes.NewReader(env))
		req.Header.Set("Content-Type", "application/json")
		res, body := send(req)
		var vr struct {
			IsValid        bool   `json:"isValid"`
			InvalidReason  string `json:"invalidReason"`
			GuardianStatus string `json:"guardianStatus"`
			GuardianReason string `json:"guardianReason"`
		}
		if res.StatusCode != http.StatusOK || json.Unmarshal([]byte(body), &vr) != nil {
			t.Fatalf("/verify: %d %s", res.StatusCode, body)
		}
		verdicts++
		awaitVerdictLog(t, runtimeLog, verdicts)
		return vr.IsValid, vr.InvalidReason, vr.GuardianStatus, vr.GuardianReason
	}

	t.Run("approved verdict: settled, proxied once, the price moved", func(t *testing.T) {
		svc.script(guardianVerdict("approved", "allowed", "payment within policy"))
		n, merchantBefore, payerBefore := up.count(), tok.BalanceOf(t, merchant), tok.BalanceOf(t, payer.Address)
		req, _ := http.NewRequest(http.MethodGet, base+"/api/item", nil)
		req.Header.Set("X-PAYMENT", paymentV1(t, tok, payer, merchant, 10000))
		res, body := send(req)
		if res.StatusCode != http.StatusOK || body != `{"data":"paid content"}` {
			t.Fatalf("got %d %s; want 200 with the upstream's content", res.StatusCode, body)
		}
		if up.count() != n+1 {
			t.Fatalf("the upstream was called %d times, want once", up.count()-n)
		}
		sr, err := x402.DecodeSettleResponse(res.Header.Get("X-PAYMENT-RESPONSE"))
		if err != nil || !sr.Success {
			t.Fatalf("X-PAYMENT-RESPONSE: %+v, %v", sr, err)
		}
		rcpt, err := chain.Client.TransactionReceipt(t.Context(), common.HexToHash(sr.Transaction))
		if err != nil || rcpt.Status != 1 {
			t.Fatalf("tx %s: receipt %v, %v", sr.Transaction, rcpt, err)
		}
		price := big.NewInt(10000)
		if got := new(big.Int).Sub(tok.BalanceOf(t, merchant), merchantBefore); got.Cmp(price) != 0 {
			t.Fatalf("merchant received %s, want exactly %s", got, price)
		}
		if got := new(big.Int).Sub(payerBefore, tok.BalanceOf(t, payer.Address)); got.Cmp(price) != 0 {
			t.Fatalf("payer paid %s, want exactly %s", got, price)
		}
		submits, gets, keys, bearer := svc.seen()
		if len(submits) != 1 || gets < 1 {
			t.Fatalf("the verdict service saw %d submits and %d status reads, want 1 and at least 1", len(submits), gets)
		}
		for i, k := range keys {
			if k != guardianTestKey {
				t.Fatalf("verdict request %d had x-api-key %q, want the configured verdict_key", i, k)
			}
		}
		if bearer != 0 {
			t.Fatalf("%d verdict requests carried an Authorization header besides the key (docs/verdict.md#secrets)", bearer)
		}
		// The submit is the docs/verdict.md#paymentaction of this payment.
		sub := submits[0]
		ptx, _ := sub["proposedTx"].(map[string]any)
		if ptx["protocol"] != "payment" || ptx["rail"] != "x402" || ptx["chainId"] != float64(84532) ||
			ptx["payTo"] != merchant.Hex() || ptx["amount"] != "10000" || ptx["asset"] != tok.Address.Hex() ||
			sub["escrowAddress"] != payer.Address.Hex() {
			t.Fatalf("submitted PaymentAction = %v", sub)
		}
		verdicts++
		if got := awaitVerdictLog(t, runtimeLog, verdicts); got != "approved" {
			t.Fatalf("the facilitator logged verdict status %q, want approved", got)
		}
	})

	t.Run("rejected verdict: 402, no upstream, no money moved", func(t *testing.T) {
		svc.script(guardianVerdict("rejected", "recipient_not_allowed", "payee is not on the allowlist"))
		if why := paidRefused(t, "rejected"); why != "payee is not on the allowlist" {
			t.Fatalf("402 body guardian reason %q, want the verdict's", why)
		}
		svc.script(guardianVerdict("rejected", "recipient_not_allowed", "payee is not on the allowlist"))
		valid, reason, status, why := apiVerify(t)
		if valid || reason != x402.ReasonVerdictNotApproved.V1() || status != "rejected" || why != "payee is not on the allowlist" {
			t.Fatalf("/verify = valid %v, invalidReason %q, guardianStatus %q, guardianReason %q; want the rejection and its reason", valid, reason, status, why)
		}
	})

	t.Run("verdict still pending at the poll bound: 402 timeout, no upstream, no money moved", func(t *testing.T) {
		pending := guardianVerdict("pending", "pending", "evaluating")
		svc.script(pending)
		if why := paidRefused(t, "timeout"); why == "" {
			t.Fatal("402 body carries no guardian reason for the timeout")
		}
		// verdict_poll 20ms 3: exactly three status reads, then the refusal.
		if _, reads, _, _ := svc.seen(); reads != 3 {
			t.Fatalf("the verdict service saw %d status reads, want the bound of 3", reads)
		}
	})

	t.Run("malformed verdict JSON: 402, no upstream, no money moved", func(t *testing.T) {
		// Truncated mid-object, after "approved": a parser that reads prefixes would approve.
		malformed := func() (int, string) { return http.StatusOK, `{"verdict":{"schemaVersion":1,"outcome":"approved"` }
		svc.script(malformed)
		paidRefused(t, "error")
		svc.script(malformed)
		valid, reason, status, _ := apiVerify(t)
		if valid || reason != x402.ReasonVerdictNotApproved.V1() || status != "error" {
			t.Fatalf("/verify = valid %v, invalidReason %q, guardianStatus %q; want not approved with status error", valid, reason, status)
		}
	})

	t.Run("the verdict key never reaches a log or a response body", func(t *testing.T) {
		rt, err := os.ReadFile(runtimeLog)
		if err != nil {
			t.Fatal(err)
		}
		// The log is the one the checks above read: it names the verdict requests.
		if !bytes.Contains(rt, []byte("0xreq1")) {
			t.Fatalf("Caddy's log names no verdict request; it cannot show the key is absent:\n%s", rt)
		}
		if bytes.Contains(rt, []byte(guardianTestKey)) {
			t.Error("Caddy's log carries the verdict key")
		}
		// The facilitator API of this config is open on purpose (api_key off): said at start.
		if !bytes.Contains(rt, []byte("the facilitator API is open (api_key off)")) {
			t.Error("Caddy's log does not warn that the facilitator API is open")
		}
		acc, err := os.ReadFile(accessLog)
		if err != nil || !bytes.Contains(acc, []byte("/api/item")) {
			t.Fatalf("access log: %v\n%s", err, acc)
		}
		if bytes.Contains(acc, []byte(guardianTestKey)) {
			t.Error("the access log carries the verdict key")
		}
		for i, b := range bodies {
			if strings.Contains(b, guardianTestKey) {
				t.Errorf("response body %d carries the verdict key: %s", i, b)
			}
		}
	})
}
