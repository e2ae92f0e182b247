package verdictserver

import (
	"context"
	"encoding/json"
	"errors"
	"math/big"
	"net/http"
	"time"

	"github.com/x402gate/x402gate/verdictserver/engine"
	"github.com/x402gate/x402gate/verdictserver/policy"
	"github.com/x402gate/x402gate/verdictserver/store"
)

// WindowState is one spend window of an agent's active policy at one time
// (docs/spend-windows.md#operator). Amounts are millionths of a USD.
type WindowState struct {
	Period        string
	Asset         string // "" for a window over every action
	CapUSD        float64
	Used          int64 // committed
	Reserved      int64 // approved, not reported, not expired
	Left          int64
	PolicyVersion int64 // the policy version the windows come from
}

// Windows returns the spend windows of the agent's active policy as they are at at; none
// when the policy sets no window. An agent without a policy is store.ErrNotFound.
func (o *Operator) Windows(ctx context.Context, agentID string, at time.Time) ([]WindowState, error) {
	pv, err := o.store.ActivePolicy(ctx, agentID)
	if err != nil {
		return nil, err
	}
	doc, err := policy.Parse(pv.Document)
	if err != nil || doc.SpendWindows == nil {
		return nil, err
	}
	ws := make([]store.Window, len(doc.SpendWindows.Windows))
	for i, w := range doc.SpendWindows.Windows {
		ws[i] = store.Window{Scope: w.Scope(), Span: w.Span(), CapMicroUSD: engine.MicroUSDFloor(w.CapUSD)}
	}
	uses, err := o.store.WindowUses(ctx, agentID, ws, at)
	if err != nil {
		return nil, err
	}
	out := make([]WindowState, len(uses))
	for i, u := range uses {
		w := doc.SpendWindows.Windows[i]
		out[i] = WindowState{Period: w.Period, Asset: w.Asset, CapUSD: w.CapUSD, Used: u.Committed, Reserved: u.Reserved, Left: u.Left(), PolicyVersion: pv.Version}
	}
	return out, nil
}

// ReportExecution commits (executed) or releases the spend reservation of the agent's
// transaction requestHash (docs/spend-windows.md#reporting) and returns its state.
func (o *Operator) ReportExecution(ctx context.Context, agentID, requestHash string, executed bool, at time.Time) (string, error) {
	return o.store.ReportExecution(ctx, agentID, requestHash, executed, at)
}

// ReportMoved commits the share of the spend reservation that m says moved, and releases the
// rest (all of it when nothing moved): an upto payment's settle (docs/spend-windows.md#reporting).
func (o *Operator) ReportMoved(ctx context.Context, agentID, requestHash string, m store.Moved, at time.Time) (string, error) {
	return o.store.ReportMoved(ctx, agentID, requestHash, m, at)
}

// serveExecution answers POST /transactions/{requestHash}/execution: the agent reports
// whether it executed one of its own approved actions. A release needs ScopeReleaseOwn.
func (s *Server) serveExecution(w http.ResponseWriter, r *http.Request, p *principal) {
	s.reportExecution(w, r, p.agentID, p.has(ScopeReleaseOwn))
}

// adminExecution answers POST /admin/transactions/{requestHash}/execution: the operator
// reports for the transaction's agent.
func (s *Server) adminExecution(w http.ResponseWriter, r *http.Request, _ *principal) {
	t, err := s.op.Transaction(r.Context(), r.PathValue("requestHash"))
	if err != nil {
		s.operatorFailed(w, "report execution", err)
		return
	}
	s.reportExecution(w, r, t.AgentID, true)
}

