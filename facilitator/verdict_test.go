package facilitator

import (
	"context"
	"errors"
	"math/big"
	"testing"
	"time"

	"github.com/x402gate/x402gate/facilitator/approval"
	"github.com/x402gate/x402gate/internal/testenv"
	"github.com/x402gate/x402gate/verdict"
	"github.com/x402gate/x402gate/x402"
)

func TestGuardianOffNeverAsksForAVerdict(t *testing.T) {
	env := newTestEnv(t)
	cfg := env.config(t)
	verdicts := approvedVerdict()
	cfg.Verdicts = verdicts // configured, but GUARDIAN_MODE is off
	e := env.engine(t, cfg)
	p, r := env.pay(t, x402.Version2, env.chain.Accounts[1], env.chain.Accounts[2].Address)
	fee := env.requirements(env.chain.Accounts[7].Address, big.NewInt(1_000))

	ver, err := e.Verify(context.Background(), x402.VerifyInput{Payment: p, Requirements: r, VerificationRequirements: fee})
	if err != nil || !ver.IsValid || ver.GuardianStatus != "" || ver.FeeTxHash != "" {
		t.Fatalf("verify = %+v, %v; want valid without verdict or fee", ver, err)
	}
	if res, err := e.Settle(context.Background(), p, r); err != nil || !res.Success {
		t.Fatalf("settle = %+v, %v", res, err)
	}
	if n := verdicts.calls.Load(); n != 0 {
		t.Errorf("verdict service called %d times", n)
	}
}

// TestGuardianRequiredSettlesOnlyApprovedPayments: docs/verdict.md#fail-closed (only an approved
// verdict executes; everything else fails closed).
func TestGuardianRequiredSettlesOnlyApprovedPayments(t *testing.T) {
	env := newTestEnv(t)
	payer, payee := env.chain.Accounts[1], env.chain.Accounts[2]
	signer := env.chain.FacilitatorAccount().Address
	cases := []struct {
		name       string
		verdicts   Verdicts
		wantValid  bool
		wantStatus verdict.GuardianStatus
	}{
		{"approved verdict records an approval", approvedVerdict(), true, verdict.GuardianApproved},
		{"rejected verdict", &fakeVerdicts{res: verdict.GuardianResult{Status: verdict.GuardianRejected, Reason: "sanctioned_address"}}, false, verdict.GuardianRejected},
		{"verdict polling timed out", &fakeVerdicts{res: verdict.GuardianResult{Status: verdict.GuardianTimeout}}, false, verdict.GuardianTimeout},
		{"verdict service error", &fakeVerdicts{res: verdict.GuardianResult{Status: verdict.GuardianError}}, false, verdict.GuardianError},
		{"verdict client returned an error", &fakeVerdicts{err: errors.New("connection reset")}, false, verdict.GuardianError},
		{"approved flag with a rejected status", &fakeVerdicts{res: verdict.GuardianResult{Approved: true, Status: verdict.GuardianRejected}}, false, verdict.GuardianRejected},
		{"approved status without the approved flag", &fakeVerdicts{res: verdict.GuardianResult{Status: verdict.GuardianApproved}}, false, verdict.GuardianError},
		{"unknown status", &fakeVerdicts{res: verdict.GuardianResult{Status: "pending"}}, false, verdict.GuardianError},
		{"no verdict service configured", nil, false, verdict.GuardianError},
	}
	cfg := env.config(t)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := cfg
			c.VerdictMode, c.Verdicts, c.SkipStartupReconcile = VerdictRequired, tc.verdicts, true
			if tc.verdicts == nil {
				c.VerdictURL = "http://127.0.0.1:1" // named, but no client built for it
			}
			e := env.engine(t, c)
			defer e.Close()
			p, r := env.pay(t, x402.Version1, payer, payee.Address)
			ver, err := e.Verify(context.Background(), x402.VerifyInput{Payment: p, Requirements: r})
			if err != nil {
				t.Fatalf("Verify: %v", err)
			}
			if ver.IsValid != tc.wantValid || ver.GuardianStatus != string(tc.wantStatus) {
				t.Fatalf("verify = %+v; want valid=%v guardianStatus=%q", ver, tc.wantValid, tc.wantStatus)
			}
			if !tc.wantValid && ver.InvalidReason != x402.ReasonVerdictNotApproved.V1() {
				t.Errorf("invalidReason = %q, want %q", ver.InvalidReason, x402.ReasonVerdictNotApproved.V1())
			}
			nonceBefore := env.pendingNonce(t, signer)
			res, err := e.Settle(context.Background(), p, r)
			if err != nil {
				t.Fatalf("Settle: %v", err)
			}
			if tc.wantValid {
				if !res.Success {
					t.Fatalf("settle of the approved payment = %+v", res)
				}
				// The approval was consumed: settling again finds none, and sends nothing.
				again, _ := e.Settle(context.Background(), p, r)
				if again.Success || again.ErrorReason != x402.ReasonApprovalNotFound.V1() {
					t.Errorf("second settle = %+v, want approval not found", again)
				}
				return
			}
			if res.Success || res.ErrorReason != x402.ReasonApprovalNotFound.V1() {
				t.Errorf("settle = %+v, want approval not found", res)
			}
			if n := env.pendingNonce(t, signer); n != nonceBefore {
				t.Errorf("signer broadcast %d transactions without an approval", n-nonceBefore)
			}
		})
	}
}

