package integration_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
)

// admin calls the admin API of a running verdict app with the operator's key
// (docs/verdict-api.md#admin-api) and returns the 2xx answer's body.
func (f *verdictFleet) admin(t *testing.T, in *verdictInstance, method, path, body string) []byte {
	t.Helper()
	req, err := http.NewRequest(method, in.verdictAPI+path, bytes.NewReader([]byte(body)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("x-admin-key", f.adminKey)
	resp, err := (&http.Client{Timeout: requestBound}).Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		t.Fatalf("%s %s: status %d: %s", method, path, resp.StatusCode, raw)
	}
	return raw
}

// setPolicy uploads doc as the next policy version of the agent named name through the admin
// API of a running verdict app (docs/verdict-api.md#policies).
func (f *verdictFleet) setPolicy(t *testing.T, in *verdictInstance, name, doc string) {
	t.Helper()
	f.admin(t, in, http.MethodPut, "/admin/agents/"+f.agentID(t, in, name)+"/policy", doc)
}

// agentID looks up the id of the agent named name through the admin API of in.
func (f *verdictFleet) agentID(t *testing.T, in *verdictInstance, name string) string {
	t.Helper()
	var list struct {
		Agents []struct{ ID, Name string } `json:"agents"`
	}
	if err := json.Unmarshal(f.admin(t, in, http.MethodGet, "/admin/agents", ""), &list); err != nil {
		t.Fatal(err)
	}
	for _, a := range list.Agents {
		if a.Name == name {
			return a.ID
		}
	}
	t.Fatalf("no agent %s", name)
	return ""
}

// TestVerdictModesThroughTheGate pays, with x402-fetch, a payee the policy does not list
// through the whole system (gate, bundled facilitator, verdict app) under the three modes
// (docs/verdict-api.md#modes). In enforce mode the 402 carries the failed recipient check
// with its observation and the correction (docs/verdict-api.md#observations) and nothing
// moves; in warn and audit mode the payment is settled, and the gate counts each would-be
// refusal by mode in caddy_x402_verdict_would_refuse_total. The verdict app counts each
// verdict it stored, by outcome, mode and reason, and the would-be refusals, in its own
// caddy_verdict_* metrics.
func TestVerdictModesThroughTheGate(t *testing.T) {
	f := newVerdictFleet(t, verdictSetup{})
	in := f.start(t)
	bal := balances(t, f.tok, f.payer.Address, f.okPayTo, f.denied)

	denied := payWith(t, payV1Script, f.payer, in.api+"/denied/report", "X402_TOKEN="+f.tok.Address.Hex())
	if denied.Status != http.StatusPaymentRequired {
		t.Fatalf("enforce: status %d, want 402: %s", denied.Status, denied.Body)
	}
	var body struct {
		Guardian struct {
			Status  string `json:"status"`
			Mode    string `json:"mode"`
			Denials []struct {
				CheckID    string `json:"checkId"`
				Code       string `json:"code"`
				Observed   []string
				Expected   []string
				Suggestion string `json:"suggestion"`
			} `json:"denials"`
		} `json:"guardian"`
	}
	if err := json.Unmarshal([]byte(denied.Body), &body); err != nil {
		t.Fatalf("enforce: the 402 body is not JSON: %v: %s", err, denied.Body)
	}
	g := body.Guardian
	wantFix := "use one of recipients.allowed: " + f.okPayTo.Hex()
	if g.Status != "rejected" || g.Mode != "enforce" || len(g.Denials) != 1 || g.Denials[0].CheckID != "recipient" ||
		g.Denials[0].Code != "recipient_not_allowed" || g.Denials[0].Suggestion != wantFix ||
		len(g.Denials[0].Observed) != 1 || !strings.EqualFold(g.Denials[0].Observed[0], f.denied.Hex()) ||
		len(g.Denials[0].Expected) != 1 || !strings.EqualFold(g.Denials[0].Expected[0], f.okPayTo.Hex()) {
		t.Fatalf("enforce: the 402's guardian is %+v, want the rejected recipient check with %q: %s", g, wantFix, denied.Body)
	}
	wantDelta(t, f.tok, f.denied, bal[2], 0)
	verdictServiceCounts(t, in, "enforce", "rejected", 0)

	paid := 0
	for _, mode := range []string{"warn", "audit"} {
		f.setPolicy(t, in, "buyer", fmt.Sprintf(`{"mode":%q,"venues":{"allowed":["payment"]},"chains":{"allowed":[84532]},`+
			`"assets":{"universe":{"84532":[%q]}},"recipients":{"allowed":[%q]},"limits":{"perTxUsd":1}}`, mode, f.tok.Address.Hex(), f.okPayTo.Hex()))
		r := payWith(t, payV1Script, f.payer, in.api+"/denied/report", "X402_TOKEN="+f.tok.Address.Hex())
		if r.Status != http.StatusOK {
			t.Fatalf("%s: status %d, want 200: %s", mode, r.Status, r.Body)
		}
		paid++
		wantDelta(t, f.tok, f.denied, bal[2], int64(paid)*price)
		if v, n := metricSum(in.caddy.Metrics(t), "caddy_x402_verdict_would_refuse_total", `mode="`+mode+`"`); n != 1 || v != 1 {
			t.Fatalf("%s: caddy_x402_verdict_would_refuse_total{mode=%q} = %v over %d series, want 1", mode, mode, v, n)
		}
		verdictServiceCounts(t, in, mode, "approved", 1)
	}
	if v, n := metricSum(in.caddy.Metrics(t), "caddy_verdict_decision_seconds_count"); n != 1 || v != 3 {
		t.Errorf("caddy_verdict_decision_seconds_count = %v over %d series, want the 3 verdicts", v, n)
	}
	if _, n := metricSum(in.caddy.Metrics(t), "caddy_verdict_queue_depth"); n != 1 {
		t.Errorf("caddy_verdict_queue_depth has %d series, want 1", n)
	}
	f.noSecretsIn(t, in.caddy.Logs())
}

// verdictServiceCounts checks, on the admin /metrics, the verdict app's own count of the one
// verdict on a payment to a payee the policy does not list, in mode: one verdict of outcome,
// under mode, with its reason, and wouldRefuse would-be refusals of the recipient check
// (docs/caddy.md#metrics).
func verdictServiceCounts(t *testing.T, in *verdictInstance, mode, outcome string, wouldRefuse float64) {
	t.Helper()
	m := in.caddy.Metrics(t)
	reason := `reason="allowed"`
	if outcome == "rejected" {
		reason = `reason="recipient_not_allowed"`
	}
	if v, n := metricSum(m, "caddy_verdict_verdicts_total", `mode="`+mode+`"`); n != 1 || v != 1 {
		t.Errorf("%s: caddy_verdict_verdicts_total{mode=%q} = %v over %d series, want 1 verdict", mode, mode, v, n)
	}
	if v, _ := metricSum(m, "caddy_verdict_verdicts_total", `mode="`+mode+`"`, `outcome="`+outcome+`"`, reason); v != 1 {
		t.Errorf("%s: caddy_verdict_verdicts_total{mode=%q,outcome=%q,%s} = %v, want 1", mode, mode, outcome, reason, v)
	}
	if v, _ := metricSum(m, "caddy_verdict_would_refuse_total", `mode="`+mode+`"`, `reason="recipient_not_allowed"`); v != wouldRefuse {
		t.Errorf("%s: caddy_verdict_would_refuse_total{mode=%q} = %v, want %v", mode, mode, v, wouldRefuse)
	}
}
