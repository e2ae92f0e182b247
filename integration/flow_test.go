package integration_test

import (
	"context"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"

	"github.com/x402gate/x402gate/internal/testenv"
)

// flowCaddyfile gates /paid/* with the authorization flow in front of {$UPSTREAM}.
const flowCaddyfile = `{
	admin {$CADDY_ADMIN}
	auto_https off
	x402 {
		facilitator {
			` + testChainFacilitator + `
		}
	}
}

http://:{$PORT} {
	bind 127.0.0.1
	x402 /paid/* {
		price 0.01 USDC
		pay_to {$PAY_TO}
		network base-sepolia
		mime_type application/json
		flow authorization
	}
	reverse_proxy {$UPSTREAM}
}
`

// paidAnswer is the answer the flow's upstream gives when it answers well.
const paidAnswer = `{"data":"the paid answer"}`

// flowUpstream answers as its mode says: "fail" 503, "ok" 200 paidAnswer, "huge" 200 with
// more than 9 MiB of body, and "drain" 200
// paidAnswer after it has moved every token of drainFrom away (the payer spends its money
// while the upstream runs, before the gate settles). It answers an OPTIONS 204 with the
// CORS headers of a preflight.
type flowUpstream struct {
	srv        *httptest.Server
	mode       atomic.Value
	calls      atomic.Int32
	preflights atomic.Int32 // CORS preflights it answered
	mu         sync.Mutex
	drainErr   error
	drainFrom  testenv.Account
}

func startFlowUpstream(t *testing.T, chain *testenv.Chain, tok *testenv.Token) *flowUpstream {
	u := &flowUpstream{}
	u.mode.Store("fail")
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodOptions {
			u.preflights.Add(1)
			w.Header().Set("Access-Control-Allow-Headers", "PAYMENT-SIGNATURE")
			w.WriteHeader(http.StatusNoContent)
			return
		}
		u.calls.Add(1)
		switch u.mode.Load() {
		case "fail":
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, `{"error":"upstream overloaded"}`)
			return
		case "huge":
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, strings.Repeat(" ", 9<<20)+paidAnswer) // past the gate's 8 MiB buffer
			return
		case "drain":
			u.mu.Lock()
			u.drainErr = drain(r.Context(), chain, tok, u.drainFrom)
			u.mu.Unlock()
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, paidAnswer)
	}))
	t.Cleanup(u.srv.Close)
	return u
}

// drain moves every token of from to a fresh address, in a transaction from signs.
func drain(ctx context.Context, chain *testenv.Chain, tok *testenv.Token, from testenv.Account) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	var all big.Int
	all.SetInt64(1_000_000) // newPayer's whole balance
	to := common.HexToAddress("0x000000000000000000000000000000000000dEaD")
	data := append([]byte{0xa9, 0x05, 0x9c, 0xbb}, common.LeftPadBytes(to.Bytes(), 32)...) // transfer(address,uint256)
	data = append(data, common.LeftPadBytes(all.Bytes(), 32)...)
	_, err := chain.SendAndWait(ctx, from, &tok.Address, data, 0)
	return err
}

