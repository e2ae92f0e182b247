package facilitator

import (
	"bytes"
	"context"
	"errors"
	"math/big"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/core/types"

	"github.com/x402gate/x402gate/facilitator/journal"
	"github.com/x402gate/x402gate/facilitator/txsender"
	"github.com/x402gate/x402gate/internal/testenv"
	"github.com/x402gate/x402gate/x402"
)

// stuckSettlement is a settlement left pending on a chain that does not mine on its own:
// automine is off when it returns, and the journal row is broadcast with first as its
// only transaction.
type stuckSettlement struct {
	env     *testEnv
	cfg     Config
	e       *Service
	key     string
	first   *types.Transaction
	payee   common.Address
	before  *big.Int // the payee's balance before the settlement
	journal journal.Journal
}

func settleStuck(t *testing.T, env *testEnv, cfg Config) *stuckSettlement {
	t.Helper()
	cfg.ReceiptTimeout = Duration(300 * time.Millisecond) // the chain mines only when told to
	e := env.engine(t, cfg)
	payer, payee := env.chain.Accounts[1], env.chain.Accounts[2]
	p, r := env.pay(t, x402.Version2, payer, payee.Address)
	s := &stuckSettlement{env: env, cfg: cfg, e: e, key: x402.KeyOf(p, r).AuthorizationKey(), payee: payee.Address,
		before: env.token.BalanceOf(t, payee.Address), journal: cfg.Journal}
	env.chain.SetAutomine(t, false)
	t.Cleanup(func() { env.chain.SetAutomine(t, true) })
	res, err := e.Settle(context.Background(), p, r)
	if err != nil || res.Success || res.ErrorReason != x402.ReasonSettlementPending.V2() {
		t.Fatalf("settle = %+v, %v; want settlement_pending", res, err)
	}
	row, err := cfg.Journal.Get(context.Background(), s.key)
	if err != nil || row.State != journal.StateBroadcast || row.TxHash.Hex() != res.Transaction {
		t.Fatalf("journal row = %+v, %v; want broadcast %s", row, err, res.Transaction)
	}
	s.first = decodeTx(t, row.RawTx)
	return s
}

func decodeTx(t *testing.T, raw []byte) *types.Transaction {
	t.Helper()
	tx := new(types.Transaction)
	if err := tx.UnmarshalBinary(raw); err != nil {
		t.Fatalf("decode journaled transaction: %v", err)
	}
	return tx
}

// spikeBaseFee makes the next block's base fee wei and mines that block, which leaves
// every transaction whose fee cap is lower in the pool.
func (s *stuckSettlement) spikeBaseFee(t *testing.T, wei *big.Int) {
	t.Helper()
	s.env.chain.RPC(t, nil, "anvil_setNextBlockBaseFeePerGas", (*hexutil.Big)(wei))
	s.env.chain.Mine(t)
	head, err := s.env.chain.Client.HeaderByNumber(context.Background(), nil)
	if err != nil || head.BaseFee.Cmp(wei) != 0 {
		t.Fatalf("latest block base fee = %v, %v; want %s", head, err, wei)
	}
	if _, err := s.env.chain.Client.TransactionReceipt(context.Background(), s.first.Hash()); !errors.Is(err, ethereum.NotFound) {
		t.Fatalf("the settlement was mined under a base fee above its cap: %v", err)
	}
}

func (s *stuckSettlement) attempts(t *testing.T) []journal.Attempt {
	t.Helper()
	as, err := s.journal.Attempts(context.Background(), s.key)
	if err != nil {
		t.Fatalf("Attempts: %v", err)
	}
	return as
}

func (s *stuckSettlement) reconcile(t *testing.T) ReconcileReport {
	t.Helper()
	rep, err := s.e.Reconcile(context.Background())
	if err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
	return rep
}

