package verdictserver

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/x402gate/x402gate/verdict"
	"github.com/x402gate/x402gate/verdictserver/policy"
	"github.com/x402gate/x402gate/verdictserver/store"
)

// Replay before enforce (docs/replay.md): a draft policy judged with the engine on an
// agent's last stored actions, to show what it would change before it is stored. Nothing
// is written: no verdict, no spend reservation, no policy version.

// DefaultReplayLast is how many of the agent's newest stored actions a replay takes when
// the caller names no number (last 0).
const DefaultReplayLast = 1000

// MaxReplayLast bounds the number of stored actions one replay takes.
const MaxReplayLast = 10000

// ErrNoEngine is Replay on an Operator made by NewOperator: replaying needs the engine
// and the policy parsing of a Server, whose Operator method gives one that can.
var ErrNoEngine = errors.New("replay needs the verdict engine: use the Operator of a Server")

// ErrReplayBusy is Replay while another replay runs on the same Operator: one at a time, so
// that replays never take both cores from the workers (docs/replay.md#one-at-a-time).
var ErrReplayBusy = errors.New("another replay is running")

// ReplayReport is what a draft policy would change on an agent's last stored actions
// (docs/replay.md#the-report). Replayed + Skipped is the number of stored actions read;
// Replayed = Unchanged + len(NewlyRefused) + len(NewlyApproved).
type ReplayReport struct {
	AgentID string `json:"agentId"`
	// ActivePolicyVersion is the agent's active policy version when the replay ran; 0 when
	// it has none.
	ActivePolicyVersion int64 `json:"activePolicyVersion"`
	// DraftVersion is the version the draft is judged as: the one SetPolicy would give it
	// now (the active version + 1).
	DraftVersion int64 `json:"draftVersion"`
	// Mode is the draft's mode (docs/policy.md#modes); "enforce" when it sets none.
	Mode string `json:"mode"`
	// Last is how many stored actions were asked for (DefaultReplayLast when 0 was given).
	Last int `json:"last"`
	// From and To are the creation times of the oldest and the newest action read; nil when
	// the agent has none.
	From *time.Time `json:"from"`
	To   *time.Time `json:"to"`
	// Replayed counts the actions the draft judged.
	Replayed int `json:"replayed"`
	// Unchanged counts the replayed actions whose outcome the draft keeps.
	Unchanged int `json:"unchanged"`
	// Skipped counts the actions read but not judged; SkippedWhy counts them by reason
	// (ReplaySkipPending, ReplaySkipUndecodable, ReplaySkipNoVerdict).
	Skipped    int            `json:"skipped"`
	SkippedWhy map[string]int `json:"skippedWhy"`
	// NewlyRefused are the actions stored as approved that the draft refuses, newest first.
	NewlyRefused []ReplayChange `json:"newlyRefused"`
	// NewlyApproved are the actions stored as refused that the draft approves, newest first.
	NewlyApproved []ReplayChange `json:"newlyApproved"`
	// SpendWindows says how the draft's spend windows were judged (docs/replay.md#spend-windows):
	// "none" when the draft sets none, else "replayed".
	SpendWindows string `json:"spendWindows"`
}

// Why a stored action is skipped (ReplayReport.SkippedWhy).
const (
	// ReplaySkipPending: the action has no verdict yet, so nothing to compare with.
	ReplaySkipPending = "pending"
	// ReplaySkipUndecodable: the stored action does not decode into an engine input.
	ReplaySkipUndecodable = "undecodable"
	// ReplaySkipNoVerdict: the engine answered no terminal, consistent verdict (the
	// lifecycle leaves such a record pending too).
	ReplaySkipNoVerdict = "no_verdict"
)

// ReplayChange is one action whose outcome the draft changes.
type ReplayChange struct {
	RequestHash string    `json:"requestHash"`
	CreatedAt   time.Time `json:"createdAt"`
	ChainID     int64     `json:"chainId"`
	Description string    `json:"description"`
	// Stored is the verdict the action has in the store; Draft the draft's.
	Stored ReplayOutcome `json:"stored"`
	Draft  ReplayOutcome `json:"draft"`
}

