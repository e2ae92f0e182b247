package facilitator

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"

	"github.com/x402gate/x402gate/facilitator/txsender"
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
	s, payee, before, start := synced(t, env, e)

	calls := settleCalls(t, env, e, 2, 4)
	calls[1].Gas = 20_000 // below the 21,000 any transaction needs: a definite refusal
	answers := sendAsOneBatch(t, s, calls)
	for i, a := range answers {
		if i == 1 {
			if !errors.Is(a.err, txsender.ErrNotBroadcast) {
				t.Errorf("refused send = %v, want txsender.ErrNotBroadcast", a.err)
			}
			continue
		}
		wantMined(t, s, i, a)
	}
	wantMoved(t, env, payee, before, 3, start, 4) // three transfers and the filler
	// The sender continues from the next nonce.
	p, r := env.pay(t, x402.Version2, env.chain.Accounts[1], payee)
	settleOK(t, env, e, p, r)
	wantMoved(t, env, payee, before, 4, start, 5)
}

// droppingNode forwards every JSON-RPC request to the real node at target, except, while
// *drop is set, the second eth_sendRawTransaction of a batch: that one is not forwarded, and
// its reply is an error that is no definite answer (a hosted provider's rate limit inside a
// batch). The node never gets the transaction; the sender cannot know that. It is a fault
// the real node will not produce on demand.
func droppingNode(t *testing.T, target string, drop *atomic.Bool) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var calls []map[string]json.RawMessage
		var dropped json.RawMessage // the id of the element not forwarded
		if json.Unmarshal(body, &calls) == nil && len(calls) > 1 && drop.Load() && string(calls[1]["method"]) == `"eth_sendRawTransaction"` {
			dropped = calls[1]["id"]
			calls = append(calls[:1], calls[2:]...)
			body, _ = json.Marshal(calls)
			drop.Store(false)
		}
		out, err := relay(target, body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		if dropped != nil {
			var replies []json.RawMessage
			if err := json.Unmarshal(out, &replies); err != nil {
				t.Errorf("batch reply: %v", err)
			}
			refusal, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": dropped,
				"error": map[string]any{"code": -32005, "message": "request limit reached"}})
			out, _ = json.Marshal(append(replies, refusal))
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(out)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestBatchBroadcastNeverSignsBelowATakenTransaction: in a batch of three, the node takes
// the first and the third, and the reply for the second says nothing certain (the node
// never got it). The third waits in the node's queue behind the second's nonce, and the
// node's pending nonce does not count it. The sender sends the second's own bytes again to
// fill the gap, and the next batch signs above the third instead of from the node's
// pending nonce: no transaction the node took is replaced, and all five are mined.
func TestBatchBroadcastNeverSignsBelowATakenTransaction(t *testing.T) {
	env := newTestEnv(t)
	var drop atomic.Bool
	cfg := env.config(t)
	cfg.Networks[0].RPC = droppingNode(t, env.chain.RPCURL, &drop)
	e := env.engine(t, cfg)
	s, payee, before, start := synced(t, env, e)

	next := 2
	batch := func(n int) []sendAnswer {
		calls := settleCalls(t, env, e, next, n)
		next += n
		return sendAsOneBatch(t, s, calls)
	}

	drop.Store(true)
	first := batch(3)
	if !errors.Is(first[1].err, txsender.ErrBroadcastUnknown) {
		t.Fatalf("the dropped send = %v, want txsender.ErrBroadcastUnknown", first[1].err)
	}
	for _, i := range []int{0, 2} {
		if first[i].err != nil {
			t.Fatalf("send %d: %v", i, first[i].err)
		}
	}
	second := batch(2)
	for i, a := range second {
		if a.err != nil {
			t.Fatalf("send %d of the next batch: %v (a nonce the node had taken was signed again)", i, a.err)
		}
		if a.tx.Nonce() <= first[2].tx.Nonce() {
			t.Errorf("send %d of the next batch has nonce %d, at or below %d, which the node took", i, a.tx.Nonce(), first[2].tx.Nonce())
		}
	}
	for i, a := range append([]sendAnswer{first[0], first[2]}, second...) {
		wantMined(t, s, i, a)
	}
	wantMoved(t, env, payee, before, 5, start, 5) // the dropped one sent again
}

