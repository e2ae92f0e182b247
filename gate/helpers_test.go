package gate

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/crypto"

	"github.com/x402gate/x402gate/facilitator"
	"github.com/x402gate/x402gate/facilitator/facilitatortest"
	"github.com/x402gate/x402gate/facilitator/httpapi"
	"github.com/x402gate/x402gate/internal/testenv"
	"github.com/x402gate/x402gate/x402"
)

// The facilitators a gate runs on (docs/gate.md#facilitator). The guards sit here because
// neither package may import gate: gate's tests import both.
var (
	_ Facilitator = (*facilitator.Service)(nil)
	_ Facilitator = (*httpapi.Client)(nil)
)

// testPrice is what the test routes charge: 0.01 USDC, 10000 base units.
const testPrice = "0.01 USDC"

var testAmount = big.NewInt(10_000)

// testEnv is one anvil chain with our token, an in-process facilitator.Service on it (a
// MemoryStore and an SQLite journal, as the bundled facilitator runs), and a fresh payee.
type testEnv struct {
	chain  *testenv.Chain
	token  *testenv.Token
	net    x402.Network
	reg    *x402.Registry
	engine *facilitator.Service
	payTo  common.Address
	payer  testenv.Account
}

func newTestEnv(t *testing.T) *testEnv {
	t.Helper()
	return newTestEnvWith(t, nil)
}

// newTestEnvWith is newTestEnv with the engine's config changed by mutate.
func newTestEnvWith(t *testing.T, mutate func(*facilitator.Config)) *testEnv {
	t.Helper()
	c := facilitatortest.StartChain(t)
	e := c.Service(t, mutate)
	chain, token, net, reg := c.Chain, c.Token, c.Network, c.Registry
	return &testEnv{
		chain: chain, token: token, net: net, reg: reg, engine: e,
		payTo: testenv.NewAccount(t).Address, payer: chain.Accounts[1],
	}
}

// config is the route every test gates: 0.01 USDC to the env's payee on base-sepolia.
func (v *testEnv) config() Config {
	return Config{
		Network:  "base-sepolia",
		PayTo:    v.payTo.Hex(),
		Price:    testPrice,
		Resource: ResourceConfig{Description: "premium data", MimeType: "application/json"},
	}
}

// gate builds a Gate on cfg with the env's engine and registry.
func (v *testEnv) gate(t *testing.T, cfg Config, opts Options) *Gate {
	t.Helper()
	if opts.Facilitator == nil {
		opts.Facilitator = v.engine
	}
	if opts.Registry == nil {
		opts.Registry = v.reg
	}
	g, err := New(cfg, opts)
	if err != nil {
		t.Fatalf("gate.New: %v", err)
	}
	return g
}

func (v *testEnv) balance(t *testing.T, a common.Address) *big.Int {
	t.Helper()
	return v.token.BalanceOf(t, a)
}

// signerNonce counts the facilitator's mined transactions: one per settlement.
func (v *testEnv) signerNonce(t *testing.T) uint64 {
	t.Helper()
	n, err := v.chain.Client.NonceAt(context.Background(), v.chain.FacilitatorAccount().Address, nil)
	if err != nil {
		t.Fatalf("signer nonce: %v", err)
	}
	return n
}

// ledger records the balances a paid request moves.
type ledger struct {
	payer, payTo *big.Int
	nonce        uint64
}

func (v *testEnv) ledger(t *testing.T, payer common.Address) ledger {
	t.Helper()
	return ledger{payer: v.balance(t, payer), payTo: v.balance(t, v.payTo), nonce: v.signerNonce(t)}
}

// expectMoved checks that exactly `payments` settlements of testAmount happened since l:
// the payer lost and the payee gained exactly that, in exactly that many transactions.
func (v *testEnv) expectMoved(t *testing.T, payer common.Address, l ledger, payments int64) {
	t.Helper()
	want := new(big.Int).Mul(testAmount, big.NewInt(payments))
	now := v.ledger(t, payer)
	if got := new(big.Int).Sub(l.payer, now.payer); got.Cmp(want) != 0 {
		t.Errorf("payer balance moved by %s, want %s", got, want)
	}
	if got := new(big.Int).Sub(now.payTo, l.payTo); got.Cmp(want) != 0 {
		t.Errorf("payee balance moved by %s, want %s", got, want)
	}
	if got := now.nonce - l.nonce; got != uint64(payments) {
		t.Errorf("facilitator sent %d transactions, want %d", got, payments)
	}
}

