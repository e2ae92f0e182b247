package gate

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/crypto"

	"github.com/x402gate/x402gate/facilitator/httpapi"
	"github.com/x402gate/x402gate/internal/testenv"
	"github.com/x402gate/x402gate/x402"
)

// TestChallengeServesBothVersions checks the unpaid 402: the v1 JSON body that x402-fetch
// 1.2.0's schema accepts, the v2 PAYMENT-REQUIRED header, no-store and the CORS expose
// list, for a route with and without mimeType and outputSchema.
func TestChallengeServesBothVersions(t *testing.T) {
	env := newTestEnv(t)
	cases := []struct {
		name     string
		resource ResourceConfig
	}{
		{"description and mimeType", ResourceConfig{Description: "premium data", MimeType: "application/json"}},
		{"no metadata", ResourceConfig{}},
		{"output schema", ResourceConfig{MimeType: "application/json", OutputSchema: map[string]any{"input": map[string]any{"type": "http", "method": "GET"}}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := env.config()
			cfg.Resource = tc.resource
			up := &upstream{}
			srv := serve(t, env.gate(t, cfg, Options{}), up)
			url := srv.URL + "/api/data?q=1"
			res := get(t, url, "", "")
			body := readBody(t, res)
			if res.StatusCode != http.StatusPaymentRequired {
				t.Fatalf("status %d, want 402", res.StatusCode)
			}
			if up.calls.Load() != 0 {
				t.Fatal("the upstream ran for an unpaid request")
			}
			for h, want := range map[string]string{
				"Cache-Control":                 "no-store",
				"Access-Control-Expose-Headers": "PAYMENT-REQUIRED, PAYMENT-RESPONSE, X-PAYMENT-RESPONSE, X-PAYMENT-RETRY",
				"Content-Type":                  "application/json",
			} {
				if got := res.Header.Get(h); got != want {
					t.Errorf("%s = %q, want %q", h, got, want)
				}
			}
			wantResource := srv.URL + "/api/data" // absolute, without the query (x402-express)

			// v1 body, checked key by key as x402-fetch's zod schema reads it.
			var raw struct {
				X402Version int              `json:"x402Version"`
				Error       string           `json:"error"`
				Accepts     []map[string]any `json:"accepts"`
			}
			if err := json.Unmarshal(body, &raw); err != nil {
				t.Fatalf("body: %v: %s", err, body)
			}
			if raw.X402Version != 1 || raw.Error != "X-PAYMENT header is required" || len(raw.Accepts) != 1 {
				t.Fatalf("body %s", body)
			}
			a := raw.Accepts[0]
			want := map[string]any{
				"scheme": "exact", "network": "base-sepolia", "maxAmountRequired": "10000",
				"resource": wantResource, "description": tc.resource.Description, "mimeType": tc.resource.MimeType,
				"payTo": env.payTo.Hex(), "maxTimeoutSeconds": float64(60), "asset": env.token.Address.Hex(),
			}
			for k, w := range want {
				got, ok := a[k]
				if !ok {
					t.Errorf("accepts[0].%s is missing", k)
				} else if got != w {
					t.Errorf("accepts[0].%s = %#v, want %#v", k, got, w)
				}
			}
			extra, _ := a["extra"].(map[string]any)
			if extra["name"] != "USDC" || extra["version"] != "2" {
				t.Errorf("accepts[0].extra = %v", a["extra"])
			}
			os, present := a["outputSchema"]
			switch {
			case tc.resource.OutputSchema == nil && present:
				t.Errorf("accepts[0].outputSchema = %v, want it absent (null fails x402-fetch)", os)
			case tc.resource.OutputSchema != nil && os == nil:
				t.Errorf("accepts[0].outputSchema is missing")
			}

			// v2 header.
			pr, err := x402.DecodePaymentRequired(res.Header.Get(x402.HeaderPaymentRequired))
			if err != nil {
				t.Fatalf("PAYMENT-REQUIRED: %v", err)
			}
			if pr.X402Version != 2 || pr.Resource == nil || pr.Resource.URL != wantResource || len(pr.Accepts) != 1 {
				t.Fatalf("PAYMENT-REQUIRED = %+v", pr)
			}
			v2 := pr.Accepts[0]
			if v2.Network != "eip155:84532" || v2.Amount != "10000" || v2.PayTo != env.payTo.Hex() ||
				v2.Asset != env.token.Address.Hex() || v2.MaxTimeoutSeconds != 60 || v2.Scheme != "exact" {
				t.Errorf("PAYMENT-REQUIRED accepts[0] = %+v", v2)
			}
			if pr.Resource.Description != tc.resource.Description || pr.Resource.MimeType != tc.resource.MimeType {
				t.Errorf("PAYMENT-REQUIRED resource = %+v", pr.Resource)
			}
		})
	}
}

