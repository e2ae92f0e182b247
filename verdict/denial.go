package verdict

import "github.com/x402gate/x402gate/x402"

// Denials are the failed checks of gv, each with its observation (docs/verdict-api.md#observations):
// what a refused payment tells its payer so that the agent can correct its request. An
// approval, or a verdict without a failed check (decode_failure), has none.
func (gv *GuardianVerdict) Denials() []x402.GuardianDenial {
	if gv == nil || gv.Outcome != OutcomeRejected {
		return nil
	}
	var out []x402.GuardianDenial
	for _, c := range gv.Checks {
		if c.Status != CheckFailed {
			continue
		}
		d := x402.GuardianDenial{CheckID: string(c.CheckID), HumanReason: c.HumanReason}
		if c.Code != nil {
			d.Code = string(*c.Code)
		}
		if c.TriggeringPolicyField != nil {
			d.TriggeringPolicyField = *c.TriggeringPolicyField
		}
		if gv.Evidence != nil {
			if o, ok := gv.Evidence.Observations[string(c.CheckID)].(map[string]any); ok {
				d.Observed, d.Expected = o["observed"], o["expected"]
				d.Suggestion, _ = o["suggestion"].(string)
			}
		}
		out = append(out, d)
	}
	return out
}

// WouldFailCodes are the codes of the checks a warn or audit mode let through gv.
func (gv *GuardianVerdict) WouldFailCodes() []string {
	if gv == nil || len(gv.WouldFail) == 0 {
		return nil
	}
	out := make([]string, len(gv.WouldFail))
	for i, c := range gv.WouldFail {
		out[i] = string(c.CheckID)
		if c.Code != nil {
			out[i] = string(*c.Code)
		}
	}
	return out
}
