package facilitator

import (
	"context"
	"errors"
	"math/big"
	"testing"
	"time"

	"github.com/x402gate/x402gate/facilitator/journal"
	"github.com/x402gate/x402gate/x402"
)

// TestReconcileIdleLeavesRowsALiveSettleMayOwn: the periodic reconcile must not touch a
// row updated within a settle's detached bound (its settle may still be broadcasting or
// waiting), and must finish it once the row is older than that.
func TestReconcileIdleLeavesRowsALiveSettleMayOwn(t *testing.T) {
	env := newTestEnv(t)
	cfg := env.config(t)
	cfg.beforeBroadcast = func(journal.Settlement) error { return errors.New("simulated crash") }
	first := env.engine(t, cfg)
	payer, payee := env.chain.Accounts[1], env.chain.Accounts[2]
	signer := env.chain.FacilitatorAccount().Address
	p, r := env.pay(t, x402.Version2, payer, payee.Address)
	before := env.token.BalanceOf(t, payee.Address)
	if res, err := first.Settle(context.Background(), p, r); err == nil || res.Success {
		t.Fatalf("settle with a crash before broadcast = %+v, %v; want an error", res, err)
	}
	first.Close()

	idle := cfg
	idle.beforeBroadcast, idle.SkipStartupReconcile = nil, true
	young := env.engine(t, idle)
	rep, err := young.ReconcileIdle(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if rep.Recent != 1 || rep.Checked != 0 || rep.Resent != 0 {
		t.Fatalf("ReconcileIdle on a fresh row = %+v; want it left alone (Recent 1)", rep)
	}
	if n := env.pendingNonce(t, signer); n != 0 {
		t.Fatalf("ReconcileIdle broadcast %d transactions for a row a settle may own", n)
	}

	later := idle
	bound := young.detachedBound()
	later.Now = func() time.Time { return time.Now().Add(bound + time.Second) }
	old := env.engine(t, later)
	rep, err = old.ReconcileIdle(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if rep.Recent != 0 || rep.Checked != 1 || rep.Confirmed != 1 {
		t.Fatalf("ReconcileIdle past the bound = %+v; want the row finished", rep)
	}
	if d := new(big.Int).Sub(env.token.BalanceOf(t, payee.Address), before); d.Cmp(r.Amount) != 0 {
		t.Fatalf("payee received %s, want %s", d, r.Amount)
	}
	if n := env.signerNonce(t, signer); n != 1 {
		t.Fatalf("signer sent %d transactions, want 1", n)
	}
}
