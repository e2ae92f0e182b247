package verdict

import (
	"errors"
	"strings"
	"testing"

	"github.com/x402gate/x402gate/internal/testenv"
)

// warned is an approved verdict of mode: recipient (index 4) was let through, so it is
// not_checked in checks and failed in wouldFail.
func warned(mode string) map[string]any {
	v := testenv.ApprovedVerdict()
	v["mode"] = mode
	checkAt(v, 4)["status"] = "not_checked"
	v["wouldFail"] = []any{map[string]any{"checkId": "recipient", "status": "failed", "code": "recipient_not_allowed",
		"humanReason": "recipient 0x3333… is not in recipients.allowed", "triggeringPolicyField": "recipients.allowed"}}
	return v
}

func TestVerdictModeExtensionAccepted(t *testing.T) {
	cases := []struct {
		name    string
		verdict func() map[string]any
		mode    Mode
		would   int
	}{
		{"a verdict without a mode is read as before", testenv.ApprovedVerdict, "", 0},
		{"an enforce verdict says so", func() map[string]any {
			v := testenv.RejectedVerdict(CheckRecipient, ReasonRecipientNotAllowed)
			v["mode"] = "enforce"
			return v
		}, ModeEnforce, 0},
		{"a warn verdict approves what would have failed", func() map[string]any { return warned("warn") }, ModeWarn, 1},
		{"an audit verdict approves what would have failed", func() map[string]any { return warned("audit") }, ModeAudit, 1},
		{"a warn verdict still rejects a sanctioned address", func() map[string]any {
			v := testenv.RejectedVerdict(CheckSanctions, ReasonSanctionedAddress)
			v["mode"] = "warn"
			checkAt(v, 4)["status"] = "not_checked"
			v["wouldFail"] = warned("warn")["wouldFail"]
			return v
		}, ModeWarn, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v, err := ParseVerdict([]byte(testenv.VerdictJSON(tc.verdict())), "0xhash")
			if err != nil {
				t.Fatalf("ParseVerdict: %v", err)
			}
			if v.Mode != tc.mode || len(v.WouldFail) != tc.would {
				t.Fatalf("mode %q with %d wouldFail, want %q with %d", v.Mode, len(v.WouldFail), tc.mode, tc.would)
			}
			if err := v.Consistent(); err != nil {
				t.Fatalf("Consistent: %v", err)
			}
		})
	}
}

func TestVerdictModeExtensionRefused(t *testing.T) {
	cases := []struct {
		name, field string
		verdict     func() map[string]any
	}{
		{"an unknown mode", "verdict.mode", func() map[string]any {
			v := testenv.ApprovedVerdict()
			v["mode"] = "shadow"
			return v
		}},
		{"a mode that is not a string", "verdict.mode", func() map[string]any {
			v := testenv.ApprovedVerdict()
			v["mode"] = 1
			return v
		}},
		{"checks that would have failed under enforce", "verdict.wouldFail", func() map[string]any {
			v := warned("warn")
			v["mode"] = "enforce"
			return v
		}},
		{"checks that would have failed without a mode", "verdict.wouldFail", func() map[string]any {
			v := warned("warn")
			delete(v, "mode")
			return v
		}},
		{"a would-fail check that did not fail", "verdict.wouldFail[0].status", func() map[string]any {
			v := warned("audit")
			v["wouldFail"].([]any)[0].(map[string]any)["status"] = "passed"
			delete(v["wouldFail"].([]any)[0].(map[string]any), "code")
			return v
		}},
		{"a sanctioned address let through", "verdict.wouldFail[0].code", func() map[string]any {
			v := warned("warn")
			w := v["wouldFail"].([]any)[0].(map[string]any)
			w["checkId"], w["code"] = "sanctions", "sanctioned_address"
			return v
		}},
		{"data_unavailable let through", "verdict.wouldFail[0].code", func() map[string]any {
			v := warned("warn")
			w := v["wouldFail"].([]any)[0].(map[string]any)
			w["checkId"], w["code"] = "per_tx_cap", "data_unavailable"
			return v
		}},
		{"a let-through check still failed in checks", "verdict.wouldFail[0].checkId", func() map[string]any {
			v := warned("warn")
			checkAt(v, 4)["status"], checkAt(v, 4)["code"] = "failed", "recipient_not_allowed"
			return v
		}},
		{"wouldFail that is not an array", "verdict.wouldFail", func() map[string]any {
			v := warned("warn")
			v["wouldFail"] = map[string]any{}
			return v
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseVerdict([]byte(testenv.VerdictJSON(tc.verdict())), "0xhash")
			var ve *ValidationError
			if err == nil || !errors.As(err, &ve) {
				t.Fatalf("ParseVerdict = %v, want a *ValidationError", err)
			}
			if ve.Field != tc.field {
				t.Fatalf("field %q (%v), want %q", ve.Field, err, tc.field)
			}
			if !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("error %q does not name %s", err, tc.field)
			}
		})
	}
}
