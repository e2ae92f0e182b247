package facilitator

import (
	"context"
	"math/big"
	"testing"
	"time"

	"github.com/x402gate/x402gate/facilitator/approval"
	"github.com/x402gate/x402gate/x402"
)

// cancelOnClaim cancels the /verify caller's context right after the fee authorization is
// claimed: the caller's deadline passes while the fee settlement waits for its receipt.
type cancelOnClaim struct {
	approval.Store
	cancel func()
}

func (s cancelOnClaim) Claim(ctx context.Context, k x402.PaymentKey, ttl time.Duration) error {
	err := s.Store.Claim(ctx, k, ttl)
	if pk := k; err == nil && pk.Amount != nil && pk.Amount.Cmp(big.NewInt(1_000)) == 0 { // the fee's claim, not the merchant payment's
		s.cancel()
	}
	return err
}

// TestFeePaidAfterTheCallerLeftStillBuysTheApproval: a verification fee settled on its
// detached context must record the approval it paid for even when the caller's context
// ended meanwhile; otherwise the payer loses the fee and cannot settle.
func TestFeePaidAfterTheCallerLeftStillBuysTheApproval(t *testing.T) {
	env := newTestEnv(t)
	cfg := env.config(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg.Store = cancelOnClaim{Store: cfg.Store, cancel: cancel}
	cfg.VerdictMode, cfg.Verdicts = VerdictRequired, approvedVerdict()
	e := env.engine(t, cfg)
	payer, payee, feePayee := env.chain.Accounts[1], env.chain.Accounts[2], env.chain.Accounts[7]
	fee := env.requirements(feePayee.Address, big.NewInt(1_000))
	p, r := env.pay(t, x402.Version2, payer, payee.Address)
	feeBefore, payeeBefore := env.token.BalanceOf(t, feePayee.Address), env.token.BalanceOf(t, payee.Address)

	ver, err := e.Verify(ctx, x402.VerifyInput{Payment: p, Requirements: r, VerificationRequirements: fee, VerificationPayment: env.feePayment(t, payer, fee)})
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	if ctx.Err() == nil {
		t.Fatal("the caller's context was never cancelled: the test did not reach the fee claim")
	}
	if got := new(big.Int).Sub(env.token.BalanceOf(t, feePayee.Address), feeBefore); got.Cmp(big.NewInt(1_000)) != 0 {
		t.Fatalf("fee payee received %s, want the fee of 1000", got)
	}
	if !ver.IsValid || ver.FeeTxHash == "" {
		t.Fatalf("verify = valid %v reason %q feeTx %q feeErr %q: the paid fee bought no approval", ver.IsValid, ver.InvalidReason, ver.FeeTxHash, ver.FeeError)
	}
	res, err := e.Settle(context.Background(), p, r)
	if err != nil || !res.Success {
		t.Fatalf("settle = %+v, %v; want the approved payment settled", res, err)
	}
	if got := new(big.Int).Sub(env.token.BalanceOf(t, payee.Address), payeeBefore); got.Cmp(r.Amount) != 0 {
		t.Fatalf("payee received %s, want %s", got, r.Amount)
	}
}
