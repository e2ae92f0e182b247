package verdictserver

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"

	"github.com/x402gate/x402gate/verdict"
	"github.com/x402gate/x402gate/verdictserver/engine"
	"github.com/x402gate/x402gate/verdictserver/policy"
)

// modePolicies is no policy, then allowPolicy and a policy allowing no venue, each in every
// mode, without and with spend windows: a daily $0.05 overall and an hourly $0.03 in the
// test asset.
func modePolicies(t *testing.T) []*policy.Policy {
	t.Helper()
	windowed := func(doc string) string {
		return strings.TrimSuffix(strings.TrimSpace(doc), "}") + `, "spendWindows": {"windows": [{"period": "day", "capUsd": 0.05}, ` +
			`{"period": "hour", "capUsd": 0.03, "asset": "` + testAsset.Hex() + `"}]}}`
	}
	out := []*policy.Policy{nil}
	for _, base := range []string{allowPolicy, `{"venues": {"allowed": []}}`} {
		for _, doc := range []string{base, windowed(base)} {
			for _, m := range []verdict.Mode{verdict.ModeEnforce, verdict.ModeWarn, verdict.ModeAudit} {
				d, err := policy.Parse([]byte(strings.Replace(doc, "{", `{"mode": "`+string(m)+`", `, 1)))
				if err != nil {
					t.Fatal(err)
				}
				out = append(out, &policy.Policy{Version: int64(len(out)), Doc: d})
			}
		}
	}
	return out
}

// TestEveryVerdictOfAnyModeWindowAndSignatureIsValid: whatever the action (signGen's) and
// the policy (none, allowing, refusing; enforce, warn or audit; with or without spend
// windows, which hold random totals), a service with or without a signer makes verdicts
// that pass the verdict package's validator; each signed one's signature holds for the
// action's binding, by the service's address, and an unsigned service signs none. A
// windowed policy's verdict is the one complete stores (decideWindows).
func TestEveryVerdictOfAnyModeWindowAndSignatureIsValid(t *testing.T) {
	eng, err := engine.New(engine.Config{}, engine.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	sg, err := (&SigningConfig{SignerKey: testSignerKey}).newSigner()
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	services := []*Server{{engine: eng, now: clock}, {engine: eng, signer: sg, now: clock}}
	policies := modePolicies(t)
	g := signGen{r: rand.New(rand.NewPCG(24, 3))}
	fill := func(uses []engine.WindowUse) {
		for i := range uses {
			c := uses[i].CapMicroUSD()
			uses[i].Committed, uses[i].Reserved = g.r.Int64N(c+1), g.r.Int64N(c/2+1)
		}
	}
	escrow := common.HexToAddress("0xA11CE00000000000000000000000000000000001")
	seen := map[string]int{}
	for i := range 3000 {
		tx := g.tx()
		pol := policies[g.r.IntN(len(policies))]
		s := services[g.r.IntN(len(services))]
		in := engine.Input{ProposedTx: tx, Escrow: escrow, Policy: pol}
		hash := fmt.Sprintf("0x%064x", i+1)
		j, ok := s.judge(t.Context(), hash, in)
		if !ok || j.err != nil {
			t.Fatalf("#%d %v: no terminal, consistent verdict: %v", i, tx, j.err)
		}
		raw := j.raw
		if pol != nil && pol.Doc.SpendWindows != nil {
			raw, _ = decideWindows(t, s, in, hash, j, fill, nil)
		}
		v, err := verdict.ParseVerdict(raw, hash)
		if err != nil {
			t.Fatalf("#%d %v: the verdict fails the validator: %v\n%s", i, tx, err, raw)
		}
		if s.signer == nil && v.Signature != nil {
			t.Fatalf("#%d: an unsigned service signed\n%s", i, raw)
		}
		if s.signer != nil {
			if err := verdict.CheckSignature(v, sg.addr, bindingOf(tx, escrow), now); err != nil {
				t.Fatalf("#%d %v: %v\n%s", i, tx, err, raw)
			}
		}
		seen[coverage(v, pol, s.signer != nil)]++
	}
	t.Logf("verdicts drawn: %v", seen)
	mustCoverEveryCase(t, seen)
}

// coverage names what kind of verdict v is, for mustCoverEveryCase.
func coverage(v *verdict.Verdict, pol *policy.Policy, signed bool) string {
	w := "none"
	if c := windowCheck(v); c != nil {
		w = string(c.Status)
	}
	for _, c := range v.WouldFail {
		if c.CheckID == verdict.CheckSpendWindow {
			w = "let through"
		}
	}
	mode := verdict.Mode("no policy")
	if pol != nil {
		mode = pol.Doc.Mode
	}
	return fmt.Sprintf("%s/%s/window %s/signed %v", mode, v.Outcome, w, signed)
}

// mustCoverEveryCase: the draw reached, signed and not, an approval and a refusal in every
// mode, and every state of a spend window: passed, failed in enforce, let through in warn
// and audit, not checked.
func mustCoverEveryCase(t *testing.T, seen map[string]int) {
	t.Helper()
	var want []string
	for _, signed := range []bool{false, true} {
		for _, m := range []verdict.Mode{verdict.ModeEnforce, verdict.ModeWarn, verdict.ModeAudit} {
			want = append(want,
				fmt.Sprintf("%s/approved/window none/signed %v", m, signed),
				fmt.Sprintf("%s/rejected/window none/signed %v", m, signed),
				fmt.Sprintf("%s/approved/window passed/signed %v", m, signed),
				fmt.Sprintf("%s/rejected/window not_checked/signed %v", m, signed))
		}
		want = append(want,
			fmt.Sprintf("enforce/rejected/window failed/signed %v", signed),
			fmt.Sprintf("warn/approved/window let through/signed %v", signed),
			fmt.Sprintf("audit/approved/window let through/signed %v", signed))
	}
	for _, w := range want {
		if seen[w] == 0 {
			t.Errorf("the draw never made a verdict %s; it made %v", w, seen)
		}
	}
}
