package integration_test

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/x402gate/x402gate/internal/testenv"
)

// passCaddyfile is one instance of a site sold by the pass: /premium/* costs 0.01 USDC and
// buys an hour of /premium/, with passes signed by the key in X402_PASS_KEY; the bundled
// facilitator keeps its retry store (and so the pass book) in Redis. The upstream echoes
// what the gate told it.
const passCaddyfile = `{
` + globalOptions + `	x402 {
		facilitator {
			` + testChainFacilitator + `
			store redis {env.X402_REDIS_URL}
		}
	}
}

http://:{$SITE_PORT} {
	bind 127.0.0.1
	log {
		output stderr
		format x402_redact json
	}
	@premium path /premium/*
	x402 @premium {
		price 0.01 USDC
		pay_to {$X402_PAY_TO}
		network base-sepolia
		pass 1h /premium/
		pass_key {env.X402_PASS_KEY} {env.X402_PASS_KEY_OLD}
	}
	respond "pass={http.x402.pass} payer={http.x402.payer} tx={http.x402.tx}" 200
}
`

// doHost sends GET url with Host host and headers: both instances answer for one public
// host, as behind a load balancer.
func doHost(t *testing.T, url, host string, header map[string]string) httpResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), requestBound)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	for k, v := range header {
		req.Header.Set(k, v)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return httpResult{Status: res.StatusCode, Header: res.Header, Body: body}
}

