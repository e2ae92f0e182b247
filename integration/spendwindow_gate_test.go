package integration_test

import (
	"encoding/json"
	"fmt"
	"math/big"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/x402gate/x402gate/internal/testenv"
)

// windowSample is the agent's daily window as the admin API answered it at one moment, and
// what the payee had received by then.
type windowSample struct {
	usedUSD, reservedUSD float64
	received             *big.Int
}

// windowOf reads the agent's one window from the admin API of in; ok is false when in did
// not answer.
func (f *verdictFleet) windowOf(t *testing.T, in *verdictInstance, agentID string) (used, reserved float64, ok bool) {
	r, err := do(t, http.MethodGet, in.verdictAPI+"/admin/agents/"+agentID+"/windows", "", map[string]string{"x-admin-key": f.adminKey})
	if err != nil || r.Status != http.StatusOK {
		return 0, 0, false
	}
	var out struct {
		Windows []struct {
			UsedUSD     float64 `json:"usedUsd"`
			ReservedUSD float64 `json:"reservedUsd"`
		} `json:"windows"`
	}
	if json.Unmarshal(r.Body, &out) != nil || len(out.Windows) != 1 {
		return 0, 0, false
	}
	return out.Windows[0].UsedUSD, out.Windows[0].ReservedUSD, true
}

// gatePayment is one paid request of the gate crash test and what became of it.
type gatePayment struct {
	auth    testenv.Authorization
	header  string
	answers []int // the status of each try; 0 for no answer (its gate was killed under it)
	body    string
}

// pay sends p's header to the live gates in turn, starting at the first-th, until one
// answers. Every gate is behind one site host, as behind a load balancer, since a payment's
// record is bound to its resource URL. A try whose gate died under it leaves the payment's
// lease held in the shared ledger until it lapses (docs/gate.md#payment-ledger): until then
// the same header is refused as a duplicate, and the client sends it again a second later.
func (p *gatePayment) pay(t *testing.T, alive func() []*verdictInstance, path string, first int) {
	for try := 0; try < 60; try++ {
		list := alive()
		r, err := do(t, http.MethodGet, list[(first+try)%len(list)].api+path, "", map[string]string{"X-PAYMENT": p.header, "Host": "shop.example"})
		if err != nil {
			p.answers = append(p.answers, 0)
			continue
		}
		p.answers, p.body = append(p.answers, r.Status), string(r.Body)
		if !p.lost() || r.Status != http.StatusPaymentRequired || !strings.Contains(p.body, "duplicate_settlement") {
			return
		}
		time.Sleep(time.Second)
	}
}

// lost reports whether a try of p got no answer: its gate was killed under it.
func (p *gatePayment) lost() bool {
	return slices.Contains(p.answers, 0)
}