// expectOnChain checks that tx is mined with status 1 and carries exactly one
// Transfer(payer, payTo, testAmount) log of the token.
func (v *testEnv) expectOnChain(t *testing.T, tx string, payer common.Address) {
	t.Helper()
	if !isTxHash(tx) {
		t.Fatalf("transaction %q is not a tx hash", tx)
	}
	rc, err := v.chain.Client.TransactionReceipt(context.Background(), common.HexToHash(tx))
	if err != nil {
		t.Fatalf("receipt of %s: %v", tx, err)
	}
	if rc.Status != types.ReceiptStatusSuccessful {
		t.Fatalf("transaction %s reverted", tx)
	}
	transfer := crypto.Keccak256Hash([]byte("Transfer(address,address,uint256)"))
	n := 0
	for _, l := range rc.Logs {
		if l.Address != v.token.Address || len(l.Topics) != 3 || l.Topics[0] != transfer {
			continue
		}
		n++
		from, to := common.BytesToAddress(l.Topics[1].Bytes()), common.BytesToAddress(l.Topics[2].Bytes())
		if from != payer || to != v.payTo || new(big.Int).SetBytes(l.Data).Cmp(testAmount) != 0 {
			t.Errorf("Transfer(%s, %s, %s), want (%s, %s, %s)", from.Hex(), to.Hex(), new(big.Int).SetBytes(l.Data), payer.Hex(), v.payTo.Hex(), testAmount)
		}
	}
	if n != 1 {
		t.Errorf("transaction %s has %d Transfer logs of the token, want 1", tx, n)
	}
}

// tamper changes a payment before or after it is signed.
type tamper struct {
	// before changes the authorization that is then signed.
	before func(a *x402.Authorization)
	// after changes the signed payload.
	after func(sig []byte, a *x402.AuthorizationJSON, acc *x402.RequirementsV2)
	// key signs instead of the payer's key.
	key *testenv.Account
}

// challengeOf reads a 402 answer as a client does: the v2 PAYMENT-REQUIRED header and the
// v1 JSON body.
type challengeOf struct {
	v2 *x402.PaymentRequiredV2
	v1 x402.PaymentRequiredV1
}

func readChallenge(t *testing.T, res *http.Response) challengeOf {
	t.Helper()
	body, err := io.ReadAll(res.Body)
	_ = res.Body.Close()
	if err != nil {
		t.Fatalf("read 402 body: %v", err)
	}
	if res.StatusCode != http.StatusPaymentRequired {
		t.Fatalf("status %d, want 402; body %s", res.StatusCode, body)
	}
	var c challengeOf
	if err := json.Unmarshal(body, &c.v1); err != nil {
		t.Fatalf("402 body is not JSON: %v: %s", err, body)
	}
	if c.v2, err = x402.DecodePaymentRequired(res.Header.Get(x402.HeaderPaymentRequired)); err != nil {
		t.Fatalf("PAYMENT-REQUIRED: %v", err)
	}
	return c
}

// fetchChallenge asks url without payment.
func fetchChallenge(t *testing.T, url string) challengeOf {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return readChallenge(t, res)
}

// sign makes a payment header answering c as the x402 clients do: v2 copies the chosen
// accepts entry and the resource into PAYMENT-SIGNATURE; v1 names the network in
// X-PAYMENT. The authorization pays exactly the amount to payTo, valid from ten minutes
// ago for an hour on the chain's clock, with a random nonce.
func (v *testEnv) sign(t *testing.T, version int, payer testenv.Account, c challengeOf, tm tamper) (name, value string) {
	t.Helper()
	acc := c.v2.Accepts[0]
	amount, ok := new(big.Int).SetString(acc.Amount, 10)
	if !ok {
		t.Fatalf("amount %q", acc.Amount)
	}
	ta := v.token.NewAuthorization(t, payer.Address, common.HexToAddress(acc.PayTo), amount)
	a := x402.Authorization(ta)
	if tm.before != nil {
		tm.before(&a)
	}
	key := payer.Key
	if tm.key != nil {
		key = tm.key.Key
	}
	sig := v.token.SignAuthorization(t, key, testenv.Authorization(a))
	aj := a.JSON()
	if tm.after != nil {
		tm.after(sig, &aj, &acc)
	}
	payload := x402.ExactEVMPayload{Signature: hexutil.Encode(sig), Authorization: aj}
	var body any
	switch version {
	case x402.Version1:
		name = x402.HeaderPayment
		body = x402.PayloadV1{X402Version: 1, Scheme: acc.Scheme, Network: c.v1.Accepts[0].Network, Payload: payload}
	case x402.Version2:
		name = x402.HeaderPaymentSignature
		body = x402.PayloadV2{X402Version: 2, Resource: c.v2.Resource, Accepted: acc, Payload: payload}
	default:
		t.Fatalf("version %d", version)
	}
	value, err := x402.EncodeHeader(body)
	if err != nil {
		t.Fatalf("encode header: %v", err)
	}
	return name, value
}

