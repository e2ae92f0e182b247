package facilitator

import (
	"context"
	"fmt"
	"math/big"
	"sync"
	"testing"
	"time"

	"github.com/x402gate/x402gate/facilitator/approval"
	"github.com/x402gate/x402gate/facilitator/journal"
	"github.com/x402gate/x402gate/internal/testenv"
	"github.com/x402gate/x402gate/x402"
)

func TestSettleMovesExactlyTheValueOnce(t *testing.T) {
	env := newTestEnv(t)
	cfg := env.config(t)
	e := env.engine(t, cfg)
	payer, payee := env.chain.Accounts[1], env.chain.Accounts[2]
	signer := env.chain.FacilitatorAccount().Address
	for _, tc := range []struct {
		version int
		network string
	}{{x402.Version1, "base-sepolia"}, {x402.Version2, "eip155:84532"}} {
		t.Run(fmt.Sprintf("v%d", tc.version), func(t *testing.T) {
			p, r := env.pay(t, tc.version, payer, payee.Address)
			payerBefore, payeeBefore := env.token.BalanceOf(t, payer.Address), env.token.BalanceOf(t, payee.Address)
			nonceBefore := env.signerNonce(t, signer)

			res, err := e.Settle(context.Background(), p, r)
			if err != nil {
				t.Fatalf("Settle: %v", err)
			}
			if !res.Success || res.Transaction == "" || res.TxHash != res.Transaction || res.Network != tc.network ||
				res.Payer != payer.Address.Hex() || res.Amount != testAmount.String() {
				t.Fatalf("settle = %+v", res)
			}
			if d := new(big.Int).Sub(payerBefore, env.token.BalanceOf(t, payer.Address)); d.Cmp(testAmount) != 0 {
				t.Errorf("payer paid %s, want %s", d, testAmount)
			}
			if d := new(big.Int).Sub(env.token.BalanceOf(t, payee.Address), payeeBefore); d.Cmp(testAmount) != 0 {
				t.Errorf("payee received %s, want %s", d, testAmount)
			}
			if !env.token.AuthorizationState(t, payer.Address, p.Authorization.Nonce) {
				t.Error("authorization is not marked used on chain")
			}
			if n := env.signerNonce(t, signer); n != nonceBefore+1 {
				t.Errorf("signer sent %d transactions, want 1", n-nonceBefore)
			}
			row, err := decidedRow(t, cfg.Journal, x402.KeyOf(p, r).AuthorizationKey())
			if err != nil {
				t.Fatalf("journal: %v", err)
			}
			if row.State != journal.StateConfirmed || row.TxHash.Hex() != res.Transaction || row.SenderNonce != nonceBefore {
				t.Errorf("journal row = %s %s nonce %d; want confirmed %s nonce %d", row.State, row.TxHash.Hex(), row.SenderNonce, res.Transaction, nonceBefore)
			}

			// Replay after settlement: the nonce is used on chain.
			again, err := e.Settle(context.Background(), p, r)
			if err != nil {
				t.Fatalf("replayed Settle: %v", err)
			}
			if again.Success || again.ErrorReason != x402.ReasonNonceUsed.For(tc.version) || again.Transaction != "" {
				t.Errorf("replayed settle = %+v, want %s", again, x402.ReasonNonceUsed.For(tc.version))
			}
			ver, err := e.Verify(context.Background(), x402.VerifyInput{Payment: p, Requirements: r})
			if err != nil || ver.IsValid || ver.InvalidReason != x402.ReasonNonceUsed.For(tc.version) {
				t.Errorf("replayed verify = %+v, %v", ver, err)
			}
			if n := env.signerNonce(t, signer); n != nonceBefore+1 {
				t.Errorf("replays made the signer send %d more transactions", n-nonceBefore-1)
			}
		})
	}
}

// settleConcurrently settles p with each engine in turn, n times at once, and returns the
// answers.
func settleConcurrently(t *testing.T, engines []*Service, n int, p *x402.Payment, r *x402.Requirements) []x402.SettleResponse {
	t.Helper()
	out := make([]x402.SettleResponse, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			out[i], errs[i] = engines[i%len(engines)].Settle(context.Background(), p, r)
		}()
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("settle %d: %v", i, err)
		}
	}
	return out
}