// settleCalls checks and simulates n new payments, from accounts first, first+1 … to
// account 9, and returns their calls, ready to send.
func settleCalls(t *testing.T, env *testEnv, e *Service, first, n int) []txsender.Call {
	t.Helper()
	var calls []txsender.Call
	for i := range n {
		p, r := env.pay(t, x402.Version2, env.chain.Accounts[first+i], env.chain.Accounts[9].Address)
		c, f := e.checkSigned(context.Background(), p, r, nil)
		if f != nil {
			t.Fatalf("checkSigned: %+v", f)
		}
		cl, f := e.simulate(context.Background(), c)
		if f != nil {
			t.Fatalf("simulate: %+v", f)
		}
		calls = append(calls, cl)
	}
	return calls
}

// sendAnswer is what one send of sendAsOneBatch answered.
type sendAnswer struct {
	tx  *types.Transaction
	err error
}

// sendAsOneBatch sends calls through s as one batch: it holds the lead while they queue in
// order, so that the batch that takes the lead next takes them all, and returns each answer.
func sendAsOneBatch(t *testing.T, s *txsender.Sender, calls []txsender.Call) []sendAnswer {
	t.Helper()
	release := s.Hold()
	answers := make([]chan sendAnswer, len(calls))
	for i, cl := range calls {
		answers[i] = make(chan sendAnswer, 1)
		go func() {
			tx, err := s.Send(context.Background(), cl, nil)
			answers[i] <- sendAnswer{tx, err}
		}()
		waitFor(t, "the send queued", func() bool { return s.Queued() == i+1 })
	}
	release()
	out := make([]sendAnswer, len(calls))
	for i := range answers {
		out[i] = <-answers[i]
	}
	return out
}

// wantMined fails t unless send i was answered with a transaction that was mined and
// succeeded.
func wantMined(t *testing.T, s *txsender.Sender, i int, a sendAnswer) {
	t.Helper()
	if a.err != nil {
		t.Fatalf("send %d: %v", i, a.err)
	}
	rcpt, err := s.WaitReceipt(context.Background(), a.tx, 30*time.Second)
	if err != nil || rcpt.Status != types.ReceiptStatusSuccessful {
		t.Fatalf("receipt of send %d (nonce %d) = %+v, %v; want it mined", i, a.tx.Nonce(), rcpt, err)
	}
}

// wantMoved fails t unless payee received n payments since its balance was before, and
// the facilitator's signer had txs transactions mined since its nonce was start.
func wantMoved(t *testing.T, env *testEnv, payee common.Address, before *big.Int, n int64, start, txs uint64) {
	t.Helper()
	if got := env.signerNonce(t, env.chain.FacilitatorAccount().Address); got != start+txs {
		t.Errorf("signer has %d transactions mined since, want %d", got-start, txs)
	}
	want := new(big.Int).Mul(testAmount, big.NewInt(n))
	if d := new(big.Int).Sub(env.token.BalanceOf(t, payee), before); d.Cmp(want) != 0 {
		t.Errorf("payee received %s, want %s", d, want)
	}
}

// synced settles one payment to account 9 through e, which syncs its sender's nonce, and
// returns the sender, the payee, the payee's balance and the signer's nonce after it.
func synced(t *testing.T, env *testEnv, e *Service) (s *txsender.Sender, payee common.Address, before *big.Int, start uint64) {
	t.Helper()
	payee = env.chain.Accounts[9].Address
	p, r := env.pay(t, x402.Version2, env.chain.Accounts[1], payee)
	settleOK(t, env, e, p, r)
	return e.order[0].sender.(*txsender.Sender), payee, env.token.BalanceOf(t, payee), env.signerNonce(t, env.chain.FacilitatorAccount().Address)
}

// relay posts the JSON-RPC request body to the node at target and returns its reply.
func relay(target string, body []byte) ([]byte, error) {
	res, err := http.Post(target, "application/json", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	return io.ReadAll(res.Body)
}
