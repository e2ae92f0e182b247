package verdict

import "strconv"

// Mode is how the policy that judged a verdict applies its checks (docs/verdict-api.md#modes):
// enforce refuses what a check fails, warn and audit approve it and record the checks that
// would have failed in Verdict.WouldFail. It is an extension of schemaVersion 1: a verdict
// without it was judged in enforce mode.
type Mode string

// The three modes of a policy (docs/policy.md#modes).
const (
	ModeEnforce Mode = "enforce" // the default: a failed check rejects the action
	ModeWarn    Mode = "warn"    // approve; humanReason and wouldFail name what would have failed
	ModeAudit   Mode = "audit"   // approve; only wouldFail records what would have failed
)

// Known reports whether m is enforce, warn or audit.
func (m Mode) Known() bool { return m == ModeEnforce || m == ModeWarn || m == ModeAudit }

// Lenient reports whether m approves what its checks fail: warn and audit.
func (m Mode) Lenient() bool { return m == ModeWarn || m == ModeAudit }

// Enforces reports whether a mode refuses an action when check c fails with code rc
// (docs/policy.md#modes). Warn and audit let a policy check's failure through, but never a
// sanctioned address (screening is not part of the policy) nor a cross-cutting code: what
// the engine cannot decode or price is not approved in any mode.
func (m Mode) Enforces(c CheckID, rc ReasonCode) bool {
	return !m.Lenient() || c == CheckSanctions || rc.CrossCutting()
}

// modeInconsistency applies the rules of the mode extension (docs/verdict-api.md#modes): the
// mode is absent or known; only a lenient mode records checks that would have failed; each
// such record is a failed check with a code that Enforces would let through, and the same
// check is not failed in checks. It returns the field at fault and the broken rule, or "".
func (vd *Verdict) modeInconsistency() (field, problem string) {
	if vd.Mode != "" && !vd.Mode.Known() {
		return "mode", "must be enforce, warn or audit"
	}
	if len(vd.WouldFail) > 0 && !vd.Mode.Lenient() {
		return "wouldFail", "only a verdict of mode warn or audit records checks that would have failed"
	}
	for i := range vd.WouldFail {
		w := &vd.WouldFail[i]
		p := "wouldFail[" + strconv.Itoa(i) + "]"
		if w.Status != CheckFailed || w.Code == nil {
			return p + ".status", "a check that would have failed is failed and has a code"
		}
		if vd.Mode.Enforces(w.CheckID, *w.Code) {
			return p + ".code", "is enforced in every mode: it cannot be let through"
		}
		for j := range vd.Checks {
			if vd.Checks[j].CheckID == w.CheckID && vd.Checks[j].Status == CheckFailed {
				return p + ".checkId", "is failed in checks: a check that was let through is not_checked there"
			}
		}
	}
	return "", ""
}
