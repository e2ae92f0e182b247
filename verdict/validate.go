package verdict

import (
	"encoding/json"
	"math"
	"strconv"
	"time"
)

// ParseEnvelope strictly decodes and validates an approval-status body (docs/verdict.md#envelope):
// a JSON object whose "verdict" is absent, null or a valid verdict. requestHash only
// labels errors. Any failure is a *ValidationError, which is never approval.
func ParseEnvelope(body []byte, requestHash string) (*Envelope, error) {
	v := validator{op: "approval status", hash: requestHash}
	obj, err := v.parseObject(body)
	if err != nil {
		return nil, err
	}
	raw, present := obj["verdict"]
	if !present || raw == nil {
		return &Envelope{}, nil
	}
	vd, err := v.verdict(raw, "verdict")
	if err != nil {
		return nil, err
	}
	return &Envelope{Verdict: vd}, nil
}

// ParseVerdict strictly decodes and validates one verdict object (docs/verdict.md#verdict). It is the
// rule set ParseEnvelope applies to the envelope's verdict, offered on its own so that a
// verdict producer can test its output against the client's rules.
func ParseVerdict(body []byte, requestHash string) (*Verdict, error) {
	v := validator{op: "verdict", hash: requestHash}
	tree, err := v.parse(body)
	if err != nil {
		return nil, err
	}
	return v.verdict(tree, "verdict")
}

// ParseTransaction validates a 201 body: an object with a non-empty string requestHash
// (docs/verdict.md#envelope rule 3). Other fields are taken when they are strings.
func ParseTransaction(body []byte, traceID string) (*Transaction, error) {
	v := validator{op: "submit"}
	obj, err := v.parseObject(body)
	if err != nil {
		return nil, err
	}
	h, ok := obj["requestHash"].(string)
	if !ok || h == "" {
		return nil, v.fail("requestHash", "must be a non-empty string")
	}
	if len(h) > 512 || !printableASCII(h) {
		return nil, v.fail("requestHash", "must be at most 512 printable ascii characters")
	}
	t := &Transaction{RequestHash: h, TraceID: traceID, Raw: json.RawMessage(body)}
	t.ID, _ = obj["id"].(string)
	t.Description, _ = obj["description"].(string)
	t.Status, _ = obj["status"].(string)
	return t, nil
}

func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] <= 0x20 || s[i] >= 0x7f {
			return false
		}
	}
	return true
}

// validator builds *ValidationError values for one answer.
type validator struct{ op, hash string }

func (v validator) fail(field, problem string) error {
	return &ValidationError{Op: v.op, RequestHash: v.hash, Field: field, Problem: problem}
}

// parse strictly decodes a whole body (ParseJSON).
func (v validator) parse(body []byte) (any, error) {
	tree, err := ParseJSON(body)
	if err != nil {
		return nil, v.fail("", "malformed json: "+err.Error())
	}
	return tree, nil
}

// parseObject strictly decodes a whole body that must be a JSON object.
func (v validator) parseObject(body []byte) (map[string]any, error) {
	tree, err := v.parse(body)
	if err != nil {
		return nil, err
	}
	obj, ok := tree.(map[string]any)
	if !ok {
		return nil, v.fail("", "not a json object")
	}
	return obj, nil
}

