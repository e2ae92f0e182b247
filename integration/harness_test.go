package integration_test

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/crypto"

	"github.com/x402gate/x402gate/internal/testenv"
)

// TestMain registers the secret canaries (secrets_test.go), runs the tests with the
// binary's own output scanned for them, fails the run when any output held one
// (docs/caddy.md#secrets), and deletes the Caddy build that testenv.CaddyBinary makes once
// for this test binary.
func TestMain(m *testing.M) {
	registerCanaries()
	stop := scanStdout()
	code := m.Run()
	stop()
	testenv.RemoveCaddyBuild()
	if hits := testenv.CanaryHits(); len(hits) > 0 {
		fmt.Fprintf(os.Stderr, "FAIL: secret canaries leaked (where: which secret):\n  %s\n", strings.Join(hits, "\n  "))
		code = 1
	}
	os.Exit(code)
}

// The node scripts that drive the real npm x402 clients against a running Caddy.
const (
	payV1Script = "scripts/pay-v1.mjs" // x402-fetch 1.2.0
	payV2Script = "scripts/pay-v2.mjs" // @x402/fetch 2.27 + @x402/evm ExactEvmScheme
)

// price is what every gated route of the test Caddyfile charges: 0.01 USDC in base units.
const price = 10_000

// requestBound bounds one HTTP request of a test to Caddy; it turns a hang into a failure.
const requestBound = 2 * time.Minute

// payOutput is what pay-v1.mjs and pay-v2.mjs print.
type payOutput struct {
	Status                int     `json:"status"`
	Body                  string  `json:"body"`
	PaymentResponseHeader *string `json:"paymentResponseHeader"`
	PaymentHeader         string  `json:"paymentHeader"`
	Pass                  string  `json:"pass"`
	PassExpires           string  `json:"passExpires"`
}

// payWith runs a pay script for payer against url; the key travels in the environment only.
func payWith(t *testing.T, script string, payer testenv.Account, url string, env ...string) payOutput {
	t.Helper()
	env = append(env, "X402_PAYER_KEY="+hexutil.Encode(crypto.FromECDSA(payer.Key)))
	out := testenv.RunNode(t, script, env, nil, url)
	testenv.ScanCanaries(t.Name()+": "+script+" output", out)
	var p payOutput
	if err := json.Unmarshal(out, &p); err != nil {
		t.Fatalf("%s printed no JSON: %v: %q", script, err, out)
	}
	return p
}

// signOnly makes a real client build its payment header for url (the 402 comes from Caddy)
// without sending the paid retry, and returns the header value.
func signOnly(t *testing.T, script string, payer testenv.Account, url string, env ...string) string {
	t.Helper()
	p := payWith(t, script, payer, url, append(env, "X402_SIGN_ONLY=1")...)
	if p.PaymentHeader == "" {
		t.Fatalf("%s built no payment header for %s", script, url)
	}
	return p.PaymentHeader
}

// settleResponse is a decoded X-PAYMENT-RESPONSE / PAYMENT-RESPONSE header, read here with
// encoding/json on purpose, independently of our own codec.
type settleResponse struct {
	Success     bool   `json:"success"`
	Transaction string `json:"transaction"`
	Network     string `json:"network"`
	Payer       string `json:"payer"`
	ErrorReason string `json:"errorReason"`
}

func decodeSettleResponse(t *testing.T, header string) settleResponse {
	t.Helper()
	raw, err := base64.StdEncoding.DecodeString(header)
	if err != nil {
		t.Fatalf("payment response header is not standard base64: %v", err)
	}
	var s settleResponse
	if err := json.Unmarshal(raw, &s); err != nil {
		t.Fatalf("payment response header JSON: %v: %s", err, raw)
	}
	return s
}

// httpResult is one request's answer.
type httpResult struct {
	Status int
	Header http.Header
	Body   []byte
}

