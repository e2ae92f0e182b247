package facilitator

import (
	"context"
	"errors"
	"math/big"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/x402gate/x402gate/facilitator/journal"
	"github.com/x402gate/x402gate/facilitator/txsender"
	"github.com/x402gate/x402gate/x402"
)

// settleAnswer is one concurrent Settle's answer.
type settleAnswer struct {
	key string
	res x402.SettleResponse
	err error
}

// settleAll settles n payments of testAmount from the payer accounts in turn to account
// 9, all at once, and sends their answers to out. It returns their authorization keys.
func settleAll(t *testing.T, env *testEnv, e *Service, n int, out chan settleAnswer) []string {
	t.Helper()
	payee := env.chain.Accounts[9].Address
	keys := make([]string, n)
	for i := range n {
		p, r := env.pay(t, x402.Version2, env.chain.Accounts[1+i%8], payee)
		keys[i] = x402.KeyOf(p, r).AuthorizationKey()
		go func() {
			res, err := e.Settle(context.Background(), p, r)
			out <- settleAnswer{keys[i], res, err}
		}()
	}
	return keys
}

// waitFor polls cond until it holds; it fails t when it does not within a generous bound
// (a bound on waiting for a state, not a timing assertion).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for range 600 {
		if cond() {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("never reached: %s", what)
}

// TestSettlesFromOneSignerArePipelined: settlements from one signer key are pipelined
// (docs/facilitator.md#settle-order). With the chain not mining, 12 concurrent settles
// are all broadcast (the node holds 12 pending transactions of the signer, none mined):
// no broadcast waits for another's receipt. Their journal rows carry the consecutive
// sender nonces 0..11, each once, and once a block is mined every settle succeeds.
func TestSettlesFromOneSignerArePipelined(t *testing.T) {
	env := newTestEnv(t)
	cfg := env.config(t)
	e := env.engine(t, cfg)
	signer := env.chain.FacilitatorAccount().Address
	env.chain.SetAutomine(t, false)
	t.Cleanup(func() { env.chain.SetAutomine(t, true) })
	const n = 12
	answers := make(chan settleAnswer, n)
	keys := settleAll(t, env, e, n, answers)

	waitFor(t, "every settlement broadcast", func() bool { return env.pendingNonce(t, signer) == n })
	if mined := env.signerNonce(t, signer); mined != 0 {
		t.Fatalf("%d transactions mined with automine off", mined)
	}
	var nonces []uint64
	for _, k := range keys {
		waitFor(t, "row "+k+" marked broadcast", func() bool {
			row, err := cfg.Journal.Get(context.Background(), k)
			return err == nil && row.State == journal.StateBroadcast
		})
		row, _ := cfg.Journal.Get(context.Background(), k)
		nonces = append(nonces, row.SenderNonce)
	}
	slices.Sort(nonces)
	for i, got := range nonces {
		if got != uint64(i) {
			t.Fatalf("journaled sender nonces %v, want 0..%d each once", nonces, n-1)
		}
	}
	select {
	case a := <-answers:
		t.Fatalf("a settle answered before any receipt: %+v, %v", a.res, a.err)
	default:
	}

	env.chain.Mine(t)
	for range n {
		a := <-answers
		if a.err != nil || !a.res.Success {
			t.Errorf("settle %s = %+v, %v", a.key, a.res, a.err)
		}
	}
	if mined := env.signerNonce(t, signer); mined != n {
		t.Errorf("signer has %d transactions mined, want %d", mined, n)
	}
}

// TestBatchFailureDoesNotWedgeLaterNonces: when one transaction of a batch is not
// broadcast (here a simulated crash right after its journal row is written), the
// transactions after it in the batch are not sent and their rows are closed as
// not_broadcast; the one before it settles. The next settle takes the first unused
// nonce, so nothing waits behind a gap, and reconcile closes the crashed row as dropped
// once its nonce is taken. Every payment is charged at most once.
func TestBatchFailureDoesNotWedgeLaterNonces(t *testing.T) {
	env := newTestEnv(t)
	cfg := env.config(t)
	const n = 6
	var (
		mu     sync.Mutex
		calls  int
		e      *Service
		inHook = make(chan struct{})
	)
	crash := errors.New("simulated crash")
	cfg.beforeBroadcast = func(journal.Settlement) error {
		mu.Lock()
		calls++
		call := calls
		mu.Unlock()
		switch call {
		case 1:
			// The first settle's batch holds the lead until the other n-1 wait in the queue,
			// so they make up the next batch together.
			close(inHook)
			s := e.order[0].sender.(*txsender.Sender)
			waitFor(t, "the other settles queued", func() bool { return s.Queued() == n-1 })
		case 3: // the second transaction of the second batch
			return crash
		}
		return nil
	}
	e = env.engine(t, cfg)
	payee := env.chain.Accounts[9].Address
	before := env.token.BalanceOf(t, payee)
	answers := make(chan settleAnswer, n)
	settleAll(t, env, e, 1, answers)
	<-inHook
	settleAll(t, env, e, n-1, answers)
	var settled, crashed, refused []string
	for range n {
		a := <-answers
		switch {
		case a.err == nil && a.res.Success:
			settled = append(settled, a.key)
		case a.err != nil:
			crashed = append(crashed, a.key)
		case x402.ReasonFromWire(a.res.ErrorReason) == x402.ReasonUnexpectedSettle:
			refused = append(refused, a.key)
		default:
			t.Fatalf("settle %s = %+v, %v", a.key, a.res, a.err)
		}
	}
	if len(settled) != 2 || len(crashed) != 1 || len(refused) != n-3 {
		t.Fatalf("%d settled, %d crashed, %d refused; want 2, 1, %d", len(settled), len(crashed), len(refused), n-3)
	}
	for _, k := range refused {
		row, err := cfg.Journal.Get(context.Background(), k)
		if err != nil || row.State != journal.StateFailed || row.Reason != txsender.ReasonNotBroadcast {
			t.Errorf("row of a transaction behind the crash = %+v, %v; want failed, not_broadcast", row, err)
		}
	}
	signer := env.chain.FacilitatorAccount().Address
	if got := env.pendingNonce(t, signer); got != 2 {
		t.Fatalf("signer has %d transactions sent, want 2: nothing behind the crashed one", got)
	}
	// The next settle takes nonce 2, the crashed transaction's, and is mined: no gap.
	p, r := env.pay(t, x402.Version2, env.chain.Accounts[1], payee)
	if res, err := e.Settle(context.Background(), p, r); err != nil || !res.Success {
		t.Fatalf("settle after the failed batch = %+v, %v", res, err)
	}
	if got := env.signerNonce(t, signer); got != 3 {
		t.Errorf("signer has %d transactions mined, want 3", got)
	}
	if _, err := e.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	row, err := cfg.Journal.Get(context.Background(), crashed[0])
	if err != nil || row.State != journal.StateFailed || row.Reason != ReconcileDropped {
		t.Errorf("crashed row after reconcile = %+v, %v; want failed, dropped", row, err)
	}
	want := new(big.Int).Mul(testAmount, big.NewInt(3))
	if d := new(big.Int).Sub(env.token.BalanceOf(t, payee), before); d.Cmp(want) != 0 {
		t.Errorf("payee received %s, want %s (three settlements)", d, want)
	}
}
