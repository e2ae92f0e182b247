package integration_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"

	"github.com/x402gate/x402gate/internal/testenv"
)

// windowAgent registers, with the caddy verdict commands, an agent "spender" whose policy
// lets it pay payTo in token under a $150 rolling daily cap, and returns its key and wallet.
func (f *verdictFleet) windowAgent(t *testing.T, payTo common.Address) (string, common.Address) {
	t.Helper()
	f.cli(t, "agent", "add", "spender")
	key := strings.TrimSpace(f.cli(t, "key", "create", "--agent", "spender"))
	testenv.AddCanary("verdict agent key (spender)", key)
	wallet := testenv.NewAccount(t).Address
	f.cli(t, "wallet", "add", "--agent", "spender", "--chain", "84532", wallet.Hex())
	f.windowPolicy(t, "spender", payTo, "150")
	return key, wallet
}

// windowPolicy sets, with the caddy verdict commands, the agent's policy to paying payTo
// only, under a rolling daily cap of capUSD.
func (f *verdictFleet) windowPolicy(t *testing.T, agent string, payTo common.Address, capUSD string) {
	t.Helper()
	pol := filepath.Join(f.dir, agent+"-windows.json")
	doc := fmt.Sprintf(`{"venues":{"allowed":["payment"]},"chains":{"allowed":[84532]},"recipients":{"allowed":[%q]},`+
		`"spendWindows":{"windows":[{"period":"day","capUsd":%s}]}}`, payTo.Hex(), capUSD)
	if err := os.WriteFile(pol, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	f.cli(t, "policy", "set", "--agent", agent, pol)
}

// verdictCall sends one request with the agent's key to the verdict API at base and
// decodes its JSON answer; err is a network failure (an instance that is gone).
func verdictCall(t *testing.T, method, url, key string, body any) (int, map[string]any, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("x-api-key", key)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := (&http.Client{Timeout: requestBound}).Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, nil, err
	}
	scanAnswer(t.Name(), resp.Header, raw)
	var out map[string]any
	_ = json.Unmarshal(raw, &out)
	return resp.StatusCode, out, nil
}

// submitOnce submits one $10 payment with trace id trace to the first instance that takes
// it, starting at first; a submit whose answer was lost (an instance killed under it) is
// found again by its trace id, never sent twice as a new record.
func submitOnce(t *testing.T, apis func() []string, first int, key string, body map[string]any, trace string) string {
	for attempt := 0; attempt < 200; attempt++ {
		list := apis()
		base := list[(first+attempt)%len(list)]
		status, out, err := verdictCall(t, http.MethodPost, base+"/transactions", key, body)
		switch {
		case err != nil || status >= 500 || status == http.StatusTooManyRequests:
			continue
		case status == http.StatusCreated:
			return out["requestHash"].(string)
		case status == http.StatusConflict && out["code"] == "duplicate_trace_id":
			_, found, err := verdictCall(t, http.MethodGet, base+"/transactions?traceId="+trace, key, nil)
			if err == nil {
				if list, _ := found["transactions"].([]any); len(list) == 1 {
					return list[0].(map[string]any)["requestHash"].(string)
				}
			}
		default:
			t.Errorf("submit %s: status %d: %v", trace, status, out)
			return ""
		}
	}
	t.Errorf("submit %s: no instance took it", trace)
	return ""
}