// ReplayOutcome is a verdict as a replay reports it: its outcome and reasons.
type ReplayOutcome struct {
	Outcome               string  `json:"outcome"`
	ReasonCode            string  `json:"reasonCode"`
	HumanReason           string  `json:"humanReason"`
	TriggeringPolicyField *string `json:"triggeringPolicyField"`
	PolicyVersion         *int64  `json:"policyVersion"`
	// Failed lists the checks that failed; WouldFail those a warn or audit mode let
	// through.
	Failed    []ReplayCheck `json:"failed"`
	WouldFail []ReplayCheck `json:"wouldFail,omitempty"`
}

// ReplayCheck is one failed check of a verdict.
type ReplayCheck struct {
	CheckID               string  `json:"checkId"`
	Code                  string  `json:"code"`
	HumanReason           string  `json:"humanReason"`
	TriggeringPolicyField *string `json:"triggeringPolicyField"`
}

// Replay judges draft, a policy document, with the engine on the agent's last stored
// actions (last of them, newest first; 0 is DefaultReplayLast, at most MaxReplayLast) and
// reports which it would newly refuse and newly approve compared with their stored
// verdicts (docs/replay.md). Nothing is written. A draft that does not validate is a
// *policy.Errors; an unknown agent store.ErrNotFound; a replay while another runs
// ErrReplayBusy.
func (o *Operator) Replay(ctx context.Context, agentID string, draft []byte, last int) (ReplayReport, error) {
	if o.srv == nil {
		return ReplayReport{}, ErrNoEngine
	}
	last = cmp.Or(last, DefaultReplayLast)
	if last < 1 || last > MaxReplayLast {
		return ReplayReport{}, &InputError{Field: "last", Problem: fmt.Sprintf("must be 1 to %d", MaxReplayLast)}
	}
	doc, err := policy.Parse(draft)
	if err != nil {
		return ReplayReport{}, err
	}
	if !o.replaying.CompareAndSwap(false, true) {
		return ReplayReport{}, ErrReplayBusy
	}
	defer o.replaying.Store(false)
	replaysTotal.Inc()
	rep := ReplayReport{AgentID: agentID, Last: last, Mode: string(cmp.Or(doc.Mode, verdict.ModeEnforce)), SpendWindows: "none",
		SkippedWhy: map[string]int{}, NewlyRefused: []ReplayChange{}, NewlyApproved: []ReplayChange{}}
	switch active, err := o.store.ActivePolicy(ctx, agentID); {
	case err == nil:
		rep.ActivePolicyVersion = active.Version
	case !errors.Is(err, store.ErrNotFound): // an agent without a policy is judged by default deny
		return ReplayReport{}, err
	}
	rep.DraftVersion = rep.ActivePolicyVersion + 1
	txs, err := o.lastTransactions(ctx, agentID, last)
	if err != nil {
		return ReplayReport{}, err
	}
	rp := replayer{srv: o.srv, policy: &policy.Policy{Version: rep.DraftVersion, Doc: doc}}
	if doc.SpendWindows != nil {
		rep.SpendWindows, rp.windows = "replayed", newReplayWindows(doc)
	}
	for i := len(txs) - 1; i >= 0; i-- { // oldest first: the draft's windows fill in time order
		if err := ctx.Err(); err != nil {
			return ReplayReport{}, err
		}
		rp.replay(ctx, txs[i], &rep)
	}
	if len(txs) > 0 {
		from, to := txs[len(txs)-1].CreatedAt, txs[0].CreatedAt // copies: the report keeps no record
		rep.From, rep.To = &from, &to
	}
	slices.Reverse(rep.NewlyRefused)
	slices.Reverse(rep.NewlyApproved)
	return rep, nil
}

// lastTransactions reads the agent's last n transactions, newest first, a page at a time.
func (o *Operator) lastTransactions(ctx context.Context, agentID string, n int) ([]store.Transaction, error) {
	var out []store.Transaction
	var after store.Cursor
	for len(out) < n {
		want := min(n-len(out), store.MaxPage)
		page, err := o.store.AgentTransactions(ctx, agentID, after, want)
		if err != nil {
			return nil, err
		}
		out = append(out, page...)
		if len(page) < want {
			break
		}
		last := page[len(page)-1]
		after = store.Cursor{CreatedAt: last.CreatedAt, ID: last.ID}
	}
	return out, nil
}

