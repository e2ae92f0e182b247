package gate

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/accounts/abi"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"

	"github.com/x402gate/x402gate/gate/payledger"
	"github.com/x402gate/x402gate/gate/redisretry"
	"github.com/x402gate/x402gate/internal/testenv"
	"github.com/x402gate/x402gate/x402"
)

// paidAnswer is what one presentation of a payment header got.
type paidAnswer struct {
	status int
	err    string
	tx     string
	token  string // the X-PAYMENT-RETRY header of the answer
	expose string // its Access-Control-Expose-Headers
}

// present sends the payment header once, without a retry token, and reads the answer.
func present(t *testing.T, url, name, value string) paidAnswer {
	t.Helper()
	return presentToken(t, url, name, value, "")
}

// presentToken sends the payment header once with the retry token token (none when
// empty) and reads the answer.
func presentToken(t *testing.T, url, name, value, token string) paidAnswer {
	t.Helper()
	return presentAs(t, http.MethodGet, url, name, value, token)
}

// presentAs is presentToken with another method.
func presentAs(t *testing.T, method, url, name, value, token string) paidAnswer {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(name, value)
	if token != "" {
		req.Header.Set(HeaderPaymentRetry, token)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	body := readBody(t, res)
	a := paidAnswer{status: res.StatusCode, token: res.Header.Get(HeaderPaymentRetry), expose: res.Header.Get("Access-Control-Expose-Headers")}
	if res.StatusCode >= 400 && res.Header.Get("Content-Type") == "application/json" {
		a.err = errorOf(t, body)
	}
	if v := res.Header.Get(x402.HeaderPaymentResponse); v != "" {
		sr, err := x402.DecodeSettleResponse(v)
		if err != nil {
			t.Fatalf("X-PAYMENT-RESPONSE: %v", err)
		}
		a.tx = sr.Transaction
	}
	return a
}

// isRetryToken reports whether s looks like a token the gate makes: 64 lowercase hex
// digits.
func isRetryToken(s string) bool {
	if len(s) != 64 {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil && strings.ToLower(s) == s
}

const nonceUsed = "invalid_exact_evm_nonce_already_used"

// TestRetryAfterUpstreamFailure: the upstream answers 503 after the payment settled, and
// the failed answer carries a fresh retry token (exposed to browsers); the same header
// with that token then reaches the upstream again without a second transfer, with the
// first settlement's transaction in its response header, and neither the header nor the
// token reaches the upstream; once the upstream succeeded, the header is refused, token
// or not.
func TestRetryAfterUpstreamFailure(t *testing.T) {
	env := newTestEnv(t)
	for _, version := range []int{x402.Version1, x402.Version2} {
		t.Run(fmt.Sprintf("v%d", version), func(t *testing.T) {
			up := &upstream{script: []int{http.StatusServiceUnavailable, http.StatusOK}}
			srv := serve(t, env.gate(t, env.config(), Options{}), up)
			url := srv.URL + "/r"
			name, value := env.sign(t, version, env.payer, fetchChallenge(t, url), tamper{})
			before := env.ledger(t, env.payer.Address)

			first := present(t, url, name, value)
			if first.status != http.StatusServiceUnavailable || first.tx == "" {
				t.Fatalf("first: %+v, want the upstream's 503 with the settlement header", first)
			}
			if !isRetryToken(first.token) {
				t.Fatalf("first: retry token %q, want 64 hex digits", first.token)
			}
			if !strings.Contains(first.expose, HeaderPaymentRetry) {
				t.Errorf("Access-Control-Expose-Headers %q lacks %s", first.expose, HeaderPaymentRetry)
			}
			env.expectOnChain(t, first.tx, env.payer.Address)
			retry := presentToken(t, url, name, value, first.token)
			if retry.status != http.StatusOK || retry.tx != first.tx {
				t.Fatalf("retry: %+v, want 200 with tx %s", retry, first.tx)
			}
			if retry.token != "" {
				t.Errorf("a retry answered with a new token %q", retry.token)
			}
			if p := up.lastPaid(); p == nil || !p.Retry || p.Settlement.Transaction != first.tx {
				t.Errorf("retry Paid = %+v", p)
			}
			again := presentToken(t, url, name, value, first.token)
			wantErr := nonceUsed
			if version == x402.Version1 {
				wantErr = "invalid_transaction_state"
			}
			if again.status != http.StatusPaymentRequired || again.err != wantErr {
				t.Errorf("after a good retry: %+v, want 402 %s", again, wantErr)
			}
			if n := up.calls.Load(); n != 2 {
				t.Errorf("upstream ran %d times, want 2", n)
			}
			if n := up.leaked.Load(); n != 0 {
				t.Errorf("the upstream received a payment header or the retry token %d times", n)
			}
			env.expectMoved(t, env.payer.Address, before, 1)
		})
	}
}

// TestRetryNeedsTheToken: once settled, the signed authorization is public in the
// transaction's calldata. An attacker who rebuilds the payment header from it (here a v1
// X-PAYMENT header, while the payer paid in v2) and presents it after the upstream failed
// is refused as the nonce is used: without the token, with a wrong one, with a malformed
// one and with two. Nothing is consumed: with retry.max 1, the payer's one retry with its
// token still reaches the upstream, without a second charge.
func TestRetryNeedsTheToken(t *testing.T) {
	env := newTestEnv(t)
	cfg := env.config()
	cfg.Retry.Max = 1
	up := &upstream{script: []int{http.StatusServiceUnavailable, http.StatusOK}}
	srv := serve(t, env.gate(t, cfg, Options{}), up)
	url := srv.URL + "/r"
	c := fetchChallenge(t, url)
	name, value := env.sign(t, x402.Version2, env.payer, c, tamper{})
	before := env.ledger(t, env.payer.Address)
	first := present(t, url, name, value)
	if first.status != http.StatusServiceUnavailable || !isRetryToken(first.token) {
		t.Fatalf("first: %+v, want the upstream's 503 with a retry token", first)
	}

	forged := headerFromChain(t, env, first.tx, c.v1.Accepts[0].Network)
	wrong := strings.Repeat("ab", 32)
	attempts := []struct {
		name  string
		set   func(h http.Header)
		wantE string
	}{
		{"no token", func(http.Header) {}, "invalid_transaction_state"},
		{"a wrong token", func(h http.Header) { h.Set(HeaderPaymentRetry, wrong) }, "invalid_transaction_state"},
		{"a token that is not hex", func(h http.Header) { h.Set(HeaderPaymentRetry, "zz"+first.token[2:]) }, "invalid_transaction_state"},
		{"a short token", func(h http.Header) { h.Set(HeaderPaymentRetry, first.token[:32]) }, "invalid_transaction_state"},
		{"the token twice", func(h http.Header) {
			h.Add(HeaderPaymentRetry, first.token)
			h.Add(HeaderPaymentRetry, first.token)
		}, "invalid_transaction_state"},
	}
	for _, a := range attempts {
		for _, hdr := range []struct{ name, value, wantE string }{
			{x402.HeaderPayment, forged, a.wantE},
			{name, value, nonceUsed},
		} {
			req, _ := http.NewRequest(http.MethodGet, url, nil)
			req.Header.Set(hdr.name, hdr.value)
			a.set(req.Header)
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body := readBody(t, res)
			if res.StatusCode != http.StatusPaymentRequired || errorOf(t, body) != hdr.wantE {
				t.Errorf("%s with %s: %d %s, want 402 %s", hdr.name, a.name, res.StatusCode, body, hdr.wantE)
			}
			if res.Header.Get(HeaderPaymentRetry) != "" {
				t.Errorf("%s with %s: the refusal carries a retry token", hdr.name, a.name)
			}
		}
	}
	if n := up.calls.Load(); n != 1 {
		t.Fatalf("upstream ran %d times before the payer's retry, want 1", n)
	}
	retry := presentToken(t, url, name, value, first.token)
	if retry.status != http.StatusOK || retry.tx != first.tx {
		t.Fatalf("the payer's retry: %+v, want 200 with tx %s (its credit was taken)", retry, first.tx)
	}
	if p := up.lastPaid(); p == nil || !p.Retry {
		t.Errorf("retry Paid = %+v", p)
	}
	// The credit is spent: even the token and the forged header together are refused now.
	if a := presentToken(t, url, x402.HeaderPayment, forged, first.token); a.status != http.StatusPaymentRequired {
		t.Errorf("after the good retry, forged header with the token: %+v, want 402", a)
	}
	if n := up.leaked.Load(); n != 0 {
		t.Errorf("the upstream received a payment header or the retry token %d times", n)
	}
	env.expectMoved(t, env.payer.Address, before, 1)
}

// twaABI is the calldata of EIP-3009 transferWithAuthorization(v, r, s), as the
// facilitator sends it.
const twaABI = `[{"type":"function","name":"transferWithAuthorization","inputs":[
 {"name":"from","type":"address"},{"name":"to","type":"address"},{"name":"value","type":"uint256"},
 {"name":"validAfter","type":"uint256"},{"name":"validBefore","type":"uint256"},{"name":"nonce","type":"bytes32"},
 {"name":"v","type":"uint8"},{"name":"r","type":"bytes32"},{"name":"s","type":"bytes32"}]}]`

// headerFromChain rebuilds a v1 X-PAYMENT header from the public calldata of the
// settlement transaction tx, as anyone watching the chain can.
func headerFromChain(t *testing.T, env *testEnv, tx, network string) string {
	t.Helper()
	ctx := context.Background()
	trx, _, err := env.chain.Client.TransactionByHash(ctx, common.HexToHash(tx))
	if err != nil {
		t.Fatalf("transaction %s: %v", tx, err)
	}
	parsed, err := abi.JSON(strings.NewReader(twaABI))
	if err != nil {
		t.Fatal(err)
	}
	m := parsed.Methods["transferWithAuthorization"]
	if len(trx.Data()) < 4 || !bytes.Equal(trx.Data()[:4], m.ID) {
		t.Fatalf("transaction %s does not call transferWithAuthorization(v, r, s)", tx)
	}
	vals, err := m.Inputs.Unpack(trx.Data()[4:])
	if err != nil {
		t.Fatalf("calldata: %v", err)
	}
	r, sv := vals[7].([32]byte), vals[8].([32]byte)
	sig := append(append(append([]byte{}, r[:]...), sv[:]...), vals[6].(uint8))
	a := x402.Authorization{
		From: vals[0].(common.Address), To: vals[1].(common.Address), Value: vals[2].(*big.Int),
		ValidAfter: vals[3].(*big.Int), ValidBefore: vals[4].(*big.Int), Nonce: vals[5].([32]byte),
	}
	h, err := x402.EncodeHeader(x402.PayloadV1{X402Version: 1, Scheme: x402.SchemeExact, Network: network,
		Payload: x402.ExactEVMPayload{Signature: hexutil.Encode(sig), Authorization: a.JSON()}})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// TestRetryAtMostN: with retry.max 2 and an upstream that keeps failing, the header with
// its token reaches the upstream 1+2 times, then is refused; a retry that fails again
// earns no new token; one transfer in all.
func TestRetryAtMostN(t *testing.T) {
	env := newTestEnv(t)
	cfg := env.config()
	cfg.Retry.Max = 2
	up := &upstream{script: []int{502, 500, 504, 500, 500}}
	srv := serve(t, env.gate(t, cfg, Options{}), up)
	url := srv.URL + "/r"
	name, value := env.sign(t, x402.Version2, env.payer, fetchChallenge(t, url), tamper{})
	before := env.ledger(t, env.payer.Address)
	want := []int{502, 500, 504, http.StatusPaymentRequired, http.StatusPaymentRequired}
	token := ""
	for i, w := range want {
		a := presentToken(t, url, name, value, token)
		if a.status != w {
			t.Fatalf("presentation %d: %+v, want %d", i+1, a, w)
		}
		if (i == 0) != (a.token != "") {
			t.Errorf("presentation %d: retry token %q; want one on the first failure only", i+1, a.token)
		}
		if i == 0 {
			token = a.token
		}
		if w == http.StatusPaymentRequired && a.err != nonceUsed {
			t.Errorf("presentation %d: error %q, want %s", i+1, a.err, nonceUsed)
		}
	}
	if n := up.calls.Load(); n != 3 {
		t.Errorf("upstream ran %d times, want 3", n)
	}
	env.expectMoved(t, env.payer.Address, before, 1)
}

// TestRetryWhatCountsAsFailure drives Serve with next functions: a connection failure
// (an error, 502 by default), a panic and a 5xx earn retries; a 4xx, an error mapped to
// 4xx by ErrorStatus, and a success do not; retry.max < 0 turns retries off. A panic that
// drops the connection delivers no token, so it cannot be retried; behind a server that
// recovers it and answers 500, the token arrives and the retry works.
func TestRetryWhatCountsAsFailure(t *testing.T) {
	env := newTestEnv(t)
	errNotFound := errors.New("no such file")
	errorStatus := func(err error) int {
		if errors.Is(err, errNotFound) {
			return http.StatusNotFound
		}
		return http.StatusBadGateway
	}
	type step func(w http.ResponseWriter) error
	write := func(code int) step {
		return func(w http.ResponseWriter) error { w.WriteHeader(code); return nil }
	}
	cases := []struct {
		name    string
		max     int
		recover bool // the server recovers a panic and answers 500
		first   step
		retried bool
	}{
		{"connection failure", 0, false, func(http.ResponseWriter) error {
			return errors.New("dial tcp 10.0.0.1:80: connect: connection refused")
		}, true},
		{"panic recovered by the server", 0, true, func(http.ResponseWriter) error { panic("upstream bug") }, true},
		{"panic that drops the connection", 0, false, func(http.ResponseWriter) error { panic(http.ErrAbortHandler) }, false},
		{"500 written", 0, false, write(500), true},
		{"404 written", 0, false, write(404), false},
		{"error mapped to 404", 0, false, func(http.ResponseWriter) error { return errNotFound }, false},
		{"200 written", 0, false, write(200), false},
		{"retries off", -1, false, write(500), false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := env.config()
			cfg.Retry.Max = tc.max
			g := env.gate(t, cfg, Options{ErrorStatus: errorStatus})
			var calls atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if tc.recover {
					defer func() {
						if recover() != nil {
							w.WriteHeader(http.StatusInternalServerError)
						}
					}()
				}
				err := g.Serve(w, r, Input{}, func(w http.ResponseWriter, r *http.Request) error {
					if calls.Add(1) == 1 {
						return tc.first(w)
					}
					w.WriteHeader(http.StatusOK)
					return nil
				})
				if err != nil { // as Caddy answers a handler's error: its status, headers kept
					w.WriteHeader(errorStatus(err))
				}
			}))
			srv.Config.ErrorLog = nil
			defer srv.Close()
			url := srv.URL + "/r"
			name, value := env.sign(t, x402.Version2, env.payer, fetchChallenge(t, url), tamper{})
			before := env.ledger(t, env.payer.Address)
			// POST: net/http's client silently resends a GET whose connection dropped (as
			// after a panic), which would itself be the retry.
			req, _ := http.NewRequest(http.MethodPost, url, nil)
			req.Header.Set(name, value)
			token := ""
			if res, err := http.DefaultClient.Do(req); err == nil { // a bare panic drops the connection
				_ = readBody(t, res)
				token = res.Header.Get(HeaderPaymentRetry)
			}
			if tc.retried != (token != "") {
				t.Errorf("first answer's retry token %q, want one: %v", token, tc.retried)
			}
			a := presentAs(t, http.MethodPost, url, name, value, token)
			if tc.retried {
				if a.status != http.StatusOK || calls.Load() != 2 {
					t.Errorf("retry: %+v, upstream calls %d; want 200 and 2", a, calls.Load())
				}
			} else if a.status != http.StatusPaymentRequired || a.err != nonceUsed || calls.Load() != 1 {
				t.Errorf("retry: %+v, upstream calls %d; want 402 %s and 1", a, calls.Load(), nonceUsed)
			}
			env.expectMoved(t, env.payer.Address, before, 1)
		})
	}
}

