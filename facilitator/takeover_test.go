package facilitator

import (
	"context"
	"errors"
	"math/big"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/x402gate/x402gate/facilitator/journal"
	"github.com/x402gate/x402gate/internal/testenv"
	"github.com/x402gate/x402gate/x402"
)

// testTakeoverAfter is the engines' Config.TakeoverAfter in these tests.
const testTakeoverAfter = 200 * time.Millisecond

// takeoverPair is two engines, A and B, of one fleet: one journal and one approval store,
// each its own signer key (A account 0, B account 9). B dies between journaling a
// settlement and broadcasting it (the beforeBroadcast seam). A's clock is the env's
// clock moved on by skew, so a row's age is set, never waited for.
type takeoverPair struct {
	a, b    *Service
	cfgA    Config
	signerB testenv.Account
	skew    atomic.Int64 // nanoseconds added to A's clock
	logs    *observer.ObservedLogs
}

func newTakeoverPair(t *testing.T, env *testEnv) *takeoverPair {
	t.Helper()
	tp := &takeoverPair{signerB: env.chain.Accounts[9]}
	core, logs := observer.New(zapcore.InfoLevel)
	tp.logs = logs
	tp.cfgA = env.config(t)
	tp.cfgA.TakeoverAfter = testTakeoverAfter
	tp.cfgA.Logger = zap.New(core)
	tp.cfgA.Now = func() time.Time { return env.now.Add(time.Duration(tp.skew.Load())) }
	tp.a = env.engine(t, tp.cfgA)

	cfgB := env.config(t)
	cfgB.Journal, cfgB.Store = tp.cfgA.Journal, tp.cfgA.Store
	cfgB.Signer = tp.signerB.Key
	cfgB.beforeBroadcast = func(journal.Settlement) error { return errors.New("simulated crash") }
	tp.b = env.engine(t, cfgB)
	return tp
}

// crashB has B settle a payment from account 1 to account 2 and die after journaling it:
// the row is prepared and nothing was sent.
func (tp *takeoverPair) crashB(t *testing.T, env *testEnv) (*x402.Payment, *x402.Requirements, journal.Settlement) {
	t.Helper()
	p, r := env.pay(t, x402.Version2, env.chain.Accounts[1], env.chain.Accounts[2].Address)
	if res, err := tp.b.Settle(context.Background(), p, r); err == nil || res.Success {
		t.Fatalf("B's settle with a crash before broadcast = %+v, %v; want an error", res, err)
	}
	row := journalRow(t, tp.cfgA, p, r)
	if row.State != journal.StatePrepared {
		t.Fatalf("journal row = %+v; want prepared", row)
	}
	if n := env.pendingNonce(t, tp.signerB.Address); n != 0 {
		t.Fatalf("B's crashed settle broadcast %d transactions", n)
	}
	return p, r, row
}

func journalRow(t *testing.T, cfg Config, p *x402.Payment, r *x402.Requirements) journal.Settlement {
	t.Helper()
	row, err := cfg.Journal.Get(context.Background(), x402.KeyOf(p, r).AuthorizationKey())
	if err != nil {
		t.Fatalf("journal row: %v", err)
	}
	return row
}

// wantPending checks that status answered settlement_pending with tx, and that the
// journal row is still prepared.
func wantPending(t *testing.T, cfg Config, res x402.SettleResponse, p *x402.Payment, r *x402.Requirements, tx string) {
	t.Helper()
	if res.Success || res.ErrorReason != x402.ReasonSettlementPending.V2() || res.Transaction != tx {
		t.Fatalf("status = %+v; want settlement_pending with %s", res, tx)
	}
	if row := journalRow(t, cfg, p, r); row.State != journal.StatePrepared {
		t.Fatalf("journal row = %+v; want still prepared", row)
	}
}

