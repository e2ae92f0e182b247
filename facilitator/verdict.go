package facilitator

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"time"

	"go.uber.org/zap"

	"github.com/x402gate/x402gate/facilitator/approval"
	"github.com/x402gate/x402gate/verdict"
	"github.com/x402gate/x402gate/x402"
)

// Verdicts is the verdict service as the engine uses it (docs/verdict.md#paymentaction): submit
// the payment as a PaymentAction, poll to a terminal verdict within the client's bound,
// and report the outcome. Implementations fail closed: a poll timeout, a malformed answer
// or an unreachable service is a non-approved result (or an error, which the engine
// treats the same way).
type Verdicts interface {
	VerifyPayment(ctx context.Context, p *x402.Payment, r *x402.Requirements) (verdict.GuardianResult, error)
}

// FeeNotQuoted is the FeeError of a /verify whose verificationRequirements are not, exactly,
// the fee the facilitator's own pricing service quotes for the payment (or that has none).
const FeeNotQuoted = "fee_not_quoted"

// FeePaymentMissing is the FeeError of a /verify that owes a verification fee but carries
// no verificationPayment.
const FeePaymentMissing = "fee_payment_missing"

// approvalRecordTimeout bounds the write of an approval, which runs even when the /verify
// caller has gone away.
const approvalRecordTimeout = 10 * time.Second

// claimMargin is how long past validBefore a settlement claim or verdict marker is kept:
// after validBefore the token refuses the authorization anyway.
const claimMargin = 5 * time.Minute

// maxClaimTTL caps claim and marker lifetimes for authorizations valid far into the
// future. It equals approval.MemoryStore's default maximum TTL, which refuses longer ones. Past
// it, the journal (which keeps every row) and the token's authorizationState still refuse
// a second broadcast; a verdict marker of an authorization valid for more than an hour
// lapses after an hour, after which optional mode no longer demands its approval.
const maxClaimTTL = time.Hour

// verdictApplies reports whether GUARDIAN_MODE asks for a verdict on this /verify.
func (e *Service) verdictApplies(in x402.VerifyInput) bool {
	switch e.cfg.VerdictMode {
	case VerdictRequired:
		return true
	case VerdictOptional:
		return in.VerificationRequirements != nil
	}
	return false
}

// markerKey is the store key of the "sent to the verdict service" marker of k. It lives
// beside k's settlement claim but can never collide with it (distinct network prefix).
func markerKey(k x402.PaymentKey) x402.PaymentKey {
	k.Network = "verdict-marker:" + k.Network
	return k
}

// untilValidBefore is how long a is still valid at now, plus margin, capped at maxClaimTTL.
func untilValidBefore(a x402.Authorization, now time.Time, margin time.Duration) time.Duration {
	left := new(big.Int).Sub(a.ValidBefore, big.NewInt(now.Unix()))
	if left.Sign() <= 0 {
		return margin
	}
	if !left.IsInt64() || left.Int64() > int64(maxClaimTTL/time.Second) {
		return maxClaimTTL
	}
	d := time.Duration(left.Int64())*time.Second + margin
	return min(d, maxClaimTTL)
}

