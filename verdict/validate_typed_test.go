package verdict

import (
	"encoding/json"
	"math/big"
	"testing"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"

	"github.com/x402gate/x402gate/internal/testenv"
)

// typedEdit is one change to a verdict made in process, valid or not.
type typedEdit struct {
	name string
	edit func(v *Verdict)
}

func code(c ReasonCode) *ReasonCode { return &c }

// onCheck edits v's i-th check when it has one.
func onCheck(i int, f func(c *Check)) func(v *Verdict) {
	return func(v *Verdict) {
		if i < len(v.Checks) {
			f(&v.Checks[i])
		}
	}
}

// onSignature edits v's signature when it has one.
func onSignature(f func(s *Signature)) func(v *Verdict) {
	return func(v *Verdict) {
		if v.Signature != nil {
			f(v.Signature)
		}
	}
}

// typedEdits reach every rule of Validate, and changes that break none.
var typedEdits = []typedEdit{
	{"schemaVersion 2", func(v *Verdict) { v.SchemaVersion = 2 }},
	{"outcome unknown", func(v *Verdict) { v.Outcome = "APPROVED" }},
	{"outcome empty", func(v *Verdict) { v.Outcome = "" }},
	{"outcome rejected", func(v *Verdict) { v.Outcome = OutcomeRejected }},
	{"outcome approved", func(v *Verdict) { v.Outcome = OutcomeApproved }},
	{"reasonCode of a check", func(v *Verdict) { v.ReasonCode = ReasonVenueNotAllowed }},
	{"reasonCode not a code", func(v *Verdict) { v.ReasonCode = "Not A Code" }},
	{"reasonCode empty", func(v *Verdict) { v.ReasonCode = "" }},
	{"reasonCode unknown", func(v *Verdict) { v.ReasonCode = "brand_new_code" }},
	{"reasonCode allowed", func(v *Verdict) { v.ReasonCode = ReasonAllowed }},
	{"checks nil", func(v *Verdict) { v.Checks = nil }},
	{"checks empty", func(v *Verdict) { v.Checks = []Check{} }},
	{"a check failed", onCheck(0, func(c *Check) { c.Status = CheckFailed })},
	{"a check failed with its code", onCheck(0, func(c *Check) { c.Status, c.Code = CheckFailed, code(ReasonVenueNotAllowed) })},
	{"a check failed with another's code", onCheck(0, func(c *Check) { c.Status, c.Code = CheckFailed, code(ReasonChainNotAllowed) })},
	{"a check's status unknown", onCheck(2, func(c *Check) { c.Status = "skipped" })},
	{"a checkId empty", onCheck(2, func(c *Check) { c.CheckID = "" })},
	{"a checkId unknown", onCheck(1, func(c *Check) { c.CheckID = "mev_guard" })},
	{"a passed check with a code", onCheck(1, func(c *Check) { c.Code = code(ReasonChainNotAllowed) })},
	{"a check code not a code", onCheck(1, func(c *Check) { c.Status, c.Code = CheckFailed, code("Bad") })},
	{"a check code cross-cutting", onCheck(3, func(c *Check) { c.Status, c.Code = CheckFailed, code(ReasonDataUnavailable) })},
	{"spend_window refuses", func(v *Verdict) {
		v.Outcome, v.ReasonCode = OutcomeRejected, ReasonSpendWindowExceeded
		v.Checks = append(v.Checks, Check{CheckID: CheckSpendWindow, Status: CheckFailed, Code: code(ReasonSpendWindowExceeded), HumanReason: "full"})
	}},
	{"decodedAction nil", func(v *Verdict) { v.Evidence.DecodedAction = nil }},
	{"protocol missing", func(v *Verdict) { v.Evidence.DecodedAction = map[string]any{"chainId": int64(1)} }},
	{"protocol empty", func(v *Verdict) { v.Evidence.DecodedAction = map[string]any{"protocol": "", "chainId": int64(1)} }},
	{"chainId a string", func(v *Verdict) { v.Evidence.DecodedAction = map[string]any{"protocol": "p", "chainId": "84532"} }},
	{"chainId missing", func(v *Verdict) { v.Evidence.DecodedAction = map[string]any{"protocol": "p"} }},
	{"chainId 0", func(v *Verdict) { v.Evidence.DecodedAction = map[string]any{"protocol": "p", "chainId": int64(0)} }},
	{"chainId fractional", func(v *Verdict) {
		v.Evidence.DecodedAction = map[string]any{"protocol": "p", "chainId": json.Number("1.5")}
	}},
	{"chainId a float", func(v *Verdict) { v.Evidence.DecodedAction = map[string]any{"protocol": "p", "chainId": 8453.0} }},
	{"chainId a large float", func(v *Verdict) { v.Evidence.DecodedAction = map[string]any{"protocol": "p", "chainId": 1e21} }},
	{"chainId an int", func(v *Verdict) { v.Evidence.DecodedAction = map[string]any{"protocol": "p", "chainId": -3} }},
	{"chainId a uint64", func(v *Verdict) {
		v.Evidence.DecodedAction = map[string]any{"protocol": "p", "chainId": uint64(1 << 63)}
	}},
	{"observations nil", func(v *Verdict) { v.Evidence.Observations = nil }},
	{"evidence sources nil", func(v *Verdict) { v.Evidence.Sources = nil }},
	{"latencyMs negative", func(v *Verdict) { v.LatencyMs = -1 }},
	{"policyVersion nil", func(v *Verdict) { v.PolicyVersion = nil }},
	{"policyVersion 7", func(v *Verdict) { pv := int64(7); v.PolicyVersion = &pv }},
	{"freshness unknown", func(v *Verdict) { v.DataFreshness.Overall = "stale" }},
	{"freshness sources nil", func(v *Verdict) { v.DataFreshness.Sources = nil }},
	{"freshness source nil", func(v *Verdict) { v.DataFreshness.Sources = []map[string]any{nil} }},
	{"freshness source mixed", func(v *Verdict) { v.DataFreshness.Sources = []map[string]any{{"status": "mixed"}} }},
	{"freshness source cached", func(v *Verdict) { v.DataFreshness.Sources = []map[string]any{{"status": "cached"}} }},
	{"trust level unknown", func(v *Verdict) { v.Trust.Level = "none" }},
	{"redaction fields nil", func(v *Verdict) { v.Redaction.Fields = nil }},
	{"usdNotional negative", func(v *Verdict) { n := -0.5; v.USDNotional = &n }},
	{"usdNotional nil", func(v *Verdict) { v.USDNotional = nil }},
	{"mode unknown", func(v *Verdict) { v.Mode = "strict" }},
	{"mode warn", func(v *Verdict) { v.Mode = ModeWarn }},
	{"mode enforce", func(v *Verdict) { v.Mode = ModeEnforce }},
	{"wouldFail an allowed check", func(v *Verdict) {
		v.WouldFail = []Check{{CheckID: CheckVenue, Status: CheckFailed, Code: code(ReasonVenueNotAllowed), HumanReason: "h"}}
	}},
	{"wouldFail a passed check", func(v *Verdict) { v.WouldFail = []Check{{CheckID: CheckVenue, Status: CheckPassed}} }},
	{"wouldFail a bad status", func(v *Verdict) { v.WouldFail = []Check{{CheckID: CheckVenue, Status: "maybe"}} }},
	{"wouldFail sanctions", func(v *Verdict) {
		v.WouldFail = []Check{{CheckID: CheckSanctions, Status: CheckFailed, Code: code(ReasonSanctionedAddress)}}
	}},
	{"signature short", onSignature(func(s *Signature) { s.Sig = s.Sig[:64] })},
	{"signature outcome 3", onSignature(func(s *Signature) { s.Message.Outcome = 3 })},
	{"signature outcome rejected", onSignature(func(s *Signature) { s.Message.Outcome = SignedRejected })},
	{"signature expiry 0", onSignature(func(s *Signature) { s.Message.Expiry = 0 })},
	{"signature chainId negative", onSignature(func(s *Signature) { s.Message.ChainID = -1 })},
	{"signature policyVersion negative", onSignature(func(s *Signature) { s.Message.PolicyVersion = -1 })},
	{"signature policyVersion 7", onSignature(func(s *Signature) { s.Message.PolicyVersion = 7 })},
	{"signature value negative", onSignature(func(s *Signature) { s.Message.Value = big.NewInt(-1) })},
	{"signature value above uint256", onSignature(func(s *Signature) { s.Message.Value = new(big.Int).Lsh(big.NewInt(1), 256) })},
	{"signature value nil", onSignature(func(s *Signature) { s.Message.Value = nil })},
	{"signature dropped", func(v *Verdict) { v.Signature = nil }},
}