// checkOneSuccess asserts that exactly one answer succeeded and every other failed
// cleanly, with duplicate_settlement or nonce already used, in the payment's x402 version
// (a loser that verified before the winner was mined is refused by the simulation).
func checkOneSuccess(t *testing.T, got []x402.SettleResponse, version int) {
	t.Helper()
	wins := 0
	for i, res := range got {
		switch {
		case res.Success:
			wins++
		case res.ErrorReason == x402.ReasonDuplicateSettlement.For(version) || res.ErrorReason == x402.ReasonNonceUsed.For(version):
		default:
			t.Errorf("settle %d failed with %q (%s), want %s or %s", i, res.ErrorReason, res.ErrorMessage,
				x402.ReasonDuplicateSettlement.For(version), x402.ReasonNonceUsed.For(version))
		}
	}
	if wins != 1 {
		t.Errorf("%d settles succeeded, want exactly 1", wins)
	}
}

func TestSettleTwentyConcurrentOfOnePaymentBroadcastOnce(t *testing.T) {
	env := newTestEnv(t)
	e := env.engine(t, env.config(t))
	payer, payee := env.chain.Accounts[1], env.chain.Accounts[2]
	signer := env.chain.FacilitatorAccount().Address
	p, r := env.pay(t, x402.Version2, payer, payee.Address)
	before := env.token.BalanceOf(t, payee.Address)

	checkOneSuccess(t, settleConcurrently(t, []*Service{e}, 20, p, r), x402.Version2)

	if n := env.pendingNonce(t, signer); n != 1 {
		t.Errorf("signer's nonce is %d, want exactly one broadcast", n)
	}
	if d := new(big.Int).Sub(env.token.BalanceOf(t, payee.Address), before); d.Cmp(testAmount) != 0 {
		t.Errorf("payee received %s, want %s", d, testAmount)
	}
}

// TestSettleFleetSharingRedisBroadcastsOnce runs three instances, each with its own signer
// key (a fleet uses one key per instance: the engine owns its account's nonce) and its
// own SQLite journal, sharing one RedisStore: the store's claim alone must stop a second
// broadcast.
func TestSettleFleetSharingRedisBroadcastsOnce(t *testing.T) {
	env := newTestEnv(t, testenv.WithAccounts(12))
	redisURL := testenv.StartRedis(t)
	signers := []testenv.Account{env.chain.Accounts[0], env.chain.Accounts[10], env.chain.Accounts[11]}
	var engines []*Service
	for i, s := range signers {
		cfg := env.config(t)
		store, err := approval.NewRedisStore(context.Background(), redisURL)
		if err != nil {
			t.Fatalf("redis store %d: %v", i, err)
		}
		t.Cleanup(func() { _ = store.Close() })
		cfg.Store, cfg.Signer = store, s.Key
		engines = append(engines, env.engine(t, cfg))
	}
	var before uint64
	for _, s := range signers {
		before += env.pendingNonce(t, s.Address)
	}
	payer, payee := env.chain.Accounts[1], env.chain.Accounts[2]
	p, r := env.pay(t, x402.Version1, payer, payee.Address)

	checkOneSuccess(t, settleConcurrently(t, engines, 21, p, r), x402.Version1)

	var after uint64
	for _, s := range signers {
		after += env.pendingNonce(t, s.Address)
	}
	if after-before != 1 {
		t.Errorf("the fleet broadcast %d transactions, want 1", after-before)
	}
}

// TestSettleSixtyFourDistinctPaymentsFromOneSigner is the load case of
// docs/facilitator.md#settle-order (pipelined sends from one signer key): many payers
// at once, one signer key, every settlement succeeds (the reference stacks lose about
// half). The journal is PostgreSQL, as a fleet would share it.
func TestSettleSixtyFourDistinctPaymentsFromOneSigner(t *testing.T) {
	env := newTestEnv(t)
	cfg := env.config(t)
	j, err := journal.OpenPostgres(context.Background(), testenv.StartPostgres(t))
	if err != nil {
		t.Fatalf("postgres journal: %v", err)
	}
	t.Cleanup(func() { _ = j.Close() })
	cfg.Journal = j
	e := env.engine(t, cfg)
	payee := env.chain.Accounts[9]
	signer := env.chain.FacilitatorAccount().Address

	const perPayer, payers = 8, 8
	type job struct {
		p *x402.Payment
		r *x402.Requirements
	}
	var jobs []job
	for i := range payers * perPayer {
		p, r := env.pay(t, x402.Version2, env.chain.Accounts[1+i%payers], payee.Address)
		jobs = append(jobs, job{p, r})
	}
	before := env.token.BalanceOf(t, payee.Address)
	res := make([]x402.SettleResponse, len(jobs))
	errs := make([]error, len(jobs))
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i, jb := range jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			res[i], errs[i] = e.Settle(context.Background(), jb.p, jb.r)
		}()
	}
	close(start)
	wg.Wait()
	ok := 0
	for i := range jobs {
		if errs[i] == nil && res[i].Success {
			ok++
		} else {
			t.Errorf("payment %d: %+v, %v", i, res[i], errs[i])
		}
	}
	if ok != len(jobs) {
		t.Fatalf("%d of %d settlements succeeded", ok, len(jobs))
	}
	want := new(big.Int).Mul(testAmount, big.NewInt(int64(len(jobs))))
	if d := new(big.Int).Sub(env.token.BalanceOf(t, payee.Address), before); d.Cmp(want) != 0 {
		t.Errorf("payee received %s, want %s", d, want)
	}
	if n := env.signerNonce(t, signer); n != uint64(len(jobs)) {
		t.Errorf("signer's nonce is %d, want %d", n, len(jobs))
	}
	rows, err := j.Unfinished(context.Background())
	if err != nil || len(rows) != 0 {
		t.Errorf("unfinished journal rows: %d, %v", len(rows), err)
	}
}

