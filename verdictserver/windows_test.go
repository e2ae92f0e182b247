package verdictserver

import (
	"fmt"
	"math/big"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"

	"github.com/x402gate/x402gate/internal/testenv"
	"github.com/x402gate/x402gate/verdict"
	"github.com/x402gate/x402gate/verdictserver/engine"
	"github.com/x402gate/x402gate/verdictserver/policy"
	"github.com/x402gate/x402gate/verdictserver/store"
)

// windowPolicy is allowPolicy with the given spendWindows.windows items.
func windowPolicy(windows ...string) string {
	return strings.TrimSuffix(strings.TrimSpace(allowPolicy), "}") +
		`, "spendWindows": {"windows": [` + strings.Join(windows, ", ") + `]}}`
}

// payAll submits n $0.01 payments of a at once, spread over the envs, and returns their
// verdicts in submit order.
func payAll(t *testing.T, envs []*env, a agent, n int) ([]string, []*verdict.Verdict) {
	t.Helper()
	hashes := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// rawCall: the OpenAPI check's compiled schema is not for concurrent use; the
			// serial reads below hold every answer to it
			r := rawCall(t, http.MethodPost, envs[i%len(envs)].api.URL+"/transactions", submitBody(a.Wallet, allowedPay, ""), "x-api-key", a.Key)
			if r.status != http.StatusCreated {
				t.Errorf("submit %d = %d %s", i, r.status, r.raw)
				return
			}
			hashes[i] = r.body["requestHash"].(string)
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	vs := make([]*verdict.Verdict, n)
	for i, h := range hashes {
		vs[i] = envs[0].await(a.Key, h)
	}
	return hashes, vs
}

// windowCheck is the verdict's spend_window check, or nil.
func windowCheck(v *verdict.Verdict) *verdict.Check {
	for i := range v.Checks {
		if v.Checks[i].CheckID == verdict.CheckSpendWindow {
			return &v.Checks[i]
		}
	}
	return nil
}

// approvedCount counts approvals and holds every verdict to the window rules: an approval
// passed spend_window, a refusal failed it with spend_window_exceeded on window 0.
func approvedCount(t *testing.T, vs []*verdict.Verdict) int {
	t.Helper()
	n := 0
	for i, v := range vs {
		c := windowCheck(v)
		switch {
		case c == nil:
			t.Fatalf("verdict %d has no spend_window check", i)
		case v.Approved() && c.Status == verdict.CheckPassed:
			n++
		case !v.Approved() && v.ReasonCode == verdict.ReasonSpendWindowExceeded && c.Status == verdict.CheckFailed &&
			*c.TriggeringPolicyField == "spendWindows.windows.0":
		default:
			t.Fatalf("verdict %d: %s %s, spend_window %+v", i, v.Outcome, v.ReasonCode, c)
		}
	}
	return n
}

// windows reads the admin API's windows of agentID.
func (e *env) windows(agentID string) []any {
	e.t.Helper()
	a := call(e.t, http.MethodGet, e.admin.URL+"/admin/agents/"+agentID+"/windows", nil, "x-admin-key", e.adminKey)
	if a.status != http.StatusOK {
		e.t.Fatalf("windows = %d %s", a.status, a.raw)
	}
	return a.body["windows"].([]any)
}

// report posts an execution report for hash with the agent's key.
func (e *env) report(key, hash string, executed bool) answer {
	e.t.Helper()
	return call(e.t, http.MethodPost, e.api.URL+"/transactions/"+hash+"/execution", map[string]any{"executed": executed}, "x-api-key", key)
}

