package facilitator

import (
	"context"
	"math/big"
	"testing"
	"time"

	"github.com/x402gate/x402gate/x402"
)

// TestVerdictMarkerStopsARacingVerdictRequest: in optional mode a settle without an
// approval claims the payment's verdict marker before it broadcasts. A /verify of the same
// payment that asks for a verdict meanwhile (the marker is already claimed) must not ask
// the verdict service nor settle a fee for a payment that is being settled without one:
// it is refused, and nothing moves.
func TestVerdictMarkerStopsARacingVerdictRequest(t *testing.T) {
	verdicts := approvedVerdict()
	env, e, fee := optionalEnv(t, verdicts)
	payer, payee, feePayee := env.chain.Accounts[1], env.chain.Accounts[2], env.chain.Accounts[7]
	p, r := env.pay(t, x402.Version2, payer, payee.Address)
	// The state a racing settle leaves between claiming the marker and broadcasting.
	if err := e.cfg.Store.Claim(context.Background(), markerKey(x402.KeyOf(p, r)), time.Minute); err != nil {
		t.Fatal(err)
	}
	before := env.token.BalanceOf(t, feePayee.Address)
	ver, err := e.Verify(context.Background(), x402.VerifyInput{Payment: p, Requirements: r,
		VerificationRequirements: fee, VerificationPayment: env.feePayment(t, payer, fee)})
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	if ver.IsValid || ver.FeeTxHash != "" {
		t.Errorf("verify = %+v; want a refusal without a fee", ver)
	}
	if n := verdicts.calls.Load(); n != 0 {
		t.Errorf("the verdict service was asked %d times for a payment already being settled without a verdict", n)
	}
	if d := new(big.Int).Sub(env.token.BalanceOf(t, feePayee.Address), before); d.Sign() != 0 {
		t.Errorf("a fee of %s was settled", d)
	}
}