// TestX402FetchPaysTheChallenge hands the gate's 402 body to the real x402-fetch 1.2.0
// client (integration/scripts/sign-x402-fetch.mjs): its schema must accept every field,
// and the X-PAYMENT header it makes must settle on chain.
func TestX402FetchPaysTheChallenge(t *testing.T) {
	env := newTestEnv(t)
	up := &upstream{}
	srv := serve(t, env.gate(t, env.config(), Options{}), up)
	url := srv.URL + "/api/data"
	body := readBody(t, get(t, url, "", ""))
	key := "X402_PAYER_KEY=" + hexutil.Encode(crypto.FromECDSA(env.payer.Key))
	out := testenv.RunNode(t, "scripts/sign-x402-fetch.mjs", []string{key}, body)
	header := strings.TrimSpace(string(out))

	before := env.ledger(t, env.payer.Address)
	res := get(t, url, x402.HeaderPayment, header)
	got := readBody(t, res)
	if res.StatusCode != http.StatusOK || string(got) != `{"data":"premium"}` {
		t.Fatalf("status %d body %s, want 200 from the upstream", res.StatusCode, got)
	}
	sr := settleHeader(t, res, x402.Version1)
	if !sr.Success || sr.Network != "base-sepolia" || !strings.EqualFold(sr.Payer, env.payer.Address.Hex()) {
		t.Errorf("settle response %+v", sr)
	}
	env.expectOnChain(t, sr.Transaction, env.payer.Address)
	env.expectMoved(t, env.payer.Address, before, 1)
	if up.calls.Load() != 1 {
		t.Errorf("upstream ran %d times, want 1", up.calls.Load())
	}
}