// TestSpendWindowReserveCommitRelease: a $0.05 daily cap approves five of eight $0.01
// payments; releasing one admits one more, a commit stays, and the operator's view agrees.
func TestSpendWindowReserveCommitRelease(t *testing.T) {
	e := newEnv(t, nil, nil)
	a := e.agent("windowed", common.HexToAddress("0xA11CE00000000000000000000000000000000001"),
		windowPolicy(`{"period": "day", "capUsd": 0.05}`, `{"period": "hour", "capUsd": 1, "asset": "`+testAsset.Hex()+`"}`))
	hashes, vs := payAll(t, []*env{e}, a, 8)
	if n := approvedCount(t, vs); n != 5 {
		t.Fatalf("approved %d of 8 $0.01 payments against a $0.05 cap, want 5", n)
	}
	w := e.windows(a.ID)
	day, hour := w[0].(map[string]any), w[1].(map[string]any)
	if day["reservedUsd"] != 0.05 || day["leftUsd"] != 0.0 || hour["reservedUsd"] != 0.05 || hour["asset"] != testAsset.Hex() {
		t.Fatalf("windows %v, want $0.05 reserved in both", w)
	}
	var approved, rejected []string
	for i, v := range vs {
		if v.Approved() {
			approved = append(approved, hashes[i])
		} else {
			rejected = append(rejected, hashes[i])
		}
	}
	// the agent's own key can only commit; releasing needs verdicts:release:own
	wantError(t, e.report(a.Key, approved[0], false), http.StatusForbidden, codeInsufficientScope)
	_, releaser, err := e.srv.Operator().CreateKey(t.Context(), a.ID, []string{ScopeReleaseOwn})
	if err != nil {
		t.Fatal(err)
	}
	if r := e.report(releaser, approved[0], false); r.status != http.StatusOK || r.body["reservation"] != "released" {
		t.Fatalf("release = %d %s", r.status, r.raw)
	}
	commit := call(t, http.MethodPost, e.admin.URL+"/admin/transactions/"+approved[1]+"/execution", map[string]any{"executed": true}, "x-admin-key", e.adminKey)
	if commit.status != http.StatusOK || commit.body["reservation"] != "committed" {
		t.Fatalf("admin commit = %d %s", commit.status, commit.raw)
	}
	wantError(t, e.report(releaser, approved[1], false), http.StatusConflict, codeConflict)
	wantError(t, e.report(a.Key, rejected[0], true), http.StatusNotFound, codeNotFound)
	day = e.windows(a.ID)[0].(map[string]any)
	if day["usedUsd"] != 0.01 || day["reservedUsd"] != 0.03 || day["leftUsd"] != 0.01 {
		t.Fatalf("day window %v, want $0.01 used, $0.03 reserved, $0.01 left", day)
	}
	if _, vs := payAll(t, []*env{e}, a, 2); approvedCount(t, vs) != 1 {
		t.Fatal("the released $0.01 did not admit exactly one more payment")
	}
}

// TestSpendWindowReportCommitsWhatMoved: an upto payment reported with the amount that
// moved commits that share of its $0.01 reservation and releases the rest at once; a report
// of 0 releases it all. Committing less than the action's amount needs verdicts:release:own,
// and an amount above it, or with executed false, is refused.
func TestSpendWindowReportCommitsWhatMoved(t *testing.T) {
	e := newEnv(t, nil, nil)
	a := e.agent("metered", common.HexToAddress("0xA11CE00000000000000000000000000000000002"),
		windowPolicy(`{"period": "day", "capUsd": 0.05}`))
	hashes, vs := payAll(t, []*env{e}, a, 3)
	if n := approvedCount(t, vs); n != 3 {
		t.Fatalf("approved %d of 3, want 3", n)
	}
	_, releaser, err := e.srv.Operator().CreateKey(t.Context(), a.ID, []string{ScopeReleaseOwn})
	if err != nil {
		t.Fatal(err)
	}
	moved := func(key, hash string, executed bool, amount string) answer {
		return call(t, http.MethodPost, e.api.URL+"/transactions/"+hash+"/execution", map[string]any{"executed": executed, "amount": amount}, "x-api-key", key)
	}
	wantError(t, moved(a.Key, hashes[0], true, "3700"), http.StatusForbidden, codeInsufficientScope)
	wantError(t, moved(releaser, hashes[0], true, "10001"), http.StatusBadRequest, codeInvalidBody)
	wantError(t, moved(releaser, hashes[0], false, "3700"), http.StatusBadRequest, codeInvalidBody)
	wantError(t, moved(releaser, hashes[0], true, "0x10"), http.StatusBadRequest, codeInvalidBody)
	for _, r := range []answer{moved(releaser, hashes[0], true, "3700"), moved(a.Key, hashes[1], true, "10000")} {
		if r.status != http.StatusOK || r.body["reservation"] != "committed" {
			t.Fatalf("commit = %d %s", r.status, r.raw)
		}
	}
	if r := moved(releaser, hashes[2], true, "0"); r.status != http.StatusOK || r.body["reservation"] != "released" {
		t.Fatalf("a report of 0 = %d %s", r.status, r.raw)
	}
	day := e.windows(a.ID)[0].(map[string]any)
	if day["usedUsd"] != 0.0137 || day["reservedUsd"] != 0.0 || day["leftUsd"] != 0.0363 {
		t.Fatalf("day window %v, want $0.0137 used (0.37 of one payment, all of another), nothing reserved", day)
	}
}

