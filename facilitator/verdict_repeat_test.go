package facilitator

import (
	"context"
	"testing"

	"github.com/x402gate/x402gate/verdict"
	"github.com/x402gate/x402gate/x402"
)

// TestRepeatedVerifyDoesNotSubmitAgain: in guardian_mode required, the terminal verdict
// of an exact payment is remembered until its authorization expires, so the same
// /verify sent again (a header that keeps being refused) is answered without a second
// submission; an approved payment keeps its approval.
func TestRepeatedVerifyDoesNotSubmitAgain(t *testing.T) {
	env := newTestEnv(t)
	payer, payee := env.chain.Accounts[1], env.chain.Accounts[2]
	for _, tc := range []struct {
		name     string
		verdicts *fakeVerdicts
		valid    bool
	}{
		{"rejected", &fakeVerdicts{res: verdict.GuardianResult{Status: verdict.GuardianRejected, Reason: "recipient_not_allowed"}}, false},
		{"approved", approvedVerdict(), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := env.config(t)
			cfg.GuardianMode, cfg.Verdicts = GuardianRequired, tc.verdicts
			e := env.engine(t, cfg)
			p, r := env.pay(t, x402.Version2, payer, payee.Address)
			for i := range 5 {
				ver, err := e.Verify(context.Background(), x402.VerifyInput{Payment: p, Requirements: r})
				if err != nil || ver.IsValid != tc.valid {
					t.Fatalf("verify %d = %+v, %v; want valid %v", i+1, ver, err, tc.valid)
				}
			}
			if n := tc.verdicts.calls.Load(); n != 1 {
				t.Errorf("the verdict service was asked %d times for one payment, want 1", n)
			}
			if res, err := e.Settle(context.Background(), p, r); err != nil || res.Success != tc.valid {
				t.Errorf("settle = %+v, %v; want success %v", res, err, tc.valid)
			}
		})
	}
}

// TestVerdictRequestsAreRateLimitedPerPayer: each payer may submit VerdictBurst verdict
// requests at once and VerdictRate per second after; past that a /verify is refused
// without a submission. Another payer has its own budget.
func TestVerdictRequestsAreRateLimitedPerPayer(t *testing.T) {
	env := newTestEnv(t)
	rejecting := &fakeVerdicts{res: verdict.GuardianResult{Status: verdict.GuardianRejected}}
	cfg := env.config(t)
	cfg.GuardianMode, cfg.Verdicts, cfg.VerdictRate, cfg.VerdictBurst = GuardianRequired, rejecting, 0.001, 3
	e := env.engine(t, cfg)
	payee := env.chain.Accounts[2]
	verify := func(who int) x402.VerifyResponse {
		t.Helper()
		p, r := env.pay(t, x402.Version2, env.chain.Accounts[who], payee.Address)
		ver, err := e.Verify(context.Background(), x402.VerifyInput{Payment: p, Requirements: r})
		if err != nil {
			t.Fatal(err)
		}
		return ver
	}
	for range 3 {
		if ver := verify(1); ver.GuardianStatus != string(verdict.GuardianRejected) {
			t.Fatalf("within the burst: %+v, want the verdict asked", ver)
		}
	}
	if ver := verify(1); ver.IsValid || ver.GuardianStatus != string(verdict.GuardianError) {
		t.Errorf("past the burst: %+v, want a refusal without a submission", ver)
	}
	if n := rejecting.calls.Load(); n != 3 {
		t.Errorf("verdict service asked %d times, want 3", n)
	}
	if ver := verify(3); ver.GuardianStatus != string(verdict.GuardianRejected) {
		t.Errorf("another payer: %+v, want its verdict asked", ver)
	}
}
