package verdict_test

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"

	"github.com/x402gate/x402gate/verdict"
)

// appendedPoint is an evidence value that writes its own JSON (a verdict.JSONAppender), as
// the engine's observations do.
type appendedPoint struct {
	X float64 `json:"x"`
	S string  `json:"s,omitempty"`
}

func (p *appendedPoint) AppendJSON(b []byte) ([]byte, error) {
	if p == nil {
		return append(b, "null"...), nil
	}
	b, err := verdict.AppendJSONFloat(append(b, `{"x":`...), p.X)
	if p.S != "" {
		b = verdict.AppendJSONString(append(b, `,"s":`...), p.S)
	}
	return append(b, '}'), err
}

// marshalledPoint is an evidence value of a type AppendJSON does not know: encoding/json
// writes it.
type marshalledPoint struct {
	Y []byte `json:"y"`
	Z uint8  `json:"z"`
}

// evidenceGen draws random evidence trees: every type AppendJSON walks, JSONAppenders, and
// values only encoding/json knows, with strings that need every escape.
type evidenceGen struct{ r *rand.Rand }

var oddStrings = []string{"", "a", `"`, `\`, "<script>&amp;</script>", "\u2028\u2029", "\x00\x01\x1f\x7f",
	"\b\f\n\r\t", "\xff\xfe", "é日本\U0001F600", "\ufffd", "a\xc3", "\xed\xa0\x80", "0x036CbD53842c5426634e7929541eC2318f3dCF7e"}

func (g evidenceGen) string() string {
	if g.r.IntN(3) == 0 {
		return oddStrings[g.r.IntN(len(oddStrings))]
	}
	b := make([]byte, g.r.IntN(12))
	for i := range b {
		b[i] = byte(g.r.IntN(256))
		if g.r.IntN(2) == 0 {
			b[i] = byte(' ' + g.r.IntN(95))
		}
	}
	return string(b)
}

var oddFloats = []float64{0, math.Copysign(0, -1), 1e-6, 9.99e-7, 1e21, 9.99e20, -1e21, 0.01, 1e-300, math.MaxFloat64,
	math.SmallestNonzeroFloat64, 123456789.125, -3.5e-9}

func (g evidenceGen) float() float64 {
	if g.r.IntN(2) == 0 {
		return oddFloats[g.r.IntN(len(oddFloats))]
	}
	return math.Float64frombits(g.r.Uint64()&^(0x7ff<<52) | uint64(g.r.IntN(0x7ff))<<52) // finite
}

func (g evidenceGen) value(depth int) any {
	n := 12
	if depth > 0 {
		n = 18
	}
	switch g.r.IntN(n) {
	case 0:
		return nil
	case 1:
		return g.r.IntN(2) == 0
	case 2:
		return g.r.IntN(2000) - 1000
	case 3:
		return g.r.Int64() - g.r.Int64()
	case 4:
		return g.float()
	case 5:
		return json.Number([]string{"0", "-1.5e3", "12345678901234567890", ""}[g.r.IntN(4)])
	case 6:
		return g.strings()
	case 7:
		return []int64{g.r.Int64(), -1, 0}[:g.r.IntN(4)]
	case 8:
		return &appendedPoint{X: g.float(), S: g.string()}
	case 9:
		return []*appendedPoint{nil, {X: 1}}[g.r.IntN(2)]
	case 10:
		return marshalledPoint{Y: []byte(g.string()), Z: uint8(g.r.IntN(256))}
	case 11:
		return map[string]string{g.string(): g.string(), "b": "<"}
	case 12, 13:
		return g.object(depth - 1)
	case 14:
		return g.objects(depth - 1)
	}
	return g.array(depth - 1)
}

func (g evidenceGen) strings() []string {
	if g.r.IntN(5) == 0 {
		return nil
	}
	s := make([]string, g.r.IntN(4))
	for i := range s {
		s[i] = g.string()
	}
	return s
}

func (g evidenceGen) object(depth int) map[string]any {
	if g.r.IntN(8) == 0 {
		return nil
	}
	m := make(map[string]any)
	for range g.r.IntN(8) {
		m[g.string()] = g.value(depth)
	}
	return m
}

func (g evidenceGen) objects(depth int) []map[string]any {
	if g.r.IntN(5) == 0 {
		return nil
	}
	s := make([]map[string]any, g.r.IntN(3))
	for i := range s {
		s[i] = g.object(depth)
	}
	return s
}

func (g evidenceGen) array(depth int) []any {
	if g.r.IntN(5) == 0 {
		return nil
	}
	s := make([]any, g.r.IntN(4))
	for i := range s {
		s[i] = g.value(depth)
	}
	return s
}

func (g evidenceGen) optString() *string {
	if g.r.IntN(3) == 0 {
		return nil
	}
	s := g.string()
	return &s
}

func (g evidenceGen) checks() []verdict.Check {
	if g.r.IntN(5) == 0 {
		return nil
	}
	s := make([]verdict.Check, g.r.IntN(4))
	for i := range s {
		s[i] = verdict.Check{CheckID: verdict.CheckID(g.string()), Status: verdict.CheckStatus(g.string()),
			HumanReason: g.string(), TriggeringPolicyField: g.optString()}
		if g.r.IntN(2) == 0 {
			c := verdict.ReasonCode(g.string())
			s[i].Code = &c
		}
	}
	return s
}

// verdict is a random verdict, valid or not: AppendJSON writes what it is given.
func (g evidenceGen) verdict() *verdict.Verdict {
	v := &verdict.Verdict{
		SchemaVersion: g.r.IntN(3), Outcome: verdict.Outcome(g.string()), ReasonCode: verdict.ReasonCode(g.string()),
		HumanReason: g.string(), TriggeringPolicyField: g.optString(), Checks: g.checks(),
		Evidence:      verdict.Evidence{DecodedAction: g.object(3), Observations: g.object(3), Sources: g.array(3)},
		LatencyMs:     g.r.Int64() - g.r.Int64(),
		DataFreshness: verdict.DataFreshness{Overall: verdict.Freshness(g.string()), Sources: g.objects(2)},
		Trust:         verdict.Trust{Level: verdict.TrustLevel(g.string()), Notes: g.optString()},
		Redaction:     verdict.Redaction{Redacted: g.r.IntN(2) == 0, Fields: g.strings()},
		Timestamp:     time.Unix(g.r.Int64N(1<<35), g.r.Int64N(1e9)).In(time.FixedZone("", 60*(g.r.IntN(1500)-750))),
		Mode:          verdict.Mode([]string{"", "enforce", "warn", g.string()}[g.r.IntN(4)]),
		WouldFail:     g.checks(),
	}
	if g.r.IntN(2) == 0 {
		pv := g.r.Int64() - g.r.Int64()
		v.PolicyVersion = &pv
	}
	if g.r.IntN(2) == 0 {
		usd := g.float()
		v.USDNotional = &usd
	}
	if g.r.IntN(2) == 0 {
		m := randomMessages(g.r, 1)[0]
		v.Signature = &verdict.Signature{Signer: common.BytesToAddress(m.Nonce[:20]), Message: m, Sig: m.DataHash[:]}
	}
	return v
}

// TestAppendJSONIsMarshal: Verdict.AppendJSON, which writes the verdict and walks its
// evidence itself, writes byte for byte what encoding/json writes, appended to what the
// buffer held, for random verdicts whose evidence holds every type the engine puts there,
// values only encoding/json knows, strings that need every escape and floats at the
// exponent's cutoffs.
func TestAppendJSONIsMarshal(t *testing.T) {
	g := evidenceGen{rand.New(rand.NewPCG(11, 24))}
	for i := range 5000 {
		v := g.verdict()
		want, err := json.Marshal(v)
		if err != nil {
			t.Fatalf("#%d: %v", i, err)
		}
		got, err := v.AppendJSON([]byte("prefix"))
		if err != nil || string(got) != "prefix"+string(want) {
			t.Fatalf("#%d: AppendJSON wrote\n%s (%v)\nencoding/json\n%s", i, got, err, want)
		}
	}
}

// TestAppendJSONRefusesWhatMarshalRefuses: a value JSON cannot hold is an error, as it is
// encoding/json's.
func TestAppendJSONRefusesWhatMarshalRefuses(t *testing.T) {
	nan, year := math.NaN(), time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)
	for name, v := range map[string]*verdict.Verdict{
		"NaN usdNotional":           {USDNotional: &nan},
		"infinite observation":      {Evidence: verdict.Evidence{Observations: map[string]any{"x": []any{math.Inf(1)}}}},
		"NaN in an appender":        {Evidence: verdict.Evidence{DecodedAction: map[string]any{"p": &appendedPoint{X: nan}}}},
		"invalid json.Number":       {Evidence: verdict.Evidence{Sources: []any{json.Number("1x")}}},
		"unsupported type":          {Evidence: verdict.Evidence{Sources: []any{make(chan int)}}},
		"timestamp after year 9999": {Timestamp: year},
	} {
		if _, err := json.Marshal(v); err == nil {
			t.Fatalf("%s: encoding/json accepts it", name)
		}
		if _, err := v.AppendJSON(nil); err == nil {
			t.Errorf("%s: AppendJSON wrote it without an error", name)
		}
	}
}

// FuzzAppendJSONString: any string, valid UTF-8 or not, is escaped as encoding/json escapes it.
func FuzzAppendJSONString(f *testing.F) {
	for _, s := range oddStrings {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, _ := json.Marshal(s)
		if got := verdict.AppendJSONString(nil, s); string(got) != string(want) {
			t.Fatalf("%q: AppendJSONString wrote %s, encoding/json %s", s, got, want)
		}
	})
}