// typedBases are valid verdicts, as JSON: approved, rejected, pending, warned, and a signed
// approval.
func typedBases(t *testing.T) map[string][]byte {
	t.Helper()
	key, err := crypto.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	signed, err := ParseVerdict([]byte(testenv.VerdictJSON(testenv.ApprovedVerdict())), "0x1")
	if err != nil {
		t.Fatal(err)
	}
	if signed.Signature, err = SignVerdict(key, SignedVerdict{
		Binding: CallBinding(common.HexToAddress("0xa11ce"), 84532, common.HexToAddress("0xb0b"), []byte{1}, big.NewInt(5)),
		Outcome: SignedApproved, PolicyVersion: *signed.PolicyVersion, Nonce: common.HexToHash("0x1"), Expiry: 1_800_000_000,
	}); err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{
		"approved": []byte(testenv.VerdictJSON(testenv.ApprovedVerdict())),
		"rejected": []byte(testenv.VerdictJSON(testenv.RejectedVerdict(CheckRecipient, ReasonRecipientNotAllowed))),
		"pending":  []byte(testenv.VerdictJSON(testenv.PendingVerdict())),
		"warned":   []byte(testenv.VerdictJSON(warned("warn"))),
		"signed":   []byte(testenv.VerdictJSON(signed)),
	}
	for name, b := range out {
		if _, err := ParseVerdict(b, "0x1"); err != nil {
			t.Fatalf("base %s: %v", name, err)
		}
	}
	return out
}

