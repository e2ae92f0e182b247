package facilitator

import (
	"github.com/x402gate/x402gate/verdict"
	"github.com/x402gate/x402gate/x402"
)

// guardianDetail adds to resp what the gate passes on of a verdict result that outcome has
// normalised: the reasonCode and mode of a terminal verdict, the checks a warn or audit mode
// let through an approval (the would-be refusals the gate counts), and the failed checks of
// a rejection with their observations (docs/verdict-api.md#observations). An error result
// carries none of it.
func guardianDetail(resp *x402.VerifyResponse, res verdict.GuardianResult) {
	gv := res.Verdict
	if gv == nil || res.Status == verdict.GuardianError {
		return
	}
	resp.GuardianReasonCode, resp.GuardianMode = string(gv.ReasonCode), string(gv.Mode)
	switch res.Status {
	case verdict.GuardianApproved:
		resp.GuardianWouldFail = gv.WouldFailCodes()
	case verdict.GuardianRejected:
		resp.GuardianDenials = gv.Denials()
	}
}
