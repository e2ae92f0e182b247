package verdict

import (
	"encoding/json"
	"math"
	"strconv"
)

// Validate holds a verdict made in process to the rules ParseVerdict holds its JSON to (the
// package documentation's "Validation", and the signature member's shape): a verdict that
// passes Validate and encodes with encoding/json is one ParseVerdict accepts, and one that
// fails it is one ParseVerdict refuses, at the same field (TestValidateAgreesWithParseVerdict).
// It checks what the Go types leave open (the codes, the enumerations, the members that would
// encode as null, the numbers' ranges, the consistency rules), without encoding or parsing
// anything, so that a producer can validate the verdict it is about to encode at no more cost
// than a walk over it. What encoding/json guarantees of its output (the syntax, unique keys) is
// not checked again, nor the nesting bound of ParseJSON, which a verdict's fixed shape stays
// far below. A broken rule is a *ValidationError whose Field is relative to the verdict, as
// Consistent's is.
func (vd *Verdict) Validate() error {
	if field, problem := vd.problem(); problem != "" {
		return &ValidationError{Op: "verdict", Field: field, Problem: problem}
	}
	return nil
}

// problem is Validate's first broken rule, in the order ParseVerdict reads the members; problem
// is "" when there is none.
func (vd *Verdict) problem() (field, problem string) {
	switch {
	case vd.SchemaVersion != 1:
		return "schemaVersion", "must be the integer literal 1"
	case vd.Outcome != OutcomePending && vd.Outcome != OutcomeApproved && vd.Outcome != OutcomeRejected:
		return "outcome", "unknown outcome"
	case !isCode(string(vd.ReasonCode)):
		return "reasonCode", "must be a lower-case code of at most 64 characters"
	}
	if field, problem := checksProblem(vd.Checks, "checks"); problem != "" {
		return field, problem
	}
	if field, problem := vd.Evidence.problem(); problem != "" {
		return "evidence." + field, problem
	}
	if vd.LatencyMs < 0 {
		return "latencyMs", "must be an integer >= 0"
	}
	if field, problem := vd.DataFreshness.problem(); problem != "" {
		return "dataFreshness." + field, problem
	}
	switch l := vd.Trust.Level; {
	case l != TrustHigh && l != TrustMedium && l != TrustLow:
		return "trust.level", "must be high, medium or low"
	case vd.Redaction.Fields == nil:
		return "redaction.fields", "must be an array of strings"
	}
	if n := vd.USDNotional; n != nil && (math.IsInf(*n, 0) || math.IsNaN(*n) || *n < 0) {
		return "usdNotional", "must be a number >= 0 or null"
	}
	if vd.Mode != "" && !vd.Mode.Known() { // read before wouldFail, as ParseVerdict reads it
		return "mode", "must be enforce, warn or audit"
	}
	if field, problem := checksProblem(vd.WouldFail, "wouldFail"); problem != "" {
		return field, problem
	}
	if field, problem := vd.inconsistency(); problem != "" {
		return field, problem
	}
	if s := vd.Signature; s != nil {
		if field, problem := s.problem(vd); problem != "" {
			return "signature." + field, problem
		}
	}
	return "", ""
}

// checksProblem applies the rules of a check item to each of cs (checks or wouldFail, named by
// path). A nil checks encodes as null, which is not an array; a nil wouldFail is omitted.
func checksProblem(cs []Check, path string) (field, problem string) {
	if cs == nil && path == "checks" {
		return path, "must be an array"
	}
	for i := range cs {
		if field, problem := cs[i].problem(); problem != "" {
			return path + "[" + strconv.Itoa(i) + "]." + field, problem
		}
	}
	return "", ""
}