// TestAuthorizationFlowThroughCaddy: the built binary on anvil, a route with `flow
// authorization`, and a payment header signed by the real @x402/fetch client. A CORS
// preflight reaches the upstream uncharged. An upstream
// 503 moves nothing on chain and leaves the authorization unused; the same header then
// pays once the upstream recovers (after an answer too long to buffer, which moves nothing
// either), exactly once, and buys one good answer. A payer who
// spends its tokens while the upstream runs gets 402 with a PAYMENT-RESPONSE of success
// false and never the answer.
func TestAuthorizationFlowThroughCaddy(t *testing.T) {
	chain, tok := testenv.StartChainWithToken(t)
	payTo := testenv.NewAccount(t).Address
	up := startFlowUpstream(t, chain, tok)
	port := testenv.FreePort(t)
	testenv.StartCaddy(t, flowCaddyfile, testenv.CaddyOptions{
		Env: []string{
			"X402_RPC_URL=" + chain.RPCURL, "X402_TOKEN=" + tok.Address.Hex(),
			"X402_FACILITATOR_KEY_FILE=" + writeKeyFile(t, chain.FacilitatorAccount()),
			"PAY_TO=" + payTo.Hex(), "UPSTREAM=" + up.srv.URL, "PORT=" + strconv.Itoa(port),
		},
		WaitPorts: []int{port},
	})
	url := "http://127.0.0.1:" + strconv.Itoa(port) + "/paid/report"
	token := "X402_TOKEN=" + tok.Address.Hex()

	pre := mustDo(t, http.MethodOptions, url, map[string]string{"Origin": "https://app.example", "Access-Control-Request-Method": "GET"})
	if pre.Status != http.StatusNoContent || up.preflights.Load() != 1 {
		t.Errorf("a CORS preflight: %d %s, the upstream answered %d; want its 204", pre.Status, pre.Body, up.preflights.Load())
	}

	payer := newPayer(t, tok)
	header := signOnly(t, payV2Script, payer, url, token)
	nonce := decodePaymentJSON(t, header).authorization(t).Nonce
	bal := balances(t, tok, payer.Address, payTo)
	sent := signerNonce(t, chain)

	r := mustDo(t, http.MethodGet, url, map[string]string{"PAYMENT-SIGNATURE": header})
	if r.Status != http.StatusServiceUnavailable || r.Header.Get("PAYMENT-RESPONSE") != "" || r.Header.Get("X-PAYMENT-RETRY") != "" {
		t.Fatalf("an upstream 503: %d %s (PAYMENT-RESPONSE %q, X-PAYMENT-RETRY %q), want the 503 as it is",
			r.Status, r.Body, r.Header.Get("PAYMENT-RESPONSE"), r.Header.Get("X-PAYMENT-RETRY"))
	}
	wantDelta(t, tok, payer.Address, bal[0], 0)
	wantDelta(t, tok, payTo, bal[1], 0)
	if n := signerNonce(t, chain); n != sent || tok.AuthorizationState(t, payer.Address, nonce) {
		t.Fatalf("after the 503 the facilitator sent %d transactions and the authorization is used: %v", n-sent, tok.AuthorizationState(t, payer.Address, nonce))
	}

	up.mode.Store("huge")
	r = mustDo(t, http.MethodGet, url, map[string]string{"PAYMENT-SIGNATURE": header})
	if r.Status != http.StatusBadGateway || !strings.Contains(string(r.Body), "response_too_large") || r.Header.Get("PAYMENT-RESPONSE") != "" {
		t.Errorf("an answer past the buffer: %d %.300s, want 502 response_too_large and no settle response", r.Status, r.Body)
	}
	wantDelta(t, tok, payer.Address, bal[0], 0)

	up.mode.Store("ok")
	r = mustDo(t, http.MethodGet, url, map[string]string{"PAYMENT-SIGNATURE": header})
	if r.Status != http.StatusOK || string(r.Body) != paidAnswer {
		t.Fatalf("the same header once the upstream recovered: %d %s, want 200 %s", r.Status, r.Body, paidAnswer)
	}
	s := decodeSettleResponse(t, r.Header.Get("PAYMENT-RESPONSE"))
	if !s.Success {
		t.Fatalf("settle response %+v, want success", s)
	}
	checkOnChain(t, chain, tok, s.Transaction, payer.Address, payTo)
	wantDelta(t, tok, payer.Address, bal[0], -price)
	wantDelta(t, tok, payTo, bal[1], price)
	if r := mustDo(t, http.MethodGet, url, map[string]string{"PAYMENT-SIGNATURE": header}); r.Status != http.StatusPaymentRequired {
		t.Errorf("the same header after its good answer: %d %s, want 402", r.Status, r.Body)
	}
	if n := up.calls.Load(); n != 3 {
		t.Errorf("the upstream ran %d times, want 3 (the 503, the long answer and the good one)", n)
	}

	spender := newPayer(t, tok)
	chain.SetBalance(t, spender.Address, big.NewInt(1e18)) // gas for its own transfer
	header = signOnly(t, payV2Script, spender, url, token)
	up.mu.Lock()
	up.drainFrom = spender
	up.mu.Unlock()
	up.mode.Store("drain")
	payee := tok.BalanceOf(t, payTo)
	r = mustDo(t, http.MethodGet, url, map[string]string{"PAYMENT-SIGNATURE": header})
	up.mu.Lock()
	if up.drainErr != nil {
		t.Fatalf("the payer's transfer while the upstream ran: %v", up.drainErr)
	}
	up.mu.Unlock()
	s = decodeSettleResponse(t, r.Header.Get("PAYMENT-RESPONSE"))
	if r.Status != http.StatusPaymentRequired || s.Success || strings.Contains(string(r.Body), "the paid answer") {
		t.Errorf("a settlement that fails: %d %s with settle response %+v, want 402, success false and no answer", r.Status, r.Body, s)
	}
	wantDelta(t, tok, payTo, payee, 0)
}