// TestPaidRequestReachesUpstreamOnce pays through the net/http Middleware in both
// versions: the upstream runs once with Paid in its context, the response headers decode
// to a mined transaction, the balances move by exactly the price, and the same header
// presented again is refused without reaching the upstream or moving money.
func TestPaidRequestReachesUpstreamOnce(t *testing.T) {
	env := newTestEnv(t)
	for _, tc := range []struct {
		version              int
		network, replayError string
	}{
		{x402.Version1, "base-sepolia", "invalid_transaction_state"},
		{x402.Version2, "eip155:84532", "invalid_exact_evm_nonce_already_used"},
	} {
		t.Run(fmt.Sprintf("v%d", tc.version), func(t *testing.T) {
			up := &upstream{}
			srv := serve(t, env.gate(t, env.config(), Options{}), up)
			url := srv.URL + "/api/data"
			name, value := env.sign(t, tc.version, env.payer, fetchChallenge(t, url), tamper{})

			before := env.ledger(t, env.payer.Address)
			res := get(t, url, name, value)
			body := readBody(t, res)
			if res.StatusCode != http.StatusOK || string(body) != `{"data":"premium"}` {
				t.Fatalf("status %d body %s, want the upstream's 200", res.StatusCode, body)
			}
			sr := settleHeader(t, res, tc.version)
			if !sr.Success || sr.Network != tc.network || !strings.EqualFold(sr.Payer, env.payer.Address.Hex()) {
				t.Errorf("settle response %+v", sr)
			}
			if tc.version == x402.Version2 && sr.Amount != "10000" {
				t.Errorf("v2 settle response amount %q, want 10000", sr.Amount)
			}
			env.expectOnChain(t, sr.Transaction, env.payer.Address)
			env.expectMoved(t, env.payer.Address, before, 1)
			if n := up.calls.Load(); n != 1 {
				t.Fatalf("upstream ran %d times, want 1", n)
			}
			if n := up.leaked.Load(); n != 0 {
				t.Errorf("the upstream received the signed payment header %d times", n)
			}
			p := up.lastPaid()
			if p == nil || p.Settlement == nil || p.Retry {
				t.Fatalf("upstream context Paid = %+v", p)
			}
			s := p.Settlement
			if s.Transaction != sr.Transaction || s.Payer != env.payer.Address.Hex() || s.Amount != "10000" ||
				s.Network != "eip155:84532" || s.NetworkName != "base-sepolia" || s.PayTo != env.payTo.Hex() || s.Version != tc.version {
				t.Errorf("Paid.Settlement = %+v", s)
			}

			// Replay: refused by the chain state, nothing reaches the upstream.
			before = env.ledger(t, env.payer.Address)
			res = get(t, url, name, value)
			body = readBody(t, res)
			if res.StatusCode != http.StatusPaymentRequired {
				t.Fatalf("replay: status %d, want 402; %s", res.StatusCode, body)
			}
			if got := errorOf(t, body); got != tc.replayError {
				t.Errorf("replay: error %q, want %q", got, tc.replayError)
			}
			pr, err := x402.DecodePaymentRequired(res.Header.Get(x402.HeaderPaymentRequired))
			if err != nil || pr.Error != "invalid_exact_evm_nonce_already_used" {
				t.Errorf("replay: PAYMENT-REQUIRED error %+v, %v", pr, err)
			}
			if n := up.calls.Load(); n != 1 {
				t.Errorf("replay reached the upstream: %d calls", n)
			}
			env.expectMoved(t, env.payer.Address, before, 0)
		})
	}
}

// TestV2HeaderPreferredAndVersionChecked checks the header rules: PAYMENT-SIGNATURE wins
// over X-PAYMENT, and a payload whose x402Version differs from its header's is a 400.
func TestV2HeaderPreferredAndVersionChecked(t *testing.T) {
	env := newTestEnv(t)
	up := &upstream{}
	srv := serve(t, env.gate(t, env.config(), Options{}), up)
	url := srv.URL + "/r"
	c := fetchChallenge(t, url)

	_, v2 := env.sign(t, x402.Version2, env.payer, c, tamper{})
	_, v1 := env.sign(t, x402.Version1, env.payer, c, tamper{})

	t.Run("v1 payload in PAYMENT-SIGNATURE", func(t *testing.T) {
		res := get(t, url, x402.HeaderPaymentSignature, v1)
		body := readBody(t, res)
		if res.StatusCode != http.StatusBadRequest || errorOf(t, body) != "invalid_x402_version" {
			t.Fatalf("status %d body %s, want 400 invalid_x402_version", res.StatusCode, body)
		}
	})
	t.Run("v2 payload in X-PAYMENT", func(t *testing.T) {
		res := get(t, url, x402.HeaderPayment, v2)
		body := readBody(t, res)
		if res.StatusCode != http.StatusBadRequest || errorOf(t, body) != "invalid_x402_version" {
			t.Fatalf("status %d body %s, want 400 invalid_x402_version", res.StatusCode, body)
		}
	})
	t.Run("both headers: the v2 one is used", func(t *testing.T) {
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		req.Header.Set(x402.HeaderPaymentSignature, v2)
		req.Header.Set(x402.HeaderPayment, "not base64 at all!")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body := readBody(t, res)
		if res.StatusCode != http.StatusOK {
			t.Fatalf("status %d body %s, want 200", res.StatusCode, body)
		}
		settleHeader(t, res, x402.Version2)
	})
	if n := up.calls.Load(); n != 1 {
		t.Errorf("upstream ran %d times, want 1", n)
	}
}