// TestValidateAgreesWithParseVerdict: for every valid verdict changed by any one or two of
// typedEdits, Validate refuses it exactly when ParseVerdict refuses its JSON, naming the same
// field: validating a verdict in process is neither weaker nor stronger than parsing it.
func TestValidateAgreesWithParseVerdict(t *testing.T) {
	refused, compared := 0, 0
	for name, base := range typedBases(t) {
		for i := -1; i < len(typedEdits); i++ {
			for j := i + 1; j < len(typedEdits); j++ {
				v, err := ParseVerdict(base, "0x1")
				if err != nil {
					t.Fatal(err)
				}
				label := name
				for _, k := range []int{i, j} {
					if k >= 0 {
						typedEdits[k].edit(v)
						label += " + " + typedEdits[k].name
					}
				}
				b, err := json.Marshal(v)
				if err != nil {
					continue // not a verdict anyone can receive
				}
				compared++
				field, parsed := "", ""
				if err := v.Validate(); err != nil {
					field = "verdict." + err.(*ValidationError).Field
					refused++
				}
				if _, err := ParseVerdict(b, "0x1"); err != nil {
					parsed = err.(*ValidationError).Field
				}
				if field != parsed {
					t.Errorf("%s: Validate refuses at %q, ParseVerdict at %q", label, field, parsed)
				}
			}
		}
	}
	if refused == 0 || refused == compared {
		t.Fatalf("%d of %d verdicts refused: the edits do not reach both answers", refused, compared)
	}
	t.Logf("%d verdicts compared, %d refused", compared, refused)
}