// do sends one request to Caddy. rawPath, when not empty, is sent as the request target
// verbatim (no client-side cleaning), to probe path tricks. A "Host" entry of header is the
// request's Host.
func do(t testing.TB, method, url, rawPath string, header map[string]string) (httpResult, error) {
	ctx, cancel := context.WithTimeout(context.Background(), requestBound)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, url, nil)
	if err != nil {
		return httpResult{}, err
	}
	if rawPath != "" {
		req.URL.Opaque = rawPath
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	if h := header["Host"]; h != "" {
		req.Host = h
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return httpResult{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return httpResult{}, err
	}
	scanAnswer(t.Name(), resp.Header, body)
	return httpResult{Status: resp.StatusCode, Header: resp.Header, Body: body}, nil
}

func mustDo(t testing.TB, method, url string, header map[string]string) httpResult {
	t.Helper()
	r, err := do(t, method, url, "", header)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	return r
}

// upstream is the legacy API behind reverse_proxy: it records every request it receives.
// A path under /api/flaky answers 503 the first time it is asked for, and 200 after.
type upstream struct {
	srv  *httptest.Server
	mu   sync.Mutex
	hits []upstreamHit
	seen map[string]int
}

type upstreamHit struct {
	Method string
	Path   string
	Header http.Header
}

func startUpstream(t *testing.T) *upstream {
	u := &upstream{seen: map[string]int{}}
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.hits = append(u.hits, upstreamHit{Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone()})
		u.seen[r.URL.Path]++
		n := u.seen[r.URL.Path]
		u.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if strings.HasPrefix(r.URL.Path, "/api/flaky") && n == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, `{"error":"upstream overloaded"}`)
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"ok": true, "path": r.URL.Path, "call": n})
	}))
	t.Cleanup(u.srv.Close)
	return u
}

// count returns how many requests reached the upstream, in total or (with a path) for one path.
func (u *upstream) count(path string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	if path == "" {
		return len(u.hits)
	}
	return u.seen[path]
}

// last returns the latest request for path.
func (u *upstream) last(t *testing.T, path string) upstreamHit {
	t.Helper()
	u.mu.Lock()
	defer u.mu.Unlock()
	for i := len(u.hits) - 1; i >= 0; i-- {
		if u.hits[i].Path == path {
			return u.hits[i]
		}
	}
	t.Fatalf("the upstream never received %s", path)
	return upstreamHit{}
}

// all returns a copy of every recorded request.
func (u *upstream) all() []upstreamHit {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]upstreamHit(nil), u.hits...)
}

