package facilitator

import (
	"context"
	"errors"
	"math/big"
	"testing"

	"github.com/ethereum/go-ethereum/common"

	"github.com/x402gate/x402gate/facilitator/approval"
	"github.com/x402gate/x402gate/facilitator/journal"
	"github.com/x402gate/x402gate/internal/testenv"
	"github.com/x402gate/x402gate/verdict"
	"github.com/x402gate/x402gate/x402"
)

// hookVerdicts answers like fakeVerdicts but first runs hook: the fault a real verdict
// service cannot produce on demand (something happening on chain while it decides).
type hookVerdicts struct {
	fakeVerdicts
	hook func()
}

func (h *hookVerdicts) VerifyPayment(ctx context.Context, p *x402.Payment, r *x402.Requirements) (verdict.GuardianResult, error) {
	h.hook()
	return h.fakeVerdicts.VerifyPayment(ctx, p, r)
}

// balances reads the token balance of each address.
func (v *testEnv) balances(t *testing.T, addrs ...common.Address) []*big.Int {
	t.Helper()
	out := make([]*big.Int, len(addrs))
	for i, a := range addrs {
		out[i] = v.token.BalanceOf(t, a)
	}
	return out
}

// TestVerifySettlesTheFeeNeverTheMerchantPayment: docs/facilitator.md#verify. With
// verificationRequirements and a terminal verdict, /verify settles the quoted fee (the
// fee moves, feeTxHash names its mined transaction) and never the merchant payment (the
// merchant's payee receives nothing and the merchant authorization stays unused until
// /settle), in both GUARDIAN_MODEs that ask for a verdict and both x402 versions.
func TestVerifySettlesTheFeeNeverTheMerchantPayment(t *testing.T) {
	for _, mode := range []VerdictMode{VerdictOptional, VerdictRequired} {
		for _, version := range []int{x402.Version1, x402.Version2} {
			for _, outcome := range []verdict.GuardianStatus{verdict.GuardianApproved, verdict.GuardianRejected} {
				t.Run(string(mode)+"/v"+big.NewInt(int64(version)).String()+"/"+string(outcome), func(t *testing.T) {
					env := newTestEnv(t)
					cfg := env.config(t)
					verdicts := approvedVerdict()
					if outcome == verdict.GuardianRejected {
						verdicts = &fakeVerdicts{res: verdict.GuardianResult{Status: verdict.GuardianRejected, Reason: "policy_denied"}}
					}
					cfg.VerdictMode, cfg.Verdicts = mode, verdicts
					e := env.engine(t, cfg)
					payer, payee, feePayee := env.chain.Accounts[1], env.chain.Accounts[2], env.chain.Accounts[7]
					fee := env.requirements(feePayee.Address, big.NewInt(1_000))
					p, r := env.pay(t, version, payer, payee.Address)
					feePay := env.feePayment(t, payer, fee)
					before := env.balances(t, payer.Address, payee.Address, feePayee.Address)

					ver, err := e.Verify(context.Background(), x402.VerifyInput{Payment: p, Requirements: r,
						VerificationRequirements: fee, VerificationPayment: feePay})
					if err != nil {
						t.Fatalf("Verify: %v", err)
					}
					if ver.GuardianStatus != string(outcome) || ver.FeeError != "" || ver.FeeTxHash == "" {
						t.Fatalf("verify = %+v, want guardianStatus %s and a feeTxHash", ver, outcome)
					}
					if wantValid := outcome == verdict.GuardianApproved; ver.IsValid != wantValid {
						t.Fatalf("verify = %+v, want isValid %v", ver, wantValid)
					}
					if !ver.IsValid && ver.InvalidReason != x402.ReasonVerdictNotApproved.For(version) {
						t.Errorf("invalidReason = %q, want %q", ver.InvalidReason, x402.ReasonVerdictNotApproved.For(version))
					}
					// feeTxHash is the mined fee transfer.
					rcpt, err := env.chain.Client.TransactionReceipt(context.Background(), common.HexToHash(ver.FeeTxHash))
					if err != nil || rcpt.Status != 1 {
						t.Fatalf("receipt of feeTxHash %s: %+v, %v", ver.FeeTxHash, rcpt, err)
					}
					after := env.balances(t, payer.Address, payee.Address, feePayee.Address)
					if d := new(big.Int).Sub(before[0], after[0]); d.Int64() != 1_000 {
						t.Errorf("payer paid %s at verify, want only the fee 1000", d)
					}
					if after[1].Cmp(before[1]) != 0 {
						t.Errorf("merchant payee balance moved at verify: %s -> %s", before[1], after[1])
					}
					if d := new(big.Int).Sub(after[2], before[2]); d.Int64() != 1_000 {
						t.Errorf("fee payee received %s, want 1000", d)
					}
					if env.token.AuthorizationState(t, payer.Address, p.Authorization.Nonce) {
						t.Error("/verify used the merchant authorization on chain")
					}
					if !env.token.AuthorizationState(t, payer.Address, feePay.Authorization.Nonce) {
						t.Error("the fee authorization is not used on chain")
					}
					// The fee went through the journal like any settlement.
					row, err := decidedRow(t, cfg.Journal, x402.KeyOf(feePay, fee).AuthorizationKey())
					if err != nil || row.State != journal.StateConfirmed || row.TxHash.Hex() != ver.FeeTxHash {
						t.Errorf("fee journal row = %+v, %v", row, err)
					}
					if _, err := cfg.Journal.Get(context.Background(), x402.KeyOf(p, r).AuthorizationKey()); !errors.Is(err, journal.ErrNotFound) {
						t.Errorf("merchant payment journaled at verify: %v", err)
					}

					// Only /settle moves the merchant payment, and only when approved.
					res, err := e.Settle(context.Background(), p, r)
					if err != nil {
						t.Fatalf("Settle: %v", err)
					}
					if outcome == verdict.GuardianApproved {
						if !res.Success || res.Transaction == ver.FeeTxHash {
							t.Fatalf("settle = %+v", res)
						}
						if d := new(big.Int).Sub(env.token.BalanceOf(t, payee.Address), after[1]); d.Cmp(testAmount) != 0 {
							t.Errorf("merchant payee received %s at settle, want %s", d, testAmount)
						}
					} else if res.Success || res.ErrorReason != x402.ReasonApprovalNotFound.For(version) {
						t.Errorf("settle after a rejected verdict = %+v, want %s", res, x402.ReasonApprovalNotFound.For(version))
					}
				})
			}
		}
	}
}

