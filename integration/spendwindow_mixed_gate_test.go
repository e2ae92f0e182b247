package integration_test

import (
	"encoding/json"
	"fmt"
	"math/big"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/x402gate/x402gate/internal/testenv"
)

// mixedCaddyfile is the verdict tests' Caddyfile with a second network and asset: the
// bundled facilitator also settles on base (chain 8453, RPC_B) in TOKEN_B, which the verdict
// app prices by the price feed FEED_B on that chain, and the route /mixed/* accepts 0.01 of
// either token.
func mixedCaddyfile(caddyfile string) string {
	for _, r := range [][2]string{
		{"signer_key {file.", "network base {\n\t\t\t\trpc {env.RPC_B}\n\t\t\t\tasset {$TOKEN_B}\n\t\t\t\tasset_name USDC\n\t\t\t\tasset_version 2\n\t\t\t}\n\t\t\tsigner_key {file."},
		{"guardian_mode required", "guardian_mode required\n\t\t\tverdict_rate 100000 100000"},
		{"price 84532 {$X402_TOKEN} 1 6 USDC", "price 84532 {$X402_TOKEN} 1 6 USDC\n\t\trpc 8453 {env.RPC_B}\n\t\tprice_feed 8453 {$TOKEN_B} {$FEED_B} 1h"},
		{"\treverse_proxy {$UPSTREAM}", "\tx402 /mixed/* {\n\t\tpay_to {$PAY_TO_OK}\n\t\tmime_type application/json\n" +
			"\t\taccept {\n\t\t\tnetwork base-sepolia\n\t\t\tprice 0.01 USDC\n\t\t}\n" +
			"\t\taccept {\n\t\t\tnetwork base\n\t\t\tprice 0.01 USDC\n\t\t}\n\t}\n\treverse_proxy {$UPSTREAM}"},
	} {
		if !strings.Contains(caddyfile, r[0]) {
			panic("mixedCaddyfile: the verdict tests' Caddyfile has no " + r[0])
		}
		caddyfile = strings.Replace(caddyfile, r[0], r[1], 1)
	}
	return caddyfile
}

// mixedWindows is the agent's two windows as the admin API answers them: the daily one over
// every asset, then the daily one over the feed-priced token.
type mixedWindows [2]struct {
	UsedUSD     float64 `json:"usedUsd"`
	ReservedUSD float64 `json:"reservedUsd"`
}

// mixedWindowsOf reads the agent's windows from in's admin API; ok is false when it did not
// answer them.
func (f *verdictFleet) mixedWindowsOf(t *testing.T, in *verdictInstance, agentID string) (w mixedWindows, ok bool) {
	r, err := do(t, http.MethodGet, in.verdictAPI+"/admin/agents/"+agentID+"/windows", "", map[string]string{"x-admin-key": f.adminKey})
	if err != nil || r.Status != http.StatusOK {
		return w, false
	}
	var out struct {
		Windows []json.RawMessage `json:"windows"`
	}
	if json.Unmarshal(r.Body, &out) != nil || len(out.Windows) != 2 {
		return w, false
	}
	for i := range w {
		if json.Unmarshal(out.Windows[i], &w[i]) != nil {
			return w, false
		}
	}
	return w, true
}

// mixedPayment is one payment of the mixed-asset run: its asset, its X-PAYMENT header and
// the gate's answer.
type mixedPayment struct {
	feedPriced bool // in TOKEN_B on base, $0.02; else in our token on base-sepolia, $0.01
	header     string
	status     int
	body       string
}

// sampleEvery20ms calls sample every 20 ms until the returned stop is called, which returns
// once the last call is over.
func sampleEvery20ms(sample func()) (stop func()) {
	done, sampled := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			select {
			case <-done:
				return
			case <-time.After(20 * time.Millisecond):
			}
			sample()
		}
	}()
	return func() { close(done); <-sampled }
}

// settledUSD is the USD the payee received since before: the table's $1 a token on
// base-sepolia, the feed's $2 a token on base, in millionths of a USD.
func settledUSD(a, b *big.Int) int64 {
	return a.Int64() + 2*b.Int64()
}