// awaitOutcome polls hash's approval status on the live instances until it is terminal,
// within a bound on the number of reads.
func awaitOutcome(t *testing.T, apis func() []string, key, hash string) string {
	for i := range 2000 {
		list := apis()
		status, out, err := verdictCall(t, http.MethodGet, list[i%len(list)]+"/transactions/"+hash+"/approval-status", key, nil)
		if err == nil && status == http.StatusOK {
			if v, ok := out["verdict"].(map[string]any); ok && v["outcome"] != "pending" {
				return v["outcome"].(string)
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Errorf("%s: no terminal verdict", hash)
	return ""
}

// liftVerdictRateLimits raises the verdict API's rate limits of f's instances so far that
// only a spend window refuses one agent's many requests.
func (f *verdictFleet) liftVerdictRateLimits() {
	f.caddyfile = strings.Replace(f.caddyfile, "admin_key {env.VERDICT_ADMIN_KEY}",
		"admin_key {env.VERDICT_ADMIN_KEY}\n\t\trate_limit key 100000 100000\n\t\trate_limit ip 100000 100000", 1)
}

// crashSet is the instances of a crash test, some of which are killed under traffic.
type crashSet struct {
	mu  sync.Mutex
	ins []*verdictInstance
}

// alive lists the instances that have not exited.
func (c *crashSet) alive() []*verdictInstance {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*verdictInstance
	for _, in := range c.ins {
		if !in.caddy.Exited() {
			out = append(out, in)
		}
	}
	return out
}

// killMidway kills the first two instances with SIGKILL once midway reports true, then
// starts one more with restart; the channel it returns is closed when that one is up.
func (c *crashSet) killMidway(midway func() bool, restart func() *verdictInstance) <-chan struct{} {
	killed := make(chan struct{})
	go func() {
		defer close(killed)
		for !midway() {
			time.Sleep(time.Millisecond)
		}
		c.ins[0].caddy.Kill()
		c.ins[1].caddy.Kill()
		in := restart()
		c.mu.Lock()
		c.ins = append(c.ins, in)
		c.mu.Unlock()
	}()
	return killed
}

// TestSpendWindowHoldsWhenInstancesAreKilled is the crash test of docs/spend-windows.md:
// five Caddy processes serve the verdict API on one PostgreSQL; 200 concurrent $10 payments
// against a $150 daily cap; two instances are killed with SIGKILL midway and one is started
// again. Exactly 15 payments are approved, the windows hold $150 reserved, and once every
// approval is reported executed $150 is committed and nothing is left.
func TestSpendWindowHoldsWhenInstancesAreKilled(t *testing.T) {
	f := newVerdictFleet(t, verdictSetup{shared: true})
	f.liftVerdictRateLimits()
	key, wallet := f.windowAgent(t, f.okPayTo)
	set := &crashSet{ins: []*verdictInstance{f.start(t), f.start(t), f.start(t), f.start(t), f.start(t)}}
	apis := func() []string {
		var out []string
		for _, in := range set.alive() {
			out = append(out, in.verdictAPI)
		}
		return out
	}

	const payments = 200
	hashes := make([]string, payments)
	var submitted atomic.Int32
	killed := set.killMidway(func() bool { return submitted.Load() >= payments/2 }, func() *verdictInstance { return f.start(t) })
	var wg sync.WaitGroup
	for i := range payments {
		wg.Add(1)
		go func() {
			defer wg.Done()
			trace := fmt.Sprintf("crash-%d", i)
			body := map[string]any{
				"escrowAddress": wallet.Hex(), "prompt": "pay for the report", "arbiter": "policy",
				"proposedTx": map[string]any{"protocol": "payment", "rail": "x402", "chainId": 84532,
					"payTo": f.okPayTo.Hex(), "asset": f.tok.Address.Hex(), "amount": "10000000"},
				"metadata": map[string]any{"traceId": trace},
			}
			hashes[i] = submitOnce(t, apis, i, key, body, trace)
			submitted.Add(1)
		}()
	}
	wg.Wait()
	<-killed
	if t.Failed() {
		t.FailNow()
	}

	outcomes := map[string]int{}
	var approved []string
	for _, h := range hashes {
		o := awaitOutcome(t, apis, key, h)
		outcomes[o]++
		if o == "approved" {
			approved = append(approved, h)
		}
	}
	if outcomes["approved"] != 15 || outcomes["rejected"] != payments-15 {
		t.Fatalf("outcomes %v, want exactly 15 of %d $10 payments approved against a $150 cap", outcomes, payments)
	}
	if got := f.cli(t, "windows", "--agent", "spender"); !strings.Contains(got, "day\t*\t150\t0.000000\t150.000000\t0.000000") {
		t.Fatalf("caddy verdict windows printed %q, want $150 reserved and nothing left", got)
	}
	for _, h := range approved {
		status, out, err := verdictCall(t, http.MethodPost, apis()[0]+"/transactions/"+h+"/execution", key, map[string]any{"executed": true})
		if err != nil || status != http.StatusOK || out["reservation"] != "committed" {
			t.Fatalf("report %s: %d %v %v", h, status, out, err)
		}
	}
	if got := f.cli(t, "windows", "--agent", "spender"); !strings.Contains(got, "day\t*\t150\t150.000000\t0.000000\t0.000000") {
		t.Fatalf("caddy verdict windows printed %q, want $150 committed", got)
	}
	if list := f.cli(t, "tx", "list", "--agent", "spender", "--limit", "500"); strings.Count(list, "spend_window_exceeded") != payments-15 {
		t.Fatalf("caddy verdict tx list shows %d spend_window_exceeded refusals, want %d", strings.Count(list, "spend_window_exceeded"), payments-15)
	}
}

// TestSettledPaymentCommitsItsReservation: the gate pays through the bundled facilitator,
// which asks the verdict app; once the payment settles, the facilitator reports it, so the
// agent's window holds it as used, not reserved. The next payment, past the $0.015 cap, is
// refused with spend_window_exceeded in its 402, and nothing moves.
func TestSettledPaymentCommitsItsReservation(t *testing.T) {
	f := newVerdictFleet(t, verdictSetup{})
	f.windowPolicy(t, "buyer", f.okPayTo, "0.015")
	in := f.start(t)
	bal := balances(t, f.tok, f.okPayTo)

	if ok := payWith(t, payV1Script, f.payer, in.api+"/allowed/one", "X402_TOKEN="+f.tok.Address.Hex()); ok.Status != http.StatusOK {
		t.Fatalf("the first payment: status %d: %s", ok.Status, ok.Body)
	}
	if got := f.cli(t, "windows", "--agent", "buyer"); !strings.Contains(got, "day\t*\t0.015\t0.010000\t0.000000\t0.005000") {
		t.Fatalf("caddy verdict windows printed %q, want the settled $0.01 committed", got)
	}
	over := payWith(t, payV1Script, f.payer, in.api+"/allowed/two", "X402_TOKEN="+f.tok.Address.Hex())
	if over.Status != http.StatusPaymentRequired || !strings.Contains(over.Body, "spend_window_exceeded") {
		t.Fatalf("the payment past the cap: status %d, want 402 carrying spend_window_exceeded: %s", over.Status, over.Body)
	}
	wantDelta(t, f.tok, f.okPayTo, bal[0], price)
}

// TestSpendWindowsMixedAssets: one verdict app prices our token from a feed on anvil ($2 a
// token) and Base Sepolia USDC from its table ($1); the agent has a $20 daily window over
// everything and an $8 daily window over our token. Ten $2 payments in each asset at once:
// exactly $20 is approved, at most $8 of it in our token, and every refusal names the window
// that had no room.
func TestSpendWindowsMixedAssets(t *testing.T) {
	f := newFeedsEnv(t, "1h")
	usdc := common.HexToAddress("0x036CbD53842c5426634e7929541eC2318f3dCF7e")
	pol := filepath.Join(f.dir, "windows.json")
	doc := fmt.Sprintf(`{"venues":{"allowed":["payment"]},"chains":{"allowed":[84532]},"spendWindows":{"windows":[`+
		`{"period":"day","capUsd":20},{"period":"day","capUsd":8,"asset":%q}]}}`, f.tok.Address.Hex())
	if err := os.WriteFile(pol, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	f.cli(t, "policy", "set", "--agent", "trader", pol)
	payTo := testenv.NewAccount(t).Address
	type result struct {
		asset   common.Address
		verdict map[string]any
	}
	results := make([]result, 20)
	var wg sync.WaitGroup
	for i := range results {
		asset, amount := usdc, "2000000" // $2 at $1 a USDC
		if i%2 == 0 {
			asset, amount = f.tok.Address, "1000000" // $2 at the feed's $2 a token
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = result{asset, f.judge(t, asset, payTo, amount)}
		}()
	}
	wg.Wait()
	total, inToken := 0, 0
	for i, r := range results {
		switch v := r.verdict; {
		case v["outcome"] == "approved":
			total += 2
			if r.asset == f.tok.Address {
				inToken += 2
			}
		case v["reasonCode"] != "spend_window_exceeded" || checkStatus(v, "spend_window") != "failed spend_window_exceeded":
			t.Fatalf("payment %d: %v %v", i, v["outcome"], v["reasonCode"])
		case v["triggeringPolicyField"] == "spendWindows.windows.1" && r.asset != f.tok.Address:
			t.Fatalf("payment %d in USDC was refused by the token's window", i)
		}
	}
	if total != 20 || inToken > 8 {
		t.Fatalf("approved $%d, $%d of it in the feed-priced token; want exactly $20 and at most $8", total, inToken)
	}
	out := f.cli(t, "windows", "--agent", "trader")
	if !strings.Contains(out, "day\t*\t20\t0.000000\t20.000000\t0.000000") ||
		!strings.Contains(out, fmt.Sprintf("day\t%s\t8\t0.000000\t%d.000000\t", f.tok.Address.Hex(), inToken)) {
		t.Fatalf("caddy verdict windows printed %q", out)
	}
}
