package verdictserver

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/x402gate/x402gate/verdict"
	"github.com/x402gate/x402gate/verdictserver/engine"
	"github.com/x402gate/x402gate/verdictserver/policy"
	"github.com/x402gate/x402gate/verdictserver/store"
)

// complete stores the verdict j of record t. Under a policy with spend windows
// (docs/spend-windows.md) it first adds the spend_window check to the engine's verdict (j.v):
// an approval is decided and reserved in the store's transaction, against the windows as
// they are under the agent's lock, so that approvals on any instance never take a window
// past its cap. It notes the windows' say in j.note, which the metrics count (metrics.go).
func (s *Server) complete(ctx context.Context, t store.Transaction, in engine.Input, j *judgement) error {
	if !windowed(in) {
		return s.store.Complete(ctx, t.RequestHash, j.status, j.raw, j.policyVersion)
	}
	sw := in.Policy.Doc.SpendWindows
	if j.status != store.StatusApproved {
		raw, _, err := s.withWindowCheck(j.v, in, t.RequestHash, engine.SpendWindowNotChecked(), nil, nil)
		if err != nil {
			return err
		}
		return s.store.Complete(ctx, t.RequestHash, j.status, raw, j.policyVersion)
	}
	notional := notionalOf(j.v)
	assets := assetsOf(j.v.Evidence.DecodedAction)
	windows, uses := applying(sw, assets)
	if notional == nil {
		// unpriced: refused without reading the windows, and nothing is reserved
		check, obs := engine.SpendWindow(uses, nil)
		raw, status, err := s.withWindowCheck(j.v, in, t.RequestHash, check, &obs, nil)
		if err != nil {
			return err
		}
		j.note = j.note.afterWindow(check, status)
		return s.store.Complete(ctx, t.RequestHash, status, raw, j.policyVersion)
	}
	at := s.now()
	r := store.Reservation{
		AgentID: t.AgentID, MicroUSD: *notional, Scopes: assets,
		At: at, Expires: at.Add(sw.ReservationTTL()), Windows: windows,
	}
	// CompleteReserving writes the verdict in its transaction, in this goroutine: its JSON
	// is free once it returns, so it is written into a recycled buffer
	buf := verdictBuffers.Get().(*bytes.Buffer)
	defer putVerdictBuffer(buf)
	_, err := s.store.CompleteReserving(ctx, t.RequestHash, r, func(found []store.WindowUse) (store.Decision, error) {
		for i := range uses {
			uses[i].Committed, uses[i].Reserved = found[i].Committed, found[i].Reserved
		}
		check, obs := engine.SpendWindow(uses, notional)
		raw, status, err := s.withWindowCheck(j.v, in, t.RequestHash, check, &obs, buf)
		j.note = j.note.afterWindow(check, status)
		return store.Decision{Status: status, Verdict: raw, PolicyVersion: j.policyVersion}, err
	})
	return err
}

// verdictBuffers recycles the buffers complete encodes a verdict into when the store is done
// with it on return (CompleteReserving; Complete's group commit may write it later), and
// those encodeInto writes a verdict into before copying it out.
var verdictBuffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// maxVerdictBuffer bounds the buffers verdictBuffers keeps.
const maxVerdictBuffer = 64 << 10

func putVerdictBuffer(b *bytes.Buffer) {
	if b.Cap() <= maxVerdictBuffer {
		verdictBuffers.Put(b)
	}
}

// windowed reports whether the policy of in sets spend windows.
func windowed(in engine.Input) bool {
	return in.Policy != nil && in.Policy.Doc != nil && in.Policy.Doc.SpendWindows != nil
}

// applying is the windows of sw that apply to an action touching assets (lower-case hex),
// in the store's terms and the engine's, index for index.
func applying(sw *policy.SpendWindows, assets []string) ([]store.Window, []engine.WindowUse) {
	ws := make([]store.Window, 0, len(sw.Windows))
	uses := make([]engine.WindowUse, 0, len(sw.Windows))
	for i, w := range sw.Windows {
		scope := w.Scope()
		if scope != "" && !slices.Contains(assets, scope) {
			continue
		}
		u := engine.WindowUse{Index: i, Window: w}
		ws = append(ws, store.Window{Scope: scope, Span: w.Span(), CapMicroUSD: u.CapMicroUSD()})
		uses = append(uses, u)
	}
	return ws, uses
}

// notionalOf is the verdict's usdNotional in millionths of a USD, rounded up; nil when the
// action is unpriced.
func notionalOf(v *verdict.Verdict) *int64 {
	if v.USDNotional == nil {
		return nil
	}
	m := engine.MicroUSDCeil(*v.USDNotional)
	return &m
}

// assetsOf is every asset a decoded action (evidence.decodedAction) and its legs touch,
// lower-case and once each. It reads the action as the engine's Evaluator makes it (lists
// of strings and of maps) and as decoded JSON holds it (lists of any).
func assetsOf(action map[string]any) []string {
	var out []string
	add := func(a any) {
		if s, ok := a.(string); ok {
			if lower := strings.ToLower(s); !slices.Contains(out, lower) {
				out = append(out, lower)
			}
		}
	}
	var walk func(action map[string]any)
	walk = func(action map[string]any) {
		switch list := action["assets"].(type) {
		case []string:
			for _, a := range list {
				add(a)
			}
		case []any:
			for _, a := range list {
				add(a)
			}
		}
		switch legs := action["legs"].(type) {
		case []map[string]any:
			for _, l := range legs {
				walk(l)
			}
		case []any:
			for _, l := range legs {
				if m, ok := l.(map[string]any); ok {
					walk(m)
				}
			}
		}
	}
	walk(action)
	return out
}

