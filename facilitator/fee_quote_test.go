package facilitator

import (
	"context"
	"math/big"
	"testing"

	"github.com/x402gate/x402gate/x402"
)

// TestVerifySettlesOnlyTheQuotedFee: /verify settles a verification fee only when the
// caller's verificationRequirements equal, exactly, what the facilitator's own pricing
// service quotes for the merchant requirement, and never a fee that is the merchant
// payment or pays the merchant. A forged "fee" is refused with its reason and nothing
// moves; without a pricing service no fee is ever settled; the quoted fee still settles.
func TestVerifySettlesOnlyTheQuotedFee(t *testing.T) {
	env := newTestEnv(t)
	payer, payee, feePayee := env.chain.Accounts[1], env.chain.Accounts[2], env.chain.Accounts[7]
	quoted := env.requirements(feePayee.Address, big.NewInt(1_000))
	for _, tc := range []struct {
		name       string
		noPricing  bool
		fee        func(merchant *x402.Requirements) *x402.Requirements
		wantFeeErr string
	}{
		{"the merchant payment sent as the fee", false, func(m *x402.Requirements) *x402.Requirements { return m }, FeeNotQuoted},
		{"a fee to the merchant's payee", false, func(*x402.Requirements) *x402.Requirements {
			return env.requirements(payee.Address, big.NewInt(1_000))
		}, FeeNotQuoted},
		{"a larger fee than quoted", false, func(*x402.Requirements) *x402.Requirements {
			return env.requirements(feePayee.Address, big.NewInt(1_001))
		}, FeeNotQuoted},
		{"a fee to another payee", false, func(*x402.Requirements) *x402.Requirements {
			return env.requirements(env.chain.Accounts[8].Address, big.NewInt(1_000))
		}, FeeNotQuoted},
		{"no pricing service", true, func(*x402.Requirements) *x402.Requirements { return quoted }, FeeNotQuoted},
		{"the quoted fee", false, func(*x402.Requirements) *x402.Requirements { return quoted }, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := env.config(t)
			cfg.VerdictMode, cfg.Verdicts = VerdictOptional, approvedVerdict()
			if tc.noPricing {
				cfg.Pricing = nil
			}
			e := env.engine(t, cfg)
			p, r := env.pay(t, x402.Version2, payer, payee.Address)
			fee := tc.fee(r)
			feePay := env.feePayment(t, payer, fee)
			before := env.balances(t, payer.Address, payee.Address, feePayee.Address, env.chain.Accounts[8].Address)
			ver, err := e.Verify(context.Background(), x402.VerifyInput{Payment: p, Requirements: r,
				VerificationRequirements: fee, VerificationPayment: feePay})
			if err != nil {
				t.Fatalf("Verify: %v", err)
			}
			after := env.balances(t, payer.Address, payee.Address, feePayee.Address, env.chain.Accounts[8].Address)
			if tc.wantFeeErr != "" {
				if ver.IsValid || ver.FeeError != tc.wantFeeErr || ver.FeeTxHash != "" {
					t.Fatalf("verify = %+v; want invalid with feeError %s and no fee transaction", ver, tc.wantFeeErr)
				}
				for i := range before {
					if before[i].Cmp(after[i]) != 0 {
						t.Fatalf("balance %d moved %s -> %s on a refused fee", i, before[i], after[i])
					}
				}
				return
			}
			if !ver.IsValid || ver.FeeError != "" || ver.FeeTxHash == "" {
				t.Fatalf("verify = %+v; want valid with the quoted fee settled", ver)
			}
			if d := new(big.Int).Sub(after[2], before[2]); d.Int64() != 1_000 {
				t.Errorf("fee payee received %s, want 1000", d)
			}
			if after[1].Cmp(before[1]) != 0 {
				t.Errorf("the merchant was paid at /verify")
			}
		})
	}
}
