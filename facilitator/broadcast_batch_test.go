package facilitator

import (
	"context"
	"errors"
	"math/big"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/core/types"

	"github.com/x402gate/x402gate/x402"
)

// TestBatchBroadcastFillsTheGapOfARefusedTransaction: a batch goes to the node as one
// request, and each transaction's reply decides it. Here the second of four is refused by
// the node for certain (a gas limit below the intrinsic gas), and the two after it are
// taken: they would wait behind its unused nonce forever, so the sender takes that nonce
// with a filler, and all three are mined. The refused one is answered as not broadcast,
// and the next settle continues from the right nonce.
func TestBatchBroadcastFillsTheGapOfARefusedTransaction(t *testing.T) {
	env := newTestEnv(t)
	e := env.engine(t, env.config(t))
	ctx := context.Background()
	payee := env.chain.Accounts[9].Address
	signer := env.chain.FacilitatorAccount().Address
	// A first settle syncs the sender's nonce.
	p, r := env.pay(t, x402.Version2, env.chain.Accounts[1], payee)
	settleOK(t, env, e, p, r)
	before := env.token.BalanceOf(t, payee)
	start := env.signerNonce(t, signer)

	var calls []call
	for i := range 4 {
		p, r := env.pay(t, x402.Version2, env.chain.Accounts[2+i], payee)
		c, f := e.checkSigned(ctx, p, r)
		if f != nil {
			t.Fatalf("checkSigned: %+v", f)
		}
		cl, f := e.simulate(ctx, c)
		if f != nil {
			t.Fatalf("simulate: %+v", f)
		}
		calls = append(calls, cl)
	}
	calls[1].gas = 20_000 // below the 21,000 any transaction needs: a definite refusal

	// Hold the lead while the four queue in order, so one batch takes them all.
	s := e.order[0].sender
	s.lead <- struct{}{}
	type answer struct {
		tx  *types.Transaction
		err error
	}
	answers := make([]chan answer, len(calls))
	for i, cl := range calls {
		answers[i] = make(chan answer, 1)
		go func() {
			tx, err := s.send(ctx, cl, nil)
			answers[i] <- answer{tx, err}
		}()
		waitFor(t, "the send queued", func() bool {
			s.qmu.Lock()
			defer s.qmu.Unlock()
			return len(s.queue) == i+1
		})
	}
	<-s.lead

	for i := range calls {
		a := <-answers[i]
		if i == 1 {
			if !errors.Is(a.err, errNotBroadcast) {
				t.Errorf("refused send = %v, want errNotBroadcast", a.err)
			}
			continue
		}
		if a.err != nil {
			t.Fatalf("send %d: %v", i, a.err)
		}
		rcpt, err := s.waitReceipt(ctx, a.tx, 30*time.Second)
		if err != nil || rcpt.Status != types.ReceiptStatusSuccessful {
			t.Fatalf("receipt of send %d (nonce %d) = %+v, %v; want it mined", i, a.tx.Nonce(), rcpt, err)
		}
	}
	if got := env.signerNonce(t, signer); got != start+4 {
		t.Errorf("signer has %d transactions mined since, want 4 (three transfers and the filler)", got-start)
	}
	want := new(big.Int).Mul(testAmount, big.NewInt(3))
	if d := new(big.Int).Sub(env.token.BalanceOf(t, payee), before); d.Cmp(want) != 0 {
		t.Errorf("payee received %s, want %s", d, want)
	}
	// The sender continues from the next nonce.
	p, r = env.pay(t, x402.Version2, env.chain.Accounts[1], payee)
	settleOK(t, env, e, p, r)
	if got := env.signerNonce(t, signer); got != start+5 {
		t.Errorf("signer has %d transactions mined since, want 5", got-start)
	}
}