// TestTamperedPaymentRefused checks that a payment that does not pay the route, or whose
// signature does not hold, is refused with its exact reason in the payment's version,
// that the upstream never runs, and that no money moves.
func TestTamperedPaymentRefused(t *testing.T) {
	env := newTestEnv(t)
	other := testenv.NewAccount(t)
	stranger := env.chain.Accounts[2]
	cases := []struct {
		name       string
		tm         tamper
		status     int
		v1, v2     string
		skipV1Only bool
	}{
		{
			name:   "amount signed lower",
			tm:     tamper{before: func(a *x402.Authorization) { a.Value = big.NewInt(9_999) }},
			status: http.StatusPaymentRequired, v1: "invalid_exact_evm_payload_authorization_value", v2: "invalid_exact_evm_payload_authorization_value_mismatch",
		},
		{
			name:   "amount raised after signing",
			tm:     tamper{after: func(_ []byte, a *x402.AuthorizationJSON, _ *x402.RequirementsV2) { a.Value = "1" }},
			status: http.StatusPaymentRequired, v1: "invalid_exact_evm_payload_authorization_value", v2: "invalid_exact_evm_payload_authorization_value_mismatch",
		},
		{
			name:   "payTo signed to another address",
			tm:     tamper{before: func(a *x402.Authorization) { a.To = other.Address }},
			status: http.StatusPaymentRequired, v1: "invalid_exact_evm_payload_recipient_mismatch", v2: "invalid_exact_evm_recipient_mismatch",
		},
		{
			name: "payTo changed in accepted and authorization after signing",
			tm: tamper{after: func(_ []byte, a *x402.AuthorizationJSON, acc *x402.RequirementsV2) {
				a.To, acc.PayTo = other.Address.Hex(), other.Address.Hex()
			}},
			status: http.StatusPaymentRequired, v1: "invalid_exact_evm_payload_recipient_mismatch", v2: "invalid_exact_evm_recipient_mismatch",
		},
		{
			name:   "signature bit flipped",
			tm:     tamper{after: func(sig []byte, _ *x402.AuthorizationJSON, _ *x402.RequirementsV2) { sig[10] ^= 0x01 }},
			status: http.StatusPaymentRequired, v1: "invalid_exact_evm_payload_signature", v2: "invalid_exact_evm_signature",
		},
		{
			name:   "signed by another key",
			tm:     tamper{key: &stranger},
			status: http.StatusPaymentRequired, v1: "invalid_exact_evm_payload_signature", v2: "invalid_exact_evm_signature",
		},
		{
			name: "v2 accepted amount lowered",
			tm: tamper{after: func(_ []byte, _ *x402.AuthorizationJSON, acc *x402.RequirementsV2) {
				acc.Amount = "1"
			}},
			status: http.StatusPaymentRequired, v2: "invalid_exact_evm_payload_authorization_value_mismatch", skipV1Only: true,
		},
	}
	up := &upstream{}
	srv := serve(t, env.gate(t, env.config(), Options{}), up)
	url := srv.URL + "/r"
	c := fetchChallenge(t, url)
	before := env.ledger(t, env.payer.Address)
	for _, tc := range cases {
		for _, version := range []int{x402.Version1, x402.Version2} {
			want := tc.v2
			if version == x402.Version1 {
				if tc.skipV1Only {
					continue // v1 payloads carry no accepted requirement
				}
				want = tc.v1
			}
			t.Run(fmt.Sprintf("%s v%d", tc.name, version), func(t *testing.T) {
				name, value := env.sign(t, version, env.payer, c, tc.tm)
				res := get(t, url, name, value)
				body := readBody(t, res)
				if res.StatusCode != tc.status {
					t.Fatalf("status %d, want %d; %s", res.StatusCode, tc.status, body)
				}
				if got := errorOf(t, body); got != want {
					t.Errorf("error %q, want %q", got, want)
				}
				if res.Header.Get(x402.HeaderPaymentRequired) == "" {
					t.Error("a rejection carries no PAYMENT-REQUIRED")
				}
				if res.Header.Get(x402.HeaderPaymentResponse) != "" {
					t.Error("a rejection before settlement carries X-PAYMENT-RESPONSE")
				}
			})
		}
	}
	t.Run("malformed headers are 400", func(t *testing.T) {
		for _, h := range []struct{ name, value, want string }{
			{x402.HeaderPayment, "%%%not-base64", "invalid_payload"},
			{x402.HeaderPaymentSignature, rawHeader(t, map[string]any{"x402Version": 2}), "invalid_payload"},
			{x402.HeaderPaymentSignature, rawHeader(t, map[string]any{"x402Version": 3}), "invalid_x402_version"},
			{x402.HeaderPayment, rawHeader(t, []int{1, 2}), "invalid_payload"},
			{x402.HeaderPayment, strings.Repeat("A", 20_000), "invalid_payload"},
		} {
			res := get(t, url, h.name, h.value)
			body := readBody(t, res)
			if res.StatusCode != http.StatusBadRequest || errorOf(t, body) != h.want {
				t.Errorf("%s %.20q: status %d body %s, want 400 %s", h.name, h.value, res.StatusCode, body, h.want)
			}
		}
	})
	if n := up.calls.Load(); n != 0 {
		t.Errorf("upstream ran %d times for refused payments", n)
	}
	env.expectMoved(t, env.payer.Address, before, 0)
}