// verdict applies every rule of the package documentation's "Validation" section.
func (v validator) verdict(raw any, path string) (*Verdict, error) {
	obj, ok := raw.(map[string]any)
	if !ok {
		return nil, v.fail(path, "must be an object or null")
	}
	out := &Verdict{SchemaVersion: 1}
	var err error

	if n, ok := obj["schemaVersion"].(json.Number); !ok || n.String() != "1" {
		return nil, v.fail(path+".schemaVersion", "must be the integer literal 1")
	}
	if out.Outcome, err = oneOf(v, obj, "outcome", path, "unknown outcome",
		OutcomePending, OutcomeApproved, OutcomeRejected); err != nil {
		return nil, err
	}
	rc, err := v.str(obj, "reasonCode", path)
	if err != nil {
		return nil, err
	}
	if !isCode(rc) {
		return nil, v.fail(path+".reasonCode", "must be a lower-case code of at most 64 characters")
	}
	out.ReasonCode = ReasonCode(rc)
	if out.HumanReason, err = v.str(obj, "humanReason", path); err != nil {
		return nil, err
	}
	if out.TriggeringPolicyField, err = v.nullStr(obj, "triggeringPolicyField", path); err != nil {
		return nil, err
	}
	if out.Checks, err = v.checks(obj["checks"], path+".checks"); err != nil {
		return nil, err
	}
	if out.Evidence, err = v.evidence(obj, path); err != nil {
		return nil, err
	}
	if pv, present := obj["policyVersion"]; present && pv != nil {
		n, ok := pv.(json.Number)
		i, perr := strconv.ParseInt(n.String(), 10, 64)
		if !ok || perr != nil {
			return nil, v.fail(path+".policyVersion", "must be an integer or null")
		}
		out.PolicyVersion = &i
	}
	if n, ok := obj["latencyMs"].(json.Number); !ok {
		return nil, v.fail(path+".latencyMs", "must be an integer >= 0")
	} else if out.LatencyMs, err = strconv.ParseInt(n.String(), 10, 64); err != nil || out.LatencyMs < 0 {
		return nil, v.fail(path+".latencyMs", "must be an integer >= 0")
	}
	if out.DataFreshness, err = v.freshness(obj, path); err != nil {
		return nil, err
	}
	if out.Trust, err = v.trust(obj, path); err != nil {
		return nil, err
	}
	if out.Redaction, err = v.redaction(obj, path); err != nil {
		return nil, err
	}
	if un, present := obj["usdNotional"]; present && un != nil {
		n, ok := un.(json.Number)
		f, perr := strconv.ParseFloat(n.String(), 64)
		if !ok || perr != nil || math.IsInf(f, 0) || math.IsNaN(f) || f < 0 {
			return nil, v.fail(path+".usdNotional", "must be a number >= 0 or null")
		}
		out.USDNotional = &f
	}
	ts, err := v.str(obj, "timestamp", path)
	if err != nil {
		return nil, err
	}
	if out.Timestamp, err = time.Parse(time.RFC3339Nano, ts); err != nil {
		return nil, v.fail(path+".timestamp", "must be an RFC 3339 (ISO 8601) timestamp")
	}
	if err = v.modeExtension(obj, path, out); err != nil {
		return nil, err
	}
	if field, problem := out.inconsistency(); problem != "" {
		return nil, v.fail(path+"."+field, problem)
	}
	if out.Signature, err = v.signature(obj, path, out); err != nil {
		return nil, err
	}
	return out, nil
}

// modeExtension reads the optional members mode and wouldFail (docs/verdict-api.md#modes)
// into out; their rules across members are out.inconsistency's.
func (v validator) modeExtension(obj map[string]any, path string, out *Verdict) error {
	if raw, present := obj["mode"]; present {
		m, ok := raw.(string)
		if !ok || !Mode(m).Known() {
			return v.fail(path+".mode", "must be enforce, warn or audit")
		}
		out.Mode = Mode(m)
	}
	if raw, present := obj["wouldFail"]; present {
		var err error
		if out.WouldFail, err = v.checks(raw, path+".wouldFail"); err != nil {
			return err
		}
	}
	return nil
}

// checks reads an array of check objects (checks, wouldFail) found at path.
func (v validator) checks(raw any, path string) ([]Check, error) {
	arr, ok := raw.([]any)
	if !ok {
		return nil, v.fail(path, "must be an array")
	}
	out := make([]Check, len(arr))
	for i, item := range arr {
		p := path + "[" + strconv.Itoa(i) + "]"
		co, ok := item.(map[string]any)
		if !ok {
			return nil, v.fail(p, "must be an object")
		}
		c := &out[i]
		id, err := v.str(co, "checkId", p)
		if err != nil {
			return nil, err
		}
		c.CheckID = CheckID(id)
		status, err := v.str(co, "status", p)
		if err != nil {
			return nil, err
		}
		c.Status = CheckStatus(status)
		code, err := v.nullStr(co, "code", p)
		if err != nil {
			return nil, err
		}
		c.Code = (*ReasonCode)(code)
		if c.HumanReason, err = v.str(co, "humanReason", p); err != nil {
			return nil, err
		}
		if c.TriggeringPolicyField, err = v.nullStr(co, "triggeringPolicyField", p); err != nil {
			return nil, err
		}
		if field, problem := c.problem(); problem != "" {
			return nil, v.fail(p+"."+field, problem)
		}
	}
	return out, nil
}

func (v validator) evidence(obj map[string]any, path string) (Evidence, error) {
	eo, p, err := v.object(obj, "evidence", path)
	if err != nil {
		return Evidence{}, err
	}
	da, ok := eo["decodedAction"].(map[string]any)
	if !ok {
		return Evidence{}, v.fail(p+".decodedAction", "must be an object")
	}
	if s, ok := da["protocol"].(string); !ok || s == "" {
		return Evidence{}, v.fail(p+".decodedAction.protocol", "must be a non-empty string")
	}
	if n, ok := da["chainId"].(json.Number); !ok {
		return Evidence{}, v.fail(p+".decodedAction.chainId", "must be a number")
	} else if id, err := strconv.ParseInt(n.String(), 10, 64); err != nil || id <= 0 {
		return Evidence{}, v.fail(p+".decodedAction.chainId", "must be a positive integer")
	}
	obs, ok := eo["observations"].(map[string]any)
	if !ok {
		return Evidence{}, v.fail(p+".observations", "must be an object")
	}
	src, ok := eo["sources"].([]any)
	if !ok {
		return Evidence{}, v.fail(p+".sources", "must be an array")
	}
	return Evidence{DecodedAction: da, Observations: obs, Sources: src}, nil
}