// rawHeader base64-encodes any JSON as a header value.
func rawHeader(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(b)
}

// upstream is the gated handler: it records each request it gets and answers with the
// status its script gives for that call (200 when the script runs out).
type upstream struct {
	calls  atomic.Int32
	mu     sync.Mutex
	paid   []*Paid
	script []int
	// leaked counts requests that reached the upstream still carrying a payment header or
	// a retry token.
	leaked atomic.Int32
}

func (u *upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := int(u.calls.Add(1))
	p, _ := FromContext(r.Context())
	if r.Header.Get(x402.HeaderPayment) != "" || r.Header.Get(x402.HeaderPaymentSignature) != "" ||
		r.Header.Get(HeaderVerificationPayment) != "" || r.Header.Get(HeaderPaymentRetry) != "" {
		u.leaked.Add(1)
	}
	u.mu.Lock()
	u.paid = append(u.paid, p)
	status := http.StatusOK
	if n <= len(u.script) {
		status = u.script[n-1]
	}
	u.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, `{"data":"premium"}`)
}

func (u *upstream) lastPaid() *Paid {
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.paid) == 0 {
		return nil
	}
	return u.paid[len(u.paid)-1]
}

// serve runs g's Middleware in front of up on a real HTTP server.
func serve(t *testing.T, g *Gate, up http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(g.Middleware(MiddlewareOptions{})(up))
	t.Cleanup(srv.Close)
	return srv
}

// get sends GET url with one header set.
func get(t *testing.T, url, name, value string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if name != "" {
		req.Header.Set(name, value)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return res
}

// readBody reads and closes a response body.
func readBody(t *testing.T, res *http.Response) []byte {
	t.Helper()
	b, err := io.ReadAll(res.Body)
	_ = res.Body.Close()
	if err != nil {
		t.Fatalf("read body: %v", err)
	}
	return b
}

// errorOf is the "error" string of a JSON answer body.
func errorOf(t *testing.T, body []byte) string {
	t.Helper()
	var b struct {
		Error string `json:"error"`
	}
	if err := json.Unmarshal(body, &b); err != nil {
		t.Fatalf("body is not JSON: %v: %s", err, body)
	}
	return b.Error
}

// settleHeader decodes the settle response header of a paid answer for version: v1 reads
// X-PAYMENT-RESPONSE; v2 reads PAYMENT-RESPONSE, which must equal X-PAYMENT-RESPONSE.
func settleHeader(t *testing.T, res *http.Response, version int) *x402.SettleResponse {
	t.Helper()
	xv := res.Header.Get(x402.HeaderPaymentResponse)
	if xv == "" {
		t.Fatal("no X-PAYMENT-RESPONSE on the paid answer")
	}
	v2 := res.Header.Get(x402.HeaderPaymentResponseV2)
	switch version {
	case x402.Version1:
		if v2 != "" {
			t.Errorf("PAYMENT-RESPONSE on a v1 answer")
		}
	case x402.Version2:
		if v2 != xv {
			t.Errorf("PAYMENT-RESPONSE %q differs from X-PAYMENT-RESPONSE %q", v2, xv)
		}
	}
	sr, err := x402.DecodeSettleResponse(xv)
	if err != nil {
		t.Fatalf("X-PAYMENT-RESPONSE: %v", err)
	}
	if !strings.Contains(res.Header.Get("Access-Control-Expose-Headers"), "X-PAYMENT-RESPONSE") {
		t.Errorf("Access-Control-Expose-Headers %q", res.Header.Get("Access-Control-Expose-Headers"))
	}
	return sr
}
