package verdictserver

import (
	"context"
	"errors"
	"time"
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
// *policy.Errors; an unknown agent store.ErrNotFound.
func (o *Operator) Replay(ctx context.Context, agentID string, draft []byte, last int) (ReplayReport, error) {
	return ReplayReport{}, ErrNoEngine
}