// TestConcurrentRequestsOneHeader sends one payment header on 20 requests at once:
// exactly one transfer is made and exactly one request reaches the upstream.
func TestConcurrentRequestsOneHeader(t *testing.T) {
	env := newTestEnv(t)
	up := &upstream{}
	srv := serve(t, env.gate(t, env.config(), Options{}), up)
	url := srv.URL + "/r"
	name, value := env.sign(t, x402.Version2, env.payer, fetchChallenge(t, url), tamper{})
	before := env.ledger(t, env.payer.Address)

	const n = 20
	var wg sync.WaitGroup
	statuses := make([]int, n)
	errs := make([]string, n)
	start := make(chan struct{})
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			<-start
			req, _ := http.NewRequest(http.MethodGet, url, nil)
			req.Header.Set(name, value)
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				errs[i] = err.Error()
				return
			}
			b, _ := io.ReadAll(res.Body)
			_ = res.Body.Close()
			statuses[i] = res.StatusCode
			if res.StatusCode != http.StatusOK {
				var e struct{ Error string }
				_ = json.Unmarshal(b, &e)
				errs[i] = e.Error
			}
		}(i)
	}
	close(start)
	wg.Wait()
	ok := 0
	for i, s := range statuses {
		switch {
		case s == http.StatusOK:
			ok++
		case s == http.StatusPaymentRequired && (errs[i] == "duplicate_settlement" || errs[i] == "invalid_exact_evm_nonce_already_used"):
		default:
			t.Errorf("request %d: status %d error %q", i, s, errs[i])
		}
	}
	if ok != 1 {
		t.Errorf("%d requests succeeded, want 1", ok)
	}
	if c := up.calls.Load(); c != 1 {
		t.Errorf("upstream ran %d times, want 1", c)
	}
	env.expectMoved(t, env.payer.Address, before, 1)
}

