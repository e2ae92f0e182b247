package facilitator

import (
	"context"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"

	"github.com/x402gate/x402gate/facilitator/journal"
	"github.com/x402gate/x402gate/x402"
)

// crashedJournal is a Journal whose deferred writes never commit, as when the process dies
// before the next commit carries them: UpdateLater drops them and tells no outcome.
type crashedJournal struct {
	journal.Journal
	dropped *[]journal.State
}

func (j crashedJournal) UpdateLater(_ string, state journal.State, _ string, _ *common.Hash, _ func(error)) {
	*j.dropped = append(*j.dropped, state)
}

// TestSettleAnswersBeforeItsBroadcastAndConfirmedWrites: a settle answers once the receipt
// decided it, without waiting for the journal's broadcast and confirmed marks (they are
// deferred: docs/facilitator.md#settlement-journal). A crash that loses both leaves the row
// prepared, with its signed transaction; the restarted engine's reconcile then finds the
// receipt and confirms the row with the settling hash, and sends nothing again.
func TestSettleAnswersBeforeItsBroadcastAndConfirmedWrites(t *testing.T) {
	env := newTestEnv(t)
	cfg := env.config(t)
	var dropped []journal.State
	crashing := cfg
	crashing.Journal = crashedJournal{Journal: cfg.Journal, dropped: &dropped}
	c := env.engine(t, crashing)
	p, r := env.pay(t, x402.Version2, env.chain.Accounts[1], env.chain.Accounts[2].Address)
	ctx := context.Background()
	res, err := c.Settle(ctx, p, r)
	if err != nil || !res.Success {
		t.Fatalf("settle = %+v, %v", res, err)
	}
	if len(dropped) != 2 || dropped[0] != journal.StateBroadcast || dropped[1] != journal.StateConfirmed {
		t.Fatalf("the settle deferred %v, want [broadcast confirmed]", dropped)
	}
	key := x402.KeyOf(p, r).AuthorizationKey()
	row, err := cfg.Journal.Get(ctx, key)
	if err != nil || row.State != journal.StatePrepared || row.TxHash.Hex() != res.Transaction {
		t.Fatalf("after the lost writes the row is %q (tx %s), %v; want prepared with %s", row.State, row.TxHash.Hex(), err, res.Transaction)
	}
	// The engine after the restart reconciles at start (and again here: nothing is left).
	if rep, err := env.engine(t, cfg).Reconcile(ctx); err != nil || rep.Resent != 0 || rep.Pending != 0 {
		t.Fatalf("reconcile = %+v, %v; want nothing resent or pending", rep, err)
	}
	row, err = cfg.Journal.Get(ctx, key)
	if err != nil || row.State != journal.StateConfirmed || row.TxHash.Hex() != res.Transaction {
		t.Fatalf("after reconcile the row is %q (tx %s), %v; want confirmed by %s", row.State, row.TxHash.Hex(), err, res.Transaction)
	}
}

// decidedRow reads the journal row of key once a receipt decided it (confirmed or failed):
// a settle answers before its confirmed mark commits (deferred with the journal's next
// write), so a row read at once may still be prepared or broadcast. It gives up after a
// minute and returns the last row read.
func decidedRow(t testing.TB, j journal.Journal, key string) (journal.Settlement, error) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		row, err := j.Get(context.Background(), key)
		if err == nil && (row.State == journal.StateConfirmed || row.State == journal.StateFailed) || time.Now().After(deadline) {
			return row, err
		}
		time.Sleep(time.Millisecond)
	}
}
