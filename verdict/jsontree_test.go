package verdict

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/x402gate/x402gate/internal/testenv"
)

// reference decodes data as encoding/json does (json.Decoder with UseNumber), the
// behaviour ParseJSON must match apart from its extra rules.
func reference(data []byte) (any, error) {
	if !json.Valid(data) {
		return nil, errSyntax
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return v, nil
}

// FuzzParseStrict checks ParseJSON against encoding/json: whatever ParseJSON
// accepts, encoding/json accepts and decodes to the same tree; whatever it refuses that
// encoding/json accepts is refused for one of its extra rules (a duplicate key, depth).
func FuzzParseStrict(f *testing.F) {
	for _, s := range []string{
		testenv.VerdictJSON(map[string]any{"verdict": testenv.ApprovedVerdict()}),
		`{"verdict":null}`, `{}`, `[]`, `null`, `true`, `false`, `0`, `-0.5e+10`, `1E-7`, `"x"`,
		`{"a":1,"a":2}`, `{"a":"\u0061","\u0061":1}`, `"\ud83d\ude00 \u00e9 é \/ \b\f\n\r\t"`, "\"\xff\xfe\"",
		`{"a" : [ 1 , 2 ] , "b" : { } }`, ` {"a":1} `, `{"a":1} x`, `01`, `1.`, `.5`, `-`, `[1,]`, `{"a":1,}`,
		`{"a"}`, `"\x"`, `"\u12"`, "\"a\tb\"", `[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]`,
		`{"Outcome":"approved","outcome":"rejected"}`, `nul`, `tru`, `[`, `{"a":`, `"abc`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := ParseJSON(data)
		want, rerr := reference(data)
		if err == nil {
			if rerr != nil {
				t.Fatalf("ParseJSON accepted what encoding/json refuses (%v): %q", rerr, data)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("trees differ for %q:\n got %#v\nwant %#v", data, got, want)
			}
			return
		}
		if rerr == nil && !errors.Is(err, errDuplicateKey) && !errors.Is(err, errTooDeep) {
			t.Fatalf("ParseJSON refused valid json (%v): %q", err, data)
		}
	})
}

func TestParseStrictRules(t *testing.T) {
	cases := []struct {
		in   string
		want error // nil: accepted
	}{
		{`{"a":1,"b":{"a":2}}`, nil},
		{`{"a":1,"a":1}`, errDuplicateKey},
		{`{"a":1,"\u0061":1}`, errDuplicateKey},
		{`{"a":1,"A":1}`, nil},
		{strings.Repeat("[", maxJSONDepth) + strings.Repeat("]", maxJSONDepth), nil},
		{strings.Repeat("[", maxJSONDepth+1) + strings.Repeat("]", maxJSONDepth+1), errTooDeep},
		{`{} {}`, errTrailingData},
		{`{}` + "\n\t ", nil},
		{``, errUnexpectedEnd},
		{`   `, errUnexpectedEnd},
	}
	for _, tc := range cases {
		_, err := ParseJSON([]byte(tc.in))
		if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
			t.Errorf("ParseJSON(%.40q) = %v, want %v", tc.in, err, tc.want)
		}
	}
}
