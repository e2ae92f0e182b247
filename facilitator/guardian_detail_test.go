package facilitator

import (
	"testing"

	"github.com/x402gate/x402gate/verdict"
	"github.com/x402gate/x402gate/x402"
)

// TestGuardianDetail: what /verify passes on of a normalised verdict result
// (docs/verdict-api.md#modes, #observations): the would-be refusals of an approval, the
// denials of a rejection, and nothing of an error, even one that carries a verdict.
func TestGuardianDetail(t *testing.T) {
	code := verdict.ReasonRecipientNotAllowed
	failedRecipient := verdict.Check{CheckID: verdict.CheckRecipient, Status: verdict.CheckFailed, Code: &code, HumanReason: "not allowed"}
	obs := &verdict.Evidence{Observations: map[string]any{"recipient": map[string]any{"observed": "a", "expected": "b", "suggestion": "use b"}}}
	for _, tc := range []struct {
		name             string
		res              verdict.GuardianResult
		mode, reasonCode string
		wouldFail        int
		denials          int
	}{
		{"an approval in warn mode counts its would-be refusal", outcome(verdict.GuardianResult{Approved: true, Status: verdict.GuardianApproved,
			Verdict: &verdict.GuardianVerdict{Outcome: verdict.OutcomeApproved, ReasonCode: verdict.ReasonAllowed, Mode: verdict.ModeWarn,
				WouldFail: []verdict.Check{failedRecipient}}}), "warn", "allowed", 1, 0},
		{"a rejection carries its denials", outcome(verdict.GuardianResult{Status: verdict.GuardianRejected,
			Verdict: &verdict.GuardianVerdict{Outcome: verdict.OutcomeRejected, ReasonCode: code, Mode: verdict.ModeEnforce,
				Checks: []verdict.Check{failedRecipient}, Evidence: obs}}), "enforce", string(code), 0, 1},
		{"an approval without its status is an error and carries nothing", outcome(verdict.GuardianResult{Approved: true,
			Verdict: &verdict.GuardianVerdict{Outcome: verdict.OutcomeApproved, Mode: verdict.ModeAudit, WouldFail: []verdict.Check{failedRecipient}}}), "", "", 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var resp x402.VerifyResponse
			guardianDetail(&resp, tc.res)
			if resp.GuardianMode != tc.mode || resp.GuardianReasonCode != tc.reasonCode || len(resp.GuardianWouldFail) != tc.wouldFail || len(resp.GuardianDenials) != tc.denials {
				t.Fatalf("%+v", resp)
			}
			if tc.denials > 0 && resp.GuardianDenials[0].Suggestion != "use b" {
				t.Fatalf("denial %+v lacks the suggestion", resp.GuardianDenials[0])
			}
		})
	}
}