// paidOnce checks that the payee received the amount once and the signer sent one
// transaction.
func (s *stuckSettlement) paidOnce(t *testing.T) {
	t.Helper()
	if d := new(big.Int).Sub(s.env.token.BalanceOf(t, s.payee), s.before); d.Cmp(testAmount) != 0 {
		t.Errorf("payee received %s, want %s", d, testAmount)
	}
	if n := s.env.signerNonce(t, s.env.chain.FacilitatorAccount().Address); n != 1 {
		t.Errorf("signer has %d mined transactions, want 1", n)
	}
}

// checkReplacement checks that rep replaces old: same sender, nonce, gas, target, value
// and calldata, both fees raised by at least 10%, and a fee cap of at least 2*base + tip.
func checkReplacement(t *testing.T, env *testEnv, old, rep *types.Transaction, base *big.Int) {
	t.Helper()
	signer := types.LatestSignerForChainID(env.chain.ChainID)
	from, err := types.Sender(signer, rep)
	if err != nil || from != env.chain.FacilitatorAccount().Address {
		t.Errorf("replacement signed by %s, %v; want the facilitator", from.Hex(), err)
	}
	if rep.Nonce() != old.Nonce() || rep.Gas() != old.Gas() || *rep.To() != *old.To() ||
		rep.Value().Cmp(old.Value()) != 0 || !bytes.Equal(rep.Data(), old.Data()) {
		t.Errorf("replacement changes more than the fees: nonce %d/%d gas %d/%d", rep.Nonce(), old.Nonce(), rep.Gas(), old.Gas())
	}
	tenPercent := func(v *big.Int) *big.Int {
		return new(big.Int).Div(new(big.Int).Mul(v, big.NewInt(110)), big.NewInt(100))
	}
	if rep.GasTipCap().Cmp(tenPercent(old.GasTipCap())) < 0 || rep.GasFeeCap().Cmp(tenPercent(old.GasFeeCap())) < 0 {
		t.Errorf("replacement fees tip %s cap %s, want >= 110%% of %s and %s", rep.GasTipCap(), rep.GasFeeCap(), old.GasTipCap(), old.GasFeeCap())
	}
	if min := new(big.Int).Add(new(big.Int).Mul(base, big.NewInt(2)), rep.GasTipCap()); rep.GasFeeCap().Cmp(min) < 0 {
		t.Errorf("replacement fee cap %s, want >= 2*%s + tip = %s", rep.GasFeeCap(), base, min)
	}
}

