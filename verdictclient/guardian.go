package verdictclient

import (
	"context"
	"errors"
	"math/big"
	"net/http"
	"strings"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"go.uber.org/zap"

	"github.com/x402gate/x402gate/verdict"
	"github.com/x402gate/x402gate/x402"
)

// GuardianOptions configures the high-level helpers: the client side of the verdict
// service that docs/verdict.md#paymentaction calls GuardianConfig (not to be confused
// with gate.VerdictConfig, a route's guardian setting).
type GuardianOptions struct {
	// BaseURL is the verdict service's base URL; a trailing slash is removed. Required.
	BaseURL string
	// APIKey is the fallback verdict-service key, used when the call brings no payer key
	// (PaymentInput.APIKey). Sensitive: sent only in x-api-key. Required.
	APIKey string
	// Signer is the address whose EIP-712 signature every verdict must carry, over this
	// payment, its outcome and policy version, unexpired (docs/verdict-signing.md#checking-at-the-gate);
	// a verdict without it is an "error" result. Default: the zero address, no check.
	Signer common.Address
	// Timeout bounds each HTTP request. Default DefaultTimeout (10 s). Unlike the
	// reference helpers, which ignore timeoutMs (docs/verdict.md#paymentaction), the Guardian forwards it to
	// its low-level client: a shorter timeout can only make a call fail closed sooner.
	Timeout time.Duration
	// AllowPromptOverride lets an unsigned arbiterUserPrompt replace the prompt derived
	// from the payment action. Default false: the prompt is always derived.
	AllowPromptOverride bool
	// HTTPClient sends the requests. Default: a client with http.DefaultTransport's
	// settings that keeps up to 256 idle connections to the service (the default keeps 2).
	HTTPClient *http.Client
	// Assets resolves token decimals and symbols for the derived prompt. Default: the
	// built-in networks (x402.NewRegistry).
	Assets *x402.Registry
	// Logger receives the low-level client's entries (see Config.Logger). Default: no
	// logging.
	Logger *zap.Logger
}

// PaymentInput is the input of a verification: the payment and what it pays for, plus
// two optional fields that are not part of the signed payment.
type PaymentInput struct {
	// Payment is the decoded payment payload. Required.
	Payment *x402.Payment
	// Requirements is the requirement the payment answers. Required.
	Requirements *x402.Requirements
	// ArbiterUserPrompt replaces the derived prompt when AllowPromptOverride is set.
	ArbiterUserPrompt string
	// APIKey is the payer's own verdict-service key for this call; empty means
	// GuardianOptions.APIKey. It is used only in the x-api-key header. It is taken from
	// the caller, never from the payment payload, which travels through merchants and
	// proxies and so must not carry a secret.
	APIKey string
}

// VerifyFn verifies one x402 payment and returns an x402 verify result; an error means
// an exceptional failure, not a refused payment.
type VerifyFn func(ctx context.Context, p *x402.Payment, r *x402.Requirements) (x402.VerifyResponse, error)

// Guardian runs payment verifications against the verdict service. It is safe for
// concurrent use.
type Guardian struct {
	client      *Client
	allowPrompt bool
	assets      *x402.Registry
	signer      common.Address
}

// NewGuardian validates cfg and returns a Guardian. Errors are *InputError.
func NewGuardian(cfg GuardianOptions) (*Guardian, error) {
	c, err := New(Config{BaseURL: cfg.BaseURL, APIKey: cfg.APIKey, Timeout: cfg.Timeout, HTTPClient: cfg.HTTPClient, Logger: cfg.Logger})
	if err != nil {
		return nil, err
	}
	reg := cfg.Assets
	if reg == nil {
		reg = defaultRegistry
	}
	return &Guardian{client: c, allowPrompt: cfg.AllowPromptOverride, assets: reg, signer: cfg.Signer}, nil
}

// Client returns the Guardian's low-level client.
func (g *Guardian) Client() *Client { return g.client }

// VerifyPayment is what the facilitator calls: it verifies p against r with the
// configured key, taking an arbiterUserPrompt from the payload's guardian extension
// (PromptFromPayment) when overrides are allowed.
func (g *Guardian) VerifyPayment(ctx context.Context, p *x402.Payment, r *x402.Requirements, opts PollOptions) (verdict.GuardianResult, error) {
	return g.Verify(ctx, PaymentInput{Payment: p, Requirements: r, ArbiterUserPrompt: PromptFromPayment(p)}, opts)
}