// TestSettlementStatusTakesOverAnotherSignersUnsentSettlement: instance B journals a
// settlement and dies before broadcasting it; the client's header reaches instance A,
// whose gate asks A's SettlementStatus. Before TakeoverAfter it is pending and nothing is
// sent; after it, A sends B's journaled transaction (the same hash, signed by B, not a
// new one of A's) and answers success once it is mined: the payee is paid exactly once.
func TestSettlementStatusTakesOverAnotherSignersUnsentSettlement(t *testing.T) {
	env := newTestEnv(t)
	tp := newTakeoverPair(t, env)
	payer, payee := env.chain.Accounts[1].Address, env.chain.Accounts[2].Address
	payerBefore, payeeBefore := env.token.BalanceOf(t, payer), env.token.BalanceOf(t, payee)
	p, r, row := tp.crashB(t, env)
	tx := row.TxHash.Hex()

	tp.skew.Store(int64(testTakeoverAfter / 2))
	wantPending(t, tp.cfgA, status(t, tp.a, p, r), p, r, tx)
	if n := env.pendingNonce(t, tp.signerB.Address); n != 0 {
		t.Fatalf("status before TakeoverAfter sent %d transactions", n)
	}

	tp.skew.Store(int64(testTakeoverAfter))
	res := status(t, tp.a, p, r)
	if !res.Success || res.Transaction != tx || res.Payer != payer.Hex() {
		t.Fatalf("status after TakeoverAfter = %+v; want success with B's journaled %s", res, tx)
	}
	if got := journalRow(t, tp.cfgA, p, r); got.State != journal.StateConfirmed || got.TxHash != row.TxHash {
		t.Fatalf("journal row = %+v; want confirmed with %s", got, tx)
	}
	if d := new(big.Int).Sub(env.token.BalanceOf(t, payee), payeeBefore); d.Cmp(testAmount) != 0 {
		t.Errorf("payee received %s, want %s", d, testAmount)
	}
	if d := new(big.Int).Sub(payerBefore, env.token.BalanceOf(t, payer)); d.Cmp(testAmount) != 0 {
		t.Errorf("payer paid %s, want %s", d, testAmount)
	}
	if n := env.signerNonce(t, tp.signerB.Address); n != 1 {
		t.Errorf("B's signer has %d transactions mined, want its one journaled", n)
	}
	if n := env.pendingNonce(t, tp.a.Address()); n != 0 {
		t.Errorf("A's signer sent %d transactions of its own, want none", n)
	}
	took := tp.logs.FilterMessage("settlement status: took over a journaled settlement of another signer").All()
	if len(took) != 1 || took[0].ContextMap()["tx"] != tx || took[0].ContextMap()["payer"] != payer.Hex() {
		t.Errorf("takeover log = %+v; want one entry with payer and tx", took)
	}

	// Asked again, the confirmed row answers from the journal; nothing more moves.
	if res := status(t, tp.a, p, r); !res.Success || res.Transaction != tx {
		t.Fatalf("status of the confirmed row = %+v; want success with %s", res, tx)
	}
	if n := env.pendingNonce(t, tp.signerB.Address) + env.pendingNonce(t, tp.a.Address()); n != 1 {
		t.Errorf("%d transactions in all, want 1", n)
	}
}

// TestSettlementStatusRefusedTakeoverStaysPending: when the node refuses B's journaled
// transaction (here B's signer cannot pay its gas), the takeover leaves the row prepared
// and the status pending, with nothing moved; once the node takes it, a later status
// read settles it with that same transaction.
func TestSettlementStatusRefusedTakeoverStaysPending(t *testing.T) {
	env := newTestEnv(t)
	tp := newTakeoverPair(t, env)
	payee := env.chain.Accounts[2].Address
	before := env.token.BalanceOf(t, payee)
	p, r, row := tp.crashB(t, env)
	tx := row.TxHash.Hex()
	funds, err := env.chain.Client.BalanceAt(context.Background(), tp.signerB.Address, nil)
	if err != nil {
		t.Fatal(err)
	}
	env.chain.SetBalance(t, tp.signerB.Address, big.NewInt(0))

	tp.skew.Store(int64(testTakeoverAfter))
	wantPending(t, tp.cfgA, status(t, tp.a, p, r), p, r, tx)
	if n := env.pendingNonce(t, tp.signerB.Address); n != 0 {
		t.Fatalf("a refused takeover left %d transactions", n)
	}
	if d := new(big.Int).Sub(env.token.BalanceOf(t, payee), before); d.Sign() != 0 {
		t.Fatalf("payee received %s, want nothing", d)
	}

	env.chain.SetBalance(t, tp.signerB.Address, funds)
	if res := status(t, tp.a, p, r); !res.Success || res.Transaction != tx {
		t.Fatalf("status once the node takes it = %+v; want success with %s", res, tx)
	}
	if d := new(big.Int).Sub(env.token.BalanceOf(t, payee), before); d.Cmp(testAmount) != 0 {
		t.Errorf("payee received %s, want %s", d, testAmount)
	}
}

// TestSettlementStatusLeavesOwnSignersRowAlone: a row journaled by this engine's own
// signer and never sent is its own sender's and reconcile's: however old, the status
// reports it pending and sends nothing. Neither does a negative TakeoverAfter take over
// another signer's row.
func TestSettlementStatusLeavesOwnSignersRowAlone(t *testing.T) {
	env := newTestEnv(t)
	tp := newTakeoverPair(t, env)
	ownCfg := tp.cfgA
	ownCfg.beforeBroadcast = func(journal.Settlement) error { return errors.New("simulated crash") }
	ownCfg.SkipStartupReconcile = true
	crashing := env.engine(t, ownCfg)
	p, r := env.pay(t, x402.Version2, env.chain.Accounts[1], env.chain.Accounts[2].Address)
	if res, err := crashing.Settle(context.Background(), p, r); err == nil || res.Success {
		t.Fatalf("settle with a crash before broadcast = %+v, %v; want an error", res, err)
	}
	own := journalRow(t, tp.cfgA, p, r)

	tp.skew.Store(int64(time.Hour))
	wantPending(t, tp.cfgA, status(t, tp.a, p, r), p, r, own.TxHash.Hex())
	if n := env.pendingNonce(t, tp.a.Address()); n != 0 {
		t.Fatalf("status of the engine's own row sent %d transactions", n)
	}

	pB, rB, rowB := tp.crashB(t, env)
	off := tp.cfgA
	off.TakeoverAfter = -1
	off.SkipStartupReconcile = true
	disabled := env.engine(t, off)
	wantPending(t, tp.cfgA, status(t, disabled, pB, rB), pB, rB, rowB.TxHash.Hex())
	if n := env.pendingNonce(t, tp.signerB.Address); n != 0 {
		t.Fatalf("status with takeover disabled sent %d transactions", n)
	}
}