// writeKeyFile writes a private key as 0x-hex to a 0600 file for {file.…} placeholders.
func writeKeyFile(t *testing.T, a testenv.Account) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "facilitator.key")
	if err := os.WriteFile(p, []byte(hexutil.Encode(crypto.FromECDSA(a.Key))+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// transfers returns the token's Transfer events from from to to in blocks [fromBlock, latest].
func transfers(t *testing.T, chain *testenv.Chain, tok *testenv.Token, from, to common.Address, fromBlock uint64) []types.Log {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	transferTopic := crypto.Keccak256Hash([]byte("Transfer(address,address,uint256)"))
	logs, err := chain.Client.FilterLogs(ctx, ethereum.FilterQuery{
		FromBlock: new(big.Int).SetUint64(fromBlock),
		Addresses: []common.Address{tok.Address},
		Topics: [][]common.Hash{
			{transferTopic},
			{common.BytesToHash(from.Bytes())},
			{common.BytesToHash(to.Bytes())},
		},
	})
	if err != nil {
		t.Fatalf("filter Transfer logs: %v", err)
	}
	return logs
}

func blockNumber(t *testing.T, chain *testenv.Chain) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, err := chain.Client.BlockNumber(ctx)
	if err != nil {
		t.Fatalf("block number: %v", err)
	}
	return n
}

// checkOnChain checks that tx is mined with status 1 and moved exactly price from payer to payTo.
func checkOnChain(t *testing.T, chain *testenv.Chain, tok *testenv.Token, tx string, payer, payTo common.Address) {
	t.Helper()
	if !isHash(tx) {
		t.Fatalf("transaction %q is not a 32-byte hex hash", tx)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := chain.Client.TransactionReceipt(ctx, common.HexToHash(tx))
	if err != nil {
		t.Fatalf("receipt of %s: %v", tx, err)
	}
	if r.Status != types.ReceiptStatusSuccessful {
		t.Fatalf("transaction %s has receipt status %d, want 1", tx, r.Status)
	}
	transferTopic := crypto.Keccak256Hash([]byte("Transfer(address,address,uint256)"))
	found := 0
	for _, l := range r.Logs {
		if l.Address == tok.Address && len(l.Topics) == 3 && l.Topics[0] == transferTopic &&
			common.BytesToAddress(l.Topics[1].Bytes()) == payer && common.BytesToAddress(l.Topics[2].Bytes()) == payTo &&
			new(big.Int).SetBytes(l.Data).Cmp(big.NewInt(price)) == 0 {
			found++
		}
	}
	if found != 1 {
		t.Fatalf("transaction %s carries %d Transfer(%s → %s, %d) logs, want 1", tx, found, payer, payTo, price)
	}
}

func isHash(s string) bool {
	b, err := hexutil.Decode(s)
	return err == nil && len(b) == 32
}

// balances snapshots the token balances of some addresses.
func balances(t *testing.T, tok *testenv.Token, addrs ...common.Address) []*big.Int {
	t.Helper()
	out := make([]*big.Int, len(addrs))
	for i, a := range addrs {
		out[i] = tok.BalanceOf(t, a)
	}
	return out
}

// wantDelta checks that addr's balance moved from before by exactly delta base units.
func wantDelta(t testing.TB, tok *testenv.Token, addr common.Address, before *big.Int, delta int64) {
	t.Helper()
	got := new(big.Int).Sub(tok.BalanceOf(t, addr), before)
	if got.Cmp(big.NewInt(delta)) != 0 {
		t.Errorf("balance of %s moved by %s, want %d", addr, got, delta)
	}
}

// paymentJSON is a payment header decoded generically, to tamper with it and re-encode it.
type paymentJSON map[string]any

func decodePaymentJSON(t *testing.T, header string) paymentJSON {
	t.Helper()
	raw, err := base64.StdEncoding.DecodeString(header)
	if err != nil {
		t.Fatalf("payment header is not standard base64: %v", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.UseNumber()
	var p paymentJSON
	if err := dec.Decode(&p); err != nil {
		t.Fatalf("payment header JSON: %v", err)
	}
	return p
}

func (p paymentJSON) encode(t *testing.T) string {
	t.Helper()
	raw, err := json.Marshal(map[string]any(p))
	if err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(raw)
}

func (p paymentJSON) payload(t *testing.T) map[string]any {
	t.Helper()
	pl, ok := p["payload"].(map[string]any)
	if !ok {
		t.Fatalf("payment header has no payload object")
	}
	return pl
}

// authorization returns the EIP-3009 authorization the payload carries.
func (p paymentJSON) authorization(t *testing.T) testenv.Authorization {
	t.Helper()
	a, ok := p.payload(t)["authorization"].(map[string]any)
	if !ok {
		t.Fatalf("payment header has no authorization")
	}
	str := func(k string) string {
		s, ok := a[k].(string)
		if !ok {
			t.Fatalf("authorization.%s is not a string", k)
		}
		return s
	}
	out := testenv.Authorization{
		From:        common.HexToAddress(str("from")),
		To:          common.HexToAddress(str("to")),
		Value:       mustBig(t, str("value")),
		ValidAfter:  mustBig(t, str("validAfter")),
		ValidBefore: mustBig(t, str("validBefore")),
	}
	n, err := hexutil.Decode(str("nonce"))
	if err != nil || len(n) != 32 {
		t.Fatalf("authorization.nonce is not 32 bytes of hex")
	}
	copy(out.Nonce[:], n)
	return out
}

// clone deep-copies p through JSON.
func (p paymentJSON) clone(t *testing.T) paymentJSON {
	t.Helper()
	return decodePaymentJSON(t, p.encode(t))
}

// setAuthorization writes a (and, when sig is not nil, the signature) into the payload.
func (p paymentJSON) setAuthorization(t *testing.T, a testenv.Authorization, sig []byte) {
	t.Helper()
	pl := p.payload(t)
	pl["authorization"] = map[string]any{
		"from":        a.From.Hex(),
		"to":          a.To.Hex(),
		"value":       a.Value.String(),
		"validAfter":  a.ValidAfter.String(),
		"validBefore": a.ValidBefore.String(),
		"nonce":       hexutil.Encode(a.Nonce[:]),
	}
	if sig != nil {
		pl["signature"] = hexutil.Encode(sig)
	}
}

// goV1Header builds an X-PAYMENT header in Go the way x402-fetch 1.2.0 does (chain_test.go
// checks the harness's signatures against the real client): validAfter now-600, validBefore
// now+60 by the wall clock, a random nonce.
func goV1Header(t testing.TB, tok *testenv.Token, payer testenv.Account, payTo common.Address) (string, testenv.Authorization) {
	t.Helper()
	now := time.Now().Unix()
	a := testenv.Authorization{
		From: payer.Address, To: payTo, Value: big.NewInt(price),
		ValidAfter: big.NewInt(now - 600), ValidBefore: big.NewInt(now + 60),
		Nonce: testenv.RandomNonce(t),
	}
	return goV1HeaderFor(t, tok, payer, a), a
}

// goV1HeaderFor signs a with payer's key and encodes it as an X-PAYMENT header value.
func goV1HeaderFor(t testing.TB, tok *testenv.Token, payer testenv.Account, a testenv.Authorization) string {
	t.Helper()
	sig := tok.SignAuthorization(t, payer.Key, a)
	raw, err := json.Marshal(map[string]any{
		"x402Version": 1, "scheme": "exact", "network": "base-sepolia",
		"payload": map[string]any{
			"signature": hexutil.Encode(sig),
			"authorization": map[string]any{
				"from": a.From.Hex(), "to": a.To.Hex(), "value": a.Value.String(),
				"validAfter": a.ValidAfter.String(), "validBefore": a.ValidBefore.String(),
				"nonce": hexutil.Encode(a.Nonce[:]),
			},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(raw)
}

// metricSum parses Prometheus text and sums the samples of family name whose labels contain
// every label in match (`key="value"` fragments).
func metricSum(text, name string, match ...string) (sum float64, samples int) {
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		metric, value, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		series, labels, _ := strings.Cut(metric, "{")
		if series != name {
			continue
		}
		all := true
		for _, m := range match {
			if !strings.Contains(labels, m) {
				all = false
			}
		}
		if !all {
			continue
		}
		if i := strings.IndexByte(value, ' '); i >= 0 {
			value = value[:i]
		}
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			continue
		}
		sum += v
		samples++
	}
	return sum, samples
}

// prettyHeaders is for failure messages.
func prettyHeaders(h http.Header) string {
	var b strings.Builder
	for k, v := range h {
		fmt.Fprintf(&b, "%s: %s\n", k, strings.Join(v, ", "))
	}
	return b.String()
}

// recapped is a test whose failures are logged again at its very end, after the Caddy
// output testenv logs for a failed test, so that the tail of a CI log shows them.
type recapped struct {
	testing.TB
	msgs *[]string
	mu   *sync.Mutex
}

// recap wraps t; call it before starting anything whose cleanup logs, so that its own
// cleanup runs last.
func recap(t *testing.T) recapped {
	r := recapped{TB: t, msgs: new([]string), mu: new(sync.Mutex)}
	t.Cleanup(func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		if len(*r.msgs) > 0 {
			t.Logf("the failures again, after the instances' output:\n%s", strings.Join(*r.msgs, "\n"))
		}
	})
	return r
}

// of is r for t, a subtest of r's test: its failures are recapped with r's.
func (r recapped) of(t testing.TB) recapped { return recapped{TB: t, msgs: r.msgs, mu: r.mu} }

func (r recapped) note(msg string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	*r.msgs = append(*r.msgs, r.TB.Name()+": "+msg)
}

func (r recapped) Error(args ...any) {
	r.TB.Helper()
	r.Errorf("%s", fmt.Sprint(args...))
}

func (r recapped) Errorf(format string, args ...any) {
	r.TB.Helper()
	r.note(fmt.Sprintf(format, args...))
	r.TB.Errorf(format, args...)
}

func (r recapped) Fatal(args ...any) {
	r.TB.Helper()
	r.Fatalf("%s", fmt.Sprint(args...))
}

func (r recapped) Fatalf(format string, args ...any) {
	r.TB.Helper()
	r.note(fmt.Sprintf(format, args...))
	r.TB.Fatalf(format, args...)
}

// testChainFacilitator is the body of a Caddyfile's global `x402 { facilitator { … } }` for
// the test chain: base-sepolia with our token, the RPC URL and the signer key from the
// environment (X402_RPC_URL, X402_TOKEN, X402_FACILITATOR_KEY_FILE).
const testChainFacilitator = `network base-sepolia {
				rpc {env.X402_RPC_URL}
				asset {$X402_TOKEN}
				asset_name USDC
				asset_version 2
			}
			signer_key {file.{$X402_FACILITATOR_KEY_FILE}}`

// globalOptions opens a test Caddyfile's global options block: the admin address StartCaddy
// picked, no automatic HTTPS, and Caddy's default log redacted (docs/caddy.md#secrets).
const globalOptions = "\tadmin {$CADDY_ADMIN}\n\tauto_https off\n\tlog default {\n\t\toutput stderr\n\t\tformat x402_redact json\n\t}\n"
