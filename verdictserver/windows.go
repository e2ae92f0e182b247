package verdictserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/x402gate/x402gate/verdict"
	"github.com/x402gate/x402gate/verdictserver/engine"
	"github.com/x402gate/x402gate/verdictserver/policy"
	"github.com/x402gate/x402gate/verdictserver/store"
)

// complete stores the verdict j of record t. Under a policy with spend windows
// (docs/spend-windows.md) it first adds the spend_window check: an approval is decided and
// reserved in the store's transaction, against the windows as they are under the agent's
// lock, so that approvals on any instance never take a window past its cap.
func (s *Server) complete(ctx context.Context, t store.Transaction, in engine.Input, j judgement) error {
	if !windowed(in) {
		return s.store.Complete(ctx, t.RequestHash, j.status, j.raw, j.policyVersion)
	}
	sw := in.Policy.Doc.SpendWindows
	tree, err := verdictTree(j.raw)
	if err != nil {
		return err
	}
	if j.status != store.StatusApproved {
		raw, _, err := s.withWindowCheck(tree, in, t.RequestHash, engine.SpendWindowNotChecked(), nil)
		if err != nil {
			return err
		}
		return s.store.Complete(ctx, t.RequestHash, j.status, raw, j.policyVersion)
	}
	notional, err := notionalOf(tree)
	if err != nil {
		return err
	}
	assets := assetsOf(tree["evidence"])
	windows, uses := applying(sw, assets)
	if notional == nil {
		// unpriced: refused without reading the windows, and nothing is reserved
		check, obs := engine.SpendWindow(uses, nil)
		raw, status, err := s.withWindowCheck(tree, in, t.RequestHash, check, &obs)
		if err != nil {
			return err
		}
		return s.store.Complete(ctx, t.RequestHash, status, raw, j.policyVersion)
	}
	at := s.now()
	r := store.Reservation{
		AgentID: t.AgentID, MicroUSD: *notional, Scopes: assets,
		At: at, Expires: at.Add(sw.ReservationTTL()), Windows: windows,
	}
	_, err = s.store.CompleteReserving(ctx, t.RequestHash, r, func(found []store.WindowUse) (store.Decision, error) {
		for i := range uses {
			uses[i].Committed, uses[i].Reserved = found[i].Committed, found[i].Reserved
		}
		check, obs := engine.SpendWindow(uses, notional)
		raw, status, err := s.withWindowCheck(tree, in, t.RequestHash, check, &obs)
		return store.Decision{Status: status, Verdict: raw, PolicyVersion: j.policyVersion}, err
	})
	return err
}

// windowed reports whether the policy of in sets spend windows.
func windowed(in engine.Input) bool {
	return in.Policy != nil && in.Policy.Doc != nil && in.Policy.Doc.SpendWindows != nil
}

// applying is the windows of sw that apply to an action touching assets (lower-case hex),
// in the store's terms and the engine's, index for index.
func applying(sw *policy.SpendWindows, assets []string) ([]store.Window, []engine.WindowUse) {
	var ws []store.Window
	var uses []engine.WindowUse
	for i, w := range sw.Windows {
		if w.Scope() != "" && !slices.Contains(assets, w.Scope()) {
			continue
		}
		u := engine.WindowUse{Index: i, Window: w}
		ws = append(ws, store.Window{Scope: w.Scope(), Span: w.Span(), CapMicroUSD: u.CapMicroUSD()})
		uses = append(uses, u)
	}
	return ws, uses
}

// verdictTree decodes a verdict the engine made, keeping every member and number as it is.
func verdictTree(raw json.RawMessage) (map[string]any, error) {
	tree, err := verdict.ParseJSON(raw)
	if err != nil {
		return nil, fmt.Errorf("spend windows: decode the verdict: %w", err)
	}
	m, ok := tree.(map[string]any)
	if !ok {
		return nil, errors.New("spend windows: the verdict is not an object")
	}
	return m, nil
}

// notionalOf is the verdict's usdNotional in millionths of a USD, rounded up; nil when the
// action is unpriced.
func notionalOf(tree map[string]any) (*int64, error) {
	n, ok := tree["usdNotional"].(json.Number)
	if !ok {
		return nil, nil
	}
	f, err := n.Float64()
	if err != nil {
		return nil, fmt.Errorf("spend windows: usdNotional %s: %w", n, err)
	}
	m := engine.MicroUSDCeil(f)
	return &m, nil
}

