package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"time"
)

// Spend windows (docs/spend-windows.md#reserve-then-commit): an approval reserves its USD
// notional in the same transaction that stores the verdict, under a lock on the agent's
// row, so that no two approvals of one agent (on any instance sharing the database) read
// the windows' totals at once. A reservation counts until it is released or expires; once
// committed it counts for as long as its windows cover it.

// Reservation states.
const (
	ReservationReserved  = "reserved"
	ReservationCommitted = "committed"
	ReservationReleased  = "released"
)

// ErrReservationNotFound: the transaction has no spend reservation (it was rejected, or
// its policy had no window).
var ErrReservationNotFound = fmt.Errorf("spend reservation: %w", ErrNotFound)

// Window is one rolling spend window in the store's terms.
type Window struct {
	Scope       string        // "" for the agent's overall spending, else an asset key
	Span        time.Duration // how far back from the reservation's time the window reaches
	CapMicroUSD int64         // the cap, in millionths of a USD
}

// WindowUse is what a window holds at one time, in millionths of a USD.
type WindowUse struct {
	Window
	Committed int64 // reported executed
	Reserved  int64 // approved, not yet reported, not expired
}

// Left is what the window still admits (never negative).
func (u WindowUse) Left() int64 { return max(u.CapMicroUSD-u.Committed-u.Reserved, 0) }

// Reservation is what CompleteReserving reserves when its decision approves.
type Reservation struct {
	AgentID  string
	MicroUSD int64     // the action's notional, rounded up
	Scopes   []string  // the asset keys the action touches; "" (overall) is always reserved too
	At       time.Time // the reservation's time: windows reach back from it
	Expires  time.Time // when an unreported reservation stops counting
	Windows  []Window  // the windows that apply to the action
}

// Decision is the verdict a caller makes once it sees the windows' use (before the
// reservation): the status, the verdict (a JSON object), and the policy version.
type Decision struct {
	Status        string // StatusApproved reserves; StatusRejected reserves nothing
	Verdict       json.RawMessage
	PolicyVersion *int64
}

// CompleteReserving completes the PENDING transaction requestHash as Complete does, but
// first locks the agent's row, reads the use of r.Windows at r.At, and asks decide for the
// verdict; an approval reserves r.MicroUSD in scope "" and in each of r.Scopes, in the same
// transaction. It returns the decision stored. A terminal record is ErrTerminal, an
// unknown one ErrNotFound; decide's error is returned as it is, and nothing is written.
func (s *Store) CompleteReserving(ctx context.Context, requestHash string, r Reservation, decide func([]WindowUse) (Decision, error)) (Decision, error) {
	op := "complete with spend windows " + requestHash
	if r.MicroUSD < 0 || r.AgentID == "" || !r.Expires.After(r.At) {
		return Decision{}, invalid(op, "a reservation needs an agent, a notional >= 0 and an expiry after its time")
	}
	var d Decision
	err := s.inTx(ctx, op, func(tx *sql.Tx) error {
		var status string
		err := tx.QueryRowContext(ctx, `SELECT t.status FROM agents a JOIN transactions t ON t.agent_id = a.id
			WHERE a.id = $1 AND t.request_hash = $2`+s.forUpdateOf("a"), r.AgentID, requestHash).Scan(&status)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("verdict store %s: %w", op, ErrNotFound)
		}
		if err != nil {
			return s.fail(op, err)
		}
		if status != StatusPending {
			return fmt.Errorf("verdict store %s: already %s: %w", op, status, ErrTerminal)
		}
		use, err := windowUses(ctx, tx, r.AgentID, r.Windows, r.At)
		if err != nil {
			return s.fail(op, err)
		}
		if d, err = decide(use); err != nil {
			return err
		}
		if err := checkDecision(op, d); err != nil {
			return err
		}
		if d.Status == StatusApproved {
			if err := reserve(ctx, tx, requestHash, r); err != nil {
				return s.fail(op, err)
			}
		}
		ok, err := affected(tx.StmtContext(ctx, s.stmts.completeTransaction).ExecContext(ctx, d.Status, string(d.Verdict), policyArg(d.PolicyVersion), micros(now()), requestHash))
		if err != nil {
			return s.fail(op, err)
		}
		if !ok {
			return fmt.Errorf("verdict store %s: completed concurrently: %w", op, ErrTerminal)
		}
		return nil
	})
	return d, err
}

// checkDecision holds a decision to Complete's rules.
func checkDecision(op string, d Decision) error {
	switch {
	case d.Status != StatusApproved && d.Status != StatusRejected:
		return invalid(op, "status %q is not terminal", d.Status)
	case !jsonObject(d.Verdict):
		return invalid(op, "verdict is not a JSON object")
	case d.PolicyVersion != nil && *d.PolicyVersion <= 0:
		return invalid(op, "policy version %d", *d.PolicyVersion)
	}
	return nil
}

// policyArg is a policy version as a column value.
func policyArg(v *int64) any {
	if v == nil {
		return nil
	}
	return *v
}

// reserve writes r's rows: scope "" and each of r.Scopes once.
func reserve(ctx context.Context, tx *sql.Tx, requestHash string, r Reservation) error {
	seen := map[string]bool{}
	for _, scope := range append([]string{""}, r.Scopes...) {
		if seen[scope] {
			continue
		}
		seen[scope] = true
		if _, err := tx.ExecContext(ctx, `INSERT INTO spend_reservations
			(request_hash, scope, agent_id, usd_micros, state, created_at, expires_at, updated_at)
			VALUES ($1, $2, $3, $4, 'reserved', $5, $6, $5)`,
			requestHash, scope, r.AgentID, r.MicroUSD, micros(r.At), micros(r.Expires)); err != nil {
			return err
		}
	}
	return nil
}

