package integration_test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/ethereum/go-ethereum/common"

	"github.com/x402gate/x402gate/internal/testenv"
)

// permit2Caddyfile gates /exact/* (0.01 DAI by Permit2) and /upto/* (metered, at most
// 0.01 DAI) in front of {$UPSTREAM}; the bundled facilitator settles DAI, a plain ERC-20
// without EIP-3009, through Permit2 (docs/gate.md#permit2, docs/gate.md#metering).
const permit2Caddyfile = `{
` + globalOptions + `	x402 {
		facilitator {
			network base-sepolia {
				rpc {env.X402_RPC_URL}
				asset {$X402_TOKEN}
				asset_name USDC
				asset_version 2
				permit2_tokens {$DAI}
			}
			signer_key {file.{$X402_FACILITATOR_KEY_FILE}}
		}
	}
}

http://:{$PORT} {
	bind 127.0.0.1
	x402 /exact/* {
		price 0.01 DAI
		pay_to {$PAY_TO}
		network base-sepolia
		asset {$DAI}
		decimals 18
		symbol DAI
		transfer permit2
	}
	x402 /upto/* {
		scheme upto
		price 0.01 DAI
		pay_to {$PAY_TO}
		network base-sepolia
		asset {$DAI}
		decimals 18
		symbol DAI
	}
	reverse_proxy {$UPSTREAM}
}
`

// daiPrice is 0.01 DAI in base units (18 decimals): the price of /exact/*, the maximum of
// /upto/*.
var daiPrice = new(big.Int).Exp(big.NewInt(10), big.NewInt(16), nil)