// Verify is verifyPayment (docs/gate.md#results): build the PaymentAction, submit it with
// authorization.from as escrowAddress, and poll for a terminal verdict. It never settles.
//
// Every failure becomes a non-approved result: rejected, timeout (still pending at the
// bound or the context's deadline) or error. The error return is non-nil only when the
// action cannot be built (an *InputError); the result is then an "error" result too, so
// a caller that ignores the error still fails closed. After an uncertain submit it
// reconciles by trace id (retrying the lookup within opts) and continues with the found
// transaction; it never submits twice.
func (g *Guardian) Verify(ctx context.Context, in PaymentInput, opts PollOptions) (verdict.GuardianResult, error) {
	act, from, err := verdict.NewPaymentAction(in.Payment, in.Requirements)
	if err != nil {
		return failed(err, "", nil), err
	}
	prompt, err := promptFor(act, in.ArbiterUserPrompt, g.allowPrompt, g.assets)
	if err != nil {
		return failed(err, "", nil), err
	}
	c := g.client
	keys := []string{c.apiKey}
	if in.APIKey != "" {
		if c, err = c.WithAPIKey(in.APIKey); err != nil {
			return failed(err, "", keys), nil
		}
		keys = append(keys, in.APIKey)
	}
	tx, err := c.Submit(ctx, SubmitRequest{EscrowAddress: from.Hex(), Prompt: prompt, ProposedTx: act})
	var ue *UncertainSubmitError
	if errors.As(err, &ue) {
		// docs/verdict.md#envelope rule 5: establish whether the request was created; never resubmit.
		tx, err = c.reconcileWithin(ctx, ue.TraceID, opts)
		if err != nil {
			err = errors.Join(ue, err)
		}
	}
	if err != nil {
		return failed(err, "", keys), nil
	}
	v, err := c.Await(ctx, tx.RequestHash, opts)
	if err == nil {
		err = g.checkSigned(v, act, from)
	}
	if err != nil {
		return failed(err, tx.RequestHash, keys), nil
	}
	return fromVerdict(v, tx.RequestHash, keys), nil
}

// fromVerdict turns a terminal verdict into a result.
func fromVerdict(v *verdict.Verdict, hash string, keys []string) verdict.GuardianResult {
	// Service text is passed on to callers that log it (guardianReason, GuardianVerdict),
	// so every string in it loses the keys of this call (docs/verdict.md#secrets).
	ev := verdict.Evidence{
		DecodedAction: scrubTree(v.Evidence.DecodedAction, keys).(map[string]any),
		Observations:  scrubTree(v.Evidence.Observations, keys).(map[string]any),
		Sources:       scrubTree(v.Evidence.Sources, keys).([]any),
	}
	gv := &verdict.GuardianVerdict{
		Outcome: v.Outcome, ReasonCode: v.ReasonCode, HumanReason: scrub(v.HumanReason, keys),
		Checks: scrubChecks(v.Checks, keys), Evidence: &ev, PolicyVersion: v.PolicyVersion,
		USDNotional: v.USDNotional, Timestamp: v.Timestamp, Mode: v.Mode, WouldFail: scrubChecks(v.WouldFail, keys),
	}
	reason := v.HumanReason
	if reason == "" {
		reason = string(v.ReasonCode)
	}
	res := verdict.GuardianResult{Verdict: gv, RequestHash: hash, Reason: scrub(reason, keys)}
	if v.Approved() {
		res.Approved, res.Status = true, verdict.GuardianApproved
	} else {
		res.Status = verdict.GuardianRejected
	}
	return res
}

// scrubChecks is a copy of cs without the keys in their text.
func scrubChecks(cs []verdict.Check, keys []string) []verdict.Check {
	if cs == nil {
		return nil
	}
	out := make([]verdict.Check, len(cs))
	for i, c := range cs {
		c.HumanReason = scrub(c.HumanReason, keys)
		if c.TriggeringPolicyField != nil {
			f := scrub(*c.TriggeringPolicyField, keys)
			c.TriggeringPolicyField = &f
		}
		out[i] = c
	}
	return out
}

// failed turns an error into a non-approved result.
func failed(err error, hash string, keys []string) verdict.GuardianResult {
	st := verdict.GuardianError
	var pb *PollBoundError
	switch {
	case errors.As(err, &pb):
		if pb.Last == nil { // still pending; a service that kept failing is an error
			st = verdict.GuardianTimeout
		}
	case errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, ErrNetwork):
		st = verdict.GuardianTimeout // the caller's deadline, not a per-request timeout
	}
	return verdict.GuardianResult{Status: st, Reason: scrub(err.Error(), keys), RequestHash: hash}
}

