package gate

import (
	"crypto/ecdsa"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/accounts"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/crypto"

	"github.com/x402gate/x402gate/gate/pass"
	"github.com/x402gate/x402gate/gate/redisretry"
	"github.com/x402gate/x402gate/internal/testenv"
	"github.com/x402gate/x402gate/x402"
)

// siwxChallengeOf reads the sign-in-with-x extension of a 402's PAYMENT-REQUIRED.
func siwxChallengeOf(t *testing.T, res *http.Response) (info pass.Info, chains []pass.ChainSpec) {
	t.Helper()
	readBody(t, res)
	pr, err := x402.DecodePaymentRequired(res.Header.Get(x402.HeaderPaymentRequired))
	if err != nil {
		t.Fatalf("PAYMENT-REQUIRED: %v", err)
	}
	raw, err := json.Marshal(pr.Extensions[SignInWithX])
	if err != nil {
		t.Fatal(err)
	}
	var ext struct {
		Info            pass.Info        `json:"info"`
		SupportedChains []pass.ChainSpec `json:"supportedChains"`
	}
	if err := json.Unmarshal(raw, &ext); err != nil || ext.Info.Nonce == "" {
		t.Fatalf("no sign-in-with-x extension in %s: %v", raw, err)
	}
	return ext.Info, ext.SupportedChains
}

// siwxProof signs info as the wallet of key, on chain, after change edits the payload.
func siwxProof(t *testing.T, info pass.Info, chain string, key *ecdsa.PrivateKey, change func(*pass.Proof)) string {
	t.Helper()
	addr := crypto.PubkeyToAddress(key.PublicKey)
	st, exp := info.Statement, info.ExpirationTime
	p := &pass.Proof{
		Domain: info.Domain, Address: addr.Hex(), Statement: &st, URI: info.URI, Version: info.Version,
		ChainID: chain, Type: "eip191", Nonce: info.Nonce, IssuedAt: info.IssuedAt, ExpirationTime: &exp,
		Resources: info.Resources,
	}
	if change != nil {
		change(p)
	}
	id := int64(84532)
	msg := p.Message(addr.Hex(), id)
	if p.Address == strings.ToLower(p.Address) {
		msg = p.Message(p.Address, id) // as a browser wallet signs it
	}
	sig, err := crypto.Sign(accounts.TextHash([]byte(msg)), key)
	if err != nil {
		t.Fatal(err)
	}
	sig[64] += 27
	p.Signature = hexutil.Encode(sig)
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(b)
}