// TestSpendWindowsMixedAssetsThroughTheGate is the mixed-asset run of the spend windows'
// crash test (docs/spend-windows.md) through the built Caddy: a gate whose bundled
// facilitator, in GUARDIAN_MODE required, asks its own verdict app and settles on two
// anvils: base-sepolia in our token, which the verdict app prices at $1 from its table
// (`price`), and base (chain 8453) in a second token, which it prices at $2 by a price feed
// on that anvil (`price_feed`). The agent's payer, one wallet on both chains, sends ten
// payments of 0.01 token in each asset at once ($0.01 and $0.02) against a $0.15 daily
// window over every asset and a $0.08 daily window over the feed-priced token. Judged on
// the two chains and by the verdict store:
//
//   - at no sample is the USD the payee received on the two chains more than $0.15, nor the
//     windows' committed and reserved totals more than their caps;
//   - every payment served was settled once on its chain, and every other got a 402 that
//     says spend_window_exceeded;
//   - in the end the overall window's committed total is the USD settled on the two chains,
//     the token's window's is what settled in that token, and nothing is left reserved.
func TestSpendWindowsMixedAssetsThroughTheGate(t *testing.T) {
	f := newVerdictFleet(t, verdictSetup{})
	chainB, tokB := testenv.StartChainWithToken(t, testenv.WithChainID(8453))
	feed := chainB.DeployPriceFeed(t, 8, "WETH / USD")
	feed.SetRound(t, big.NewInt(2e8), time.Now()) // $2 a token
	f.caddyfile = mixedCaddyfile(f.caddyfile)
	f.liftVerdictRateLimits()
	f.env = append(f.env, "RPC_B="+chainB.RPCURL, "TOKEN_B="+tokB.Address.Hex(), "FEED_B="+feed.Address.Hex())
	f.cli(t, "wallet", "add", "--agent", "buyer", "--chain", "8453", f.payer.Address.Hex())
	pol := filepath.Join(f.dir, "mixed-windows.json")
	doc := fmt.Sprintf(`{"venues":{"allowed":["payment"]},"chains":{"allowed":[84532,8453]},"recipients":{"allowed":[%q]},`+
		`"spendWindows":{"windows":[{"period":"day","capUsd":0.15},{"period":"day","capUsd":0.08,"asset":%q}]}}`, f.okPayTo.Hex(), tokB.Address.Hex())
	if err := os.WriteFile(pol, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	f.cli(t, "policy", "set", "--agent", "buyer", pol)
	in := f.start(t)
	agentID := f.agentID(t, in, "buyer")
	const capUSD, tokenCapUSD = 150_000, 80_000 // millionths
	beforeA, beforeB := f.tok.BalanceOf(t, f.okPayTo), tokB.BalanceOf(t, f.okPayTo)
	headA, headB := blockNumber(t, f.chain), blockNumber(t, chainB)
	received := func() (a, b *big.Int) {
		return new(big.Int).Sub(f.tok.BalanceOf(t, f.okPayTo), beforeA), new(big.Int).Sub(tokB.BalanceOf(t, f.okPayTo), beforeB)
	}

	ps := make([]*mixedPayment, 20)
	for i := range ps {
		if i%2 == 0 {
			header, _ := goV1Header(t, f.tok, f.payer, f.okPayTo)
			ps[i] = &mixedPayment{header: header}
			continue
		}
		now := time.Now().Unix()
		a := testenv.Authorization{From: f.payer.Address, To: f.okPayTo, Value: big.NewInt(price),
			ValidAfter: big.NewInt(now - 600), ValidBefore: big.NewInt(now + 60), Nonce: testenv.RandomNonce(t)}
		p := decodePaymentJSON(t, goV1HeaderFor(t, tokB, f.payer, a))
		p["network"] = "base"
		ps[i] = &mixedPayment{feedPriced: true, header: p.encode(t)}
	}

	var samples int
	stop := sampleEvery20ms(func() {
		a, b := received()
		if usd := settledUSD(a, b); usd > capUSD || 2*b.Int64() > tokenCapUSD {
			t.Errorf("a sample past a cap: the payee received %s on base-sepolia and %s on base, $%v", a, b, float64(usd)/1e6)
		}
		if w, ok := f.mixedWindowsOf(t, in, agentID); ok {
			samples++
			if w[0].UsedUSD+w[0].ReservedUSD > 0.15+1e-9 || w[1].UsedUSD+w[1].ReservedUSD > 0.08+1e-9 {
				t.Errorf("a sample past a window's cap: %+v", w)
			}
		}
	})
	var wg sync.WaitGroup
	for i, p := range ps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := do(t, http.MethodGet, in.api+fmt.Sprintf("/mixed/%d", i), "", map[string]string{"X-PAYMENT": p.header})
			if err != nil {
				t.Errorf("payment %d: %v", i, err)
				return
			}
			p.status, p.body = r.Status, string(r.Body)
		}()
	}
	wg.Wait()
	stop()

	served := map[bool]int{}
	for i, p := range ps {
		switch {
		case p.status == http.StatusOK:
			served[p.feedPriced]++
		case p.status != http.StatusPaymentRequired || !strings.Contains(p.body, "spend_window_exceeded"):
			t.Errorf("payment %d (feed-priced %v): %d, want 200 or a 402 that says spend_window_exceeded: %s", i, p.feedPriced, p.status, p.body)
		}
	}
	settledA := len(transfers(t, f.chain, f.tok, f.payer.Address, f.okPayTo, headA))
	settledB := len(transfers(t, chainB, tokB, f.payer.Address, f.okPayTo, headB))
	a, b := received()
	usd := settledUSD(a, b)
	if settledA != served[false] || settledB != served[true] || a.Int64() != int64(settledA)*price || b.Int64() != int64(settledB)*price {
		t.Fatalf("served %d + %d payments, settled %d + %d transfers moving %s + %s", served[false], served[true], settledA, settledB, a, b)
	}
	if usd > capUSD || 2*b.Int64() > tokenCapUSD || served[false]+served[true] == 0 || served[false]+served[true] == len(ps) {
		t.Fatalf("settled $%v, $%v of it in the feed-priced token, in %d + %d payments: want at most $0.15 and $0.08, and some refused",
			float64(usd)/1e6, float64(2*b.Int64())/1e6, settledA, settledB)
	}
	// The facilitator reports each settle to the verdict app, which commits its reservation.
	var w mixedWindows
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		var ok bool
		if w, ok = f.mixedWindowsOf(t, in, agentID); ok && w[0].ReservedUSD == 0 && w[1].ReservedUSD == 0 {
			break
		}
	}
	t.Logf("%d samples; served and settled %d payments in our token and %d in the feed-priced one, $%v; windows %+v",
		samples, settledA, settledB, float64(usd)/1e6, w)
	if w[0].ReservedUSD != 0 || w[1].ReservedUSD != 0 ||
		int64(w[0].UsedUSD*1e6+0.5) != usd || int64(w[1].UsedUSD*1e6+0.5) != 2*b.Int64() {
		t.Fatalf("the windows hold %+v; want $%v committed overall and $%v in the feed-priced token, what settled, and nothing reserved",
			w, float64(usd)/1e6, float64(2*b.Int64())/1e6)
	}
}
