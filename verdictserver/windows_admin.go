package verdictserver

import (
	"context"
	"errors"
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

// reportExecution reads {"executed": bool} and settles the reservation of agentID's
// transaction; mayRelease says whether the caller may report it not executed.
func (s *Server) reportExecution(w http.ResponseWriter, r *http.Request, agentID string, mayRelease bool) {
	obj, ok := s.adminObject(w, r, "executed")
	if !ok {
		return
	}
	executed, ok := obj["executed"].(bool)
	if !ok {
		writeFieldError(w, badField("executed", "must be true or false"))
		return
	}
	if !executed && !mayRelease {
		writeCode(w, codeInsufficientScope, "releasing a reservation needs the scope "+ScopeReleaseOwn)
		return
	}
	hash := r.PathValue("requestHash")
	state, err := s.op.ReportExecution(r.Context(), agentID, hash, executed, s.now())
	switch {
	case errors.Is(err, store.ErrTerminal):
		writeCode(w, codeConflict, "the reservation was settled the other way already")
	case err != nil:
		s.operatorFailed(w, "report execution", err)
	default:
		writeJSON(w, http.StatusOK, map[string]any{"requestHash": hash, "reservation": state})
	}
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