// TestSignInWithXAcrossInstances: a payer buys a pass on instance A; instance B, sharing
// A's Redis pass book but not its process, offers the sign-in-with-x challenge and lets
// the payer in on a signed proof, without the pass and without a payment. Every check of
// the proof refuses with its reason and the ordinary 402.
func TestSignInWithXAcrossInstances(t *testing.T) {
	env := newTestEnv(t)
	url := testenv.StartRedis(t)
	store := func() *redisretry.Store {
		s, err := redisretry.Open(t.Context(), url, "")
		if err != nil {
			t.Fatalf("redisretry.Open: %v", err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	clk := &clock{}
	up := &upstream{}
	const host = "shop.example"
	srvA := serve(t, env.gate(t, env.passConfig(testPassKey), Options{Now: clk.now, Ledger: store()}), up)
	srvB := serve(t, env.gate(t, env.passConfig(testPassKey), Options{Now: clk.now, Ledger: store()}), up)
	before := env.ledger(t, env.payer.Address)
	env.payForPass(t, srvA.URL+"/premium/a.html", host)

	stranger := testenv.NewAccount(t)
	for _, tc := range []struct {
		name   string
		path   string
		key    *ecdsa.PrivateKey
		chain  string
		wait   time.Duration // before the challenge
		later  time.Duration // after the challenge
		change func(*pass.Proof)
		reuse  bool
		raw    string
		want   PassRefusal
	}{
		{name: "the payer's proof lets in on the other instance", path: "/premium/b.html", want: ""},
		{name: "a proof naming the address in lowercase, as browser wallets do, lets in", path: "/premium/b.html", change: func(p *pass.Proof) { p.Address = strings.ToLower(p.Address) }, want: ""},
		{name: "a mixed-case address that fails its checksum is refused", path: "/premium/b.html", change: func(p *pass.Proof) { p.Address = flipCase(p.Address) }, want: SIWXMalformed},
		{name: "a proof used twice is refused", path: "/premium/b.html", reuse: true, want: SIWXNonce},
		{name: "a wallet without a pass is refused", path: "/premium/b.html", key: stranger.Key, want: SIWXNoPass},
		{name: "a proof for another domain is refused", path: "/premium/b.html", change: func(p *pass.Proof) { p.Domain = "evil.example" }, want: SIWXDomainMismatch},
		{name: "a proof for another origin is refused", path: "/premium/b.html", change: func(p *pass.Proof) { p.URI = "https://evil.example/premium/b.html" }, want: SIWXURIMismatch},
		{name: "a proof issued too long ago is refused", path: "/premium/b.html", later: 6 * time.Minute, want: SIWXTooOld},
		{name: "an expired proof is refused", path: "/premium/b.html", change: func(p *pass.Proof) { e := p.IssuedAt; p.ExpirationTime = &e }, want: SIWXExpired},
		{name: "a proof on another chain is refused", path: "/premium/b.html", chain: "eip155:1", want: SIWXChainID},
		{name: "a proof signed by another key is refused", path: "/premium/b.html", change: func(p *pass.Proof) { p.Address = env.chain.Accounts[2].Address.Hex() }, want: SIWXSignature},
		{name: "a malformed proof is refused", path: "/premium/b.html", raw: "bm90IGpzb24=", want: SIWXMalformed},
		{name: "a pass outside the proof's scope does not let in", path: "/free/b.html", want: SIWXNoPass},
		{name: "after the pass expired the proof does not let in", path: "/premium/b.html", wait: time.Hour + time.Minute, want: SIWXNoPass},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk.advance(tc.wait)
			defer clk.advance(-tc.wait)
			info, chains := siwxChallengeOf(t, getWith(t, srvB.URL+tc.path, host, nil))
			clk.advance(tc.later)
			defer clk.advance(-tc.later)
			if len(chains) != 1 || chains[0].ChainID != "eip155:84532" || chains[0].Type != "eip191" || info.Domain != host || !strings.HasPrefix(info.URI, "http://"+host+"/") {
				t.Fatalf("challenge %+v on %+v", info, chains)
			}
			key, chain := env.payer.Key, "eip155:84532"
			if tc.key != nil {
				key = tc.key
			}
			if tc.chain != "" {
				chain = tc.chain
			}
			proof := tc.raw
			if proof == "" {
				proof = siwxProof(t, info, chain, key, tc.change)
			}
			if tc.reuse {
				readBody(t, getWith(t, srvB.URL+tc.path, host, http.Header{HeaderSignInWithX: {proof}}))
			}
			calls := up.calls.Load()
			res := getWith(t, srvB.URL+tc.path, host, http.Header{HeaderSignInWithX: {proof}})
			body := readBody(t, res)
			if tc.want == "" {
				p := up.lastPaid()
				if res.StatusCode != 200 || up.calls.Load() != calls+1 || p == nil || p.Pass == nil || p.Pass.Via != PassViaSIWX ||
					p.Pass.Payer != env.payer.Address.Hex() || p.Pass.Scope != "/premium/" {
					t.Fatalf("status %d (refused %q), Paid %+v", res.StatusCode, res.Header.Get(HeaderPassRefused), p)
				}
				if up.leaked.Load() != 0 {
					t.Error("a credential reached the upstream")
				}
				if res.Header.Get(HeaderPass) == "" || !strings.Contains(res.Header.Get("Set-Cookie"), CookiePass+"=") {
					t.Error("signing in gave no pass back")
				}
				return
			}
			if res.StatusCode != http.StatusPaymentRequired || errorOf(t, body) != "X-PAYMENT header is required" || up.calls.Load() != calls {
				t.Fatalf("status %d %s; want the ordinary 402", res.StatusCode, body)
			}
			if got := res.Header.Get(HeaderPassRefused); got != string(tc.want) {
				t.Errorf("%s = %q, want %q", HeaderPassRefused, got, tc.want)
			}
		})
	}
	env.expectMoved(t, env.payer.Address, before, 1)
}

// flipCase changes the case of the first letter of a checksummed address's hex digits.
func flipCase(a string) string {
	b := []byte(a)
	for i := 2; i < len(b); i++ {
		switch {
		case b[i] >= 'a' && b[i] <= 'f':
			b[i] -= 'a' - 'A'
			return string(b)
		case b[i] >= 'A' && b[i] <= 'F':
			b[i] += 'a' - 'A'
			return string(b)
		}
	}
	return a
}

// TestSignInWithXBoundToIssuingKey: two routes of one site share one pass book, as every
// route of a Caddy server shares its facilitator's store. A wallet pays the cheap route,
// whose pass covers "/", then signs in on a dearer route that has its own pass_key and
// the request's directory as its scope (so it looks up "/" too): it is refused with
// siwx_no_pass and the ordinary 402, as its pass token is refused with pass_key_retired.
// The same proof lets it in on the route that issued the pass, and on a route that keeps
// the issuing key after a rotation. In memory and on Redis.
func TestSignInWithXBoundToIssuingKey(t *testing.T) {
	env := newTestEnv(t)
	redisStore, err := redisretry.Open(t.Context(), testenv.StartRedis(t), "")
	if err != nil {
		t.Fatalf("redisretry.Open: %v", err)
	}
	t.Cleanup(func() { _ = redisStore.Close() })
	const host = "shop.example"
	const thirdKey = "test-pass-key-third-route-00112233445566778899"
	for _, book := range []struct {
		name  string
		store Ledger
	}{{"memory", NewMemoryLedger(0)}, {"redis", redisStore}} {
		t.Run(book.name, func(t *testing.T) {
			up := &upstream{}
			route := func(price string, scope string, keys ...string) string {
				cfg := env.config()
				cfg.Price = price
				cfg.Pass = PassConfig{Duration: time.Hour, Scope: scope, Keys: keys}
				return serve(t, env.gate(t, cfg, Options{Ledger: book.store}), up).URL
			}
			cheap := route(testPrice, "/", testPassKey)
			dear := route("0.05 USDC", "", testPassKeyNew)
			rotated := route(testPrice, "/", thirdKey, testPassKey)

			before := env.ledger(t, env.payer.Address)
			token, _ := env.payForPass(t, cheap+"/cheap/a.html", host)
			for _, tc := range []struct {
				name string
				url  string
				pass bool        // present the pass token instead of a proof
				want PassRefusal // "" lets in
			}{
				{"the cheap route's pass token is refused on the dear route", dear + "/dear/x.html", true, PassKeyRetired},
				{"signing in on the dear route with the cheap route's pass is refused", dear + "/dear/x.html", false, SIWXNoPass},
				{"signing in at the dear route's root is refused too", dear + "/x.html", false, SIWXNoPass},
				{"signing in on the route that issued the pass lets in", cheap + "/cheap/b.html", false, ""},
				{"signing in on a route that keeps the issuing key after rotation lets in", rotated + "/cheap/c.html", false, ""},
			} {
				t.Run(tc.name, func(t *testing.T) {
					h := http.Header{HeaderPass: {token}}
					if !tc.pass {
						info, _ := siwxChallengeOf(t, getWith(t, tc.url, host, nil))
						h = http.Header{HeaderSignInWithX: {siwxProof(t, info, "eip155:84532", env.payer.Key, nil)}}
					}
					calls := up.calls.Load()
					res := getWith(t, tc.url, host, h)
					body := readBody(t, res)
					if tc.want == "" {
						if p := up.lastPaid(); res.StatusCode != 200 || up.calls.Load() != calls+1 || p == nil || p.Pass == nil {
							t.Fatalf("status %d (refused %q), Paid %+v; want 200 through sign-in-with-x", res.StatusCode, res.Header.Get(HeaderPassRefused), p)
						}
						return
					}
					if res.StatusCode != http.StatusPaymentRequired || errorOf(t, body) != "X-PAYMENT header is required" || up.calls.Load() != calls {
						t.Fatalf("status %d %s, upstream calls %d; want the ordinary 402", res.StatusCode, body, up.calls.Load()-calls)
					}
					if got := res.Header.Get(HeaderPassRefused); got != string(tc.want) {
						t.Errorf("%s = %q, want %q", HeaderPassRefused, got, tc.want)
					}
				})
			}
			env.expectMoved(t, env.payer.Address, before, 1)
		})
	}
}
