package verdictserver

import (
	"sort"
	"time"

	"github.com/x402gate/x402gate/verdict"
	"github.com/x402gate/x402gate/verdictserver/engine"
	"github.com/x402gate/x402gate/verdictserver/policy"
)

// A replay judges the draft's spend windows (docs/replay.md#spend-windows) on the replayed
// actions themselves, oldest first, as if the draft had been enforced from the oldest one:
// each action the draft approves counts in its windows from its creation time, as a
// committed spend (a replay cannot know which the agent would have executed). Spend before
// the oldest replayed action is not counted, and nothing is read from or written to the
// store's reservations.

// replayWindows is the spend a replay has approved so far, by scope ("" for every action,
// else an asset key), in time order.
type replayWindows struct {
	sw    *policy.SpendWindows
	mode  verdict.Mode
	spent map[string][]replaySpend
}

// replaySpend is one approved spend and the total of its scope up to it.
type replaySpend struct {
	at    time.Time
	total int64 // millionths of a USD, this spend included
}

// windowSpend is what the windows need of an approved verdict: its notional in millionths
// of a USD (nil when unpriced) and the assets it touches.
type windowSpend struct {
	notional *int64
	assets   []string
}

func newReplayWindows(doc *policy.Document) *replayWindows {
	return &replayWindows{sw: doc.SpendWindows, mode: doc.Mode, spent: map[string][]replaySpend{}}
}

// spendOf copies out of an approved verdict what its windows need, as complete reads them
// (notionalOf, assetsOf).
func spendOf(v *verdict.Verdict) windowSpend {
	return windowSpend{notional: notionalOf(v), assets: assetsOf(v.Evidence.DecodedAction)}
}

// judge adds the spend_window check to an approval of the draft made at at, out being its
// outcome, and reports whether it stays approved; an approval counts in its windows. The
// check and the modes are the engine's (engine.SpendWindow, engine.LetThrough), as in
// complete.
func (w *replayWindows) judge(at time.Time, s windowSpend, out *ReplayOutcome) bool {
	_, uses := applying(w.sw, s.assets)
	for i, u := range uses {
		uses[i].Committed = w.used(u.Window.Scope(), u.Window.Span(), at)
	}
	check, _ := engine.SpendWindow(uses, s.notional)
	if check.Status == verdict.CheckFailed {
		if _, lenient := engine.LetThrough(w.mode, check); !lenient {
			*out = ReplayOutcome{Outcome: string(verdict.OutcomeRejected), ReasonCode: string(*check.Code), HumanReason: check.HumanReason,
				TriggeringPolicyField: check.TriggeringPolicyField, PolicyVersion: out.PolicyVersion, Failed: []ReplayCheck{checkOf(check)}, WouldFail: out.WouldFail}
			return false
		}
		out.WouldFail = append(out.WouldFail, checkOf(check))
	}
	if s.notional != nil {
		for _, scope := range append([]string{""}, s.assets...) {
			w.add(scope, at, *s.notional)
		}
	}
	return true
}

// used is what scope spent in the span up to at: after at-span, as the store's windows
// count it.
func (w *replayWindows) used(scope string, span time.Duration, at time.Time) int64 {
	l := w.spent[scope]
	if len(l) == 0 {
		return 0
	}
	from := at.Add(-span)
	i := sort.Search(len(l), func(i int) bool { return l[i].at.After(from) })
	if i == 0 {
		return l[len(l)-1].total
	}
	return l[len(l)-1].total - l[i-1].total
}

// add counts micro in scope at at; spends come in time order.
func (w *replayWindows) add(scope string, at time.Time, micro int64) {
	l := w.spent[scope]
	var total int64
	if len(l) > 0 {
		total = l[len(l)-1].total
	}
	w.spent[scope] = append(l, replaySpend{at: at, total: total + micro})
}