// TestReconcileFeeBumpsTransactionBelowBaseFee: a settlement whose fee cap fell below a
// spiked base fee is replaced by Reconcile with the same nonce and calldata and higher
// fees, journaled before its broadcast; the replacement is mined, the row is confirmed
// with its hash, the payee is paid once, and the journal holds both attempts. On both
// journal engines.
func TestReconcileFeeBumpsTransactionBelowBaseFee(t *testing.T) {
	for _, kind := range []string{"sqlite", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			env := newTestEnv(t)
			cfg := env.config(t)
			if kind == "postgres" {
				j, err := journal.OpenPostgres(context.Background(), testenv.StartPostgres(t))
				if err != nil {
					t.Fatalf("postgres journal: %v", err)
				}
				t.Cleanup(func() { _ = j.Close() })
				cfg.Journal = j
			}
			s := settleStuck(t, env, cfg)
			base := new(big.Int).Mul(s.first.GasFeeCap(), big.NewInt(3))
			s.spikeBaseFee(t, base)

			rep := s.reconcile(t)
			if rep.Checked != 1 || rep.Bumped != 1 || rep.Resent != 0 || rep.Pending != 1 || len(rep.Outcomes) != 1 {
				t.Fatalf("reconcile report = %+v, want one row bumped and left pending (nothing mined)", rep)
			}
			as := s.attempts(t)
			if len(as) != 2 || as[0].TxHash != s.first.Hash() || as[1].Seq != 1 {
				t.Fatalf("attempts = %+v, want the first transaction and one replacement", as)
			}
			second := decodeTx(t, as[1].RawTx)
			if second.Hash() != as[1].TxHash || rep.Outcomes[0].TxHash != second.Hash().Hex() {
				t.Fatalf("replacement %s, journaled %s, reported %s", second.Hash().Hex(), as[1].TxHash.Hex(), rep.Outcomes[0].TxHash)
			}
			checkReplacement(t, env, s.first, second, base)
			if n := env.pendingNonce(t, env.chain.FacilitatorAccount().Address); n != 1 {
				t.Errorf("signer's pending nonce = %d, want 1 (the replacement takes the same slot)", n)
			}

			env.chain.Mine(t)
			if _, err := env.chain.Client.TransactionReceipt(context.Background(), second.Hash()); err != nil {
				t.Fatalf("replacement not mined: %v", err)
			}
			rep = s.reconcile(t)
			if rep.Checked != 1 || rep.Confirmed != 1 || rep.Bumped != 0 || len(rep.Outcomes) != 1 ||
				rep.Outcomes[0].TxHash != second.Hash().Hex() || rep.Outcomes[0].State != journal.StateConfirmed {
				t.Fatalf("reconcile report = %+v, want the row confirmed by %s", rep, second.Hash().Hex())
			}
			row, err := cfg.Journal.Get(context.Background(), s.key)
			if err != nil || row.State != journal.StateConfirmed || row.TxHash != s.first.Hash() {
				t.Errorf("journal row = %+v, %v; want confirmed, first hash kept", row, err)
			}
			as = s.attempts(t)
			if len(as) != 2 || as[0].Settled || !as[1].Settled {
				t.Errorf("attempts = %+v, want two with the replacement marked settled", as)
			}
			s.paidOnce(t)

			rep = s.reconcile(t)
			if rep.Checked != 0 || rep.Bumped != 0 || rep.Resent != 0 || len(rep.Outcomes) != 0 {
				t.Errorf("second reconcile = %+v, want nothing to do", rep)
			}
			if n := env.pendingNonce(t, env.chain.FacilitatorAccount().Address); n != 1 {
				t.Errorf("signer's pending nonce = %d after the second reconcile, want 1", n)
			}
		})
	}
}

// TestReconcileFeeCeilingStopsBumping: a bump that would need a fee cap past the ceiling
// (the default, ten times the first cap, or Config.MaxFeePerGas) is not signed; the row
// stays broadcast with ReconcileFeeCeiling, and once the base fee falls the first
// transaction itself is mined and confirms the row.
func TestReconcileFeeCeilingStopsBumping(t *testing.T) {
	cases := []struct {
		name      string
		baseTimes int64 // the spiked base fee, in multiples of the first fee cap
		ceiling   func(firstCap *big.Int) *big.Int
	}{
		{"default ceiling", 20, nil},
		{"configured ceiling", 3, func(firstCap *big.Int) *big.Int { return new(big.Int).Mul(firstCap, big.NewInt(2)) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			env := newTestEnv(t)
			s := settleStuck(t, env, env.config(t))
			if tc.ceiling != nil {
				s.e.cfg.MaxFeePerGas = tc.ceiling(s.first.GasFeeCap())
			}
			s.spikeBaseFee(t, new(big.Int).Mul(s.first.GasFeeCap(), big.NewInt(tc.baseTimes)))

			rep := s.reconcile(t)
			if rep.Bumped != 0 || rep.Resent != 0 || rep.Pending != 1 || len(rep.Outcomes) != 1 ||
				rep.Outcomes[0].Reason != ReconcileFeeCeiling || rep.Outcomes[0].State != journal.StateBroadcast ||
				rep.Outcomes[0].TxHash != s.first.Hash().Hex() {
				t.Fatalf("reconcile report = %+v, want the row pending with %q", rep, ReconcileFeeCeiling)
			}
			if as := s.attempts(t); len(as) != 1 {
				t.Errorf("attempts = %+v, want only the first transaction", as)
			}
			if row, err := s.cfg.Journal.Get(context.Background(), s.key); err != nil || row.State != journal.StateBroadcast {
				t.Errorf("journal row = %+v, %v; want broadcast", row, err)
			}

			// The base fee falls back under the first cap: the same transaction is mined.
			s.env.chain.RPC(t, nil, "anvil_setNextBlockBaseFeePerGas", (*hexutil.Big)(big.NewInt(1)))
			env.chain.Mine(t)
			// anvil evicts a transaction its base fee priced out; Reconcile sends the
			// same bytes again, and the node mines them at once.
			env.chain.SetAutomine(t, true)
			rep = s.reconcile(t)
			if rep.Confirmed != 1 || len(rep.Outcomes) != 1 || rep.Outcomes[0].TxHash != s.first.Hash().Hex() {
				t.Fatalf("reconcile report = %+v, want the first transaction confirmed", rep)
			}
			if as := s.attempts(t); len(as) != 1 || !as[0].Settled {
				t.Errorf("attempts = %+v, want the first marked settled", as)
			}
			s.paidOnce(t)
		})
	}
}

