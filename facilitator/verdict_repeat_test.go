package facilitator

import (
	"context"
	"math/big"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/x402gate/x402gate/facilitator/approval"
	"github.com/x402gate/x402gate/internal/testenv"
	"github.com/x402gate/x402gate/verdict"
	"github.com/x402gate/x402gate/verdictclient"
	"github.com/x402gate/x402gate/x402"
)

// TestRepeatedVerifyAsksAgain: in guardian_mode required, the same /verify sent again is
// asked of the verdict service again (docs/facilitator.md#fresh-verdicts), whatever the
// first verdict was; an approved payment keeps its approval, once.
func TestRepeatedVerifyAsksAgain(t *testing.T) {
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
			cfg.VerdictMode, cfg.Verdicts = VerdictRequired, tc.verdicts
			e := env.engine(t, cfg)
			p, r := env.pay(t, x402.Version2, payer, payee.Address)
			for i := range 3 {
				ver, err := e.Verify(context.Background(), x402.VerifyInput{Payment: p, Requirements: r})
				if err != nil || ver.IsValid != tc.valid {
					t.Fatalf("verify %d = %+v, %v; want valid %v", i+1, ver, err, tc.valid)
				}
			}
			if n := tc.verdicts.calls.Load(); n != 3 {
				t.Errorf("the verdict service was asked %d times for three /verify, want 3", n)
			}
			if res, err := e.Settle(context.Background(), p, r); err != nil || res.Success != tc.valid {
				t.Errorf("settle = %+v, %v; want success %v", res, err, tc.valid)
			}
		})
	}
}

// policyService is a scripted verdict service whose agent policy can change: its
// approval-status answers the verdict of the current policy.
func policyService(t *testing.T, env *testEnv) (*verdictService, *atomic.Pointer[string], *VerdictClient) {
	t.Helper()
	var current atomic.Pointer[string]
	svc := newVerdictService(t, func() (int, string) { return http.StatusOK, *current.Load() })
	reg := &x402.Registry{}
	if err := reg.Add(env.net); err != nil {
		t.Fatal(err)
	}
	vc, err := NewVerdictClient(VerdictClientConfig{BaseURL: svc.srv.URL, APIKey: vcTestKey, Assets: reg,
		Poll: verdictclient.PollOptions{IntervalMs: 1, MaxAttempts: 3}})
	if err != nil {
		t.Fatal(err)
	}
	return svc, &current, vc
}

// policyVerdict is the approval-status answer of a verdict judged under policy version.
func policyVerdict(outcome, code string, version int) *string {
	v := testenv.Verdict(outcome, code, "judged under policy "+strconv.Itoa(version))
	v["policyVersion"] = version
	body := testenv.VerdictEnvelope(v)
	return &body
}

// TestPolicyChangeBetweenVerifiesIsSeen: issue 20 "Why" 4. The agent's policy changes
// between two /verify of the same payment; the second gets the new policy's verdict from
// the verdict service, and an approval that the first recorded is withdrawn when the new
// verdict is a rejection, so the settle moves nothing.
func TestPolicyChangeBetweenVerifiesIsSeen(t *testing.T) {
	env := newTestEnv(t)
	payer, payee := env.chain.Accounts[1], env.chain.Accounts[2]
	allowed, refused := policyVerdict("approved", "allowed", 1), policyVerdict("rejected", "recipient_not_allowed", 2)
	for _, tc := range []struct {
		name          string
		first, second *string
		wantValid     bool
	}{
		{"approved, then rejected under a stricter policy", allowed, refused, false},
		{"rejected, then approved under a looser policy", refused, allowed, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			svc, current, vc := policyService(t, env)
			cfg := env.config(t)
			cfg.VerdictMode, cfg.Verdicts = VerdictRequired, vc
			e := env.engine(t, cfg)
			p, r := env.pay(t, x402.Version2, payer, payee.Address)
			current.Store(tc.first)
			if ver, err := e.Verify(context.Background(), x402.VerifyInput{Payment: p, Requirements: r}); err != nil || ver.IsValid == tc.wantValid {
				t.Fatalf("first verify = %+v, %v", ver, err)
			}
			current.Store(tc.second)
			ver, err := e.Verify(context.Background(), x402.VerifyInput{Payment: p, Requirements: r})
			if err != nil || ver.IsValid != tc.wantValid {
				t.Fatalf("verify after the policy change = %+v, %v; want valid %v (the new policy's verdict)", ver, err, tc.wantValid)
			}
			if posts, _ := svc.counts(); posts != 2 {
				t.Errorf("the verdict service got %d submits for two /verify, want 2", posts)
			}
			res, err := e.Settle(context.Background(), p, r)
			if err != nil || res.Success != tc.wantValid {
				t.Errorf("settle = %+v, %v; want success %v", res, err, tc.wantValid)
			}
		})
	}
}