// withWindowCheck adds check (and its observation, when there is one) to v, the engine's
// verdict, which it leaves as it is (a store may decide more than once); a failed check
// rejects the verdict with its code. A signing service signs the verdict as it now stands:
// the windows decide after the engine, and a window can turn an approval into a refusal
// (docs/verdict-signing.md). It returns the verdict's JSON and status once the verdict
// passes the verdict package's validator (verdict.Verdict.Validate, the rules of
// docs/verdict.md#consistency-rules). The JSON is written into into when it is not nil, and
// is then into's until into changes; else it is a slice of its own.
func (s *Server) withWindowCheck(v *verdict.Verdict, in engine.Input, hash string, check verdict.Check, obs *engine.Observation, into *bytes.Buffer) (json.RawMessage, string, error) {
	sc := windowScratches.Get().(*windowScratch)
	defer sc.recycle()
	sc.w = *v
	w := &sc.w
	failed := check.Status == verdict.CheckFailed && !letWindowThrough(w, &check)
	sc.checks = append(append(sc.checks[:0], v.Checks...), check)
	w.Checks = sc.checks
	if obs != nil && v.Evidence.Observations != nil { // none: Validate refuses the verdict
		if sc.observations == nil {
			sc.observations = make(map[string]any, len(v.Evidence.Observations)+1)
		}
		maps.Copy(sc.observations, v.Evidence.Observations)
		sc.observations[string(verdict.CheckSpendWindow)] = obs
		w.Evidence.Observations = sc.observations
	}
	if failed {
		w.Outcome, w.ReasonCode = verdict.OutcomeRejected, *check.Code
		w.HumanReason, w.TriggeringPolicyField = check.HumanReason, check.TriggeringPolicyField
	}
	w.Signature = nil
	if s.signer != nil {
		if err := s.signer.signInto(&sc.sig, w, in, hash, s.now()); err != nil {
			return nil, "", fmt.Errorf("spend windows: sign the verdict: %w", err)
		}
		w.Signature = &sc.sig
	}
	if err := w.Validate(); err != nil || !w.Terminal() {
		return nil, "", fmt.Errorf("spend windows: the verdict is not a terminal, valid one: %v", err)
	}
	raw, err := encodeInto(into, w)
	if err != nil {
		return nil, "", fmt.Errorf("spend windows: encode the verdict: %w", err)
	}
	if w.Approved() {
		return raw, store.StatusApproved, nil
	}
	return raw, store.StatusRejected, nil
}

// windowScratch is withWindowCheck's copy of the engine's verdict with its checks,
// observations and signature, recycled (windowScratches): nothing of it outlives the
// verdict's JSON, which is written into bytes of its own or into withWindowCheck's caller's
// buffer.
type windowScratch struct {
	w            verdict.Verdict
	sig          verdict.Signature
	checks       []verdict.Check
	observations map[string]any
}

var windowScratches = sync.Pool{New: func() any { return new(windowScratch) }}

// maxRecycledObservations bounds the observations map a windowScratch keeps.
const maxRecycledObservations = 32

// recycle empties sc, dropping what it points to, and puts it back in windowScratches.
func (sc *windowScratch) recycle() {
	sc.w, sc.sig = verdict.Verdict{}, verdict.Signature{}
	clear(sc.checks)
	sc.checks = sc.checks[:0]
	if len(sc.observations) > maxRecycledObservations {
		sc.observations = nil
	}
	clear(sc.observations)
	windowScratches.Put(sc)
}

// encodeInto is v's JSON (verdict.Verdict.AppendJSON, what json.Marshal writes), written
// into b when b is not nil, else bytes of its own, as many as it needs.
func encodeInto(b *bytes.Buffer, v *verdict.Verdict) (json.RawMessage, error) {
	if b == nil {
		b = verdictBuffers.Get().(*bytes.Buffer)
		defer putVerdictBuffer(b)
		raw, err := encodeInto(b, v)
		return bytes.Clone(raw), err
	}
	b.Reset()
	raw, err := v.AppendJSON(b.AvailableBuffer())
	if err != nil {
		return nil, err
	}
	_, _ = b.Write(raw) // raw is b's own bytes unless b had to grow
	return b.Bytes(), nil
}

// letWindowThrough applies a warn or audit policy to a failed spend_window check of w, as the
// engine applies it to its own checks (docs/policy.md#modes): a full window is recorded in
// wouldFail, the check becomes not_checked saying so, and a warn verdict's humanReason names
// the rejection it would have been. The approval then reserves its notional like any other:
// the action will move money. It reports false, changing nothing, in enforce mode and for a
// code every mode enforces (data_unavailable).
func letWindowThrough(w *verdict.Verdict, check *verdict.Check) bool {
	shown, ok := engine.LetThrough(w.Mode, *check)
	if !ok {
		return false
	}
	w.WouldFail = append(slices.Clip(w.WouldFail), *check)
	*check = shown
	if w.PolicyVersion != nil && w.Mode == verdict.ModeWarn {
		w.HumanReason = engine.WarnedReason(*w.PolicyVersion, w.WouldFail)
	}
	return true
}
