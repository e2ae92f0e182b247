package verdict

import "time"

// GuardianStatus is the status of a GuardianResult.
type GuardianStatus string

// Guardian statuses (docs/verdict.md#paymentaction).
const (
	GuardianApproved GuardianStatus = "approved" // terminal verdict, outcome approved
	GuardianRejected GuardianStatus = "rejected" // terminal verdict, outcome rejected
	GuardianTimeout  GuardianStatus = "timeout"  // still pending at the polling bound or the context deadline
	GuardianError    GuardianStatus = "error"    // anything else: refused, malformed, unavailable, cancelled
)

// GuardianResult is the outcome of checking one payment with the verdict service
// (docs/verdict.md#paymentaction). Only Approved matters for the decision; the rest
// explains it. verdictclient's Guardian returns it, and the facilitator's Verdicts
// interface passes it on.
type GuardianResult struct {
	// Approved is true only when the terminal verdict's outcome is approved.
	Approved bool `json:"approved"`
	// Status is approved, rejected, timeout or error.
	Status GuardianStatus `json:"status"`
	// Reason is a non-sensitive, human-readable verdict or failure reason. It names the
	// requestHash (or the trace id) when one is known and never contains an API key.
	Reason string `json:"reason,omitempty"`
	// Verdict is set for terminal verdicts. Unknown reasonCode values pass through.
	Verdict *GuardianVerdict `json:"verdict,omitempty"`
	// RequestHash identifies the transaction for logs, when one was created.
	RequestHash string `json:"requestHash,omitempty"`
}

// GuardianVerdict is the part of a terminal verdict a GuardianResult carries (docs/verdict.md#paymentaction):
// outcome, reasonCode and humanReason always; the rest when the service sent them.
type GuardianVerdict struct {
	// Outcome is approved or rejected.
	Outcome Outcome `json:"outcome"`
	// ReasonCode is allowed, or a violation code, possibly one this version does not know.
	ReasonCode ReasonCode `json:"reasonCode"`
	// HumanReason is the service's explanation.
	HumanReason string `json:"humanReason"`
	// Checks are the per-check results.
	Checks []Check `json:"checks,omitempty"`
	// Evidence is what the service decoded and observed.
	Evidence *Evidence `json:"evidence,omitempty"`
	// PolicyVersion is the evaluated policy's version, when resolved.
	PolicyVersion *int64 `json:"policyVersion,omitempty"`
	// USDNotional is the action's notional in USD, when priced.
	USDNotional *float64 `json:"usdNotional,omitempty"`
	// Timestamp is when the verdict was made.
	Timestamp time.Time `json:"timestamp"`
	// Mode is the mode of the policy that judged the verdict, when the service said
	// (docs/verdict-api.md#modes).
	Mode Mode `json:"mode,omitempty"`
	// WouldFail are the checks a warn or audit mode let through.
	WouldFail []Check `json:"wouldFail,omitempty"`
}