// TestMiddlewarePerRequestMappers checks the net/http middleware's mappers (the spec's
// ctx(request)): a per-request price and payee, and a public resource URL.
func TestMiddlewarePerRequestMappers(t *testing.T) {
	env := newTestEnv(t)
	vip := testenv.NewAccount(t).Address
	cfg := env.config()
	cfg.PriceMin, cfg.PriceMax, cfg.PayToAllowed = "1000 base", "0.01", []string{vip.Hex()}
	g := env.gate(t, cfg, Options{})
	up := &upstream{}
	h := g.Middleware(MiddlewareOptions{
		Resource: func(r *http.Request) string { return "https://api.example.com" + r.URL.Path },
		Price: func(r *http.Request) string {
			if r.URL.Query().Get("tier") == "gold" {
				return "2500 base"
			}
			return ""
		},
		PayTo: func(r *http.Request) string {
			if r.URL.Query().Get("tier") == "gold" {
				return vip.Hex()
			}
			return ""
		},
	})(up)
	srv := httptest.NewServer(h)
	defer srv.Close()

	c := fetchChallenge(t, srv.URL+"/x?tier=gold")
	if a := c.v2.Accepts[0]; a.Amount != "2500" || a.PayTo != vip.Hex() || c.v2.Resource.URL != "https://api.example.com/x" {
		t.Errorf("gold challenge %+v resource %+v", a, c.v2.Resource)
	}
	c = fetchChallenge(t, srv.URL+"/x")
	if a := c.v2.Accepts[0]; a.Amount != "10000" || a.PayTo != env.payTo.Hex() {
		t.Errorf("default challenge %+v", a)
	}
	// A bad per-request override is the route's misconfiguration: 500, fail closed.
	bad := httptest.NewServer(g.Middleware(MiddlewareOptions{Price: func(*http.Request) string { return "-1" }})(up))
	defer bad.Close()
	res := get(t, bad.URL+"/x", "", "")
	body := readBody(t, res)
	if res.StatusCode != http.StatusInternalServerError || errorOf(t, body) != "invalid_payment_requirements" {
		t.Errorf("bad price: status %d body %s", res.StatusCode, body)
	}
	if up.calls.Load() != 0 {
		t.Error("the upstream ran")
	}
}

// TestPerRequestPriceAndPayeeBounds: a price or payee that a request brings (a
// placeholder a client may influence) is held to price_min, price_max and
// pay_to_allowed. Outside them the answer is 500 invalid_payment_requirements, a paid
// request included, and the upstream never runs; a route without bounds takes no
// per-request price or payee at all.
func TestPerRequestPriceAndPayeeBounds(t *testing.T) {
	env := newTestEnv(t)
	vip := testenv.NewAccount(t).Address
	bounded := env.config()
	bounded.PriceMin, bounded.PriceMax, bounded.PayToAllowed = "1000 base", "0.01", []string{vip.Hex()}
	up := &upstream{}
	for _, tc := range []struct {
		name         string
		cfg          Config
		price, payTo string
		want         int
	}{
		{"a price within the bounds", bounded, "5000 base", "", http.StatusPaymentRequired},
		{"price_min itself", bounded, "1000 base", "", http.StatusPaymentRequired},
		{"a client-chosen price of 1 base unit", bounded, "1 base", "", http.StatusInternalServerError},
		{"a price over price_max", bounded, "0.02", "", http.StatusInternalServerError},
		{"an allowed payee", bounded, "", vip.Hex(), http.StatusPaymentRequired},
		{"a payee not in the list", bounded, "", env.payer.Address.Hex(), http.StatusInternalServerError},
		{"a price on a route without bounds", env.config(), "5000 base", "", http.StatusInternalServerError},
		{"a payee on a route without an allow-list", env.config(), "", vip.Hex(), http.StatusInternalServerError},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := env.gate(t, tc.cfg, Options{})
			srv := httptest.NewServer(g.Middleware(MiddlewareOptions{
				Price: func(*http.Request) string { return tc.price },
				PayTo: func(*http.Request) string { return tc.payTo },
			})(up))
			defer srv.Close()
			res := get(t, srv.URL+"/x", "", "")
			body := readBody(t, res)
			if res.StatusCode != tc.want {
				t.Fatalf("status %d, want %d; body %s", res.StatusCode, tc.want, body)
			}
			if tc.want == http.StatusInternalServerError && errorOf(t, body) != "invalid_payment_requirements" {
				t.Errorf("body %s, want invalid_payment_requirements", body)
			}
			if tc.want != http.StatusInternalServerError {
				return
			}
			// A paid request is refused the same way, before anything is verified.
			c := fetchChallenge(t, serve(t, env.gate(t, env.config(), Options{}), up).URL+"/x")
			name, value := env.sign(t, x402.Version2, env.payer, c, tamper{})
			res = get(t, srv.URL+"/x", name, value)
			_ = readBody(t, res)
			if res.StatusCode != http.StatusInternalServerError {
				t.Errorf("paid: status %d, want 500", res.StatusCode)
			}
		})
	}
	if n := up.calls.Load(); n != 0 {
		t.Errorf("the upstream ran %d times", n)
	}
}