// problem applies the rules of one check item that its Go type leaves open (the package
// documentation's "Validation"): ParseVerdict applies them to the items it reads, and Validate
// to a Verdict's. It returns the member at fault and the rule, or "".
func (c *Check) problem() (field, problem string) {
	if !isCode(string(c.CheckID)) {
		return "checkId", "must be a lower-case id of at most 64 characters"
	}
	if c.Status != CheckPassed && c.Status != CheckFailed && c.Status != CheckNotChecked {
		return "status", "unknown check status"
	}
	if c.Code == nil {
		return "", ""
	}
	rc := *c.Code
	switch {
	case c.Status != CheckFailed:
		return "code", "only a failed check carries a code"
	case !isCode(string(rc)):
		return "code", "must be a lower-case code of at most 64 characters"
	case knownFailureCodes[rc] && !rc.CrossCutting() && !containsCode(checkCodes[c.CheckID], rc):
		// a check this version does not know (an extension, docs/verdict.md#checks) has no
		// codes of its own: it can only back a rejection literally
		return "code", "is the failure code of a different check"
	}
	return "", ""
}

// problem applies the evidence rules: a decodedAction with a non-empty string protocol and a
// positive integer chainId, observations and sources present.
func (e *Evidence) problem() (field, problem string) {
	if e.DecodedAction == nil {
		return "decodedAction", "must be an object"
	}
	if s, ok := e.DecodedAction["protocol"].(string); !ok || s == "" {
		return "decodedAction.protocol", "must be a non-empty string"
	}
	if field, problem := chainIDProblem(e.DecodedAction["chainId"]); problem != "" {
		return "decodedAction." + field, problem
	}
	switch {
	case e.Observations == nil:
		return "observations", "must be an object"
	case e.Sources == nil:
		return "sources", "must be an array"
	}
	return "", ""
}

// chainIDProblem is the rule of decodedAction.chainId, a positive integer, applied to the
// value as it will encode.
func chainIDProblem(id any) (field, problem string) {
	var n json.Number
	switch x := id.(type) {
	case int64:
		n = json.Number(strconv.FormatInt(x, 10))
	case json.Number:
		n = x
	default:
		b, err := json.Marshal(x)
		if err != nil || len(b) == 0 || (b[0] != '-' && (b[0] < '0' || b[0] > '9')) {
			return "chainId", "must be a number"
		}
		n = json.Number(b)
	}
	if i, err := strconv.ParseInt(n.String(), 10, 64); err != nil || i <= 0 {
		return "chainId", "must be a positive integer"
	}
	return "", ""
}

// problem applies the dataFreshness rules.
func (d *DataFreshness) problem() (field, problem string) {
	if o := d.Overall; o != FreshnessFresh && o != FreshnessCached && o != FreshnessMixed {
		return "overall", "must be fresh, cached or mixed"
	}
	if d.Sources == nil {
		return "sources", "must be an array"
	}
	for i, so := range d.Sources {
		p := "sources[" + strconv.Itoa(i) + "]"
		if so == nil {
			return p, "must be an object"
		}
		if st, _ := so["status"].(string); st != string(FreshnessFresh) && st != string(FreshnessCached) {
			return p + ".status", "must be fresh or cached"
		}
	}
	return "", ""
}

// problem applies the rules of the signature member of vd: a 65-byte signature, the message's
// integers in their ranges (signedInts), a uint256 value, and vd's own outcome and
// policyVersion.
func (s *Signature) problem(vd *Verdict) (field, problem string) {
	if len(s.Sig) != 65 {
		return "signature", "must be 0x and 130 hex digits"
	}
	m := &s.Message
	for i, n := range [...]int64{m.ChainID, m.PolicyVersion, int64(m.Outcome), m.Expiry} {
		if f := signedInts[i]; n < f.min || n > f.max {
			return "message." + f.key, f.problem()
		}
	}
	if v := m.Value; v != nil && (v.Sign() < 0 || v.BitLen() > 256) {
		return "message.value", "must be a decimal string of a uint256"
	}
	if se, ok := s.consistent(vd).(*SignatureError); ok {
		return se.Field, se.Problem
	}
	return "", ""
}
