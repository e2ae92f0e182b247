package facilitator

import (
	"context"
	"math/big"
	"testing"

	"github.com/x402gate/x402gate/verdict"
	"github.com/x402gate/x402gate/x402"
)

// TestVerdictMarkersAreBoundedPerPayer: in optional mode each /verify that asks for a
// verdict leaves a marker that outlives a rejection, so one payer's markers that no
// settlement used are bounded (MaxMarkersPerPayer): past the bound a /verify is refused
// without asking the verdict service, so an open /verify cannot fill the claim table that
// real settles need. Another payer is unaffected.
func TestVerdictMarkersAreBoundedPerPayer(t *testing.T) {
	env := newTestEnv(t)
	rejecting := &fakeVerdicts{res: verdict.GuardianResult{Status: verdict.GuardianRejected}}
	cfg := env.config(t)
	cfg.VerdictMode, cfg.Verdicts, cfg.MaxMarkersPerPayer = VerdictOptional, rejecting, 2
	e := env.engine(t, cfg)
	fee := env.requirements(env.chain.Accounts[7].Address, big.NewInt(1_000))
	payee := env.chain.Accounts[2]
	ask := func(who int) x402.VerifyResponse {
		t.Helper()
		p, r := env.pay(t, x402.Version2, env.chain.Accounts[who], payee.Address)
		ver, err := e.Verify(context.Background(), x402.VerifyInput{Payment: p, Requirements: r,
			VerificationRequirements: fee, VerificationPayment: env.feePayment(t, env.chain.Accounts[who], fee)})
		if err != nil {
			t.Fatalf("Verify: %v", err)
		}
		return ver
	}
	for i := range 2 {
		if ver := ask(1); ver.IsValid || ver.GuardianStatus != string(verdict.GuardianRejected) {
			t.Fatalf("verify %d = %+v; want the rejected verdict", i+1, ver)
		}
	}
	if n := rejecting.calls.Load(); n != 2 {
		t.Fatalf("verdict service asked %d times, want 2", n)
	}
	if ver := ask(1); ver.IsValid || ver.GuardianStatus != string(verdict.GuardianError) {
		t.Errorf("a third outstanding payment of the payer: %+v; want a refusal", ver)
	}
	if n := rejecting.calls.Load(); n != 2 {
		t.Errorf("the verdict service was asked past the payer's bound (%d calls)", n)
	}
	if ver := ask(3); ver.GuardianStatus != string(verdict.GuardianRejected) {
		t.Errorf("another payer: %+v; want its verdict asked", ver)
	}
}
