package facilitator

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"go.uber.org/zap"

	"github.com/x402gate/x402gate/verdict"
	"github.com/x402gate/x402gate/verdictclient"
	"github.com/x402gate/x402gate/x402"
)

// VerdictClientConfig configures NewVerdictClient: where the verdict service is, the
// agent key, and how long /verify may wait for a terminal verdict.
type VerdictClientConfig struct {
	// BaseURL is the verdict service's base URL, http or https; a trailing slash is
	// removed. Required.
	BaseURL string
	// APIKey is the verdict service's agent key, sent only in the x-api-key header (docs/verdict.md#secrets).
	// It needs at least verdictclient.MinAPIKeyLength visible ASCII characters.
	// Required.
	APIKey string
	// Signer is the address whose signature every verdict must carry
	// (docs/verdict-signing.md#checking-at-the-gate). Default: the zero address, no check.
	Signer common.Address
	// Timeout bounds each HTTP request to the verdict service. Default
	// verdictclient.DefaultTimeout (10 s).
	Timeout time.Duration
	// Poll bounds the wait for a terminal verdict: IntervalMs (default 1000), MaxAttempts
	// (default 20), MaxDelay (default 5 s). A verdict still pending when it is used up is
	// a "timeout", never an approval (docs/verdict.md#fail-closed).
	Poll verdictclient.PollOptions
	// AllowPromptOverride lets the payload's unsigned extensions.guardian.arbiterUserPrompt
	// replace the prompt derived from the payment. Default false (docs/verdict.md#paymentaction).
	AllowPromptOverride bool
	// HTTPClient sends the requests; it is copied and never follows redirects. Default: a
	// client with http.DefaultTransport's settings that keeps up to 256 idle connections
	// to the service (the default keeps 2).
	HTTPClient *http.Client
	// Assets names token symbols and decimals in the derived prompt. Default: the
	// built-in networks (x402.NewRegistry).
	Assets *x402.Registry
	// Logger receives one debug entry per request to the verdict service (operation,
	// status, requestHash; never the key). Default: no logging.
	Logger *zap.Logger
}

// VerdictClient is the engine's Verdicts on top of verdictclient (docs/gate.md#results
// verifyPayment): it builds the PaymentAction from the payment and its requirements,
// submits it once with authorization.from as escrowAddress, reconciles an uncertain
// submit by trace id, and polls within Poll. It is safe for concurrent use.
type VerdictClient struct {
	g    *verdictclient.Guardian
	poll verdictclient.PollOptions
}

var _ Verdicts = (*VerdictClient)(nil)

// NewVerdictClient validates cfg and returns a VerdictClient. Errors never quote the key.
func NewVerdictClient(cfg VerdictClientConfig) (*VerdictClient, error) {
	g, err := verdictclient.NewGuardian(verdictclient.GuardianOptions{
		BaseURL:             cfg.BaseURL,
		APIKey:              cfg.APIKey,
		Signer:              cfg.Signer,
		Timeout:             cfg.Timeout,
		AllowPromptOverride: cfg.AllowPromptOverride,
		HTTPClient:          cfg.HTTPClient,
		Assets:              cfg.Assets,
		Logger:              cfg.Logger,
	})
	if err != nil {
		return nil, fmt.Errorf("verdict client: %w", err)
	}
	if cfg.Poll.IntervalMs < 0 || cfg.Poll.MaxAttempts < 0 || cfg.Poll.MaxDelay < 0 {
		return nil, fmt.Errorf("verdict client: poll options must not be negative")
	}
	return &VerdictClient{g: g, poll: cfg.Poll}, nil
}

// VerifyPayment asks the verdict service about p and returns its GuardianResult.
// Approved is set only for an approved terminal verdict. Every failure of the service
// (pending at the bound, rejected, malformed, unavailable) is a non-approved result with a nil error; the error is non-nil only when p and r cannot become a
// PaymentAction (for example a network other than Base or Base Sepolia), and the result
// is then a non-approved "error" as well.
func (c *VerdictClient) VerifyPayment(ctx context.Context, p *x402.Payment, r *x402.Requirements) (verdict.GuardianResult, error) {
	out, err := c.g.VerifyPayment(ctx, p, r, c.poll)
	out = outcome(out)
	if err != nil {
		return out, fmt.Errorf("verdict check: %w", err)
	}
	return out, nil
}