func TestGuardianRequiredApprovalIsConsumedEvenWhenSettlementFails(t *testing.T) {
	env := newTestEnv(t)
	cfg := env.config(t)
	cfg.VerdictMode, cfg.Verdicts = VerdictRequired, approvedVerdict()
	e := env.engine(t, cfg)
	payer, payee := env.chain.Accounts[1], env.chain.Accounts[2]
	p, r := env.pay(t, x402.Version2, payer, payee.Address)
	if ver, err := e.Verify(context.Background(), x402.VerifyInput{Payment: p, Requirements: r}); err != nil || !ver.IsValid {
		t.Fatalf("verify = %+v, %v", ver, err)
	}
	// The payer cancels the authorization between verify and settle (sent by account 9).
	sig := env.token.SignCancelAuthorization(t, payer.Key, payer.Address, p.Authorization.Nonce)
	env.chain.Transact(t, env.chain.Accounts[9], env.token.Address,
		testenv.CancelAuthorizationVRS(t, payer.Address, p.Authorization.Nonce, sig))

	res, err := e.Settle(context.Background(), p, r)
	if err != nil || res.Success || res.ErrorReason != x402.ReasonNonceUsed.V2() {
		t.Fatalf("settle = %+v, %v; want nonce used", res, err)
	}
	// docs/facilitator.md#approval-records: the approval is consumed even if the merchant settlement then fails.
	if _, err := cfg.Store.Consume(context.Background(), x402.KeyOf(p, r)); !errors.Is(err, approval.ErrNotFound) {
		t.Errorf("approval still present after a failed settle: %v", err)
	}
}

func TestApprovalNeverOutlivesTheAuthorization(t *testing.T) {
	env := newTestEnv(t)
	cfg := env.config(t)
	cfg.VerdictMode, cfg.Verdicts = VerdictRequired, approvedVerdict()
	e := env.engine(t, cfg)
	payer, payee := env.chain.Accounts[1], env.chain.Accounts[2]
	for _, tc := range []struct {
		name        string
		validBefore int64 // seconds after the engine's clock
		want        time.Duration
	}{
		{"authorization valid for 30s: approval lives 30s", 30, 30 * time.Second},
		{"authorization valid for 10m: approval lives ApprovalTTL", 600, DefaultApprovalTTL},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := env.requirements(payee.Address, testAmount)
			a := env.authorization(t, payer.Address, payee.Address, testAmount)
			a.ValidBefore = big.NewInt(env.now.Unix() + tc.validBefore)
			p := env.payment(x402.Version2, a, env.sign(t, payer.Key, a), r)
			if ver, err := e.Verify(context.Background(), x402.VerifyInput{Payment: p, Requirements: r}); err != nil || !ver.IsValid {
				t.Fatalf("verify = %+v, %v", ver, err)
			}
			got, err := cfg.Store.Consume(context.Background(), x402.KeyOf(p, r))
			if err != nil {
				t.Fatalf("consume: %v", err)
			}
			if d := got.ExpiresAt.Sub(got.RecordedAt); d != tc.want || got.RequestHash != "0xreq" {
				t.Errorf("approval = %+v (ttl %s), want ttl %s and the request hash", got, d, tc.want)
			}
		})
	}
}

// optionalEnv is an engine in GUARDIAN_MODE optional, with a verification fee of 0.001
// USDC paid to account 7.
func optionalEnv(t *testing.T, verdicts *fakeVerdicts) (*testEnv, *Service, *x402.Requirements) {
	env := newTestEnv(t)
	cfg := env.config(t)
	cfg.VerdictMode, cfg.Verdicts = VerdictOptional, verdicts
	return env, env.engine(t, cfg), env.requirements(env.chain.Accounts[7].Address, big.NewInt(1_000))
}

// feePayment is payer's authorization of the fee.
func (v *testEnv) feePayment(t *testing.T, payer testenv.Account, fee *x402.Requirements) *x402.Payment {
	a := v.authorization(t, payer.Address, fee.PayTo, fee.Amount)
	return v.payment(x402.Version2, a, v.sign(t, payer.Key, a), fee)
}