// TestCaddyPassAcrossInstances: two instances of the built Caddy with the same pass_key
// (from the environment) and one Redis. A payment on instance A buys a pass; instance B
// lets the pass in without a payment and tells its upstream {http.x402.pass}; a tampered
// pass is refused on B with its reason and the 402; one transfer moves; neither instance's
// logs nor adapted config hold the pass key or the pass. Then @x402/fetch 2.27 with
// @x402/extensions' sign-in-with-x pays once on A and comes back by signing the challenge,
// its pass found in the bundled facilitator's Redis store; the admin /metrics count it all.
func TestCaddyPassAcrossInstances(t *testing.T) {
	chain, tok := testenv.StartChainWithToken(t)
	redisURL := testenv.StartRedis(t)
	payTo := testenv.NewAccount(t).Address
	passKey, passKeyOld := canary.passKey, canary.passKeyOld
	keyFile := writeKeyFile(t, chain.FacilitatorAccount())
	start := func() (*testenv.Caddy, string) {
		port := testenv.FreePort(t)
		c := testenv.StartCaddy(t, passCaddyfile, testenv.CaddyOptions{
			Env: []string{
				"X402_RPC_URL=" + chain.RPCURL, "X402_TOKEN=" + tok.Address.Hex(), "X402_PAY_TO=" + payTo.Hex(),
				"X402_FACILITATOR_KEY_FILE=" + keyFile, "X402_REDIS_URL=" + redisURL,
				"X402_PASS_KEY=" + passKey, "X402_PASS_KEY_OLD=" + passKeyOld, "SITE_PORT=" + strconv.Itoa(port),
			},
			WaitPorts: []int{port},
		})
		return c, "http://127.0.0.1:" + strconv.Itoa(port)
	}
	caddyA, a := start()
	caddyB, b := start()
	const host = "shop.example"
	payer := chain.Accounts[1]
	bal := balances(t, tok, payer.Address, payTo)

	header := signOnly(t, payV2Script, payer, a+"/premium/one.html", "X402_TOKEN="+tok.Address.Hex())
	paid := doHost(t, a+"/premium/one.html", host, map[string]string{"PAYMENT-SIGNATURE": header})
	pass := paid.Header.Get("X-402-PASS")
	if paid.Status != 200 || pass == "" || !strings.HasPrefix(string(paid.Body), "pass= payer="+payer.Address.Hex()) {
		t.Fatalf("paid on A: %d %q, a pass: %v", paid.Status, paid.Body, pass != "")
	}
	if c := paid.Header.Get("Set-Cookie"); !strings.Contains(c, "x402_pass="+pass) || !strings.Contains(c, "Path=/premium/") || !strings.Contains(c, "HttpOnly") {
		t.Errorf("Set-Cookie lacks the pass, Path=/premium/ or HttpOnly")
	}

	got := doHost(t, b+"/premium/two.html", host, map[string]string{"X-402-PASS": pass})
	if got.Status != 200 || !strings.HasPrefix(string(got.Body), "pass=header payer="+payer.Address.Hex()+" tx=0x") {
		t.Errorf("B with A's pass: %d %q (refused %q)", got.Status, got.Body, got.Header.Get("X-402-PASS-REFUSED"))
	}
	got = doHost(t, b+"/premium/three.html", host, map[string]string{"Cookie": "x402_pass=" + pass})
	if got.Status != 200 || !strings.HasPrefix(string(got.Body), "pass=cookie ") {
		t.Errorf("B with A's pass cookie: %d %q", got.Status, got.Body)
	}
	tampered := pass[:len(pass)-2] + map[bool]string{true: "AA", false: "BB"}[!strings.HasSuffix(pass, "AA")]
	got = doHost(t, b+"/premium/two.html", host, map[string]string{"X-402-PASS": tampered})
	if got.Status != http.StatusPaymentRequired || got.Header.Get("X-402-PASS-REFUSED") != "pass_invalid" {
		t.Errorf("B with a tampered pass: %d, refused %q", got.Status, got.Header.Get("X-402-PASS-REFUSED"))
	}
	got = doHost(t, b+"/premium/two.html", "other.example", map[string]string{"X-402-PASS": pass})
	if got.Status != http.StatusPaymentRequired || got.Header.Get("X-402-PASS-REFUSED") != "pass_other_site" {
		t.Errorf("B with the pass for another host: %d, refused %q", got.Status, got.Header.Get("X-402-PASS-REFUSED"))
	}
	// The real @x402/fetch 2.27 with @x402/extensions' sign-in-with-x, through the built Caddy:
	// it pays once for one page, then gets another page by signing the 402's challenge; the
	// pass book is the bundled facilitator's Redis store.
	siwxPayer := chain.Accounts[2]
	siwxBal := balances(t, tok, siwxPayer.Address)
	first := payWith(t, payV2Script, siwxPayer, a+"/premium/siwx-one.html", "X402_TOKEN="+tok.Address.Hex(), "X402_SIWX=1")
	if first.Status != 200 || first.PaymentResponseHeader == nil || !strings.HasPrefix(first.Body, "pass= payer="+siwxPayer.Address.Hex()) {
		t.Fatalf("first call: %d %q", first.Status, first.Body)
	}
	second := payWith(t, payV2Script, siwxPayer, a+"/premium/siwx-two.html", "X402_TOKEN="+tok.Address.Hex(), "X402_SIWX=1")
	if second.Status != 200 || second.PaymentResponseHeader != nil || !strings.HasPrefix(second.Body, "pass=sign-in-with-x payer="+siwxPayer.Address.Hex()) {
		t.Errorf("second call: %d %q (a settle header: %v); want it let in by sign-in-with-x", second.Status, second.Body, second.PaymentResponseHeader != nil)
	}
	wantDelta(t, tok, siwxPayer.Address, siwxBal[0], -10_000)

	for _, m := range []struct {
		c      *testenv.Caddy
		labels string
	}{
		{caddyA, `event="admitted",reason="",via="sign-in-with-x"`},
		{caddyA, `event="refused",reason="siwx_no_pass",via=""`},
		{caddyB, `event="admitted",reason="",via="header"`},
		{caddyB, `event="admitted",reason="",via="cookie"`},
		{caddyB, `event="refused",reason="pass_invalid",via=""`},
		{caddyB, `event="refused",reason="pass_other_site",via=""`},
	} {
		if v, n := metricSum(m.c.Metrics(t), "caddy_x402_passes_total", m.labels); n != 1 || v != 1 {
			t.Errorf("caddy_x402_passes_total{%s} = %v over %d series, want 1", m.labels, v, n)
		}
	}
	wantDelta(t, tok, payer.Address, bal[0], -10_000)
	wantDelta(t, tok, payTo, bal[1], 20_000) // both payers, once each

	for name, c := range map[string]*testenv.Caddy{"A": caddyA, "B": caddyB} {
		cfg := mustDo(t, http.MethodGet, c.AdminURL+"/config/", nil)
		for what, secret := range map[string]string{"pass key": passKey, "old pass key": passKeyOld, "pass": pass} {
			if strings.Contains(c.Logs(), secret) || strings.Contains(string(cfg.Body), secret) {
				t.Errorf("instance %s: the %s appears in its logs or adapted config", name, what)
			}
		}
		if !strings.Contains(string(cfg.Body), "{env.X402_PASS_KEY}") {
			t.Errorf("instance %s: the adapted config lacks the pass_key placeholder", name)
		}
	}
}