// TestSpendWindowHoldsThroughTheGate is the crash test of docs/spend-windows.md through the
// whole system: ten Caddy processes, each a gate whose bundled facilitator, in
// GUARDIAN_MODE required, asks its own verdict app, all on one PostgreSQL, one Redis and
// one anvil. The agent's payer sends 200 payments of $0.01 at once, spread over the ten
// gates, against a $0.15 daily window (a $150 cap and $10 payments, scaled to the gate's
// price). Midway, once the window is committed in full, two gates are killed with SIGKILL
// while payments are in flight and one is started again; a client whose gate died sends the
// same payment to the next gate, as one behind a load balancer would. Judged by the chain
// and by the verdict store:
//
//   - at no sample does the window hold more than $0.15, nor the payee more than 15 payments;
//   - in the end exactly 15 payments are served and settled on chain, each authorization
//     used at most once, and the window holds exactly $0.15 committed (the facilitator
//     reported each settle) and nothing reserved;
//   - every other payment got a 402 that says spend_window_exceeded.
func TestSpendWindowHoldsThroughTheGate(t *testing.T) {
	// Eleven instances, up to 40 PostgreSQL connections each (docs/reliability.md#several-instances).
	f := newVerdictFleet(t, verdictSetup{shared: true, pgConnections: 500})
	// One payer pays 200 times at once: the verdict rate of the facilitator and the verdict
	// API's limits are raised so that only the window refuses.
	f.caddyfile = strings.Replace(f.caddyfile, "guardian_mode required", "guardian_mode required\n\t\t\tverdict_rate 100000 100000", 1)
	f.liftVerdictRateLimits()
	f.windowPolicy(t, "buyer", f.okPayTo, "0.15")
	const gates, payments, approvals = 10, 200, 15

	// Each gate signs with its own key: a signer's nonces are counted in its process
	// (docs/reliability.md#several-instances). The restarted gate takes the key of the first
	// one killed.
	keys := make([]string, gates)
	for i := range keys {
		signer := testenv.NewAccount(t)
		f.chain.SetBalance(t, signer.Address, new(big.Int).Exp(big.NewInt(10), big.NewInt(20), nil))
		keys[i] = "X402_FACILITATOR_KEY_FILE=" + writeKeyFile(t, signer)
	}
	set := &crashSet{ins: make([]*verdictInstance, gates)}
	var wg sync.WaitGroup
	for i := range set.ins {
		wg.Add(1)
		go func() {
			defer wg.Done()
			in := f.start(t, keys[i])
			set.mu.Lock()
			set.ins[i] = in
			set.mu.Unlock()
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	watcher := set.ins[gates-1] // never killed
	agentID := f.agentID(t, watcher, "buyer")
	before := f.tok.BalanceOf(t, f.okPayTo)
	head := blockNumber(t, f.chain)

	// The sampler reads the window and the payee's balance until the payments are done.
	var samples []windowSample
	var committedFull atomic.Bool
	stop := sampleEvery20ms(func() {
		if used, reserved, ok := f.windowOf(t, watcher, agentID); ok {
			got := new(big.Int).Sub(f.tok.BalanceOf(t, f.okPayTo), before)
			samples = append(samples, windowSample{used, reserved, got})
			committedFull.Store(used >= 0.15-1e-9)
		}
	})

	ps := make([]*gatePayment, payments)
	for i := range ps {
		header, auth := goV1Header(t, f.tok, f.payer, f.okPayTo)
		ps[i] = &gatePayment{auth: auth, header: header}
	}
	var answered atomic.Int32
	// Midway: half of the payments are answered, and the window is committed in full. An
	// approval whose gate is killed before it settles stays reserved until it expires
	// (docs/reliability.md#several-instances): the kill waits until no approval is left
	// to settle, so that the count of payments is exact; the payments still in flight, on
	// the killed gates too, are refused or retried.
	midway := func() bool {
		n := answered.Load()
		return n >= payments/2 && committedFull.Load() || n == payments
	}
	var atKill int32
	killed := set.killMidway(midway, func() *verdictInstance {
		atKill = answered.Load()
		return f.start(t, keys[0])
	})
	for i, p := range ps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer answered.Add(1)
			p.pay(t, set.alive, fmt.Sprintf("/allowed/window-%d", i), i)
		}()
	}
	wg.Wait()
	<-killed
	stop()

	for _, s := range samples {
		if s.usedUSD+s.reservedUSD > 0.15+1e-9 || s.received.Cmp(big.NewInt(approvals*price)) > 0 {
			t.Errorf("a sample past the $0.15 cap: used %v, reserved %v, the payee received %s", s.usedUSD, s.reservedUSD, s.received)
		}
	}
	served, lost, answers := 0, 0, map[int]int{}
	for i, p := range ps {
		last := p.answers[len(p.answers)-1]
		answers[last]++
		if p.lost() {
			lost++
		}
		if events, _ := authorizationUses(t, f.chain, f.tok, p.auth, head); events > 1 || last == http.StatusOK && events != 1 {
			t.Errorf("payment %d: answers %v, its authorization used %d times on chain", i, p.answers, events)
		}
		switch {
		case last == http.StatusOK:
			served++
		case last != http.StatusPaymentRequired || !strings.Contains(p.body, "spend_window_exceeded"):
			t.Errorf("payment %d: answers %v, want 200 or a 402 that says spend_window_exceeded: %s", i, p.answers, p.body)
		}
	}
	settled := len(transfers(t, f.chain, f.tok, f.payer.Address, f.okPayTo, head))
	used, reserved, ok := f.windowOf(t, watcher, agentID)
	t.Logf("killed when %d payments were answered; %d samples; answers %v; %d payments with a try lost on a killed gate; %d settled on chain; window used $%v, reserved $%v",
		atKill, len(samples), answers, lost, settled, used, reserved)
	if !ok || used < 0.15-1e-9 || used > 0.15+1e-9 || reserved != 0 {
		t.Fatalf("the window holds used $%v and reserved $%v (answered %v), want exactly $0.15 committed: 15 approvals, each reported settled", used, reserved, ok)
	}
	if atKill >= payments {
		t.Fatal("the kill came after every payment was answered: the window was not committed in full before")
	}
	if settled != approvals || served != approvals {
		t.Fatalf("the payee received %d payments and %d were served, want exactly %d", settled, served, approvals)
	}
	wantDelta(t, f.tok, f.okPayTo, before, approvals*price)
}