// TestSpendWindowUnpricedIsDataUnavailable: with a window set, an action without a USD
// price is refused with data_unavailable; without windows the check is absent.
func TestSpendWindowUnpricedIsDataUnavailable(t *testing.T) {
	e := newEnv(t, nil, nil)
	unpriced := common.HexToAddress("0x7777777777777777777777777777777777777777")
	base := fmt.Sprintf(`{"venues": {"allowed": ["payment"]}, "chains": {"allowed": [%d]}%%s}`, testChain)
	for _, tc := range []struct {
		name, policy string
		want         verdict.ReasonCode
		checks       int
	}{
		{"window set", fmt.Sprintf(base, `, "spendWindows": {"windows": [{"period": "week", "capUsd": 100}]}`), verdict.ReasonDataUnavailable, 13},
		{"no window", fmt.Sprintf(base, ``), verdict.ReasonAllowed, 12},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := e.agent(strings.ReplaceAll(tc.name, " ", "-"), common.HexToAddress(fmt.Sprintf("0xA11CE0000000000000000000000000000000%04x", len(tc.name))), tc.policy)
			body := submitBody(a.Wallet, allowedPay, "")
			body["proposedTx"].(map[string]any)["asset"] = unpriced.Hex()
			r := e.submit(a.Key, body)
			v := e.await(a.Key, r.body["requestHash"].(string))
			if v.ReasonCode != tc.want || len(v.Checks) != tc.checks {
				t.Fatalf("verdict %s with %d checks, want %s with %d", v.ReasonCode, len(v.Checks), tc.want, tc.checks)
			}
		})
	}
}

// TestSpendWindowHoldsAcrossInstances: three instances on one PostgreSQL database, 30
// concurrent $0.01 payments against a $0.15 daily cap: exactly 15 approved.
func TestSpendWindowHoldsAcrossInstances(t *testing.T) {
	dsn := postgresDSN(t)
	envs := []*env{newEnv(t, postgresAt(t, dsn), nil), newEnv(t, postgresAt(t, dsn), nil), newEnv(t, postgresAt(t, dsn), nil)}
	a := envs[0].agent("shared", common.HexToAddress("0xA11CE00000000000000000000000000000000001"), windowPolicy(`{"period": "day", "capUsd": 0.15}`))
	if _, vs := payAll(t, envs, a, 30); approvedCount(t, vs) != 15 {
		t.Fatal("the cap did not admit exactly 15 of 30 $0.01 payments across 3 instances")
	}
	if day := envs[2].windows(a.ID)[0].(map[string]any); day["reservedUsd"] != 0.15 {
		t.Fatalf("day window %v, want $0.15 reserved", day)
	}
}

// TestWindowVerdictsAreValid: whatever the windows hold and whatever the notional (or none),
// the verdict with its spend_window check passes the verdict package's validator, and it is
// an approval exactly when every window had room.
func TestWindowVerdictsAreValid(t *testing.T) {
	rng := rand.New(rand.NewPCG(24, 1))
	day := policy.SpendWindow{Period: "day", CapUSD: 150}
	token := policy.SpendWindow{Period: "hour", CapUSD: 20, Asset: testAsset.Hex()}
	for i := range 2000 {
		uses := []engine.WindowUse{
			{Index: 0, Window: day, Committed: rng.Int64N(200e6), Reserved: rng.Int64N(200e6)},
			{Index: 1, Window: token, Committed: rng.Int64N(30e6), Reserved: rng.Int64N(30e6)},
		}
		var notional *int64
		if rng.IntN(10) > 0 {
			n := rng.Int64N(50e6)
			notional = &n
		}
		approved, err := verdict.ParseVerdict([]byte(testenv.VerdictJSON(testenv.ApprovedVerdict())), "0xprop")
		if err != nil {
			t.Fatal(err)
		}
		check, obs := engine.SpendWindow(uses, notional)
		raw, status, err := (&Server{now: time.Now}).withWindowCheck(approved, engine.Input{}, "0xprop", check, &obs, nil)
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		fits := notional != nil && uses[0].Left() >= *notional && uses[1].Left() >= *notional
		if (status == store.StatusApproved) != fits {
			t.Fatalf("case %d: %s for notional %v and windows %+v", i, status, notional, uses)
		}
		v, err := verdict.ParseVerdict(raw, "0xprop")
		if err != nil || v.Approved() != fits {
			t.Fatalf("case %d: %v, approved %v", i, err, v.Approved())
		}
	}
}

