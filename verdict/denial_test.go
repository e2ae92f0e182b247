package verdict

import (
	"reflect"
	"testing"

	"github.com/x402gate/x402gate/internal/testenv"
	"github.com/x402gate/x402gate/x402"
)

// TestDenialsCarryTheObservations: a rejection's failed checks become denials with their
// observation (docs/verdict-api.md#observations); an approval has none, and its let-through
// checks are WouldFailCodes.
func TestDenialsCarryTheObservations(t *testing.T) {
	rejected := testenv.RejectedVerdict(CheckRecipient, ReasonRecipientNotAllowed)
	rejected["evidence"].(map[string]any)["observations"] = map[string]any{"recipient": map[string]any{
		"observed": []any{"0x3333333333333333333333333333333333333333"}, "expected": []any{"self"},
		"suggestion": "use one of recipients.allowed: self"}}
	v, err := ParseVerdict([]byte(testenv.VerdictJSON(rejected)), "0xhash")
	if err != nil {
		t.Fatal(err)
	}
	gv := &GuardianVerdict{Outcome: v.Outcome, ReasonCode: v.ReasonCode, Checks: v.Checks, Evidence: &v.Evidence}
	want := []x402.GuardianDenial{{CheckID: "recipient", Code: "recipient_not_allowed", HumanReason: "check recipient passed",
		Observed: []any{"0x3333333333333333333333333333333333333333"}, Expected: []any{"self"}, Suggestion: "use one of recipients.allowed: self"}}
	if got := gv.Denials(); !reflect.DeepEqual(got, want) {
		t.Fatalf("Denials = %+v, want %+v", got, want)
	}
	if gv.WouldFailCodes() != nil {
		t.Fatalf("a rejection has would-fail codes %v", gv.WouldFailCodes())
	}

	w, err := ParseVerdict([]byte(testenv.VerdictJSON(warned("warn"))), "0xhash")
	if err != nil {
		t.Fatal(err)
	}
	gw := &GuardianVerdict{Outcome: w.Outcome, ReasonCode: w.ReasonCode, Checks: w.Checks, Evidence: &w.Evidence, Mode: w.Mode, WouldFail: w.WouldFail}
	if d := gw.Denials(); d != nil {
		t.Fatalf("an approval has denials %+v", d)
	}
	if got := gw.WouldFailCodes(); !reflect.DeepEqual(got, []string{"recipient_not_allowed"}) {
		t.Fatalf("WouldFailCodes = %v", got)
	}
}