// meteredUpstream answers every request 200 with its path, except the first request to
// /exact/flaky, which it answers 503; on /upto/ it reports the cost
// its query's cost names in X402-Cost, as a header, or for /upto/stream as the trailer of
// an SSE stream of 20 events it flushes one by one.
func meteredUpstream(t *testing.T) (*httptest.Server, *atomic.Int32) {
	var calls, flaky atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		if r.URL.Path == "/exact/flaky" && flaky.Add(1) == 1 {
			http.Error(w, "down for a moment", http.StatusServiceUnavailable)
			return
		}
		cost := r.URL.Query().Get("cost")
		if r.URL.Path == "/upto/stream" {
			w.Header().Set("Content-Type", "text/event-stream")
			w.Header().Set("Trailer", "X402-Cost")
			for i := range 20 {
				_, _ = fmt.Fprintf(w, "data: token %d\n\n", i)
				w.(http.Flusher).Flush()
			}
			w.Header().Set("X402-Cost", cost)
			return
		}
		if cost != "" {
			w.Header().Set("X402-Cost", cost)
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"path":"`+r.URL.Path+`"}`)
	}))
	t.Cleanup(srv.Close)
	return srv, &calls
}

// permit2Gate is the built binary on anvil with Permit2 and the x402 proxies at their
// canonical addresses, serving permit2Caddyfile.
type permit2Gate struct {
	chain *testenv.Chain
	dai   *testenv.PlainToken
	payTo common.Address
	base  string // http://127.0.0.1:<port>
	calls *atomic.Int32
}

func startPermit2Gate(t *testing.T) *permit2Gate {
	t.Helper()
	chain, tok := testenv.StartChainWithToken(t)
	chain.InstallPermit2(t)
	g := &permit2Gate{chain: chain, dai: chain.DeployPlainToken(t, "DAI", 18), payTo: testenv.NewAccount(t).Address}
	up, calls := meteredUpstream(t)
	g.calls = calls
	port := testenv.FreePort(t)
	testenv.StartCaddy(t, permit2Caddyfile, testenv.CaddyOptions{
		Env: []string{
			"X402_RPC_URL=" + chain.RPCURL, "X402_TOKEN=" + tok.Address.Hex(), "DAI=" + g.dai.Address.Hex(),
			"X402_FACILITATOR_KEY_FILE=" + writeKeyFile(t, chain.FacilitatorAccount()),
			"PAY_TO=" + g.payTo.Hex(), "UPSTREAM=" + up.URL, "PORT=" + strconv.Itoa(port),
		},
		WaitPorts: []int{port},
	})
	g.base = "http://127.0.0.1:" + strconv.Itoa(port)
	return g
}

// payer is a fresh account with 1 DAI and gas; approved, it has given Permit2 its one-time
// allowance.
func (g *permit2Gate) payer(t *testing.T, approved bool) testenv.Account {
	t.Helper()
	p := testenv.NewAccount(t)
	g.chain.SetBalance(t, p.Address, big.NewInt(1e18))
	g.dai.Mint(t, p.Address, new(big.Int).Exp(big.NewInt(10), big.NewInt(18), nil))
	if approved {
		g.dai.ApprovePermit2(t, p)
	}
	return p
}

// pay has @x402/fetch pay path with p's key.
func (g *permit2Gate) pay(t *testing.T, p testenv.Account, path string) payOutput {
	t.Helper()
	return payWith(t, payV2Script, p, g.base+path, "X402_TOKEN="+g.dai.Address.Hex())
}

// required is the PAYMENT-REQUIRED of path's 402, as JSON for testenv.SignPermit2.
func (g *permit2Gate) required(t *testing.T, path string) json.RawMessage {
	t.Helper()
	r := mustDo(t, http.MethodGet, g.base+path, nil)
	raw, err := base64.StdEncoding.DecodeString(r.Header.Get("PAYMENT-REQUIRED"))
	if r.Status != http.StatusPaymentRequired || err != nil {
		t.Fatalf("GET %s unpaid: %d %s (%v), want a 402 with PAYMENT-REQUIRED", path, r.Status, r.Body, err)
	}
	return raw
}

// wantDAI checks how much DAI addr gained (negative: lost) since before.
func (g *permit2Gate) wantDAI(t *testing.T, addr common.Address, before, delta *big.Int) {
	t.Helper()
	if got := new(big.Int).Sub(g.dai.BalanceOf(t, addr), before); got.Cmp(delta) != 0 {
		t.Errorf("%s's DAI moved by %s, want %s", addr.Hex(), got, delta)
	}
}

// settledAmount is the amount of a PAYMENT-RESPONSE, read as any client reads it.
func settledAmount(t *testing.T, header string) (success bool, amount string) {
	t.Helper()
	raw, err := base64.StdEncoding.DecodeString(header)
	var sr struct {
		Success bool   `json:"success"`
		Amount  string `json:"amount"`
	}
	if err != nil || json.Unmarshal(raw, &sr) != nil {
		t.Fatalf("PAYMENT-RESPONSE %q is not base64 JSON", header)
	}
	return sr.Success, sr.Amount
}

// TestPermit2ThroughCaddy: the built binary on anvil, `transfer permit2` for a plain
// ERC-20, and the real @x402/fetch client. A payer without the one-time Permit2 approval
// gets 412 permit2_allowance_required and nothing moves; once approved it pays, and the
// merchant receives exactly the price; the same payment header is refused after its good
// answer; 64 distinct payments signed by the real client and sent at once all settle.
func TestPermit2ThroughCaddy(t *testing.T) {
	g := startPermit2Gate(t)

	stranger := g.payer(t, false)
	before := g.dai.BalanceOf(t, stranger.Address)
	if out := g.pay(t, stranger, "/exact/report"); out.Status != http.StatusPreconditionFailed || !strings.Contains(out.Body, "permit2_allowance_required") {
		t.Errorf("a payer without the Permit2 approval: %d %s, want 412 permit2_allowance_required", out.Status, out.Body)
	}
	g.wantDAI(t, stranger.Address, before, new(big.Int))

	p := g.payer(t, true)
	payee, paid := g.dai.BalanceOf(t, g.payTo), g.dai.BalanceOf(t, p.Address)
	out := g.pay(t, p, "/exact/report")
	if out.Status != http.StatusOK || out.PaymentResponseHeader == nil {
		t.Fatalf("an approved payer: %d %s, want 200 with PAYMENT-RESPONSE", out.Status, out.Body)
	}
	if ok, amount := settledAmount(t, *out.PaymentResponseHeader); !ok || amount != daiPrice.String() {
		t.Errorf("PAYMENT-RESPONSE success %v amount %s, want success and %s", ok, amount, daiPrice)
	}
	g.wantDAI(t, g.payTo, payee, daiPrice)
	g.wantDAI(t, p.Address, paid, new(big.Int).Neg(daiPrice))

	header := signOnly(t, payV2Script, p, g.base+"/exact/replay", "X402_TOKEN="+g.dai.Address.Hex())
	if r := mustDo(t, http.MethodGet, g.base+"/exact/replay", map[string]string{"PAYMENT-SIGNATURE": header}); r.Status != http.StatusOK {
		t.Fatalf("a fresh header: %d %s, want 200", r.Status, r.Body)
	}
	payee = g.dai.BalanceOf(t, g.payTo)
	if r := mustDo(t, http.MethodGet, g.base+"/exact/replay", map[string]string{"PAYMENT-SIGNATURE": header}); r.Status != http.StatusPaymentRequired {
		t.Errorf("the same header again: %d %s, want 402", r.Status, r.Body)
	}
	g.wantDAI(t, g.payTo, payee, new(big.Int))

	// a retry credit, as for EIP-3009 (docs/gate.md#retry-credits): the upstream fails once
	// after the payment settled; the same header with the retry token reaches it again
	// without a second transfer, and once it answered well the header is refused
	header = signOnly(t, payV2Script, p, g.base+"/exact/flaky", "X402_TOKEN="+g.dai.Address.Hex())
	payee = g.dai.BalanceOf(t, g.payTo)
	failed := mustDo(t, http.MethodGet, g.base+"/exact/flaky", map[string]string{"PAYMENT-SIGNATURE": header})
	token := failed.Header.Get("X-Payment-Retry")
	if failed.Status != http.StatusServiceUnavailable || len(token) != 64 {
		t.Fatalf("a payment whose upstream fails: %d %s, retry token %q; want 503 with a token", failed.Status, failed.Body, token)
	}
	retried := mustDo(t, http.MethodGet, g.base+"/exact/flaky", map[string]string{"PAYMENT-SIGNATURE": header, "X-Payment-Retry": token})
	if retried.Status != http.StatusOK {
		t.Fatalf("the retry with its token: %d %s, want 200", retried.Status, retried.Body)
	}
	if r := mustDo(t, http.MethodGet, g.base+"/exact/flaky", map[string]string{"PAYMENT-SIGNATURE": header, "X-Payment-Retry": token}); r.Status != http.StatusPaymentRequired {
		t.Errorf("the header after its good answer: %d %s, want 402", r.Status, r.Body)
	}
	g.wantDAI(t, g.payTo, payee, daiPrice)

	const n = 64
	required := make([]any, n)
	for i := range required {
		required[i] = g.required(t, "/exact/many")
	}
	headers := testenv.SignPermit2(t, p, required...)
	payee = g.dai.BalanceOf(t, g.payTo)
	var wg sync.WaitGroup
	statuses := make([]int, n)
	for i, h := range headers {
		wg.Go(func() {
			r, err := do(t, http.MethodGet, g.base+"/exact/many", "", map[string]string{"PAYMENT-SIGNATURE": h})
			if err == nil {
				statuses[i] = r.Status
			}
		})
	}
	wg.Wait()
	for i, s := range statuses {
		if s != http.StatusOK {
			t.Errorf("concurrent payment %d: status %d, want 200", i, s)
		}
	}
	g.wantDAI(t, g.payTo, payee, new(big.Int).Mul(daiPrice, big.NewInt(n)))
}

// TestUptoThroughCaddy: the built binary on anvil, `scheme upto`, and the real @x402/evm
// upto client. The upstream reports 37% of the maximum and exactly that moves, reported
// in PAYMENT-RESPONSE; a report above the maximum is answered 502 cost_above_maximum,
// nothing moves and the client never sees the answer; a cost of 0 moves nothing and buys
// one answer; an SSE stream whose cost comes in a trailer is settled for it and arrives
// whole, without the trailer.
func TestUptoThroughCaddy(t *testing.T) {
	g := startPermit2Gate(t)
	p := g.payer(t, true)
	cost := new(big.Int).Div(new(big.Int).Mul(daiPrice, big.NewInt(37)), big.NewInt(100)) // 0.0037 DAI

	payee, paid := g.dai.BalanceOf(t, g.payTo), g.dai.BalanceOf(t, p.Address)
	out := g.pay(t, p, "/upto/report?cost="+url.QueryEscape("0.0037 DAI"))
	if out.Status != http.StatusOK || !strings.Contains(out.Body, "/upto/report") || out.PaymentResponseHeader == nil {
		t.Fatalf("a metered answer: %d %s, want 200 with PAYMENT-RESPONSE", out.Status, out.Body)
	}
	if ok, amount := settledAmount(t, *out.PaymentResponseHeader); !ok || amount != cost.String() {
		t.Errorf("PAYMENT-RESPONSE success %v amount %s, want success and %s", ok, amount, cost)
	}
	g.wantDAI(t, g.payTo, payee, cost)
	g.wantDAI(t, p.Address, paid, new(big.Int).Neg(cost))

	payee = g.dai.BalanceOf(t, g.payTo)
	out = g.pay(t, p, "/upto/report?cost="+url.QueryEscape("0.02 DAI"))
	if out.Status != http.StatusBadGateway || !strings.Contains(out.Body, "cost_above_maximum") || strings.Contains(out.Body, "/upto/report") {
		t.Errorf("a report above the maximum: %d %s, want 502 cost_above_maximum without the answer", out.Status, out.Body)
	}
	g.wantDAI(t, g.payTo, payee, new(big.Int))

	zero := testenv.SignPermit2(t, p, g.required(t, "/upto/free"))[0]
	payee = g.dai.BalanceOf(t, g.payTo)
	r := mustDo(t, http.MethodGet, g.base+"/upto/free?cost=0", map[string]string{"PAYMENT-SIGNATURE": zero})
	if ok, amount := settledAmount(t, r.Header.Get("PAYMENT-RESPONSE")); r.Status != http.StatusOK || !ok || amount != "0" {
		t.Errorf("a cost of 0: %d %s with PAYMENT-RESPONSE success %v amount %q, want 200, success and 0", r.Status, r.Body, ok, amount)
	}
	if r := mustDo(t, http.MethodGet, g.base+"/upto/free?cost=0", map[string]string{"PAYMENT-SIGNATURE": zero}); r.Status != http.StatusPaymentRequired {
		t.Errorf("the same header after its free answer: %d %s, want 402", r.Status, r.Body)
	}
	g.wantDAI(t, g.payTo, payee, new(big.Int))

	headers := testenv.SignPermit2(t, p, g.required(t, "/upto/stream"))
	payee = g.dai.BalanceOf(t, g.payTo)
	r = mustDo(t, http.MethodGet, g.base+"/upto/stream?cost="+url.QueryEscape("2500000000000000 base"), map[string]string{"PAYMENT-SIGNATURE": headers[0]})
	if r.Status != http.StatusOK || strings.Count(string(r.Body), "data: token") != 20 || r.Header.Get("X402-Cost") != "" {
		t.Fatalf("a streamed answer: %d %.300s (X402-Cost %q), want 200 with its 20 events and no cost report", r.Status, r.Body, r.Header.Get("X402-Cost"))
	}
	if ok, amount := settledAmount(t, r.Header.Get("PAYMENT-RESPONSE")); !ok || amount != "2500000000000000" {
		t.Errorf("the stream's PAYMENT-RESPONSE success %v amount %s, want success and 2500000000000000", ok, amount)
	}
	g.wantDAI(t, g.payTo, payee, big.NewInt(2_500_000_000_000_000))
}