// TestSignedSpendWindowVerdicts: under a signing service, a verdict that a spend window
// turns into a refusal is signed as a refusal, and an approval the windows admit as an
// approval: the signature covers the verdict as stored, not the engine's verdict before the
// windows decided (which left a full window's records pending: their signature signed
// "approved").
func TestSignedSpendWindowVerdicts(t *testing.T) {
	now := time.Now().UTC()
	e := signingEnv(t, now, 2*time.Minute)
	a := e.agent("signed-windowed", common.HexToAddress("0xA11CE00000000000000000000000000000000002"),
		windowPolicy(`{"period": "day", "capUsd": 0.02}`))
	_, vs := payAll(t, []*env{e}, a, 3)
	if n := approvedCount(t, vs); n != 2 {
		t.Fatalf("approved %d of 3 $0.01 payments against a $0.02 cap, want 2", n)
	}
	want := verdict.PaymentBinding(a.Wallet, testChain, allowedPay, testAsset, big.NewInt(10000))
	for _, v := range vs {
		if v.Signature == nil {
			t.Fatalf("%s verdict is not signed", v.Outcome)
		}
		if err := verdict.CheckSignature(v, testSigner(t), want, now); err != nil {
			t.Errorf("%s verdict (%s): CheckSignature = %v", v.Outcome, v.ReasonCode, err)
		}
	}
}

// TestSpendWindowUnderWarnAndAudit: a policy in warn or audit mode approves what a full
// window would refuse, records it in wouldFail (warn names it in humanReason), and still
// reserves it: the action will move money. An unpriced action is refused in every mode.
func TestSpendWindowUnderWarnAndAudit(t *testing.T) {
	for _, mode := range []verdict.Mode{verdict.ModeWarn, verdict.ModeAudit} {
		t.Run(string(mode), func(t *testing.T) {
			e := newEnv(t, nil, nil)
			pol := strings.Replace(windowPolicy(`{"period": "day", "capUsd": 0.02}`), "{", `{"mode": "`+string(mode)+`", `, 1)
			a := e.agent("lenient-"+string(mode), common.HexToAddress("0xA11CE00000000000000000000000000000000003"), pol)
			_, vs := payAll(t, []*env{e}, a, 3)
			let := 0
			for i, v := range vs {
				c := windowCheck(v)
				if !v.Approved() || v.Mode != mode || c == nil {
					t.Fatalf("verdict %d: %s %s mode %q, want approved in %s", i, v.Outcome, v.ReasonCode, v.Mode, mode)
				}
				if c.Status == verdict.CheckPassed {
					continue
				}
				let++
				if c.Status != verdict.CheckNotChecked || len(v.WouldFail) != 1 ||
					v.WouldFail[0].CheckID != verdict.CheckSpendWindow || *v.WouldFail[0].Code != verdict.ReasonSpendWindowExceeded {
					t.Fatalf("verdict %d: spend_window %+v, wouldFail %+v", i, c, v.WouldFail)
				}
				if warned := strings.Contains(v.HumanReason, "would have been rejected with spend_window_exceeded"); warned != (mode == verdict.ModeWarn) {
					t.Errorf("verdict %d: humanReason %q in %s mode", i, v.HumanReason, mode)
				}
			}
			if let != 1 {
				t.Fatalf("%d verdicts let a full window through, want 1", let)
			}
			if day := e.windows(a.ID)[0].(map[string]any); day["reservedUsd"] != 0.03 {
				t.Fatalf("day window %v, want $0.03 reserved: a let-through approval reserves too", day)
			}
		})
	}
}