func TestSettleRedisDownRefusesAndNeverBroadcasts(t *testing.T) {
	env := newTestEnv(t)
	redis := testenv.StartRedisServer(t, testenv.RedisConfig{})
	store, err := approval.NewRedisStore(context.Background(), redis.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	cfg := env.config(t)
	cfg.Store, cfg.VerdictMode, cfg.Verdicts = store, VerdictRequired, approvedVerdict()
	e := env.engine(t, cfg)
	payer, payee := env.chain.Accounts[1], env.chain.Accounts[2]
	signer := env.chain.FacilitatorAccount().Address
	p, r := env.pay(t, x402.Version2, payer, payee.Address)

	ver, err := e.Verify(context.Background(), x402.VerifyInput{Payment: p, Requirements: r})
	if err != nil || !ver.IsValid {
		t.Fatalf("verify = %+v, %v", ver, err)
	}
	redis.Stop()

	res, err := e.Settle(context.Background(), p, r)
	if err != nil {
		t.Fatalf("Settle: %v", err)
	}
	if res.Success || res.ErrorReason != x402.ReasonApprovalStoreDown.V2() || res.Transaction != "" {
		t.Errorf("settle = %+v, want %s and no transaction", res, x402.ReasonApprovalStoreDown)
	}
	if n := env.pendingNonce(t, signer); n != 0 {
		t.Errorf("signer broadcast %d transactions with the store down", n)
	}
	if env.token.AuthorizationState(t, payer.Address, p.Authorization.Nonce) {
		t.Error("authorization was used on chain")
	}
}

func TestSettleReceiptTimeoutIsPendingThenReconciled(t *testing.T) {
	env := newTestEnv(t)
	cfg := env.config(t)
	cfg.ReceiptTimeout = Duration(300 * time.Millisecond) // the chain will not mine until told to
	e := env.engine(t, cfg)
	payer, payee := env.chain.Accounts[1], env.chain.Accounts[2]
	p, r := env.pay(t, x402.Version1, payer, payee.Address)
	before := env.token.BalanceOf(t, payee.Address)

	env.chain.SetAutomine(t, false)
	res, err := e.Settle(context.Background(), p, r)
	if err != nil {
		t.Fatalf("Settle: %v", err)
	}
	if res.Success || res.ErrorReason != x402.ReasonSettlementPending.V1() || res.Transaction == "" {
		t.Fatalf("settle = %+v, want pending with the transaction hash", res)
	}
	key := x402.KeyOf(p, r).AuthorizationKey()
	if row, err := cfg.Journal.Get(context.Background(), key); err != nil || row.State != journal.StateBroadcast || row.TxHash.Hex() != res.Transaction {
		t.Fatalf("journal row = %+v, %v; want broadcast %s", row, err, res.Transaction)
	}

	env.chain.Mine(t)
	env.chain.SetAutomine(t, true)
	rep, err := e.Reconcile(context.Background())
	if err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
	if rep.Checked != 1 || rep.Confirmed != 1 {
		t.Errorf("reconcile report = %+v, want one row confirmed", rep)
	}
	if row, err := cfg.Journal.Get(context.Background(), key); err != nil || row.State != journal.StateConfirmed {
		t.Errorf("journal row = %+v, %v; want confirmed", row, err)
	}
	if d := new(big.Int).Sub(env.token.BalanceOf(t, payee.Address), before); d.Cmp(testAmount) != 0 {
		t.Errorf("payee received %s, want %s", d, testAmount)
	}
	if n := env.signerNonce(t, env.chain.FacilitatorAccount().Address); n != 1 {
		t.Errorf("signer sent %d transactions, want 1", n)
	}
}

func TestSettleCrashAfterJournalIsFinishedByStartupReconcile(t *testing.T) {
	env := newTestEnv(t)
	j, err := journal.OpenPostgres(context.Background(), testenv.StartPostgres(t))
	if err != nil {
		t.Fatalf("postgres journal: %v", err)
	}
	t.Cleanup(func() { _ = j.Close() })
	cfg := env.config(t)
	cfg.Journal = j
	crash := fmt.Errorf("simulated crash")
	cfg.beforeBroadcast = func(journal.Settlement) error { return crash }
	first := env.engine(t, cfg)
	payer, payee := env.chain.Accounts[1], env.chain.Accounts[2]
	signer := env.chain.FacilitatorAccount().Address
	p, r := env.pay(t, x402.Version2, payer, payee.Address)
	before := env.token.BalanceOf(t, payee.Address)

	if res, err := first.Settle(context.Background(), p, r); err == nil || res.Success {
		t.Fatalf("settle with a crash before broadcast = %+v, %v; want an error", res, err)
	}
	key := x402.KeyOf(p, r).AuthorizationKey()
	row, err := j.Get(context.Background(), key)
	if err != nil || row.State != journal.StatePrepared {
		t.Fatalf("journal row = %+v, %v; want prepared", row, err)
	}
	if n := env.pendingNonce(t, signer); n != 0 {
		t.Fatalf("the crashed settle broadcast %d transactions", n)
	}
	first.Close()

	// A new process with the same journal and key: New reconciles.
	restart := cfg
	restart.beforeBroadcast = nil
	second := env.engine(t, restart)
	rep := second.StartupReconcile()
	if rep.Resent != 1 || rep.Confirmed != 1 || len(rep.Outcomes) != 1 || rep.Outcomes[0].TxHash != row.TxHash.Hex() {
		t.Errorf("startup reconcile = %+v; want the journaled transaction resent and confirmed", rep)
	}
	if got, err := j.Get(context.Background(), key); err != nil || got.State != journal.StateConfirmed {
		t.Errorf("journal row = %+v, %v; want confirmed", got, err)
	}
	if d := new(big.Int).Sub(env.token.BalanceOf(t, payee.Address), before); d.Cmp(testAmount) != 0 {
		t.Errorf("payee received %s, want %s", d, testAmount)
	}
	if n := env.signerNonce(t, signer); n != 1 {
		t.Errorf("signer sent %d transactions, want 1", n)
	}
	// The restarted engine's nonce manager starts past the reconciled transaction.
	p2, r2 := env.pay(t, x402.Version2, payer, payee.Address)
	if res, err := second.Settle(context.Background(), p2, r2); err != nil || !res.Success {
		t.Errorf("next settle = %+v, %v", res, err)
	}
}

func TestReconcileClosesDroppedAndSettledElsewhere(t *testing.T) {
	env := newTestEnv(t)
	cfg := env.config(t)
	e := env.engine(t, cfg)
	payer, payee := env.chain.Accounts[1], env.chain.Accounts[2]
	signer := env.chain.FacilitatorAccount()

	// Row 1: journaled with sender nonce 0, never sent; then nonce 0 goes to another
	// payment. Row 2: journaled, never sent, and the payer's authorization is then used by
	// someone else's transaction.
	crashOnce := true
	var mu sync.Mutex
	cfg.beforeBroadcast = func(journal.Settlement) error {
		mu.Lock()
		defer mu.Unlock()
		if crashOnce {
			crashOnce = false
			return fmt.Errorf("simulated crash")
		}
		return nil
	}
	crashing := env.engine(t, cfg)
	pDropped, rDropped := env.pay(t, x402.Version2, payer, payee.Address)
	if _, err := crashing.Settle(context.Background(), pDropped, rDropped); err == nil {
		t.Fatal("want the simulated crash")
	}
	pOther, rOther := env.pay(t, x402.Version2, payer, payee.Address)
	if res, err := crashing.Settle(context.Background(), pOther, rOther); err != nil || !res.Success {
		t.Fatalf("settle taking nonce 0 = %+v, %v", res, err)
	}

	mu.Lock()
	crashOnce = true
	mu.Unlock()
	pElse, rElse := env.pay(t, x402.Version2, payer, payee.Address)
	if _, err := crashing.Settle(context.Background(), pElse, rElse); err == nil {
		t.Fatal("want the simulated crash")
	}
	// Someone else (account 8) submits the payer's authorization directly.
	a := testenv.Authorization(pElse.Authorization)
	env.chain.Transact(t, env.chain.Accounts[8], env.token.Address, testenv.TransferWithAuthorizationVRS(t, a, pElse.Signature))

	rep, err := e.Reconcile(context.Background())
	if err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
	want := map[string]string{
		x402.KeyOf(pDropped, rDropped).AuthorizationKey(): ReconcileDropped,
		x402.KeyOf(pElse, rElse).AuthorizationKey():       ReconcileSettledElsewhere,
	}
	if rep.Failed != 2 || rep.Resent != 0 {
		t.Errorf("report = %+v, want two rows failed and none resent", rep)
	}
	for _, o := range rep.Outcomes {
		if want[o.AuthorizationKey] != o.Reason || o.State != journal.StateFailed {
			t.Errorf("outcome %+v, want failed with %q", o, want[o.AuthorizationKey])
		}
	}
	if n := env.signerNonce(t, signer.Address); n != 1 {
		t.Errorf("signer sent %d transactions, want 1", n)
	}
}

// TestRedisDownFailsClosedEverywhere: with the shared store unreachable, /verify in
// GUARDIAN_MODE required cannot record its approval and refuses, and /settle refuses in
// every mode (off: the settlement claim cannot be taken; optional: neither the approval
// nor the verdict marker can be read), never broadcasting.
func TestRedisDownFailsClosedEverywhere(t *testing.T) {
	env := newTestEnv(t)
	payer, payee := env.chain.Accounts[1], env.chain.Accounts[2]
	signer := env.chain.FacilitatorAccount().Address
	redis := testenv.StartRedisServer(t, testenv.RedisConfig{})
	store, err := approval.NewRedisStore(context.Background(), redis.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	engines := map[VerdictMode]*Service{}
	for _, mode := range []VerdictMode{VerdictOff, VerdictOptional, VerdictRequired} {
		cfg := env.config(t)
		cfg.Store, cfg.VerdictMode, cfg.Verdicts, cfg.SkipStartupReconcile = store, mode, approvedVerdict(), true
		engines[mode] = env.engine(t, cfg)
	}
	redis.Stop()

	for _, version := range []int{x402.Version1, x402.Version2} {
		p, r := env.pay(t, version, payer, payee.Address)
		ver, err := engines[VerdictRequired].Verify(context.Background(), x402.VerifyInput{Payment: p, Requirements: r})
		if err != nil || ver.IsValid || ver.InvalidReason != x402.ReasonApprovalStoreDown.For(version) {
			t.Errorf("v%d required verify = %+v, %v; want %s", version, ver, err, x402.ReasonApprovalStoreDown.For(version))
		}
		for mode, e := range engines {
			res, err := e.Settle(context.Background(), p, r)
			if err != nil || res.Success || res.ErrorReason != x402.ReasonApprovalStoreDown.For(version) || res.Transaction != "" {
				t.Errorf("v%d %s settle = %+v, %v; want %s and no transaction", version, mode, res, err, x402.ReasonApprovalStoreDown.For(version))
			}
		}
		if env.token.AuthorizationState(t, payer.Address, p.Authorization.Nonce) {
			t.Errorf("v%d: authorization used on chain", version)
		}
	}
	if n := env.pendingNonce(t, signer); n != 0 {
		t.Errorf("signer broadcast %d transactions with the store down", n)
	}
}

// TestSettleFinishesWhenTheCallerGoesAway: once the authorization is claimed and
// journaled, a caller that hangs up (its context is cancelled) does not leave the
// settlement half done: it is broadcast, confirmed and journaled as confirmed.
func TestSettleFinishesWhenTheCallerGoesAway(t *testing.T) {
	env := newTestEnv(t)
	cfg := env.config(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg.beforeBroadcast = func(journal.Settlement) error { cancel(); return nil }
	e := env.engine(t, cfg)
	payer, payee := env.chain.Accounts[1], env.chain.Accounts[2]
	p, r := env.pay(t, x402.Version2, payer, payee.Address)
	before := env.token.BalanceOf(t, payee.Address)

	res, err := e.Settle(ctx, p, r)
	if err != nil || !res.Success || res.Transaction == "" {
		t.Fatalf("settle with the caller gone = %+v, %v; want success", res, err)
	}
	if ctx.Err() == nil {
		t.Fatal("the caller's context was not cancelled before the broadcast")
	}
	if d := new(big.Int).Sub(env.token.BalanceOf(t, payee.Address), before); d.Cmp(testAmount) != 0 {
		t.Errorf("payee received %s, want %s", d, testAmount)
	}
	row, err := decidedRow(t, cfg.Journal, x402.KeyOf(p, r).AuthorizationKey())
	if err != nil || row.State != journal.StateConfirmed || row.TxHash.Hex() != res.Transaction {
		t.Errorf("journal row = %+v, %v; want confirmed %s", row, err, res.Transaction)
	}
}
