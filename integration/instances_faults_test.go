package integration_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"

	"github.com/x402gate/x402gate/facilitator/journal"
	"github.com/x402gate/x402gate/internal/testenv"
)

// fleetPayment is one payment of the fleet test and what became of it.
type fleetPayment struct {
	path    string
	auth    testenv.Authorization
	header  string
	sentTo  []int  // the instances it was sent to, in order
	answers []int  // their statuses; 0 for no answer (the instance died)
	retry   string // the X-PAYMENT-RETRY token of a 502 whose settlement was pending
	// oldRedis: its record (and a token's credit) was written before Redis came back
	// empty, so it may be gone with the old Redis (no persistence): a request in flight
	// across the restart finds its record gone and answers 502, and the same header sent
	// again finds no record of a payment the facilitator settled.
	oldRedis bool
	// creditLost: its credit was gone with the old Redis when the client redeemed it.
	creditLost bool
}

// served reports whether some answer of p served the content.
func (p *fleetPayment) served() bool {
	for _, s := range p.answers {
		if s == http.StatusOK {
			return true
		}
	}
	return false
}

// TestSeveralInstancesUnderFaults runs three Caddy instances on one Redis and one
// PostgreSQL (approvals, claims, retry credits, journal, verdicts) under paid traffic, kills
// one of them with SIGKILL in the middle of it, then restarts Redis (empty, as a Redis
// without persistence comes back) while traffic goes on (docs/reliability.md#several-instances):
//
//   - no payment is settled twice: one AuthorizationUsed event at most per authorization,
//     and the payer's balance moved by the price times the settled payments;
//   - no paid request is lost: a client whose instance died sends the same header to
//     another one; every payment is served once, or refused with nothing charged, or (its
//     settle had passed the broadcast when its instance died) settled once with the
//     transaction in the shared journal, and the upstream ran once per served payment;
//   - a payment whose answer was a 502 settlement_pending, with its retry token, is
//     redeemed on another instance after the first one died.
func TestSeveralInstancesUnderFaults(t *testing.T) {
	rt := recap(t)
	f := newVerdictFleet(t, verdictSetup{shared: true})
	redis := testenv.StartRedisServer(t, testenv.RedisConfig{})
	for i, e := range f.env {
		if strings.HasPrefix(e, "REDIS_URL=") {
			f.env[i] = "REDIS_URL=" + redis.URL
		}
	}
	// One payer pays many times here: the verdict rate is raised so that the per-payer
	// limit (docs/facilitator.md#guardian) does not refuse the traffic; a short receipt
	// wait lets the last step see a settlement_pending.
	f.caddyfile = strings.Replace(f.caddyfile, "guardian_mode required", "guardian_mode required\n\t\t\tverdict_rate 1000 1000\n\t\t\treceipt_timeout 2s", 1)
	// Each instance signs with its own key: a signer's nonces are counted in its process
	// (docs/reliability.md#several-instances).
	ins := make([]*verdictInstance, 3)
	keys := make([]string, 3) // instance i signs with Accounts[2+i]
	for i := range ins {
		keys[i] = "X402_FACILITATOR_KEY_FILE=" + writeKeyFile(t, f.chain.Accounts[2+i])
		ins[i] = f.startFaulty(t, "", keys[i])
	}
	alive := func(i int) bool { return !ins[i].caddy.Exited() }
	j := f.openJournal(t)
	bal := balances(t, f.tok, f.payer.Address, f.okPayTo)
	head := blockNumber(t, f.chain)

	const workers, perWorker = 6, 6
	payments := make([]*fleetPayment, workers*perWorker)
	var done atomic.Int32
	killed := make(chan struct{})
	restarted := make(chan struct{})
	var redisBack atomic.Bool // Redis is back, empty
	pay := func(p *fleetPayment, first int) {
		for k := 0; k < 3; k++ {
			i := (first + k) % 3
			if !alive(i) {
				continue
			}
			p.sentTo = append(p.sentTo, i)
			before := !redisBack.Load() // its record is written in the Redis of now
			r, err := do(t, http.MethodGet, ins[i].api+p.path, "", map[string]string{"X-PAYMENT": p.header})
			if err != nil {
				p.answers = append(p.answers, 0)
				continue // the instance died under the request: the client tries another
			}
			p.answers = append(p.answers, r.Status)
			if r.Status == http.StatusBadGateway {
				p.retry, p.oldRedis = r.Header.Get("X-PAYMENT-RETRY"), before
			}
			return
		}
	}
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for n := 0; n < perWorker; n++ {
				k := w*perWorker + n
				header, auth := goV1Header(t, f.tok, f.payer, f.okPayTo)
				p := &fleetPayment{path: fmt.Sprintf("/allowed/fleet-%d", k), auth: auth, header: header}
				payments[k] = p
				pay(p, (w+n)%3)
				if done.Add(1) == workers*perWorker/3 {
					ins[1].caddy.Kill() // mid-traffic: other workers' requests are in flight
					close(killed)
				}
				if n == perWorker-2 {
					<-restarted
				}
			}
		}(w)
	}
	<-killed
	redis.Restart(t)
	redisBack.Store(true)
	close(restarted)
	wg.Wait()
	// B comes back: its start-up reconcile finishes what it broadcast before it died (the
	// others' periodic reconcile would too, once the rows are idle).
	b := f.startFaulty(t, "", keys[1])
	// A 502 is followed up, here on instance A behind the same site host: a settlement still
	// pending when its instance answered (the receipt wait is short here, and a loaded machine
	// may exceed it) came with a retry token, which the client redeems
	// (docs/gate.md#retry-credits); a settlement the ledger could not record while Redis was
	// down came without one, and the client sends the same header again
	// (docs/gate.md#payment-ledger). A record written before Redis came back empty may be gone
	// with it: that payment is then only in the journal (docs/reliability.md#several-instances).
	for _, p := range payments {
		last := len(p.answers) - 1
		if last < 0 || p.answers[last] != http.StatusBadGateway {
			continue
		}
		h := map[string]string{"X-PAYMENT": p.header}
		if p.retry != "" {
			h["X-PAYMENT-RETRY"] = p.retry
		}
		from := ins[p.sentTo[last]]
		r := doHost(t, ins[0].api+p.path, strings.TrimPrefix(from.api, "http://"), h)
		p.sentTo, p.answers = append(p.sentTo, 0), append(p.answers, r.Status)
		switch {
		case r.Status == http.StatusOK:
		case p.oldRedis:
			p.creditLost = true
			t.Logf("%s: its record was written before Redis came back empty: %d", p.path, r.Status)
		case p.retry != "":
			rt.Errorf("%s: redeeming the retry token of a pending settlement: %d %s", p.path, r.Status, r.Body)
		}
	}

	settled, servedN, lost := 0, 0, 0
	for _, p := range payments {
		events, _ := authorizationUses(t, f.chain, f.tok, p.auth, head)
		if events > 1 {
			rt.Errorf("%s: the authorization was used %d times on chain", p.path, events)
		}
		settled += events
		served := p.served()
		// A request B was proxying when it died may have reached the upstream, whose answer
		// then died with B: at most once, only then unserved, and only once it was settled
		// (the gate settles before it proxies).
		diedOnB := len(p.answers) > 0 && p.sentTo[0] == 1 && p.answers[0] == 0
		if c := f.up.count(p.path); served && c != 1 || !served && c != 0 && !(diedOnB && c == 1 && events == 1) {
			rt.Errorf("%s: the upstream ran %d times; answers %v from instances %v", p.path, c, p.answers, p.sentTo)
		}
		for _, s := range p.answers {
			switch s {
			case 0, http.StatusOK, http.StatusPaymentRequired, http.StatusServiceUnavailable, http.StatusBadGateway:
			default:
				rt.Errorf("%s: answer %d; answers %v from instances %v", p.path, s, p.answers, p.sentTo)
			}
		}
		switch {
		case served:
			servedN++
			if events != 1 {
				rt.Errorf("%s: served with %d settlements", p.path, events)
			}
		case events == 1:
			// settled, no answer served: only a request that was on the killed instance, or
			// whose pending credit was gone with the old Redis
			lost++
			row, ok := journalRow(t, j, f.authorizationKey(p.auth))
			byB := diedOnB && signedBy(t, f.chain, row.TxHash, f.chain.Accounts[3].Address)
			if !ok || row.State != journal.StateConfirmed || !byB && !p.creditLost {
				rt.Errorf("%s: settled without a served answer (journal %q, answers %v from instances %v; B's key signs as %s)", p.path, row.State, p.answers, p.sentTo, f.chain.Accounts[3].Address)
			}
		}
	}
	t.Logf("%d payments: %d served, %d settled, %d settled whose answer died with instance B", len(payments), servedN, settled, lost)
	if servedN == 0 {
		rt.Fatal("no payment was served")
	}
	wantDelta(rt, f.tok, f.payer.Address, bal[0], -price*int64(settled))
	wantDelta(rt, f.tok, f.okPayTo, bal[1], price*int64(settled))

	t.Run("a pending settlement is redeemed on another instance", func(t *testing.T) {
		rt := rt.of(t)
		a, c := ins[0], ins[2]
		const path = "/allowed/fleet-pending"
		header, auth := goV1Header(t, f.tok, f.payer, f.okPayTo)
		f.chain.SetAutomine(t, false)
		r := mustDo(t, http.MethodGet, a.api+path, map[string]string{"X-PAYMENT": header})
		token := r.Header.Get("X-PAYMENT-RETRY")
		if r.Status != http.StatusBadGateway || token == "" {
			f.chain.SetAutomine(t, true)
			rt.Fatalf("a settle whose receipt is late: status %d, retry token %v: %s", r.Status, token != "", r.Body)
		}
		a.caddy.Kill()
		f.chain.SetAutomine(t, true)
		f.chain.Mine(t)
		// Behind one load balancer every instance sees the site's host, to which the
		// credit is bound (the resource URL): the request to C carries A's.
		retry := map[string]string{"X-PAYMENT": header, "X-PAYMENT-RETRY": token}
		redeemed := doHost(t, c.api+path, strings.TrimPrefix(a.api, "http://"), retry)
		if redeemed.Status != http.StatusOK {
			rt.Fatalf("redeeming on another instance: status %d: %s", redeemed.Status, redeemed.Body)
		}
		if events, _ := authorizationUses(t, f.chain, f.tok, auth, head); events != 1 || f.up.count(path) != 1 {
			rt.Errorf("the pending payment: %d uses on chain, %d upstream calls, want 1 and 1", events, f.up.count(path))
		}
		if again := doHost(t, c.api+path, strings.TrimPrefix(a.api, "http://"), retry); again.Status == http.StatusOK {
			rt.Error("the redeemed token served a second answer")
		}
	})
	for _, in := range append(ins, b) {
		f.noSecretsIn(t, in.caddy.Logs())
	}
}

// signedBy reports whether the transaction hash on chain was signed by from.
func signedBy(t *testing.T, chain *testenv.Chain, hash common.Hash, from common.Address) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tx, _, err := chain.Client.TransactionByHash(ctx, hash)
	if err != nil {
		t.Errorf("transaction %s: %v", hash, err)
		return false
	}
	sender, err := types.Sender(types.LatestSignerForChainID(chain.ChainID), tx)
	return err == nil && sender == from
}