// TestAssetsOfTheEnginesAndDecodedJSON: the assets of a decoded action and its legs are the
// same whether the action is the engine's (lists of strings and maps) or its JSON decoded
// (lists of any): lower-case, once each, the action's first.
func TestAssetsOfTheEnginesAndDecodedJSON(t *testing.T) {
	leg := func(assets ...string) map[string]any { return map[string]any{"kind": "leg", "assets": assets} }
	action := map[string]any{"protocol": "multicall", "assets": []string{"0xAbC"},
		"legs": []map[string]any{leg("0xabc", "0xDEF"), {"kind": "nested", "assets": []string{}, "legs": []map[string]any{leg("0x123")}}}}
	decoded, err := verdict.ParseJSON([]byte(testenv.JSON(t, action)))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"0xabc", "0xdef", "0x123"}
	for name, a := range map[string]map[string]any{"engine's": action, "decoded JSON": decoded.(map[string]any)} {
		if got := assetsOf(a); !slices.Equal(got, want) {
			t.Errorf("the %s action: assets %v, want %v", name, got, want)
		}
	}
}

// TestWindowCheckOnAVerdictWithoutObservations: an engine's verdict that has no observations
// to add the spend_window one to is not stored (an error, the record stays pending), and
// the engine's verdict is left as it was.
func TestWindowCheckOnAVerdictWithoutObservations(t *testing.T) {
	v, err := verdict.ParseVerdict([]byte(testenv.VerdictJSON(testenv.ApprovedVerdict())), "0xobs")
	if err != nil {
		t.Fatal(err)
	}
	v.Evidence.Observations = nil
	checks := len(v.Checks)
	check, obs := engine.SpendWindow([]engine.WindowUse{{Window: policy.SpendWindow{Period: "day", CapUSD: 1}}}, new(int64))
	raw, status, err := (&Server{now: time.Now}).withWindowCheck(v, engine.Input{}, "0xobs", check, &obs, nil)
	if err == nil || raw != nil || status != "" || len(v.Checks) != checks {
		t.Fatalf("withWindowCheck = %s, %q, %v; the engine's verdict now has %d checks, had %d", raw, status, err, len(v.Checks), checks)
	}
}

// TestWindowCheckCarriesNothingToTheNextVerdict: withWindowCheck's recycled copy of a
// verdict (windowScratch) takes nothing of one verdict into the next: a verdict's JSON is the
// same byte for byte after a verdict with more checks and observations, and neither engine's
// verdict is changed.
func TestWindowCheckCarriesNothingToTheNextVerdict(t *testing.T) {
	parse := func() *verdict.Verdict {
		v, err := verdict.ParseVerdict([]byte(testenv.VerdictJSON(testenv.ApprovedVerdict())), "0xnext")
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	s := &Server{now: time.Now}
	decide := func(v *verdict.Verdict) string {
		check, obs := engine.SpendWindow([]engine.WindowUse{{Window: policy.SpendWindow{Period: "day", CapUSD: 1}}}, new(int64))
		raw, _, err := s.withWindowCheck(v, engine.Input{}, "0xnext", check, &obs, nil)
		if err != nil {
			t.Fatal(err)
		}
		return string(raw)
	}
	small, big := parse(), parse()
	big.Checks = append(big.Checks, big.Checks...)
	big.Evidence.Observations["extra"] = map[string]any{"expected": 1}
	want := decide(small)
	if got := decide(big); !strings.Contains(got, `"extra"`) {
		t.Fatalf("the bigger verdict lost its extra observation: %s", got)
	}
	if got := decide(small); got != want {
		t.Errorf("after a bigger verdict the verdict's JSON is\n%s\nwant\n%s", got, want)
	}
	for _, v := range []*verdict.Verdict{small, big} {
		if _, ok := v.Evidence.Observations[string(verdict.CheckSpendWindow)]; ok || slices.ContainsFunc(v.Checks, func(c verdict.Check) bool { return c.CheckID == verdict.CheckSpendWindow }) {
			t.Errorf("the engine's verdict now has the spend_window check or observation")
		}
	}
}
