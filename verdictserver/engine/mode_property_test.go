package engine

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/x402gate/x402gate/verdict"
	"github.com/x402gate/x402gate/verdictserver/policy"
)

// inMode is pol with its mode set to m: the same version and constraints.
func inMode(pol *policy.Policy, m verdict.Mode) *policy.Policy {
	if pol == nil {
		return nil
	}
	d := *pol.Doc
	d.Mode = m
	return &policy.Policy{Version: pol.Version, Doc: &d}
}

// TestEveryVerdictOfEveryModeIsValid judges random payments, EVM calls and Hyperliquid
// actions under the same policy in enforce, warn and audit (docs/policy.md#modes). Every
// verdict passes verdict.ParseVerdict (mustBeValid); each failed check's observation has an
// observed and an expected value; and the modes differ only as documented: warn and audit
// turn each failed check they do not enforce into not_checked and list it, as enforce
// reported it, in wouldFail, and reject only with the first failure they enforce.
func TestEveryVerdictOfEveryModeIsValid(t *testing.T) {
	e := newEngine(t, Config{}, Deps{References: hlMarks})
	lets := map[verdict.Mode]int{}
	for seed := uint64(1); seed <= 1500; seed++ {
		g := gen{rand.New(rand.NewPCG(seed, 24))}
		pol := g.policy(t)
		var tx map[string]any
		switch g.pick(3) {
		case 0:
			tx, _ = g.action()
		case 1:
			if pol != nil && pol.Doc.Venues != nil {
				pol.Doc.Venues.Allowed = append(slices.Clone(pol.Doc.Venues.Allowed), "evm", "uniswap")
			}
			tx = g.evmAction(t)
		default:
			if pol != nil {
				g.hlPolicy(pol)
			}
			tx = g.hlAction()
		}
		in := Input{Escrow: escrow, ProposedTx: tx, Metadata: g.context()}
		judged := map[verdict.Mode]*verdict.Verdict{}
		for _, m := range []verdict.Mode{verdict.ModeEnforce, verdict.ModeWarn, verdict.ModeAudit} {
			in.Policy = inMode(pol, m)
			v := e.Evaluate(context.Background(), in)
			body := mustBeValid(t, v)
			mustObserveFailures(t, seed, v, body)
			judged[m] = v
		}
		enf := judged[verdict.ModeEnforce]
		for _, m := range []verdict.Mode{verdict.ModeWarn, verdict.ModeAudit} {
			if pol == nil {
				m = verdict.ModeEnforce // no policy, no mode: default deny
			}
			lets[m] += len(judged[m].WouldFail)
			mustDifferOnlyByMode(t, seed, m, enf, judged[m])
		}
	}
	t.Logf("checks let through over 1500 random actions: %v", lets)
	if lets[verdict.ModeWarn] == 0 || lets[verdict.ModeAudit] == 0 {
		t.Error("no mode let a check through: widen the generator")
	}
}

// mustObserveFailures: every failed check (and every check a mode let through) has an
// observation with an observed and an expected value (docs/verdict-api.md#observations).
func mustObserveFailures(t *testing.T, seed uint64, v *verdict.Verdict, body []byte) {
	t.Helper()
	var doc struct {
		Evidence struct {
			Observations map[string]map[string]any `json:"observations"`
		} `json:"evidence"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		t.Fatal(err)
	}
	for _, c := range append(slices.Clone(v.Checks), v.WouldFail...) {
		if c.Status != verdict.CheckFailed {
			continue
		}
		o, ok := doc.Evidence.Observations[string(c.CheckID)]
		if !ok || o["observed"] == nil || o["expected"] == nil {
			t.Fatalf("seed %d: failed check %s has no observed and expected value: %v\n%s", seed, c.CheckID, o, body)
		}
	}
}

// mustDifferOnlyByMode compares the verdict of mode m with the enforce verdict of the same
// action and policy.
func mustDifferOnlyByMode(t *testing.T, seed uint64, m verdict.Mode, enf, v *verdict.Verdict) {
	t.Helper()
	fail := func(format string, args ...any) {
		t.Helper()
		a, _ := json.Marshal(enf)
		b, _ := json.Marshal(v)
		t.Fatalf("seed %d, mode %s: "+format+"\nenforce: %s\n%s: %s", append(append([]any{seed, m}, args...), a, m, b)...)
	}
	if v.Mode != m {
		fail("the verdict says mode %q", v.Mode)
	}
	var wantWould []verdict.Check
	var firstEnforced *verdict.Check
	for _, id := range reasonOrder {
		c := checkOf(enf, id)
		switch {
		case c.Status != verdict.CheckFailed:
		case m.Enforces(id, *c.Code):
			if firstEnforced == nil {
				firstEnforced = &c
			}
		default:
			wantWould = append(wantWould, c)
		}
	}
	if len(v.WouldFail) != len(wantWould) {
		fail("wouldFail has %d checks, want %d", len(v.WouldFail), len(wantWould))
	}
	for i, w := range wantWould {
		got := v.WouldFail[i]
		if got.CheckID != w.CheckID || *got.Code != *w.Code || got.HumanReason != w.HumanReason {
			fail("wouldFail[%d] is %s %s, want %s %s as enforce reported it", i, got.CheckID, *got.Code, w.CheckID, *w.Code)
		}
		if c := checkOf(v, w.CheckID); c.Status != verdict.CheckNotChecked {
			fail("%s was let through but is %s in checks", w.CheckID, c.Status)
		}
	}
	for i, c := range enf.Checks {
		let := slices.ContainsFunc(wantWould, func(w verdict.Check) bool { return w.CheckID == c.CheckID })
		if !let && v.Checks[i].Status != c.Status {
			fail("check %s is %s, but %s under enforce", c.CheckID, v.Checks[i].Status, c.Status)
		}
	}
	switch {
	case firstEnforced != nil:
		if v.Outcome != verdict.OutcomeRejected || v.ReasonCode != *firstEnforced.Code {
			fail("%s/%s, want rejected with %s, the first failure the mode enforces", v.Outcome, v.ReasonCode, *firstEnforced.Code)
		}
	case enf.ReasonCode == verdict.ReasonDecodeFailure || enf.PolicyVersion == nil:
		if v.Outcome != enf.Outcome || v.ReasonCode != enf.ReasonCode {
			fail("%s/%s, want %s/%s as under enforce", v.Outcome, v.ReasonCode, enf.Outcome, enf.ReasonCode)
		}
	case !v.Approved():
		fail("%s/%s with no failure the mode enforces", v.Outcome, v.ReasonCode)
	}
}