// TestConsumedApprovalIsNotRecreated: issue 20 "Why" 4. A settle that consumed the
// approval and then failed (the payer's funds fell short) leaves nothing to re-create it
// from: the next /verify of the same payment asks the verdict service again, on the
// memory store and on Redis.
func TestConsumedApprovalIsNotRecreated(t *testing.T) {
	env := newTestEnv(t)
	redisURL := testenv.StartRedis(t)
	for _, store := range []string{"memory", "redis"} {
		t.Run(store, func(t *testing.T) {
			cfg := env.config(t)
			if store == "redis" {
				rs, err := approval.NewRedisStore(context.Background(), redisURL, approval.WithKeyPrefix(t.Name()+":"))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = rs.Close() })
				cfg.Store = rs
			}
			verifySettleFailVerify(t, env, cfg)
		})
	}
}

// verifySettleFailVerify runs TestConsumedApprovalIsNotRecreated on cfg's store.
func verifySettleFailVerify(t *testing.T, env *testEnv, cfg Config) {
	payer, payee, other := testenv.NewAccount(t), env.chain.Accounts[2], env.chain.Accounts[3]
	env.token.Mint(t, payer.Address, testAmount)
	svc, current, vc := policyService(t, env)
	current.Store(policyVerdict("approved", "allowed", 1))
	cfg.VerdictMode, cfg.Verdicts = VerdictRequired, vc
	e := env.engine(t, cfg)
	p, r := env.pay(t, x402.Version2, payer, payee.Address)
	verify := func(when string) {
		t.Helper()
		if ver, err := e.Verify(context.Background(), x402.VerifyInput{Payment: p, Requirements: r}); err != nil || !ver.IsValid {
			t.Fatalf("verify %s = %+v, %v", when, ver, err)
		}
	}
	verify("first")
	// The payer moves its funds away between verify and settle (a transfer it signed,
	// sent by account 9): the settle consumes the approval, then fails.
	away := env.token.NewAuthorization(t, payer.Address, other.Address, testAmount)
	env.chain.Transact(t, env.chain.Accounts[9], env.token.Address,
		testenv.TransferWithAuthorizationVRS(t, away, env.token.SignAuthorization(t, payer.Key, away)))
	if res, err := e.Settle(context.Background(), p, r); err != nil || res.Success || res.ErrorReason != x402.ReasonInsufficientFunds.V2() {
		t.Fatalf("settle without funds = %+v, %v; want %s", res, err, x402.ReasonInsufficientFunds)
	}
	env.token.Mint(t, payer.Address, testAmount)
	verify("after the failed settle")
	if posts, gets := svc.counts(); posts != 2 || gets < 2 {
		t.Fatalf("the verdict service got %d submits and %d status reads, want 2 submits: the consumed approval was re-created from memory", posts, gets)
	}
	if res, err := e.Settle(context.Background(), p, r); err != nil || !res.Success {
		t.Fatalf("settle under the fresh approval = %+v, %v", res, err)
	}
}

// TestOptionalRepeatedVerifyPaysOneFee: in guardian_mode optional a repeated /verify of a
// payment is asked again, without a second fee and without the marker its first ask claimed
// refusing it.
func TestOptionalRepeatedVerifyPaysOneFee(t *testing.T) {
	verdicts := approvedVerdict()
	env, e, fee := optionalEnv(t, verdicts)
	payer, payee, feePayee := env.chain.Accounts[1], env.chain.Accounts[2], env.chain.Accounts[7]
	p, r := env.pay(t, x402.Version2, payer, payee.Address)
	in := x402.VerifyInput{Payment: p, Requirements: r, VerificationRequirements: fee, VerificationPayment: env.feePayment(t, payer, fee)}
	feeBefore := env.token.BalanceOf(t, feePayee.Address)
	for i, wantFee := range []bool{true, false} {
		ver, err := e.Verify(context.Background(), in)
		if err != nil || !ver.IsValid || (ver.FeeTxHash != "") != wantFee {
			t.Fatalf("verify %d = %+v, %v; want valid, fee paid %v", i+1, ver, err, wantFee)
		}
	}
	if n := verdicts.calls.Load(); n != 2 {
		t.Errorf("the verdict service was asked %d times for two /verify, want 2", n)
	}
	if paid := new(big.Int).Sub(env.token.BalanceOf(t, feePayee.Address), feeBefore); paid.Int64() != 1_000 {
		t.Errorf("fee payee received %s, want one fee of 1000", paid)
	}
	if res, err := e.Settle(context.Background(), p, r); err != nil || !res.Success {
		t.Errorf("settle = %+v, %v", res, err)
	}
}