// TestHandleResults checks Handle's kinds directly, as the Caddy handler uses them.
func TestHandleResults(t *testing.T) {
	env := newTestEnv(t)
	g := env.gate(t, env.config(), Options{})
	ctx := t.Context()
	res := g.Handle(ctx, Input{Resource: "https://shop.example/a", Header: http.Header{}})
	if res.Kind != KindPaymentRequired || res.Status != 402 || res.Requirements == nil || res.Requirements.Amount.Cmp(testAmount) != 0 {
		t.Fatalf("unpaid: %+v", res)
	}
	for _, bad := range []string{"", "/relative", "ftp://x/y", "https://user:pw@host/x", "https://"} {
		res := g.Handle(ctx, Input{Resource: bad, Header: http.Header{}})
		if res.Kind != KindError || res.Status != http.StatusInternalServerError {
			t.Errorf("resource %q: %s %d", bad, res.Kind, res.Status)
		}
		if bytes.Contains(res.Body, []byte("pw")) {
			t.Errorf("resource %q: body quotes the URL: %s", bad, res.Body)
		}
	}
	h := http.Header{}
	h.Add(x402.HeaderPaymentSignature, "a")
	h.Add(x402.HeaderPaymentSignature, "b")
	if res := g.Handle(ctx, Input{Resource: "https://shop.example/a", Header: h}); res.Kind != KindError || res.Status != 400 || res.Reason != x402.ReasonInvalidPayload {
		t.Errorf("doubled header: %+v", res)
	}
	if err := g.CheckSupported(ctx); err != nil {
		t.Errorf("CheckSupported: %v", err)
	}
	// The settled kind and its header, through Handle and ReportUpstream.
	c := challengeOf{v2: res.challenge}
	v1, _ := res.Requirements.V1(env.reg)
	c.v1.Accepts = []x402.RequirementsV1{v1}
	name, value := env.sign(t, x402.Version2, env.payer, c, tamper{})
	hh := http.Header{}
	hh.Set(name, value)
	res = g.Handle(ctx, Input{Resource: "https://shop.example/a", Header: hh})
	if res.Kind != KindSettled || res.Status != 200 || res.Settlement == nil || !res.Settlement.Success ||
		res.Header.Get(x402.HeaderPaymentResponseV2) == "" || res.Payer != env.payer.Address.Hex() || res.Version != 2 {
		t.Fatalf("paid: %+v", res)
	}
	env.expectOnChain(t, res.Settlement.Transaction, env.payer.Address)
	// A caller of Handle reports the failed upstream itself and passes the token on.
	token, err := g.ReportUpstream(ctx, res, true)
	if err != nil || len(token) != 64 {
		t.Fatalf("ReportUpstream(failed): token %q, %v", token, err)
	}
	if again, err := g.ReportUpstream(ctx, res, true); err != nil || again != "" {
		t.Errorf("a second report of the same attempt: token %q, %v; want no new grant", again, err)
	}
	if r := g.Handle(ctx, Input{Resource: "https://shop.example/a", Header: hh}); r.Kind != KindRejected || r.Reason != x402.ReasonNonceUsed {
		t.Errorf("the header again without the token: %s %s, want rejected %s", r.Kind, r.Reason, x402.ReasonNonceUsed)
	}
	hh.Set(HeaderPaymentRetry, token)
	retry := g.Handle(ctx, Input{Resource: "https://shop.example/a", Header: hh})
	if retry.Kind != KindSettled || !retry.Retry || retry.Settlement.Transaction != res.Settlement.Transaction {
		t.Fatalf("the header with the token: %+v, want a settled retry of %s", retry, res.Settlement.Transaction)
	}
	if tok, err := g.ReportUpstream(ctx, retry, false); err != nil || tok != "" {
		t.Errorf("ReportUpstream(retry ok): token %q, %v", tok, err)
	}
	if r := g.Handle(ctx, Input{Resource: "https://shop.example/a", Header: hh}); r.Kind != KindRejected {
		t.Errorf("after a good retry: %s, want rejected", r.Kind)
	}
}