// TestRetryGraceExpires: a grant lives for retry.grace on the store's clock; after it the
// header is refused, token or not.
func TestRetryGraceExpires(t *testing.T) {
	env := newTestEnv(t)
	cfg := env.config()
	cfg.Retry.Grace = time.Minute
	var mu sync.Mutex
	clock := time.Unix(1_900_000_000, 0)
	store := &MemoryLedger{payledger.NewMemory(0, func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }), NewMemoryPassBook(0)}
	up := &upstream{script: []int{500, 500, 500}}
	srv := serve(t, env.gate(t, cfg, Options{Ledger: store}), up)
	url := srv.URL + "/r"
	name, value := env.sign(t, x402.Version2, env.payer, fetchChallenge(t, url), tamper{})
	first := present(t, url, name, value)
	if first.status != 500 || first.token == "" {
		t.Fatalf("first: %+v", first)
	}
	mu.Lock()
	clock = clock.Add(59 * time.Second)
	mu.Unlock()
	if a := presentToken(t, url, name, value, first.token); a.status != 500 {
		t.Fatalf("retry within grace: %+v, want the upstream's 500", a)
	}
	mu.Lock()
	clock = clock.Add(2 * time.Second)
	mu.Unlock()
	if a := presentToken(t, url, name, value, first.token); a.status != http.StatusPaymentRequired || a.err != nonceUsed {
		t.Fatalf("retry after grace: %+v, want 402", a)
	}
	if n := up.calls.Load(); n != 2 {
		t.Errorf("upstream ran %d times, want 2", n)
	}
}

