package facilitator

import (
	"context"

	"github.com/x402gate/x402gate/x402"
)

// Service is the facilitator's method set. The in-process *Engine and the remote *Client
// both implement it, so a resource gate can use either. Logical failures come back in the
// response (IsValid/Success false with a reason in the payment's x402 version); an error
// return means an exceptional failure (HTTP 500 on the wire).
type Service interface {
	Verify(ctx context.Context, in x402.VerifyInput) (x402.VerifyResponse, error)
	Settle(ctx context.Context, p *x402.Payment, r *x402.Requirements) (x402.SettleResponse, error)
	Supported(ctx context.Context) (x402.SupportedResponse, error)
}