func (v validator) freshness(obj map[string]any, path string) (DataFreshness, error) {
	fo, p, err := v.object(obj, "dataFreshness", path)
	if err != nil {
		return DataFreshness{}, err
	}
	var out DataFreshness
	if out.Overall, err = oneOf(v, fo, "overall", p, "must be fresh, cached or mixed",
		FreshnessFresh, FreshnessCached, FreshnessMixed); err != nil {
		return DataFreshness{}, err
	}
	arr, ok := fo["sources"].([]any)
	if !ok {
		return DataFreshness{}, v.fail(p+".sources", "must be an array")
	}
	out.Sources = make([]map[string]any, len(arr))
	for i, item := range arr {
		so, ok := item.(map[string]any)
		if !ok {
			return DataFreshness{}, v.fail(p+".sources["+strconv.Itoa(i)+"]", "must be an object")
		}
		if st, _ := so["status"].(string); st != string(FreshnessFresh) && st != string(FreshnessCached) {
			return DataFreshness{}, v.fail(p+".sources["+strconv.Itoa(i)+"].status", "must be fresh or cached")
		}
		out.Sources[i] = so
	}
	return out, nil
}

func (v validator) trust(obj map[string]any, path string) (Trust, error) {
	to, p, err := v.object(obj, "trust", path)
	if err != nil {
		return Trust{}, err
	}
	var out Trust
	if out.Level, err = oneOf(v, to, "level", p, "must be high, medium or low",
		TrustHigh, TrustMedium, TrustLow); err != nil {
		return Trust{}, err
	}
	if out.Notes, err = v.nullStr(to, "notes", p); err != nil {
		return Trust{}, err
	}
	return out, nil
}

func (v validator) redaction(obj map[string]any, path string) (Redaction, error) {
	ro, p, err := v.object(obj, "redaction", path)
	if err != nil {
		return Redaction{}, err
	}
	red, ok := ro["redacted"].(bool)
	if !ok {
		return Redaction{}, v.fail(p+".redacted", "must be a boolean")
	}
	arr, ok := ro["fields"].([]any)
	if !ok {
		return Redaction{}, v.fail(p+".fields", "must be an array of strings")
	}
	out := Redaction{Redacted: red, Fields: make([]string, len(arr))}
	for i, f := range arr {
		s, ok := f.(string)
		if !ok {
			return Redaction{}, v.fail(p+".fields", "must be an array of strings")
		}
		out.Fields[i] = s
	}
	return out, nil
}

// object reads a required object field; p is its path.
func (v validator) object(obj map[string]any, key, path string) (o map[string]any, p string, err error) {
	p = path + "." + key
	o, ok := obj[key].(map[string]any)
	if !ok {
		return nil, p, v.fail(p, "must be an object")
	}
	return o, p, nil
}

// oneOf reads a required string field whose value must be one of allowed; problem
// describes any other value.
func oneOf[T ~string](v validator, obj map[string]any, key, path, problem string, allowed ...T) (T, error) {
	s, err := v.str(obj, key, path)
	if err != nil {
		return "", err
	}
	for _, a := range allowed {
		if T(s) == a {
			return a, nil
		}
	}
	return "", v.fail(path+"."+key, problem)
}

// str reads a required string field.
func (v validator) str(obj map[string]any, key, path string) (string, error) {
	s, ok := obj[key].(string)
	if !ok {
		return "", v.fail(path+"."+key, "must be a string")
	}
	return s, nil
}

// nullStr reads a "string or null" field; absent counts as null.
func (v validator) nullStr(obj map[string]any, key, path string) (*string, error) {
	raw, present := obj[key]
	if !present || raw == nil {
		return nil, nil
	}
	s, ok := raw.(string)
	if !ok {
		return nil, v.fail(path+"."+key, "must be a string or null")
	}
	return &s, nil
}

// isCode accepts machine codes: [a-z][a-z0-9_]*, at most 64 bytes.
func isCode(s string) bool {
	if s == "" || len(s) > 64 || s[0] < 'a' || s[0] > 'z' {
		return false
	}
	for i := 1; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

func containsCode(cs []ReasonCode, c ReasonCode) bool {
	for _, x := range cs {
		if x == c {
			return true
		}
	}
	return false
}