func TestGuardianOptional(t *testing.T) {
	cases := []struct {
		name        string
		verdict     *fakeVerdicts
		askVerdict  bool // the /verify carries verificationRequirements
		withFee     bool // and a verificationPayment
		wantCalls   int32
		wantValid   bool
		wantFeeErr  string
		wantFeePaid bool
		wantSettle  string // "" for success, else the v2 reason
	}{
		{name: "without verificationRequirements no verdict is asked and settle needs no approval",
			verdict: approvedVerdict(), wantValid: true},
		{name: "approved verdict settles the fee and records an approval",
			verdict: approvedVerdict(), askVerdict: true, withFee: true, wantCalls: 1, wantValid: true, wantFeePaid: true},
		{name: "rejected verdict still settles the fee; the payment can never settle",
			verdict: &fakeVerdicts{res: verdict.GuardianResult{Status: verdict.GuardianRejected}}, askVerdict: true, withFee: true,
			wantCalls: 1, wantFeePaid: true, wantSettle: x402.ReasonApprovalNotFound.V2()},
		{name: "verdict timeout is not terminal: no fee, no settle",
			verdict: &fakeVerdicts{res: verdict.GuardianResult{Status: verdict.GuardianTimeout}}, askVerdict: true, withFee: true,
			wantCalls: 1, wantSettle: x402.ReasonApprovalNotFound.V2()},
		{name: "missing fee payment: no verdict is asked",
			verdict: approvedVerdict(), askVerdict: true, wantFeeErr: FeePaymentMissing},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			env, e, fee := optionalEnv(t, tc.verdict)
			payer, payee, feePayee := env.chain.Accounts[1], env.chain.Accounts[2], env.chain.Accounts[7]
			p, r := env.pay(t, x402.Version2, payer, payee.Address)
			in := x402.VerifyInput{Payment: p, Requirements: r}
			if tc.askVerdict {
				in.VerificationRequirements = fee
			}
			if tc.withFee {
				in.VerificationPayment = env.feePayment(t, payer, fee)
			}
			feeBefore := env.token.BalanceOf(t, feePayee.Address)
			ver, err := e.Verify(context.Background(), in)
			if err != nil {
				t.Fatalf("Verify: %v", err)
			}
			if ver.IsValid != tc.wantValid || ver.FeeError != tc.wantFeeErr || (ver.FeeTxHash != "") != tc.wantFeePaid {
				t.Errorf("verify = %+v", ver)
			}
			if n := tc.verdict.calls.Load(); n != tc.wantCalls {
				t.Errorf("verdict service called %d times, want %d", n, tc.wantCalls)
			}
			paid := new(big.Int).Sub(env.token.BalanceOf(t, feePayee.Address), feeBefore)
			if want := map[bool]int64{true: 1_000, false: 0}[tc.wantFeePaid]; paid.Int64() != want {
				t.Errorf("fee payee received %s, want %d", paid, want)
			}
			if tc.wantFeeErr != "" {
				return
			}
			res, err := e.Settle(context.Background(), p, r)
			if err != nil {
				t.Fatalf("Settle: %v", err)
			}
			if tc.wantSettle == "" && !res.Success || tc.wantSettle != "" && res.ErrorReason != tc.wantSettle {
				t.Errorf("settle = %+v, want %q", res, tc.wantSettle)
			}
		})
	}
}

// TestGuardianOptionalSettleRefusedEarlyCanBeRetried: in optional mode a payment never sent
// for a verdict settles without an approval; a settle refused before anything was claimed
// (here the payer's funds fell short) does not mark the payment, so a later settle of the
// same payment succeeds, once.
func TestGuardianOptionalSettleRefusedEarlyCanBeRetried(t *testing.T) {
	env, e, _ := optionalEnv(t, approvedVerdict())
	payer, payee := testenv.NewAccount(t), env.chain.Accounts[2]
	p, r := env.pay(t, x402.Version2, payer, payee.Address)

	res, err := e.Settle(context.Background(), p, r)
	if err != nil || res.Success || res.ErrorReason != x402.ReasonInsufficientFunds.V2() {
		t.Fatalf("settle without funds = %+v, %v; want %s", res, err, x402.ReasonInsufficientFunds)
	}
	env.token.Mint(t, payer.Address, testAmount)
	res, err = e.Settle(context.Background(), p, r)
	if err != nil || !res.Success {
		t.Fatalf("settle once funded = %+v, %v; want success", res, err)
	}
	if got := env.token.BalanceOf(t, payee.Address); got.Cmp(new(big.Int).Add(testenv.DefaultPayerFunds, testAmount)) != 0 {
		t.Errorf("payee balance %s", got)
	}
	again, err := e.Settle(context.Background(), p, r)
	if err != nil || again.Success {
		t.Errorf("third settle = %+v, %v; want refused", again, err)
	}
}