// scrub removes any key from s. Errors of this package never contain one; this guards
// text that came from the service (humanReason).
func scrub(s string, keys []string) string {
	for _, k := range keys {
		if k != "" && strings.Contains(s, k) {
			s = strings.ReplaceAll(s, k, "[redacted]")
		}
	}
	return s
}

// scrubTree returns a copy of a decoded JSON tree with every key removed from its strings
// and object keys; it returns x itself when no string holds a key.
func scrubTree(x any, keys []string) any {
	switch t := x.(type) {
	case string:
		return scrub(t, keys)
	case map[string]any:
		if t == nil {
			return t
		}
		m := make(map[string]any, len(t))
		for k, v := range t {
			m[scrub(k, keys)] = scrubTree(v, keys)
		}
		return m
	case []any:
		if t == nil {
			return t
		}
		a := make([]any, len(t))
		for i, v := range t {
			a[i] = scrubTree(v, keys)
		}
		return a
	default:
		return x
	}
}

// VerifyPayment is the one-shot form of Guardian.Verify (docs/verdict.md#paymentaction): it
// builds a Guardian from cfg and verifies in. An invalid cfg is reported like an action
// that cannot be built: an "error" result and an *InputError.
func VerifyPayment(ctx context.Context, in PaymentInput, cfg GuardianOptions, opts PollOptions) (verdict.GuardianResult, error) {
	g, err := NewGuardian(cfg)
	if err != nil {
		return failed(err, "", nil), err
	}
	return g.Verify(ctx, in, opts)
}

// WithGuardian wraps base with a verdict check (docs/gate.md#guardian). Errors are an
// invalid cfg (*InputError).
func WithGuardian(base VerifyFn, cfg GuardianOptions, opts PollOptions) (VerifyFn, error) {
	g, err := NewGuardian(cfg)
	if err != nil {
		return nil, err
	}
	return g.Wrap(base, opts), nil
}

// Wrap wraps base with a verdict check from g:
//   - base's error, or a base result that is not valid, is returned as it is, and the
//     verdict service is not called;
//   - a valid base result stays valid only if the verdict is approved; otherwise IsValid
//     becomes false with InvalidReason x402.ReasonVerdictNotApproved (the facilitator maps
//     it to the payment's x402 version);
//   - GuardianStatus and GuardianReason are set whenever the service was consulted.
func (g *Guardian) Wrap(base VerifyFn, opts PollOptions) VerifyFn {
	return func(ctx context.Context, p *x402.Payment, r *x402.Requirements) (x402.VerifyResponse, error) {
		if base == nil || g == nil {
			return x402.VerifyResponse{}, &verdict.InputError{Field: "withGuardian", Problem: "base verifier and verdict source are required"}
		}
		res, err := base(ctx, p, r)
		if err != nil || !res.IsValid {
			return res, err
		}
		gr, _ := g.VerifyPayment(ctx, p, r, opts) // the result already fails closed on error
		if gr.Status == "" {
			gr.Status = verdict.GuardianError
		}
		res.GuardianStatus, res.GuardianReason = string(gr.Status), gr.Reason
		if !gr.Approved || gr.Status != verdict.GuardianApproved {
			res.IsValid = false
			res.InvalidReason = string(x402.ReasonVerdictNotApproved)
		}
		return res, nil
	}
}

// checkSigned checks, when the Guardian has a signer, that v is signed by it over the
// payment act of from (docs/verdict-signing.md#checking-at-the-gate). Its error is a
// *verdict.SignatureError: the result is then "error", never an approval.
func (g *Guardian) checkSigned(v *verdict.Verdict, act verdict.PaymentAction, from common.Address) error {
	if g.signer == (common.Address{}) {
		return nil
	}
	amount, ok := new(big.Int).SetString(act.Amount, 10)
	if !ok {
		return &verdict.SignatureError{Field: "amount", Problem: "the payment's amount is not a decimal number"}
	}
	want := verdict.PaymentBinding(from, act.ChainID, common.HexToAddress(act.PayTo), common.HexToAddress(act.Asset), amount)
	return verdict.CheckSignature(v, g.signer, want, time.Now())
}
