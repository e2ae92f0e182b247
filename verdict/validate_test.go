package verdict

import (
	"errors"
	"strings"
	"testing"

	"github.com/x402gate/x402gate/internal/testenv"
)

// check returns the i-th check object of a fixture.
func checkAt(v map[string]any, i int) map[string]any { return v["checks"].([]any)[i].(map[string]any) }

func TestVerdictValidationAcceptsValidVerdicts(t *testing.T) {
	cases := []struct {
		name    string
		verdict func() map[string]any
		outcome Outcome
		reason  ReasonCode
	}{
		{"approved with reasonCode allowed", testenv.ApprovedVerdict, OutcomeApproved, ReasonAllowed},
		{"pending with reasonCode pending and null policyVersion", testenv.PendingVerdict, OutcomePending, ReasonPending},
		{"rejected code matches the failed check's code", func() map[string]any {
			return testenv.RejectedVerdict(CheckRecipient, ReasonRecipientNotAllowed)
		}, OutcomeRejected, ReasonRecipientNotAllowed},
		{"rejected code matches a failed check with null code through the check table", func() map[string]any {
			v := testenv.RejectedVerdict(CheckSanctions, ReasonSanctionedAddress)
			checkAt(v, 9)["code"] = nil
			return v
		}, OutcomeRejected, ReasonSanctionedAddress},
		{"per_tx_cap may fail with data_unavailable", func() map[string]any {
			return testenv.RejectedVerdict(CheckPerTxCap, ReasonDataUnavailable)
		}, OutcomeRejected, ReasonDataUnavailable},
		{"cross-cutting decode_failure needs no failed check", func() map[string]any {
			v := testenv.ApprovedVerdict()
			v["outcome"], v["reasonCode"], v["policyVersion"] = "rejected", "decode_failure", nil
			v["checks"] = []any{}
			return v
		}, OutcomeRejected, ReasonDecodeFailure},
		{"cross-cutting data_unavailable needs no failed check", func() map[string]any {
			v := testenv.ApprovedVerdict()
			v["outcome"], v["reasonCode"] = "rejected", "data_unavailable"
			return v
		}, OutcomeRejected, ReasonDataUnavailable},
		{"an unknown check and its unknown code pass through on a rejection", func() map[string]any {
			v := testenv.ApprovedVerdict()
			v["outcome"], v["reasonCode"] = "rejected", "mev_risk"
			v["checks"] = append(v["checks"].([]any), map[string]any{"checkId": "mev_guard", "status": "failed", "code": "mev_risk", "humanReason": "sandwich risk", "triggeringPolicyField": nil})
			return v
		}, OutcomeRejected, "mev_risk"},
		{"spend_window fails with spend_window_exceeded", func() map[string]any {
			v := testenv.ApprovedVerdict()
			v["outcome"], v["reasonCode"] = "rejected", "spend_window_exceeded"
			v["checks"] = append(v["checks"].([]any), map[string]any{"checkId": "spend_window", "status": "failed", "code": "spend_window_exceeded", "humanReason": "day window full", "triggeringPolicyField": "spendWindows.windows.0"})
			return v
		}, OutcomeRejected, ReasonSpendWindowExceeded},
		{"an unknown check that passed does not stop an approval", func() map[string]any {
			v := testenv.ApprovedVerdict()
			v["checks"] = append(v["checks"].([]any), map[string]any{"checkId": "mev_guard", "status": "passed", "code": nil, "humanReason": "ok", "triggeringPolicyField": nil})
			return v
		}, OutcomeApproved, ReasonAllowed},
		{"unknown reasonCode passes through when a failed check carries it", func() map[string]any {
			return testenv.RejectedVerdict(CheckRecipient, "recipient_on_watchlist")
		}, OutcomeRejected, "recipient_on_watchlist"},
		{"nullable members may be absent", func() map[string]any {
			v := testenv.ApprovedVerdict()
			delete(v, "triggeringPolicyField")
			delete(v, "policyVersion")
			delete(v, "usdNotional")
			delete(v["trust"].(map[string]any), "notes")
			delete(checkAt(v, 0), "code")
			delete(checkAt(v, 0), "triggeringPolicyField")
			return v
		}, OutcomeApproved, ReasonAllowed},
		{"unknown extra members are allowed", func() map[string]any {
			v := testenv.ApprovedVerdict()
			v["futureField"] = map[string]any{"x": 1}
			checkAt(v, 1)["weight"] = 2
			return v
		}, OutcomeApproved, ReasonAllowed},
		{"timestamp with an offset", func() map[string]any {
			v := testenv.ApprovedVerdict()
			v["timestamp"] = "2026-03-01T12:00:00+02:00"
			return v
		}, OutcomeApproved, ReasonAllowed},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v, err := ParseVerdict([]byte(testenv.VerdictJSON(tc.verdict())), "0xhash")
			if err != nil {
				t.Fatalf("ParseVerdict: %v", err)
			}
			if v.Outcome != tc.outcome || v.ReasonCode != tc.reason {
				t.Fatalf("got %s/%s, want %s/%s", v.Outcome, v.ReasonCode, tc.outcome, tc.reason)
			}
			if v.Approved() != (tc.outcome == OutcomeApproved) {
				t.Fatalf("Approved() = %v for %s", v.Approved(), tc.outcome)
			}
		})
	}
}