// verdictCheck runs the verdict check on a payment that passed x402 verification (docs/facilitator.md#api):
// it pre-verifies the verification fee when
// one is owed, marks the payment as sent to the verdict service (optional mode), asks for
// the verdict, settles the fee on a terminal verdict, and records an approval for the
// exact payment when the verdict is approved and any fee was paid. Anything else fails
// closed with ReasonVerdictNotApproved.
func (e *Service) verdictCheck(ctx context.Context, c *checked, in x402.VerifyInput, resp x402.VerifyResponse) x402.VerifyResponse {
	p := c.p
	v := versionOf(p)
	deny := func(r x402.Reason, msg string) x402.VerifyResponse {
		resp.IsValid = false
		resp.InvalidReason = r.For(v)
		resp.InvalidMessage = msg
		return resp
	}
	if e.cfg.Verdicts == nil {
		resp.GuardianStatus, resp.GuardianReason = string(verdict.GuardianError), "verdict service is not configured"
		return deny(x402.ReasonVerdictNotApproved, "verdict required but no verdict service is configured")
	}
	// A payment asked about before is asked again (docs/facilitator.md#fresh-verdicts): only
	// the service knows the agent's current policy and key. What is remembered spares the
	// payer a second fee, and in optional mode stands for the marker its first ask claimed.
	before, err := e.cfg.Store.RecallVerdict(ctx, c.key)
	askedBefore := err == nil
	if err != nil && !errors.Is(err, approval.ErrNotFound) {
		e.log.Error("recall verdict", zap.String("payer", c.auth.From.Hex()), zap.Error(err))
		return deny(x402.ReasonApprovalStoreDown, "approval store unavailable")
	}
	switch ok, err := e.cfg.SubmitLimiter.Allow(ctx, c.auth.From.Hex()); {
	case err != nil:
		e.log.Error("verdict rate limit", zap.String("payer", c.auth.From.Hex()), zap.Error(err))
		return deny(x402.ReasonApprovalStoreDown, "rate limiter unavailable")
	case !ok:
		resp.GuardianStatus, resp.GuardianReason = string(verdict.GuardianError), "too many verdict requests from this payer; slow down"
		return deny(x402.ReasonVerdictNotApproved, "verdict requests of this payer are rate-limited")
	}
	feeOwed := in.VerificationRequirements != nil && !askedBefore
	if feeOwed {
		if feeErr, f := e.feeCheck(ctx, c, in); f != nil {
			resp.FeeError = feeErr
			return deny(f.reason, f.msg)
		}
	}
	if e.cfg.VerdictMode == VerdictOptional && !askedBefore {
		// The marker makes Settle demand an approval for this payment from now on, even
		// if the verdict is never recorded (see claimVerdictMarker). Whoever claims it
		// first wins: a marker already claimed means the payment was sent for a verdict
		// before, or a settle without an approval is under way, and either way a second
		// verdict request (and its fee) is refused, never raced against that settle.
		ttl := untilValidBefore(c.auth, e.now(), claimMargin)
		if !e.markers.take(c.auth.From, e.now(), e.now().Add(ttl)) {
			resp.GuardianStatus, resp.GuardianReason = string(verdict.GuardianError), "too many payments of this payer await a verdict"
			return deny(x402.ReasonVerdictNotApproved, "too many payments of this payer were sent for a verdict and not settled; settle them or let them expire")
		}
		err := e.cfg.Store.Claim(ctx, markerKey(c.key), ttl)
		if err != nil {
			e.markers.release(c.auth.From)
		}
		switch {
		case errors.Is(err, approval.ErrAlreadyClaimed):
			resp.GuardianStatus, resp.GuardianReason = string(verdict.GuardianError), "this payment was already sent for a verdict, or is being settled without one"
			return deny(x402.ReasonVerdictNotApproved, "a verdict for this payment was already asked, or it is being settled without one")
		case err != nil:
			e.log.Error("record verdict marker", zap.String("payer", c.auth.From.Hex()), zap.Error(err))
			return deny(x402.ReasonApprovalStoreDown, "approval store unavailable")
		}
	}
	res, err := e.cfg.Verdicts.VerifyPayment(ctx, p, c.r)
	if err != nil {
		e.log.Warn("verdict check failed", zap.String("payer", c.auth.From.Hex()), zap.Error(err))
		res = verdict.GuardianResult{Status: verdict.GuardianError, Reason: "verdict service error"}
	}
	res = outcome(res)
	approved := res.Approved
	resp.GuardianStatus, resp.GuardianReason = string(res.Status), res.Reason
	guardianDetail(&resp, res)
	e.logVerdict(c, res, before, askedBefore)

	feeOK := !feeOwed
	if feeOwed && (res.Status == verdict.GuardianApproved || res.Status == verdict.GuardianRejected) {
		// docs/facilitator.md#verify: the fee is settled on a terminal verdict, through the same
		// settle path as any payment but without approval consumption.
		resp.FeeTxHash, resp.FeeError = e.settleFee(ctx, in)
		feeOK = resp.FeeError == ""
	}
	if !approved {
		if res.Status == verdict.GuardianRejected {
			e.remember(ctx, c, res)
		}
		if !e.withdrawApproval(ctx, c) {
			return deny(x402.ReasonApprovalStoreDown, "approval store unavailable")
		}
		return deny(x402.ReasonVerdictNotApproved, "verdict is "+string(res.Status))
	}
	if !feeOK {
		return deny(x402.ReasonInvalidPayload, "verification fee was not settled")
	}
	e.remember(ctx, c, res)
	ttl := min(time.Duration(e.cfg.ApprovalTTL), untilValidBefore(c.auth, e.now(), 0))
	a := approval.Approval{RequestHash: res.RequestHash, RecordedAt: e.now(), ExpiresAt: e.now().Add(ttl)}
	// A fee may just have been paid for this verdict: the caller's deadline, which the fee
	// settlement outlived on its own detached context, must not cost the payer the
	// approval the fee bought. The write gets a bounded context of its own.
	recCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), approvalRecordTimeout)
	defer cancel()
	if err := e.cfg.Store.Record(recCtx, c.key, a, ttl); err != nil {
		e.log.Error("record approval", zap.String("payer", c.auth.From.Hex()), zap.String("requestHash", res.RequestHash), zap.Error(err))
		return deny(x402.ReasonApprovalStoreDown, "approval store unavailable")
	}
	return resp
}