// replayer judges stored actions with a draft policy, through the lifecycle's own input
// and engine paths (recordInput, Server.run) but none of its writes.
type replayer struct {
	srv     *Server
	policy  *policy.Policy
	windows *replayWindows // nil: the draft sets no spend window
}

// replay judges t with the draft and counts it in rep.
func (rp *replayer) replay(ctx context.Context, t store.Transaction, rep *ReplayReport) {
	skip := func(why string) {
		rep.Skipped++
		rep.SkippedWhy[why]++
	}
	if t.Status == store.StatusPending {
		skip(ReplaySkipPending)
		return
	}
	in, err := recordInput(t)
	if err != nil {
		skip(ReplaySkipUndecodable)
		return
	}
	in.Policy = rp.policy
	storedApproved := t.Status == store.StatusApproved
	var draft ReplayOutcome
	var approved bool
	var spend windowSpend
	ok := rp.srv.run(ctx, in, true, func(v *verdict.Verdict) {
		approved = v.Approved()
		// the verdict is the engine's only during this call: keep what the report needs, the
		// outcome of any that may change (the windows may yet refuse an approval)
		if approved != storedApproved || (approved && rp.windows != nil) {
			draft = outcomeOf(v)
		}
		if approved && rp.windows != nil {
			spend = spendOf(v)
		}
	})
	if !ok {
		skip(ReplaySkipNoVerdict)
		return
	}
	if approved && rp.windows != nil {
		approved = rp.windows.judge(t.CreatedAt, spend, &draft)
	}
	rep.Replayed++
	if approved == storedApproved {
		rep.Unchanged++
		return
	}
	c := ReplayChange{RequestHash: t.RequestHash, CreatedAt: t.CreatedAt, ChainID: t.ChainID, Description: t.Description,
		Stored: storedOutcome(t), Draft: draft}
	if approved {
		rep.NewlyApproved = append(rep.NewlyApproved, c)
	} else {
		rep.NewlyRefused = append(rep.NewlyRefused, c)
	}
}

// outcomeOf is what a replay reports of a verdict.
func outcomeOf(v *verdict.Verdict) ReplayOutcome {
	o := ReplayOutcome{Outcome: string(v.Outcome), ReasonCode: string(v.ReasonCode), HumanReason: v.HumanReason,
		TriggeringPolicyField: clonePtr(v.TriggeringPolicyField), PolicyVersion: clonePtr(v.PolicyVersion), Failed: []ReplayCheck{}}
	for _, c := range v.Checks {
		if c.Status == verdict.CheckFailed {
			o.Failed = append(o.Failed, checkOf(c))
		}
	}
	for _, c := range v.WouldFail {
		o.WouldFail = append(o.WouldFail, checkOf(c))
	}
	return o
}

func checkOf(c verdict.Check) ReplayCheck {
	rc := ReplayCheck{CheckID: string(c.CheckID), HumanReason: c.HumanReason, TriggeringPolicyField: clonePtr(c.TriggeringPolicyField)}
	if c.Code != nil {
		rc.Code = string(*c.Code)
	}
	return rc
}

func clonePtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}

// storedOutcome is the stored verdict of a terminal record as a replay reports it; a
// verdict that does not decode keeps only the record's status. Only the members reported
// are decoded: the evidence is most of a verdict's JSON.
func storedOutcome(t store.Transaction) ReplayOutcome {
	var v struct {
		Outcome               verdict.Outcome    `json:"outcome"`
		ReasonCode            verdict.ReasonCode `json:"reasonCode"`
		HumanReason           string             `json:"humanReason"`
		TriggeringPolicyField *string            `json:"triggeringPolicyField"`
		PolicyVersion         *int64             `json:"policyVersion"`
		Checks                []verdict.Check    `json:"checks"`
		WouldFail             []verdict.Check    `json:"wouldFail"`
	}
	if err := json.Unmarshal(t.Verdict, &v); err != nil {
		return ReplayOutcome{Outcome: strings.ToLower(t.Status), PolicyVersion: t.PolicyVersion, Failed: []ReplayCheck{}}
	}
	return outcomeOf(&verdict.Verdict{Outcome: v.Outcome, ReasonCode: v.ReasonCode, HumanReason: v.HumanReason,
		TriggeringPolicyField: v.TriggeringPolicyField, PolicyVersion: v.PolicyVersion, Checks: v.Checks, WouldFail: v.WouldFail})
}