// TestRetryIsPerResource: a credit earned on one resource does not open another, even
// with its token.
func TestRetryIsPerResource(t *testing.T) {
	env := newTestEnv(t)
	up := &upstream{script: []int{500}}
	srv := serve(t, env.gate(t, env.config(), Options{}), up)
	name, value := env.sign(t, x402.Version2, env.payer, fetchChallenge(t, srv.URL+"/a"), tamper{})
	first := present(t, srv.URL+"/a", name, value)
	if first.status != 500 || first.token == "" {
		t.Fatalf("first: %+v", first)
	}
	// The v2 payload names /a as its resource, but the gate keys credits on the URL asked.
	if a := presentToken(t, srv.URL+"/b", name, value, first.token); a.status != http.StatusPaymentRequired {
		t.Fatalf("other resource: %+v, want 402", a)
	}
	if a := presentToken(t, srv.URL+"/a", name, value, first.token); a.status != http.StatusOK {
		t.Fatalf("same resource: %+v, want 200", a)
	}
}

// TestRetrySharedThroughRedis: two Gate instances share a redisretry.Store; a payment whose
// upstream failed behind one is retried with its token behind the other, without a second
// transfer, and the N credits are counted across both. A presentation without the token,
// or with a wrong one, behind either instance takes nothing.
func TestRetrySharedThroughRedis(t *testing.T) {
	env := newTestEnv(t)
	url := testenv.StartRedis(t)
	newStore := func() *redisretry.Store {
		s, err := redisretry.Open(t.Context(), url, "")
		if err != nil {
			t.Fatalf("redisretry.Open: %v", err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	cfg := env.config()
	cfg.Retry.Max = 2
	up := &upstream{script: []int{500, 503, 500, 500}}
	// Both instances answer for the same public resource.
	resource := func(r *http.Request) string { return "https://api.example.com" + r.URL.Path }
	a := httptest.NewServer(env.gate(t, cfg, Options{Ledger: newStore()}).Middleware(MiddlewareOptions{Resource: resource})(up))
	defer a.Close()
	b := httptest.NewServer(env.gate(t, cfg, Options{Ledger: newStore()}).Middleware(MiddlewareOptions{Resource: resource})(up))
	defer b.Close()

	name, value := env.sign(t, x402.Version2, env.payer, fetchChallenge(t, a.URL+"/r"), tamper{})
	before := env.ledger(t, env.payer.Address)
	wrong := strings.Repeat("0f", 32)
	steps := []struct {
		srv   *httptest.Server
		token string // "first": the token of the first answer
		want  int
	}{
		{a, "", 500}, {b, "", http.StatusPaymentRequired}, {a, wrong, http.StatusPaymentRequired},
		{b, "first", 503}, {b, wrong, http.StatusPaymentRequired}, {a, "first", 500},
		{b, "first", http.StatusPaymentRequired}, {a, "first", http.StatusPaymentRequired},
	}
	var tx, token string
	for i, s := range steps {
		tok := s.token
		if tok == "first" {
			tok = token
		}
		got := presentToken(t, s.srv.URL+"/r", name, value, tok)
		if got.status != s.want {
			t.Fatalf("step %d: %+v, want %d", i+1, got, s.want)
		}
		if i == 0 {
			token = got.token
			if !isRetryToken(token) {
				t.Fatalf("first answer's retry token %q", token)
			}
		} else if got.token != "" {
			t.Errorf("step %d answered with a retry token", i+1)
		}
		if s.want >= 500 {
			if tx == "" {
				tx = got.tx
			}
			if got.tx != tx {
				t.Errorf("step %d: tx %s, want %s", i+1, got.tx, tx)
			}
		}
	}
	if n := up.calls.Load(); n != 3 {
		t.Errorf("upstream ran %d times, want 3", n)
	}
	if n := up.leaked.Load(); n != 0 {
		t.Errorf("the upstream received a payment header or the retry token %d times", n)
	}
	env.expectOnChain(t, tx, env.payer.Address)
	env.expectMoved(t, env.payer.Address, before, 1)

	t.Run("retry succeeds behind the other instance", func(t *testing.T) {
		up2 := &upstream{script: []int{502}}
		a2 := httptest.NewServer(env.gate(t, cfg, Options{Ledger: newStore()}).Middleware(MiddlewareOptions{Resource: resource})(up2))
		defer a2.Close()
		b2 := httptest.NewServer(env.gate(t, cfg, Options{Ledger: newStore()}).Middleware(MiddlewareOptions{Resource: resource})(up2))
		defer b2.Close()
		name, value := env.sign(t, x402.Version1, env.payer, fetchChallenge(t, a2.URL+"/s"), tamper{})
		before := env.ledger(t, env.payer.Address)
		first := present(t, a2.URL+"/s", name, value)
		if first.status != 502 || first.token == "" {
			t.Fatalf("first: %+v", first)
		}
		if got := presentToken(t, b2.URL+"/s", name, value, first.token); got.status != 200 {
			t.Fatalf("retry: %+v, want 200", got)
		}
		if got := presentToken(t, a2.URL+"/s", name, value, first.token); got.status != http.StatusPaymentRequired {
			t.Fatalf("after a good retry: %+v, want 402", got)
		}
		env.expectMoved(t, env.payer.Address, before, 1)
	})
}

// TestRetryStoreDownFailsClosed: when Redis is gone, a retry presentation with its token,
// and the bare header too, is answered 503 retry_store_unavailable and nothing reaches the
// upstream.
func TestRetryStoreDownFailsClosed(t *testing.T) {
	env := newTestEnv(t)
	rs := testenv.StartRedisServer(t, testenv.RedisConfig{})
	store, err := redisretry.Open(t.Context(), rs.URL, "")
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	up := &upstream{script: []int{500}}
	srv := serve(t, env.gate(t, env.config(), Options{Ledger: store}), up)
	url := srv.URL + "/r"
	name, value := env.sign(t, x402.Version2, env.payer, fetchChallenge(t, url), tamper{})
	first := present(t, url, name, value)
	if first.status != 500 || first.token == "" {
		t.Fatalf("first: %+v", first)
	}
	rs.Stop()
	a := presentToken(t, url, name, value, first.token)
	if a.status != http.StatusServiceUnavailable || a.err != "retry_store_unavailable" {
		t.Fatalf("store down: %+v, want 503 retry_store_unavailable", a)
	}
	// Every paid request begins at the ledger, before anything is verified or broadcast.
	if a := present(t, url, name, value); a.status != http.StatusServiceUnavailable || a.err != "retry_store_unavailable" {
		t.Fatalf("store down, no token: %+v, want 503 retry_store_unavailable", a)
	}
	if n := up.calls.Load(); n != 1 {
		t.Errorf("upstream ran %d times, want 1", n)
	}
	if _, err := redisretry.Open(t.Context(), "redis://:hunter2@"+rs.Addr+"/0", ""); err == nil || !errors.Is(err, redisretry.ErrUnavailable) || containsSecret(err, "hunter2") {
		t.Errorf("open a down store: %v", err)
	}
	if _, err := redisretry.Open(t.Context(), "http://:hunter2@x", ""); err == nil || containsSecret(err, "hunter2") {
		t.Errorf("open a bad URL: %v", err)
	}
}

func containsSecret(err error, s string) bool {
	return err != nil && strings.Contains(err.Error(), s)
}