// outcome is the one normalisation of a verdict result, whichever Verdicts gave it: an
// approval only when Approved and the approved status agree; an approval without its
// status, an approved status without Approved, an empty or unknown status are all
// "error" (docs/verdict.md#fail-closed).
func outcome(res verdict.GuardianResult) verdict.GuardianResult {
	switch {
	case res.Approved && res.Status == verdict.GuardianApproved:
		return res
	case res.Status == verdict.GuardianRejected || res.Status == verdict.GuardianTimeout || res.Status == verdict.GuardianError:
	default:
		res.Status = verdict.GuardianError
	}
	res.Approved = false
	return res
}

// remember keeps the first terminal verdict res of c's payment until its authorization
// expires (docs/facilitator.md#fresh-verdicts): a later /verify of the payment asks again
// without another fee or marker. A failure only means such a /verify is treated as a first.
func (e *Service) remember(ctx context.Context, c *checked, res verdict.GuardianResult) {
	v := approval.FirstVerdict{Status: string(res.Status), RequestHash: res.RequestHash}
	if res.Verdict != nil {
		v.ReasonCode, v.PolicyVersion = string(res.Verdict.ReasonCode), res.Verdict.PolicyVersion
	}
	recCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), approvalRecordTimeout)
	defer cancel()
	if err := e.cfg.Store.RememberVerdict(recCtx, c.key, v, untilValidBefore(c.auth, e.now(), claimMargin)); err != nil {
		e.log.Warn("remember verdict", zap.String("payer", c.auth.From.Hex()), zap.String("requestHash", res.RequestHash), zap.Error(err))
	}
}

// withdrawApproval drops an approval that an earlier verdict of c's payment recorded and no
// settle has consumed: the latest answer of the verdict service stands, and it is not an
// approval. It reports whether the store answered.
func (e *Service) withdrawApproval(ctx context.Context, c *checked) bool {
	recCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), approvalRecordTimeout)
	defer cancel()
	a, err := e.cfg.Store.Consume(recCtx, c.key)
	switch {
	case err == nil:
		e.log.Info("approval withdrawn by a later verdict", zap.String("payer", c.auth.From.Hex()), zap.String("requestHash", a.RequestHash))
	case !errors.Is(err, approval.ErrNotFound):
		e.log.Error("withdraw approval", zap.String("payer", c.auth.From.Hex()), zap.Error(err))
		return false
	}
	return true
}

// logVerdict logs the verdict res of c's payment and, when the payment was asked about
// before, the verdict and policy version of that first ask.
func (e *Service) logVerdict(c *checked, res verdict.GuardianResult, before approval.FirstVerdict, askedBefore bool) {
	fields := []zap.Field{zap.String("payer", c.auth.From.Hex()), zap.String("requestHash", res.RequestHash),
		zap.String("status", string(res.Status))}
	if res.Verdict != nil && res.Verdict.PolicyVersion != nil {
		fields = append(fields, zap.Int64("policyVersion", *res.Verdict.PolicyVersion))
	}
	if askedBefore {
		fields = append(fields, zap.String("firstStatus", before.Status), zap.String("firstReasonCode", before.ReasonCode),
			zap.String("firstRequestHash", before.RequestHash))
		if before.PolicyVersion != nil {
			fields = append(fields, zap.Int64("firstPolicyVersion", *before.PolicyVersion))
		}
	}
	e.log.Info("verdict", fields...)
}

// CheckAdvertise refuses a gate's guardian advertisement that a facilitator in mode m
// would not keep: a 402 that promises a verdict check no /verify makes misleads the
// payer's agent. Off never asks; optional asks only when /verify carries verification
// requirements, which a gate sends only with its fee on and a fee quoted, so it keeps an
// "optional" advertisement with the fee on, never a "required" one
// (docs/facilitator.md#guardian).
func (m VerdictMode) CheckAdvertise(advertise string, fee bool) error {
	switch {
	case advertise == "":
		return nil
	case m == VerdictOff || m == "":
		return fmt.Errorf("advertise %s, but the facilitator's guardian_mode is off: no verdict would ever be asked", advertise)
	case m == VerdictOptional && advertise == "required":
		// Optional mode asks only when the gate sends verification requirements, and the
		// gate has none to send when the pricing service quotes no fee: a "required"
		// advertisement would then be a promise no /verify keeps.
		return errors.New("advertise required needs the facilitator's guardian_mode required: with optional, a payment the pricing service quotes no fee for would settle without a verdict")
	case m == VerdictOptional && !fee:
		return errors.New("advertise " + advertise + " with guardian_mode optional needs fee on: without verification requirements no verdict is asked")
	}
	return nil
}
