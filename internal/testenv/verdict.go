package testenv

import "encoding/json"

// verdictChecks are the twelve checkIds of docs/verdict.md#checks, in table order.
var verdictChecks = []string{
	"venue", "chain", "contract_selector", "asset", "recipient", "side",
	"slippage_guard", "execution_price_bound", "leverage", "sanctions",
	"sink_recipient", "per_tx_cap",
}

// ApprovedVerdict is a complete, valid approved verdict as a mutable JSON tree: all
// twelve checks, evidence, mixed freshness sources and a redaction
// (docs/verdict.md#verdict). Each call returns a fresh tree.
func ApprovedVerdict() map[string]any {
	checks := make([]any, 0, len(verdictChecks))
	for i, id := range verdictChecks {
		st := "passed"
		if i%3 == 2 {
			st = "not_checked"
		}
		checks = append(checks, map[string]any{
			"checkId": id, "status": st, "code": nil,
			"humanReason": "check " + id + " " + st, "triggeringPolicyField": nil,
		})
	}
	return map[string]any{
		"schemaVersion":         1,
		"outcome":               "approved",
		"reasonCode":            "allowed",
		"humanReason":           "payment within policy",
		"triggeringPolicyField": nil,
		"checks":                checks,
		"evidence": map[string]any{
			"decodedAction": map[string]any{"protocol": "payment", "chainId": 84532, "kind": "x402.exact",
				"payTo": "0x209693Bc6afc0C5328bA36FaF03C514EF312287C", "amount": "10000"},
			"observations": map[string]any{"per_tx_cap": map[string]any{"observed": 0.01, "expected": 5}},
			"sources":      []any{map[string]any{"name": "ofac-sdn", "asOf": "2026-01-01T00:00:00Z"}},
		},
		"policyVersion": 3,
		"latencyMs":     4,
		"dataFreshness": map[string]any{"overall": "mixed", "sources": []any{
			map[string]any{"name": "ofac-sdn", "status": "cached"}, map[string]any{"name": "pricing", "status": "fresh"}}},
		"trust":       map[string]any{"level": "high", "notes": nil},
		"redaction":   map[string]any{"redacted": true, "fields": []any{"metadata.environment"}},
		"usdNotional": 0.01,
		"timestamp":   "2026-03-01T12:00:00.123Z",
	}
}

// RejectedVerdict is ApprovedVerdict turned into a valid rejection by the check id
// failing with code.
func RejectedVerdict[C, R ~string](id C, code R) map[string]any {
	v := ApprovedVerdict()
	v["outcome"], v["reasonCode"] = "rejected", string(code)
	v["humanReason"] = "payee is not on the allowlist"
	v["triggeringPolicyField"] = "recipients.allowed"
	for _, c := range v["checks"].([]any) {
		cm := c.(map[string]any)
		if cm["checkId"] == string(id) {
			cm["status"], cm["code"] = "failed", string(code)
		}
	}
	return v
}

// PendingVerdict is ApprovedVerdict while still pending: reasonCode pending and no
// policyVersion.
func PendingVerdict() map[string]any {
	v := ApprovedVerdict()
	v["outcome"], v["reasonCode"], v["policyVersion"] = "pending", "pending", nil
	return v
}

// Verdict is a small valid verdict with the given outcome, reasonCode and humanReason
// for a Base Sepolia payment: a passed chain check and a recipient check that is failed
// (with code and human as its code and reason) when outcome is "rejected". A pending
// verdict has no policyVersion.
func Verdict(outcome, code, human string) map[string]any {
	recipient := map[string]any{"checkId": "recipient", "status": "passed", "code": nil, "humanReason": "payee allowed"}
	var policy any = 7
	switch outcome {
	case "rejected":
		recipient["status"], recipient["code"], recipient["humanReason"] = "failed", code, human
	case "pending":
		policy = nil
	}
	return map[string]any{
		"schemaVersion": 1, "outcome": outcome, "reasonCode": code, "humanReason": human,
		"triggeringPolicyField": nil,
		"checks": []any{
			map[string]any{"checkId": "chain", "status": "passed", "code": nil, "humanReason": "Base Sepolia allowed"},
			recipient,
		},
		"evidence":      map[string]any{"decodedAction": map[string]any{"protocol": "payment", "chainId": 84532}, "observations": map[string]any{}, "sources": []any{}},
		"policyVersion": policy, "latencyMs": 3,
		"dataFreshness": map[string]any{"overall": "fresh", "sources": []any{}},
		"trust":         map[string]any{"level": "high", "notes": nil},
		"redaction":     map[string]any{"redacted": false, "fields": []any{}},
		"usdNotional":   0.01, "timestamp": "2026-11-23T10:00:00Z",
	}
}

// VerdictJSON encodes a verdict tree (or any value) as JSON; it panics on a value
// encoding/json refuses, which a fixture never is.
func VerdictJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// VerdictEnvelope is the approval-status body {"verdict": v}.
func VerdictEnvelope(v map[string]any) string {
	return VerdictJSON(map[string]any{"verdict": v})
}