// assetsOf is every asset the decoded action and its legs touch, lower-case and once each.
func assetsOf(evidence any) []string {
	var out []string
	var walk func(action any)
	walk = func(action any) {
		m, _ := action.(map[string]any)
		list, _ := m["assets"].([]any)
		for _, a := range list {
			if s, ok := a.(string); ok && !slices.Contains(out, strings.ToLower(s)) {
				out = append(out, strings.ToLower(s))
			}
		}
		legs, _ := m["legs"].([]any)
		for _, l := range legs {
			walk(l)
		}
	}
	ev, _ := evidence.(map[string]any)
	walk(ev["decodedAction"])
	return out
}

// withWindowCheck adds check (and its observation, when there is one) to the verdict tree;
// a failed check rejects the verdict with its code. It returns the verdict's JSON and
// status once it passes the verdict package's validator (docs/verdict.md#consistency-rules).
// A signing service signs the verdict as it now stands: the engine's signature covered the
// verdict before the windows decided, and a window can turn an approval into a refusal
// (docs/verdict-signing.md).
func (s *Server) withWindowCheck(tree map[string]any, in engine.Input, hash string, check verdict.Check, obs *engine.Observation) (json.RawMessage, string, error) {
	failed := check.Status == verdict.CheckFailed
	if failed && letWindowThrough(tree, &check) {
		failed = false
	}
	checks, _ := tree["checks"].([]any)
	tree["checks"] = append(checks, check)
	if ev, ok := tree["evidence"].(map[string]any); ok && obs != nil {
		if o, ok := ev["observations"].(map[string]any); ok {
			o[string(verdict.CheckSpendWindow)] = obs
		}
	}
	if failed {
		tree["outcome"], tree["reasonCode"] = verdict.OutcomeRejected, *check.Code
		tree["humanReason"], tree["triggeringPolicyField"] = check.HumanReason, check.TriggeringPolicyField
	}
	delete(tree, "signature")
	v, raw, err := parseTree(tree, hash)
	if err != nil {
		return nil, "", err
	}
	if s.signer != nil {
		sig, err := s.signer.sign(v, in, hash, s.now())
		if err != nil {
			return nil, "", fmt.Errorf("spend windows: sign the verdict: %w", err)
		}
		// signed from the verdict parseTree validated: its outcome and policy version are
		// the verdict's by construction, so it is encoded without parsing it all again
		// (TestEveryVerdictOfAnyModeWindowAndSignatureIsValid parses every one)
		tree["signature"] = sig
		if raw, err = json.Marshal(tree); err != nil {
			return nil, "", fmt.Errorf("spend windows: encode the signed verdict: %w", err)
		}
	}
	if v.Approved() {
		return raw, store.StatusApproved, nil
	}
	return raw, store.StatusRejected, nil
}

// letWindowThrough applies a warn or audit policy to a failed spend_window check, as the
// engine applies it to its own checks (docs/policy.md#modes): a full window is recorded in
// wouldFail, the check becomes not_checked saying so, and a warn verdict's humanReason names
// the rejection it would have been. The approval then reserves its notional like any other:
// the action will move money. It reports false, changing nothing, in enforce mode and for a
// code every mode enforces (data_unavailable).
func letWindowThrough(tree map[string]any, check *verdict.Check) bool {
	m, _ := tree["mode"].(string)
	mode := verdict.Mode(m)
	shown, ok := engine.LetThrough(mode, *check)
	if !ok {
		return false
	}
	wouldFail, _ := tree["wouldFail"].([]any)
	tree["wouldFail"] = append(wouldFail, *check)
	*check = shown
	if n, ok := tree["policyVersion"].(json.Number); ok && mode == verdict.ModeWarn {
		var all []verdict.Check
		pv, err := n.Int64()
		if b, merr := json.Marshal(tree["wouldFail"]); err == nil && merr == nil && json.Unmarshal(b, &all) == nil {
			tree["humanReason"] = engine.WarnedReason(pv, all)
		}
	}
	return true
}

// parseTree encodes a verdict tree and holds it to the verdict package's validator.
func parseTree(tree map[string]any, hash string) (*verdict.Verdict, json.RawMessage, error) {
	raw, err := json.Marshal(tree)
	if err != nil {
		return nil, nil, fmt.Errorf("spend windows: encode the verdict: %w", err)
	}
	v, err := verdict.ParseVerdict(raw, hash)
	if err != nil || !v.Terminal() {
		return nil, nil, fmt.Errorf("spend windows: the verdict is not a terminal, valid one: %v", err)
	}
	return v, raw, nil
}