// TestNewRefusesBadConfig checks New's errors.
func TestNewRefusesBadConfig(t *testing.T) {
	reg := x402.NewRegistry()
	f := deadFacilitator(t, reg)
	base := Config{Network: "base-sepolia", PayTo: "0x209693Bc6afc0C5328bA36FaF03C514EF312287C", Price: "0.01"}
	cases := []struct {
		name   string
		mutate func(*Config)
		want   string
	}{
		{"no network", func(c *Config) { c.Network = "" }, "network: is required"},
		{"unknown network", func(c *Config) { c.Network = "solana" }, `network: "solana" is not one of base, base-sepolia`},
		{"bad payTo", func(c *Config) { c.PayTo = "0x1234" }, "pay_to: "},
		{"payTo checksum", func(c *Config) { c.PayTo = "0x209693bc6afc0C5328bA36FaF03C514EF312287C" }, "EIP-55"},
		{"zero payTo", func(c *Config) { c.PayTo = "0x0000000000000000000000000000000000000000" }, "zero address"},
		{"negative price", func(c *Config) { c.Price = "-0.01" }, "invalid price"},
		{"zero price", func(c *Config) { c.Price = "0" }, "must be positive"},
		{"wrong unit", func(c *Config) { c.Price = "0.01 EURC" }, `unit "EURC"`},
		{"negative timeout", func(c *Config) { c.MaxTimeoutSeconds = -1 }, "max_timeout: "},
		{"guardian advertise", func(c *Config) { c.Verdict = &VerdictConfig{Advertise: "always"} }, `guardian: advertise "always"`},
		{"fee without pricing", func(c *Config) { c.Verdict = &VerdictConfig{Fee: true} }, "pricing"},
		{"foreign asset without domain", func(c *Config) { c.Asset.Address = "0x1111111111111111111111111111111111111111" }, "EIP-712 asset_name and asset_version"},
		{"negative grace", func(c *Config) { c.Retry.Grace = -1 }, "retry_grace: "},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := base
			tc.mutate(&cfg)
			_, err := New(cfg, Options{Facilitator: f, Registry: reg})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New: %v, want an error containing %q", err, tc.want)
			}
		})
	}
	t.Run("no facilitator", func(t *testing.T) {
		if _, err := New(base, Options{Registry: reg}); err == nil || !strings.Contains(err.Error(), "Options.Facilitator is required") {
			t.Fatalf("New: %v", err)
		}
	})
	t.Run("defaults", func(t *testing.T) {
		g, err := New(base, Options{Facilitator: f, Registry: reg})
		if err != nil {
			t.Fatal(err)
		}
		r, err := g.Requirements(t.Context(), Input{Resource: "https://a.example/"})
		if err != nil {
			t.Fatal(err)
		}
		if r.Asset != x402.BaseSepolia.USDC.Address || r.Extra["name"] != "USDC" || r.MaxTimeoutSeconds != DefaultMaxTimeoutSeconds || r.Amount.Int64() != 10_000 {
			t.Errorf("requirements %+v", r)
		}
		if g.route.retryMax != DefaultRetryMax {
			t.Errorf("retry max %d", g.route.retryMax)
		}
		if _, ok := g.ledger.(*MemoryLedger); !ok {
			t.Errorf("default ledger %T", g.ledger)
		}
	})
}

// deadFacilitator is a real httpapi.Client of a port nothing listens on.
func deadFacilitator(t *testing.T, reg *x402.Registry) Facilitator {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	c, err := httpapi.NewClient(httpapi.ClientConfig{URL: "http://" + addr, Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	return c
}
