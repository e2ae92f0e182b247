package engine

import (
	"strconv"

	"github.com/x402gate/x402gate/verdict"
)

// letThrough applies a warn or audit mode to the checks' results (docs/policy.md#modes): each
// failed check the mode does not enforce becomes not_checked, its reason saying so, and is
// returned, as it would have been reported, in the order in which the first failed check
// decides a rejection. Its observation stays, with its suggestion. Enforce changes nothing
// and returns nil.
func letThrough(m verdict.Mode, results *[numChecks]result) []verdict.Check {
	if !m.Lenient() {
		return nil
	}
	var would []verdict.Check
	for _, i := range reasonIndexes {
		r := &results[i]
		id := checks[i].id
		if r.status != verdict.CheckFailed {
			continue
		}
		w := verdict.Check{CheckID: id, Status: verdict.CheckFailed, Code: reasonCodePtr(r.code), HumanReason: r.reason}
		if r.field != "" {
			w.TriggeringPolicyField = fieldPtr(r.field)
		}
		shown, ok := LetThrough(m, w)
		if !ok {
			continue
		}
		would = append(would, w)
		r.status, r.code, r.reason = shown.Status, "", shown.HumanReason
	}
	return would
}

// LetThrough applies mode m to one check c (docs/policy.md#modes): a failed check that m
// does not enforce is shown not_checked, its reason saying so, and ok is true; c itself is
// then what wouldFail records. Anything else is returned as it is, ok false. The engine's
// checks and the spend windows, decided after the engine, both go through it.
func LetThrough(m verdict.Mode, c verdict.Check) (shown verdict.Check, ok bool) {
	if c.Status != verdict.CheckFailed || c.Code == nil || m.Enforces(c.CheckID, *c.Code) {
		return c, false
	}
	shown = c
	shown.Status, shown.Code = verdict.CheckNotChecked, nil
	shown.HumanReason = "not enforced in " + string(m) + " mode; would have failed: " + c.HumanReason
	return shown, true
}

// WarnedReason is the humanReason of an approval in warn mode that let checks through: the
// reason of the first, which would have decided the rejection, and how many more there are.
// The spend windows, decided after the engine, use it too (docs/spend-windows.md).
func WarnedReason(v int64, wouldFail []verdict.Check) string {
	first := wouldFail[0]
	s := "approved in warn mode under policy version " + strconv.FormatInt(v, 10) +
		"; would have been rejected with " + string(*first.Code) + ": " + first.HumanReason
	if n := len(wouldFail) - 1; n > 0 {
		s += " (and " + strconv.Itoa(n) + " more failed check"
		if n > 1 {
			s += "s"
		}
		s += ": see wouldFail)"
	}
	return s
}