func TestVerdictValidationRejectsBrokenRules(t *testing.T) {
	mut := func(f func(v map[string]any)) string {
		v := testenv.ApprovedVerdict()
		f(v)
		return testenv.VerdictJSON(v)
	}
	rej := func(f func(v map[string]any)) string {
		v := testenv.RejectedVerdict(CheckRecipient, ReasonRecipientNotAllowed)
		f(v)
		return testenv.VerdictJSON(v)
	}
	cases := []struct {
		name  string
		body  string
		field string // expected ValidationError.Field
	}{
		{"malformed json", `{"schemaVersion":1,`, ""},
		{"not an object", `[1]`, "verdict"},
		{"trailing data after the verdict", testenv.VerdictJSON(testenv.ApprovedVerdict()) + ` {}`, ""},
		{"duplicate outcome key", strings.Replace(testenv.VerdictJSON(testenv.ApprovedVerdict()), `"outcome":"approved"`, `"outcome":"rejected","outcome":"approved"`, 1), ""},
		{"outcome key in another case does not count", strings.Replace(testenv.VerdictJSON(testenv.ApprovedVerdict()), `"outcome":`, `"Outcome":`, 1), "verdict.outcome"},
		{"schemaVersion missing", mut(func(v map[string]any) { delete(v, "schemaVersion") }), "verdict.schemaVersion"},
		{"schemaVersion 2", mut(func(v map[string]any) { v["schemaVersion"] = 2 }), "verdict.schemaVersion"},
		{"schemaVersion as a string", mut(func(v map[string]any) { v["schemaVersion"] = "1" }), "verdict.schemaVersion"},
		{"schemaVersion 1.0 is not the integer literal", strings.Replace(testenv.VerdictJSON(testenv.ApprovedVerdict()), `"schemaVersion":1`, `"schemaVersion":1.0`, 1), "verdict.schemaVersion"},
		{"unknown outcome", mut(func(v map[string]any) { v["outcome"] = "APPROVED" }), "verdict.outcome"},
		{"outcome missing", mut(func(v map[string]any) { delete(v, "outcome") }), "verdict.outcome"},
		{"outcome null", mut(func(v map[string]any) { v["outcome"] = nil }), "verdict.outcome"},
		{"rule 1: approved with a violation code", mut(func(v map[string]any) { v["reasonCode"] = "venue_not_allowed" }), "verdict.reasonCode"},
		{"rule 1: approved with an unknown code", mut(func(v map[string]any) { v["reasonCode"] = "allowed_with_warning" }), "verdict.reasonCode"},
		{"approved with a failed check", mut(func(v map[string]any) { checkAt(v, 0)["status"] = "failed" }), "verdict.checks[0].status"},
		{"rule 2: pending with reasonCode allowed", mut(func(v map[string]any) { v["outcome"], v["policyVersion"] = "pending", nil }), "verdict.reasonCode"},
		{"policyVersion must be null while pending", mut(func(v map[string]any) { v["outcome"], v["reasonCode"] = "pending", "pending" }), "verdict.policyVersion"},
		{"rule 3: rejected with reasonCode allowed", rej(func(v map[string]any) { v["reasonCode"] = "allowed" }), "verdict.reasonCode"},
		{"rule 3: rejected with reasonCode pending", rej(func(v map[string]any) { v["reasonCode"] = "pending" }), "verdict.reasonCode"},
		{"rule 4: rejected code matches no failed check", rej(func(v map[string]any) { v["reasonCode"] = "sanctioned_address" }), "verdict.reasonCode"},
		{"rule 4: rejected without any failed check", mut(func(v map[string]any) { v["outcome"], v["reasonCode"] = "rejected", "venue_not_allowed" }), "verdict.reasonCode"},
		{"rule 4: unknown code backed by no failed check", rej(func(v map[string]any) { v["reasonCode"] = "brand_new_code" }), "verdict.reasonCode"},
		{"rule 4: code of a passed check does not count", rej(func(v map[string]any) {
			checkAt(v, 4)["status"], checkAt(v, 4)["code"] = "passed", nil
		}), "verdict.reasonCode"},
		{"reasonCode empty", rej(func(v map[string]any) { v["reasonCode"] = "" }), "verdict.reasonCode"},
		{"reasonCode not a code", rej(func(v map[string]any) { v["reasonCode"] = "Recipient Not Allowed" }), "verdict.reasonCode"},
		{"reasonCode a number", rej(func(v map[string]any) { v["reasonCode"] = 7 }), "verdict.reasonCode"},
		{"humanReason missing", mut(func(v map[string]any) { delete(v, "humanReason") }), "verdict.humanReason"},
		{"triggeringPolicyField a number", mut(func(v map[string]any) { v["triggeringPolicyField"] = 1 }), "verdict.triggeringPolicyField"},
		{"checks missing", mut(func(v map[string]any) { delete(v, "checks") }), "verdict.checks"},
		{"checks an object", mut(func(v map[string]any) { v["checks"] = map[string]any{} }), "verdict.checks"},
		{"check not an object", mut(func(v map[string]any) { v["checks"] = []any{"venue"} }), "verdict.checks[0]"},
		{"empty checkId", mut(func(v map[string]any) { checkAt(v, 2)["checkId"] = "" }), "verdict.checks[2].checkId"},
		{"approved with a failed unknown check", mut(func(v map[string]any) {
			v["checks"] = append(v["checks"].([]any), map[string]any{"checkId": "mev_guard", "status": "failed", "code": "mev_risk", "humanReason": "h", "triggeringPolicyField": nil})
		}), "verdict.checks[12].status"},
		{"unknown check backs a rejection only with its literal code", rej(func(v map[string]any) {
			v["reasonCode"] = "mev_risk"
			v["checks"] = append(v["checks"].([]any), map[string]any{"checkId": "mev_guard", "status": "failed", "code": nil, "humanReason": "h", "triggeringPolicyField": nil})
		}), "verdict.reasonCode"},
		{"unknown check carries a known check's code", rej(func(v map[string]any) {
			v["checks"] = append(v["checks"].([]any), map[string]any{"checkId": "mev_guard", "status": "failed", "code": "venue_not_allowed", "humanReason": "h", "triggeringPolicyField": nil})
		}), "verdict.checks[12].code"},
		{"unknown check status", mut(func(v map[string]any) { checkAt(v, 2)["status"] = "skipped" }), "verdict.checks[2].status"},
		{"check humanReason missing", mut(func(v map[string]any) { delete(checkAt(v, 3), "humanReason") }), "verdict.checks[3].humanReason"},
		{"passed check carries a code", mut(func(v map[string]any) { checkAt(v, 0)["code"] = "venue_not_allowed" }), "verdict.checks[0].code"},
		{"failed check carries another check's code", rej(func(v map[string]any) {
			checkAt(v, 0)["status"], checkAt(v, 0)["code"] = "failed", "chain_not_allowed"
		}), "verdict.checks[0].code"},
		{"check code not a string", rej(func(v map[string]any) { checkAt(v, 4)["code"] = 3 }), "verdict.checks[4].code"},
		{"evidence missing", mut(func(v map[string]any) { delete(v, "evidence") }), "verdict.evidence"},
		{"decodedAction without protocol", mut(func(v map[string]any) {
			delete(v["evidence"].(map[string]any)["decodedAction"].(map[string]any), "protocol")
		}), "verdict.evidence.decodedAction.protocol"},
		{"decodedAction chainId a string", mut(func(v map[string]any) {
			v["evidence"].(map[string]any)["decodedAction"].(map[string]any)["chainId"] = "84532"
		}), "verdict.evidence.decodedAction.chainId"},
		{"observations an array", mut(func(v map[string]any) { v["evidence"].(map[string]any)["observations"] = []any{} }), "verdict.evidence.observations"},
		{"evidence sources missing", mut(func(v map[string]any) { delete(v["evidence"].(map[string]any), "sources") }), "verdict.evidence.sources"},
		{"policyVersion a string", mut(func(v map[string]any) { v["policyVersion"] = "3" }), "verdict.policyVersion"},
		{"policyVersion fractional", mut(func(v map[string]any) { v["policyVersion"] = 3.5 }), "verdict.policyVersion"},
		{"latencyMs negative", mut(func(v map[string]any) { v["latencyMs"] = -1 }), "verdict.latencyMs"},
		{"latencyMs missing", mut(func(v map[string]any) { delete(v, "latencyMs") }), "verdict.latencyMs"},
		{"latencyMs fractional", mut(func(v map[string]any) { v["latencyMs"] = 1.5 }), "verdict.latencyMs"},
		{"dataFreshness overall unknown", mut(func(v map[string]any) { v["dataFreshness"].(map[string]any)["overall"] = "stale" }), "verdict.dataFreshness.overall"},
		{"dataFreshness source status mixed", mut(func(v map[string]any) {
			v["dataFreshness"].(map[string]any)["sources"] = []any{map[string]any{"status": "mixed"}}
		}), "verdict.dataFreshness.sources[0].status"},
		{"dataFreshness source without status", mut(func(v map[string]any) {
			v["dataFreshness"].(map[string]any)["sources"] = []any{map[string]any{}}
		}), "verdict.dataFreshness.sources[0].status"},
		{"trust level unknown", mut(func(v map[string]any) { v["trust"].(map[string]any)["level"] = "none" }), "verdict.trust.level"},
		{"trust notes a number", mut(func(v map[string]any) { v["trust"].(map[string]any)["notes"] = 1 }), "verdict.trust.notes"},
		{"redaction redacted a string", mut(func(v map[string]any) { v["redaction"].(map[string]any)["redacted"] = "yes" }), "verdict.redaction.redacted"},
		{"redaction fields not strings", mut(func(v map[string]any) { v["redaction"].(map[string]any)["fields"] = []any{1} }), "verdict.redaction.fields"},
		{"usdNotional negative", mut(func(v map[string]any) { v["usdNotional"] = -0.5 }), "verdict.usdNotional"},
		{"timestamp not ISO 8601", mut(func(v map[string]any) { v["timestamp"] = "yesterday" }), "verdict.timestamp"},
		{"timestamp missing", mut(func(v map[string]any) { delete(v, "timestamp") }), "verdict.timestamp"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v, err := ParseVerdict([]byte(tc.body), "0xfeed")
			if err == nil {
				t.Fatalf("accepted an invalid verdict (outcome %s)", v.Outcome)
			}
			var ve *ValidationError
			if !errors.As(err, &ve) || !errors.Is(err, ErrInvalidResponse) {
				t.Fatalf("error %v is not a *ValidationError", err)
			}
			if ve.Field != tc.field {
				t.Fatalf("field = %q, want %q (%v)", ve.Field, tc.field, err)
			}
			if !strings.Contains(err.Error(), "0xfeed") {
				t.Fatalf("error %q does not name the requestHash", err)
			}
		})
	}
}