// reportExecution reads {"executed": bool, "amount"?: string} and settles the reservation of
// agentID's transaction; mayRelease says whether the caller may report it not executed, or
// executed for less than its action's amount.
func (s *Server) reportExecution(w http.ResponseWriter, r *http.Request, agentID string, mayRelease bool) {
	obj, ok := s.adminObject(w, r, "executed", "amount")
	if !ok {
		return
	}
	executed, ok := obj["executed"].(bool)
	if !ok {
		writeFieldError(w, badField("executed", "must be true or false"))
		return
	}
	hash := r.PathValue("requestHash")
	var state string
	var err error
	if raw, set := obj["amount"]; set {
		m, ok := s.movedOf(w, r, agentID, hash, executed, raw)
		if !ok {
			return
		}
		if m.Amount.Cmp(m.Max) < 0 && !mayRelease {
			writeCode(w, codeInsufficientScope, "committing less than the action's amount releases the rest, which needs the scope "+ScopeReleaseOwn)
			return
		}
		state, err = s.op.ReportMoved(r.Context(), agentID, hash, m, s.now())
	} else {
		if !executed && !mayRelease {
			writeCode(w, codeInsufficientScope, "releasing a reservation needs the scope "+ScopeReleaseOwn)
			return
		}
		state, err = s.op.ReportExecution(r.Context(), agentID, hash, executed, s.now())
	}
	switch {
	case errors.Is(err, store.ErrTerminal):
		writeCode(w, codeConflict, "the reservation was settled the other way already")
	case err != nil:
		s.operatorFailed(w, "report execution", err)
	default:
		writeJSON(w, http.StatusOK, map[string]any{"requestHash": hash, "reservation": state})
	}
}

// movedOf reads a report's amount: what agentID's transaction hash moved of its action's
// amount (an upto payment's settled amount). It answers the request itself when not ok.
func (s *Server) movedOf(w http.ResponseWriter, r *http.Request, agentID, hash string, executed bool, raw any) (store.Moved, bool) {
	str, _ := raw.(string)
	amount, ok := new(big.Int).SetString(str, 10)
	if !executed || !ok || amount.Sign() < 0 || len(str) > 78 || str != amount.String() {
		writeFieldError(w, badField("amount", "must be a decimal string of base units, with executed true"))
		return store.Moved{}, false
	}
	t, err := s.op.Transaction(r.Context(), hash)
	if err == nil && t.AgentID != agentID {
		err = store.ErrNotFound
	}
	if err != nil {
		s.operatorFailed(w, "report execution", err)
		return store.Moved{}, false
	}
	var act struct {
		Amount string `json:"amount"`
	}
	maxAmount, ok := new(big.Int), false
	if json.Unmarshal(t.ProposedTx, &act) == nil {
		_, ok = maxAmount.SetString(act.Amount, 10)
	}
	switch {
	case !ok || maxAmount.Sign() <= 0:
		writeFieldError(w, badField("amount", "only for an action with a positive amount (a payment)"))
	case amount.Cmp(maxAmount) > 0:
		writeFieldError(w, badField("amount", "must be at most the action's amount "+maxAmount.String()))
	default:
		return store.Moved{Amount: amount, Max: maxAmount}, true
	}
	return store.Moved{}, false
}

// windowJSON is one window of GET /admin/agents/{agentId}/windows.
type windowJSON struct {
	Period        string  `json:"period"`
	Asset         *string `json:"asset"`
	CapUSD        float64 `json:"capUsd"`
	UsedUSD       float64 `json:"usedUsd"`
	ReservedUSD   float64 `json:"reservedUsd"`
	LeftUSD       float64 `json:"leftUsd"`
	PolicyVersion int64   `json:"policyVersion"`
}

// adminWindows answers GET /admin/agents/{agentId}/windows.
func (s *Server) adminWindows(w http.ResponseWriter, r *http.Request, _ *principal) {
	states, err := s.op.Windows(r.Context(), r.PathValue("agentId"), s.now())
	if err != nil {
		s.operatorFailed(w, "spend windows", err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"windows": mapSlice(states, func(st WindowState) windowJSON {
		j := windowJSON{Period: st.Period, CapUSD: st.CapUSD, UsedUSD: dollars(st.Used), ReservedUSD: dollars(st.Reserved), LeftUSD: dollars(st.Left), PolicyVersion: st.PolicyVersion}
		if st.Asset != "" {
			j.Asset = &st.Asset
		}
		return j
	})})
}

// dollars is millionths of a USD in USD.
func dollars(m int64) float64 { return float64(m) / 1e6 }