// TestVerifyBadFeePaymentGivesFeeError: a fee payment that is missing or cannot be paid
// gives isValid false with feeError (the fee's reason as a v2 string), asks no verdict,
// records no approval and moves nothing; a fee that fails at settlement after the verdict
// gives feeError too and no approval.
func TestVerifyBadFeePaymentGivesFeeError(t *testing.T) {
	env := newTestEnv(t)
	payer, payee, feePayee, other := env.chain.Accounts[1], env.chain.Accounts[2], env.chain.Accounts[7], env.chain.Accounts[3]
	fee := env.requirements(feePayee.Address, big.NewInt(1_000))
	broke := testenv.NewAccount(t) // holds no token

	cases := []struct {
		name string
		// feePay builds the fee payment for the merchant payment p; nil omits it.
		feePay     func(t *testing.T, p *x402.Payment) *x402.Payment
		feeReqs    func() *x402.Requirements
		wantFeeErr string
	}{
		{name: "missing fee payment", wantFeeErr: FeePaymentMissing},
		{name: "fee signed by another key", wantFeeErr: x402.ReasonInvalidSignature.V2(),
			feePay: func(t *testing.T, _ *x402.Payment) *x402.Payment {
				a := env.authorization(t, payer.Address, feePayee.Address, fee.Amount)
				return env.payment(x402.Version2, a, env.sign(t, other.Key, a), fee)
			}},
		{name: "fee payer cannot pay", wantFeeErr: x402.ReasonInsufficientFunds.V2(),
			feePay: func(t *testing.T, _ *x402.Payment) *x402.Payment { return env.feePayment(t, broke, fee) }},
		{name: "fee pays less than quoted", wantFeeErr: x402.ReasonValueMismatch.V2(),
			feePay: func(t *testing.T, _ *x402.Payment) *x402.Payment {
				a := env.authorization(t, payer.Address, feePayee.Address, big.NewInt(999))
				return env.payment(x402.Version2, a, env.sign(t, payer.Key, a), fee)
			}},
		{name: "fee pays someone else", wantFeeErr: x402.ReasonRecipientMismatch.V2(),
			feePay: func(t *testing.T, _ *x402.Payment) *x402.Payment {
				a := env.authorization(t, payer.Address, other.Address, fee.Amount)
				return env.payment(x402.Version2, a, env.sign(t, payer.Key, a), fee)
			}},
		{name: "a fee in another asset than quoted", wantFeeErr: FeeNotQuoted,
			feeReqs: func() *x402.Requirements {
				q := env.requirements(feePayee.Address, big.NewInt(1_000))
				q.Asset = x402.BaseSepolia.USDC.Address
				return q
			},
			feePay: func(t *testing.T, _ *x402.Payment) *x402.Payment { return env.feePayment(t, payer, fee) }},
		{name: "fee reuses the merchant authorization", wantFeeErr: x402.ReasonDuplicateSettlement.V2(),
			feePay: func(t *testing.T, p *x402.Payment) *x402.Payment {
				// Same authorization (payer, nonce) as the merchant payment, presented as the fee:
				// settling it as the fee would burn the merchant payment's nonce.
				a := p.Authorization
				a.To, a.Value = feePayee.Address, new(big.Int).Set(fee.Amount)
				return env.payment(x402.Version2, a, env.sign(t, payer.Key, a), fee)
			}},
	}
	for _, mode := range []VerdictMode{VerdictOptional, VerdictRequired} {
		for _, tc := range cases {
			for _, version := range []int{x402.Version1, x402.Version2} {
				t.Run(string(mode)+"/"+tc.name+"/v"+big.NewInt(int64(version)).String(), func(t *testing.T) {
					cfg := env.config(t)
					verdicts := approvedVerdict()
					cfg.VerdictMode, cfg.Verdicts, cfg.SkipStartupReconcile = mode, verdicts, true
					e := env.engine(t, cfg)
					p, r := env.pay(t, version, payer, payee.Address)
					in := x402.VerifyInput{Payment: p, Requirements: r, VerificationRequirements: fee}
					if tc.feeReqs != nil {
						in.VerificationRequirements = tc.feeReqs()
					}
					if tc.feePay != nil {
						in.VerificationPayment = tc.feePay(t, p)
					}
					before := env.balances(t, payer.Address, payee.Address, feePayee.Address, broke.Address)
					ver, err := e.Verify(context.Background(), in)
					if err != nil {
						t.Fatalf("Verify: %v", err)
					}
					if ver.IsValid || ver.FeeError != tc.wantFeeErr || ver.FeeTxHash != "" ||
						ver.InvalidReason != x402.ReasonInvalidPayload.For(version) {
						t.Fatalf("verify = %+v, want invalid (%s) with feeError %q and no feeTxHash",
							ver, x402.ReasonInvalidPayload.For(version), tc.wantFeeErr)
					}
					if n := verdicts.calls.Load(); n != 0 {
						t.Errorf("verdict service asked %d times for a payment whose fee cannot be paid", n)
					}
					for i, b := range env.balances(t, payer.Address, payee.Address, feePayee.Address, broke.Address) {
						if b.Cmp(before[i]) != 0 {
							t.Errorf("balance %d moved: %s -> %s", i, before[i], b)
						}
					}
					if _, err := cfg.Store.Consume(context.Background(), x402.KeyOf(p, r)); !errors.Is(err, approval.ErrNotFound) {
						t.Errorf("an approval was recorded: %v", err)
					}
				})
			}
		}
	}

	t.Run("fee fails at settlement after the verdict", func(t *testing.T) {
		cfg := env.config(t)
		var feePay *x402.Payment
		// While the verdict service decides, the payer cancels the fee authorization on chain
		// (sent by account 9, not the facilitator).
		verdicts := &hookVerdicts{fakeVerdicts: *approvedVerdict(), hook: func() {
			sig := env.token.SignCancelAuthorization(t, payer.Key, payer.Address, feePay.Authorization.Nonce)
			env.chain.Transact(t, env.chain.Accounts[9], env.token.Address,
				testenv.CancelAuthorizationVRS(t, payer.Address, feePay.Authorization.Nonce, sig))
		}}
		cfg.VerdictMode, cfg.Verdicts, cfg.SkipStartupReconcile = VerdictRequired, verdicts, true
		e := env.engine(t, cfg)
		p, r := env.pay(t, x402.Version2, payer, payee.Address)
		feePay = env.feePayment(t, payer, fee)
		before := env.balances(t, payer.Address, feePayee.Address)
		ver, err := e.Verify(context.Background(), x402.VerifyInput{Payment: p, Requirements: r,
			VerificationRequirements: fee, VerificationPayment: feePay})
		if err != nil {
			t.Fatalf("Verify: %v", err)
		}
		if ver.IsValid || ver.GuardianStatus != string(verdict.GuardianApproved) || ver.FeeError != x402.ReasonNonceUsed.V2() ||
			ver.InvalidReason != x402.ReasonInvalidPayload.V2() {
			t.Fatalf("verify = %+v, want invalid, approved verdict, feeError %s", ver, x402.ReasonNonceUsed)
		}
		if n := verdicts.calls.Load(); n != 1 {
			t.Errorf("verdict service asked %d times, want 1", n)
		}
		for i, b := range env.balances(t, payer.Address, feePayee.Address) {
			if b.Cmp(before[i]) != 0 {
				t.Errorf("balance %d moved: %s -> %s", i, before[i], b)
			}
		}
		// No approval: the merchant payment cannot settle.
		res, err := e.Settle(context.Background(), p, r)
		if err != nil || res.Success || res.ErrorReason != x402.ReasonApprovalNotFound.V2() {
			t.Errorf("settle = %+v, %v; want %s", res, err, x402.ReasonApprovalNotFound)
		}
	})
}