func TestEnvelopeValidation(t *testing.T) {
	approved := testenv.VerdictJSON(testenv.ApprovedVerdict())
	cases := []struct {
		name        string
		body        string
		wantVerdict bool
		wantErr     bool
	}{
		{"verdict absent means not yet", `{"status":"PENDING"}`, false, false},
		{"verdict null means not yet", `{"verdict":null}`, false, false},
		{"verdict present", `{"verdict":` + approved + `}`, true, false},
		{"verdict key in another case is not the verdict", `{"Verdict":` + approved + `}`, false, false},
		{"top-level null is not an envelope", `null`, false, true},
		{"top-level array is not an envelope", `[]`, false, true},
		{"verdict a string", `{"verdict":"approved"}`, false, true},
		{"duplicate verdict key", `{"verdict":null,"verdict":` + approved + `}`, false, true},
		{"empty body", ``, false, true},
		{"nesting too deep", `{"verdict":null,"x":` + strings.Repeat("[", 40) + strings.Repeat("]", 40) + `}`, false, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			env, err := ParseEnvelope([]byte(tc.body), "0xabc")
			if tc.wantErr {
				if err == nil || !errors.Is(err, ErrInvalidResponse) {
					t.Fatalf("err = %v, want ErrInvalidResponse", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if (env.Verdict != nil) != tc.wantVerdict {
				t.Fatalf("verdict present = %v, want %v", env.Verdict != nil, tc.wantVerdict)
			}
		})
	}
}

// FuzzParseEnvelope: whatever the bytes, ParseEnvelope never panics, and any verdict it
// returns obeys the consistency rules (docs/verdict.md#verdict), so that no malformed answer can ever
// come out as an approval.
func FuzzParseEnvelope(f *testing.F) {
	f.Add([]byte(`{"verdict":` + testenv.VerdictJSON(testenv.ApprovedVerdict()) + `}`))
	f.Add([]byte(`{"verdict":` + testenv.VerdictJSON(testenv.RejectedVerdict(CheckRecipient, ReasonRecipientNotAllowed)) + `}`))
	f.Add([]byte(`{"verdict":` + testenv.VerdictJSON(testenv.RejectedVerdict(CheckPerTxCap, ReasonDataUnavailable)) + `}`))
	f.Add([]byte(`{"verdict":` + testenv.VerdictJSON(testenv.PendingVerdict()) + `}`))
	f.Add([]byte(`{"verdict":` + testenv.VerdictJSON(warned("warn")) + `}`))
	f.Add([]byte(`{"verdict":` + testenv.VerdictJSON(warned("audit")) + `}`))
	f.Add([]byte(`{"verdict":null}`))
	f.Add([]byte(`{"verdict":{"schemaVersion":1,"outcome":"approved","reasonCode":"allowed"}}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		env, err := ParseEnvelope(body, "0xfuzz")
		if err != nil {
			if env != nil || !errors.Is(err, ErrInvalidResponse) || !strings.Contains(err.Error(), "0xfuzz") {
				t.Fatalf("error %v with envelope %v", err, env)
			}
			return
		}
		v := env.Verdict
		if v == nil {
			return
		}
		failed := map[ReasonCode]bool{}
		for _, c := range v.Checks {
			if c.CheckID == "" {
				t.Fatal("empty checkId accepted")
			}
			if c.Status == CheckFailed {
				if c.Code != nil {
					failed[*c.Code] = true
				} else {
					for _, code := range checkCodes[c.CheckID] {
						failed[code] = true
					}
				}
			} else if c.Code != nil {
				t.Fatal("a check that did not fail carries a code")
			}
		}
		switch v.Outcome {
		case OutcomeApproved:
			if v.ReasonCode != ReasonAllowed || len(failed) != 0 {
				t.Fatalf("approved with %s and failed checks %v", v.ReasonCode, failed)
			}
		case OutcomePending:
			if v.ReasonCode != ReasonPending || v.PolicyVersion != nil || v.Terminal() {
				t.Fatal("inconsistent pending verdict accepted")
			}
		case OutcomeRejected:
			if v.ReasonCode == ReasonAllowed || v.ReasonCode == ReasonPending || v.Approved() ||
				!v.ReasonCode.CrossCutting() && !failed[v.ReasonCode] {
				t.Fatalf("inconsistent rejection %s accepted", v.ReasonCode)
			}
		default:
			t.Fatalf("unknown outcome %q accepted", v.Outcome)
		}
		if err := v.Consistent(); err != nil { // the mode extension's rules too
			t.Fatalf("an accepted verdict is inconsistent: %v", err)
		}
		if v.SchemaVersion != 1 || v.LatencyMs < 0 || v.USDNotional != nil && *v.USDNotional < 0 {
			t.Fatalf("out-of-range field accepted: %+v", v)
		}
	})
}