// querier is what windowUses reads through: the database or a transaction.
type querier interface {
	QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row
}

// windowUses reads each window's committed and live reserved totals at at.
func windowUses(ctx context.Context, q querier, agentID string, ws []Window, at time.Time) ([]WindowUse, error) {
	out := make([]WindowUse, len(ws))
	for i, w := range ws {
		out[i].Window = w
		err := q.QueryRowContext(ctx, `SELECT
			COALESCE(SUM(CASE WHEN state = 'committed' THEN usd_micros ELSE 0 END), 0),
			COALESCE(SUM(CASE WHEN state = 'reserved' AND expires_at > $4 THEN usd_micros ELSE 0 END), 0)
			FROM spend_reservations WHERE agent_id = $1 AND scope = $2 AND created_at > $3`,
			agentID, w.Scope, micros(at.Add(-w.Span)), micros(at)).Scan(&out[i].Committed, &out[i].Reserved)
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// WindowUses returns what each of ws holds for the agent at at (docs/spend-windows.md#operator).
func (s *Store) WindowUses(ctx context.Context, agentID string, ws []Window, at time.Time) ([]WindowUse, error) {
	use, err := windowUses(ctx, s.db, agentID, ws, at)
	if err != nil {
		return nil, s.fail("spend windows of "+agentID, err)
	}
	return use, nil
}

// ReportExecution settles the reservation of the agent's transaction requestHash: committed
// when executed, else released (docs/spend-windows.md#reporting). Reporting the state it
// already has again is a no-op; a commit follows a release (the money moved after all), and
// nothing changes a commit (ErrTerminal). A transaction of
// another agent, or one without a reservation, is ErrReservationNotFound. It returns the
// reservation's state.
func (s *Store) ReportExecution(ctx context.Context, agentID, requestHash string, executed bool, at time.Time) (string, error) {
	want := ReservationReleased
	if executed {
		want = ReservationCommitted
	}
	return s.settleReservation(ctx, agentID, requestHash, want, nil, at)
}

// Moved is what an approved action moved of the most it could: Amount of Max, both in the
// action's base units, 0 <= Amount <= Max, Max > 0 (an upto payment's settled amount of
// its signed maximum).
type Moved struct {
	Amount, Max *big.Int
}

// ReportMoved settles the reservation of the agent's transaction requestHash as
// ReportExecution does, for an action that moved m.Amount of the m.Max it reserved
// (docs/spend-windows.md#reporting): an amount of 0 releases the reservation; any other
// commits m.Amount/m.Max of the reserved USD (priced like the reservation, rounded up to a
// millionth of a USD) and releases the rest at once.
func (s *Store) ReportMoved(ctx context.Context, agentID, requestHash string, m Moved, at time.Time) (string, error) {
	if m.Amount == nil || m.Max == nil || m.Amount.Sign() < 0 || m.Max.Sign() <= 0 || m.Amount.Cmp(m.Max) > 0 {
		return "", invalid("report execution of "+requestHash, "a moved amount must be 0 to its maximum")
	}
	if m.Amount.Sign() == 0 {
		return s.settleReservation(ctx, agentID, requestHash, ReservationReleased, nil, at)
	}
	return s.settleReservation(ctx, agentID, requestHash, ReservationCommitted, &m, at)
}

// share is ceil(micros × m.Amount / m.Max): the USD of what moved, priced like the
// reservation of m.Max.
func (m *Moved) share(micros int64) int64 {
	n := new(big.Int).Mul(big.NewInt(micros), m.Amount)
	n.Add(n, new(big.Int).Sub(m.Max, big.NewInt(1)))
	return n.Quo(n, m.Max).Int64()
}

// settleReservation moves the reservation of the agent's transaction requestHash to want;
// a commit with m set commits m's share of the reserved USD.
func (s *Store) settleReservation(ctx context.Context, agentID, requestHash, want string, m *Moved, at time.Time) (string, error) {
	op := "report execution of " + requestHash
	var state string
	err := s.inTx(ctx, op, func(tx *sql.Tx) error {
		var reserved int64
		err := tx.QueryRowContext(ctx, `SELECT state, usd_micros FROM spend_reservations
			WHERE request_hash = $1 AND agent_id = $2 AND scope = ''`, requestHash, agentID).Scan(&state, &reserved)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("verdict store %s: %w", op, ErrReservationNotFound)
		}
		if err != nil {
			return s.fail(op, err)
		}
		if state == want {
			return nil
		}
		// Money that moved counts: a commit also follows a release; nothing follows a commit.
		if state == ReservationCommitted {
			return fmt.Errorf("verdict store %s: already %s: %w", op, state, ErrTerminal)
		}
		if m != nil {
			reserved = m.share(reserved)
		}
		// Every scope reserved the same notional, so every scope takes the same amount. The
		// guard on state makes a concurrent report that changed it first win.
		ok, err := affected(tx.ExecContext(ctx, `UPDATE spend_reservations SET state = $1, updated_at = $2, usd_micros = $5
			WHERE request_hash = $3 AND state = $4`, want, micros(at), requestHash, state, reserved))
		if err != nil {
			return s.fail(op, err)
		}
		if !ok {
			return fmt.Errorf("verdict store %s: reported concurrently: %w", op, ErrTerminal)
		}
		state = want
		return nil
	})
	return state, err
}

// forUpdateOf is forUpdate naming the locked table's alias.
func (s *Store) forUpdateOf(alias string) string {
	if f := s.forUpdate(); f != "" {
		return f + " OF " + alias
	}
	return ""
}