// TestReconcileFeeBumpsAfterStuckAfter: a transaction whose cap still covers the base fee
// is only sent again, same bytes, until it has waited Config.StuckAfter (on the engine's
// clock) as the signer's next nonce; then it is replaced, and the replacement confirms.
func TestReconcileFeeBumpsAfterStuckAfter(t *testing.T) {
	env := newTestEnv(t)
	cfg := env.config(t)
	var clock atomic.Int64
	clock.Store(env.now.UnixNano())
	cfg.Now = func() time.Time { return time.Unix(0, clock.Load()) }
	cfg.StuckAfter = time.Minute
	s := settleStuck(t, env, cfg)

	rep := s.reconcile(t)
	if rep.Resent != 1 || rep.Bumped != 0 || len(s.attempts(t)) != 1 {
		t.Fatalf("reconcile report = %+v, want the fresh transaction resent, not bumped", rep)
	}
	clock.Add(int64(time.Minute))
	rep = s.reconcile(t)
	as := s.attempts(t)
	if rep.Bumped != 1 || len(as) != 2 {
		t.Fatalf("reconcile report = %+v, attempts %d; want one bump after StuckAfter", rep, len(as))
	}
	head, err := env.chain.Client.HeaderByNumber(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	second := decodeTx(t, as[1].RawTx)
	checkReplacement(t, env, s.first, second, head.BaseFee)

	env.chain.Mine(t)
	rep = s.reconcile(t)
	if rep.Confirmed != 1 || len(rep.Outcomes) != 1 || rep.Outcomes[0].TxHash != second.Hash().Hex() {
		t.Fatalf("reconcile report = %+v, want confirmed by the replacement", rep)
	}
	s.paidOnce(t)
}

// TestBumpFees pins the replacement fee rule and the ceiling.
func TestBumpFees(t *testing.T) {
	b := func(v int64) *big.Int { return big.NewInt(v) }
	cases := []struct {
		name                              string
		oldTip, oldCap, suggest, base, ce *big.Int
		tip, feeCap                       int64
		ok                                bool
	}{
		{"ten percent up, rounded up", b(1000), b(10001), b(0), b(10), nil, 1100, 11002, true},
		{"zero tip still rises", b(0), b(100), b(0), b(10), nil, 1, 110, true},
		{"cap covers twice the base fee", b(100), b(1000), b(0), b(5000), nil, 110, 10110, true},
		{"node's tip suggestion wins", b(100), b(1000), b(500), b(10), nil, 500, 1100, true},
		{"clamped to the ceiling", b(100), b(1000), b(0), b(5000), b(6000), 110, 6000, true},
		{"ceiling below the base fee", b(100), b(1000), b(0), b(5000), b(4000), 110, 4000, false},
		{"ceiling below the replacement rule", b(100), b(1000), b(0), b(10), b(1050), 110, 1050, false},
	}
	for _, tc := range cases {
		tip, feeCap, ok := txsender.BumpFees(tc.oldTip, tc.oldCap, tc.suggest, tc.base, tc.ce)
		if tip.Int64() != tc.tip || feeCap.Int64() != tc.feeCap || ok != tc.ok {
			t.Errorf("%s: bumpFees = %s, %s, %v; want %d, %d, %v", tc.name, tip, feeCap, ok, tc.tip, tc.feeCap, tc.ok)
		}
	}
}

// TestSettleFeeBumpsWhenTheBaseFeeSpikes: the base fee rises above the settlement's fee
// cap while Settle awaits its receipt; when the wait runs out Settle journals and
// broadcasts a fee-bumped replacement (same nonce and calldata), awaits it once more, and
// answers success with the replacement's hash. The payee is paid once.
func TestSettleFeeBumpsWhenTheBaseFeeSpikes(t *testing.T) {
	env := newTestEnv(t)
	cfg := env.config(t)
	cfg.ReceiptTimeout = Duration(3 * time.Second)
	e := env.engine(t, cfg)
	aj := cfg.Journal
	payer, payee := env.chain.Accounts[1], env.chain.Accounts[2]
	signer := env.chain.FacilitatorAccount().Address
	p, r := env.pay(t, x402.Version2, payer, payee.Address)
	key := x402.KeyOf(p, r).AuthorizationKey()
	before := env.token.BalanceOf(t, payee.Address)

	env.chain.SetAutomine(t, false)
	t.Cleanup(func() { env.chain.SetAutomine(t, true) })
	type result struct {
		res x402.SettleResponse
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := e.Settle(context.Background(), p, r)
		done <- result{res, err}
	}()
	// waitFor polls cond; the bound only keeps a broken build from hanging.
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("gave up waiting for %s", what)
			}
		}
	}
	var first *types.Transaction
	waitFor("the settlement in the pool", func() bool {
		row, err := cfg.Journal.Get(context.Background(), key)
		if err != nil || row.State != journal.StateBroadcast {
			return false
		}
		first = decodeTx(t, row.RawTx)
		return true
	})
	base := new(big.Int).Mul(first.GasFeeCap(), big.NewInt(3))
	env.chain.RPC(t, nil, "anvil_setNextBlockBaseFeePerGas", (*hexutil.Big)(base))
	env.chain.Mine(t)
	var as []journal.Attempt
	waitFor("a replacement in the journal", func() bool {
		var err error
		as, err = aj.Attempts(context.Background(), key)
		return err == nil && len(as) == 2
	})
	second := decodeTx(t, as[1].RawTx)
	checkReplacement(t, env, first, second, base)
	waitFor("the replacement in the pool", func() bool {
		_, pending, err := env.chain.Client.TransactionByHash(context.Background(), second.Hash())
		return err == nil && pending
	})
	env.chain.Mine(t)
	got := <-done
	if got.err != nil || !got.res.Success || got.res.Transaction != second.Hash().Hex() {
		t.Fatalf("settle = %+v, %v; want success with the replacement %s", got.res, got.err, second.Hash().Hex())
	}
	row, err := decidedRow(t, cfg.Journal, key)
	if err != nil || row.State != journal.StateConfirmed {
		t.Errorf("journal row = %+v, %v; want confirmed", row, err)
	}
	if as, err := aj.Attempts(context.Background(), key); err != nil || len(as) != 2 || !as[1].Settled || as[0].Settled {
		t.Errorf("attempts = %+v, %v; want the replacement settled", as, err)
	}
	if d := new(big.Int).Sub(env.token.BalanceOf(t, payee.Address), before); d.Cmp(testAmount) != 0 {
		t.Errorf("payee received %s, want %s", d, testAmount)
	}
	if n := env.signerNonce(t, signer); n != 1 {
		t.Errorf("signer has %d mined transactions, want 1", n)
	}
	if rep, err := e.Reconcile(context.Background()); err != nil || rep.Checked != 0 {
		t.Errorf("reconcile after = %+v, %v; want nothing to do", rep, err)
	}
}
