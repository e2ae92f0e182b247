package facilitator

import (
	"context"

	"go.uber.org/zap"

	"github.com/x402gate/x402gate/x402"
)

// The verification fee (docs/facilitator.md#verify): when a /verify carries
// verificationRequirements, the verdict service is paid by a second EIP-3009
// authorization from the client. On the wire it travels as `verificationPayment` in the
// /verify body (x402.VerifyRequest.VerificationPayment); in Go it is
// x402.VerifyInput.VerificationPayment. The engine checks it before asking for a verdict, so a
// verdict is never obtained without a fee that can be paid, and settles it on a terminal
// verdict (approved or rejected) through the same settle path as a merchant payment, less
// the approval. A fee that is missing or cannot be settled leaves the /verify invalid,
// with FeeError set, and no approval is recorded.

// feeCheck verifies the fee authorization of in before the verdict is asked. It returns
// the FeeError and the failure for the /verify answer, or "" and nil when the fee can be
// paid.
func (e *Service) feeCheck(ctx context.Context, c *checked, in x402.VerifyInput) (string, *failure) {
	if f := e.checkQuote(ctx, c.r, in.VerificationRequirements); f != nil {
		return FeeNotQuoted, f
	}
	if in.VerificationPayment == nil {
		return FeePaymentMissing, fail(x402.ReasonInvalidPayload, "verification fee payment is missing")
	}
	fc, f := e.verifyPayment(ctx, in.VerificationPayment, in.VerificationRequirements)
	if f != nil {
		return f.reason.V2(), fail(x402.ReasonInvalidPayload, "verification fee payment is invalid: %s", f.msg)
	}
	if fc.key.AuthorizationKey() == c.key.AuthorizationKey() {
		return x402.ReasonDuplicateSettlement.V2(), fail(x402.ReasonInvalidPayload, "verification fee reuses the payment's authorization")
	}
	return "", nil
}

// settleFee settles the fee authorization of in. It returns the fee transaction's hash
// (also when the settlement is pending) and, unless the fee is settled, a FeeError: the
// reason code of the failure.
func (e *Service) settleFee(ctx context.Context, in x402.VerifyInput) (txHash, feeErr string) {
	res, err := e.settle(ctx, in.VerificationPayment, in.VerificationRequirements, false, nil)
	switch {
	case err != nil:
		return "", x402.ReasonUnexpectedSettle.V2()
	case res.resp.Success:
		return res.resp.Transaction, ""
	default:
		return res.resp.Transaction, res.reason.V2()
	}
}

// checkQuote holds the caller's fee requirement to the facilitator's own quote for the
// merchant requirement: /verify comes from whoever can reach the API, and a "fee" it
// chose freely would make the facilitator settle any transfer, the merchant payment
// included, and pay its gas (docs/facilitator.md#verification-fee). A fee is settled
// only when it equals the quote in scheme, network, asset, payee and amount, and never
// when it pays the merchant.
func (e *Service) checkQuote(ctx context.Context, merchant, fee *x402.Requirements) *failure {
	if e.cfg.Pricing == nil {
		return fail(x402.ReasonInvalidPayload, "this facilitator has no pricing service: it settles no verification fee")
	}
	if fee.PayTo == merchant.PayTo {
		return fail(x402.ReasonInvalidPayload, "a verification fee cannot pay the merchant")
	}
	quote, err := e.cfg.Pricing(ctx, merchant)
	switch {
	case err != nil:
		e.log.Warn("verification fee quote unavailable", zap.Error(err))
		return fail(x402.ReasonInvalidPayload, "the verification fee could not be quoted")
	case quote == nil:
		return fail(x402.ReasonInvalidPayload, "no verification fee applies to this payment")
	case quote.Scheme != fee.Scheme || quote.Network != fee.Network || quote.Asset != fee.Asset ||
		quote.PayTo != fee.PayTo || quote.Amount == nil || fee.Amount == nil || quote.Amount.Cmp(fee.Amount) != 0:
		return fail(x402.ReasonInvalidPayload, "the verification fee is not the facilitator's quote")
	}
	return nil
}
