package integration_test

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPolicyReplayThroughCaddy: an operator replays a draft on what the built Caddy judged.
// x402-fetch pays the payee the policy allows (approved, settled) and the one it does not
// (refused); a draft that allows only the second payee newly refuses the first payment and
// newly approves the second, by `caddy verdict policy replay` and by the admin route of the
// verdict site, each with the recipient check's reason. The agent's stored transactions and
// policy versions are the same after (docs/replay.md).
func TestPolicyReplayThroughCaddy(t *testing.T) {
	f := newVerdictFleet(t, verdictSetup{})
	in := f.start(t)
	if ok := payWith(t, payV1Script, f.payer, in.api+"/allowed/report", "X402_TOKEN="+f.tok.Address.Hex()); ok.Status != http.StatusOK {
		t.Fatalf("paying an allowed payee: status %d: %s", ok.Status, ok.Body)
	}
	if denied := payWith(t, payV1Script, f.payer, in.api+"/denied/report", "X402_TOKEN="+f.tok.Address.Hex()); denied.Status != http.StatusPaymentRequired {
		t.Fatalf("paying a payee the policy does not allow: status %d: %s", denied.Status, denied.Body)
	}
	agentID, _, _ := strings.Cut(strings.TrimSpace(f.cli(t, "agent", "list")), "\t")
	admin := map[string]string{"x-admin-key": f.adminKey, "Content-Type": "application/json"}
	stored := func() string {
		t.Helper()
		r := mustDo(t, http.MethodGet, in.verdictAPI+"/admin/agents/"+agentID+"/transactions?limit=500", admin)
		if r.Status != http.StatusOK {
			t.Fatalf("list transactions: status %d: %s", r.Status, r.Body)
		}
		return string(r.Body) + f.cli(t, "policy", "versions", "--agent", "buyer")
	}
	before := stored()

	doc := fmt.Sprintf(`{"venues":{"allowed":["payment"]},"chains":{"allowed":[84532]},"assets":{"universe":{"84532":[%q]}},"recipients":{"allowed":[%q]}}`,
		f.tok.Address.Hex(), f.denied.Hex())
	draft := filepath.Join(f.dir, "draft.json")
	if err := os.WriteFile(draft, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	out := f.cli(t, "policy", "replay", "--agent", "buyer", draft)
	for _, want := range []string{"draft judged as policy version 2 (active: 1)", "newly refused: 1\n", "newly approved: 1\n", "\trecipient_not_allowed\t", "\twas recipient_not_allowed\t"} {
		if !strings.Contains(out, want) {
			t.Errorf("caddy verdict policy replay printed:\n%s\nwant it to contain %q", out, want)
		}
	}
	rep := doJSON(t, in.verdictAPI+"/admin/agents/"+agentID+"/policy/replay?last=10", admin, []byte(doc))
	refused, _ := rep["newlyRefused"].([]any)
	approved, _ := rep["newlyApproved"].([]any)
	if rep["replayed"] != 2.0 || len(refused) != 1 || len(approved) != 1 {
		t.Fatalf("the admin route's report %v, want one newly refused and one newly approved", rep)
	}
	if d := refused[0].(map[string]any)["draft"].(map[string]any); d["reasonCode"] != "recipient_not_allowed" {
		t.Errorf("newly refused for %v, want recipient_not_allowed", d["reasonCode"])
	}
	if after := stored(); after != before {
		t.Errorf("the replay changed the store:\nbefore %s\nafter  %s", before, after)
	}
	f.noSecretsIn(t, in.caddy.Logs())
}
