package x402

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/big"
	"math/rand/v2"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"
)

// refObject is the decoder's object as it was before the one-pass scanner: encoding/json
// into a map of raw values. The scanner is held to it.
type refObject struct {
	path   string
	reason Reason
	m      map[string]json.RawMessage
}

func refParseObject(raw []byte, path string, reason Reason) (*refObject, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '{' {
		return nil, &DecodeError{Reason: reason, Field: path, Msg: "must be a JSON object"}
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, &DecodeError{Reason: reason, Field: path, Msg: "bad JSON", Err: err}
	}
	return &refObject{path: path, reason: reason, m: m}, nil
}

func (o *refObject) field(key string) string {
	if o.path == "" {
		return key
	}
	return o.path + "." + key
}

func (o *refObject) fail(key, msg string) *DecodeError {
	return &DecodeError{Reason: o.reason, Field: o.field(key), Msg: msg}
}

// only refuses keys outside allowed.
func (o *refObject) only(allowed ...string) error {
	for k := range o.m {
		ok := false
		for _, a := range allowed {
			if k == a {
				ok = true
				break
			}
		}
		if !ok {
			return o.fail(keyName(k), "unknown field")
		}
	}
	return nil
}

// has reports whether key is present and not null.
func (o *refObject) has(key string) bool {
	v, ok := o.m[key]
	return ok && !bytes.Equal(bytes.TrimSpace(v), []byte("null"))
}

func (o *refObject) str(key string) (string, error) {
	v, ok := o.m[key]
	if !ok {
		return "", o.fail(key, "missing")
	}
	v = bytes.TrimSpace(v)
	if len(v) == 0 || v[0] != '"' {
		return "", o.fail(key, "must be a string")
	}
	var s string
	if err := json.Unmarshal(v, &s); err != nil {
		return "", o.fail(key, "bad string")
	}
	return s, nil
}

// optStr reads an optional string; absent and null read as "".
func (o *refObject) optStr(key string) (string, error) {
	if !o.has(key) {
		return "", nil
	}
	return o.str(key)
}

func (o *refObject) nonEmptyStr(key string) (string, error) {
	s, err := o.str(key)
	if err == nil && s == "" {
		err = o.fail(key, "is empty")
	}
	return s, err
}

func (o *refObject) obj(key string) (*refObject, error) {
	v, ok := o.m[key]
	if !ok {
		return nil, o.fail(key, "missing")
	}
	return refParseObject(v, o.field(key), o.reason)
}

func (o *refObject) boolean(key string) (bool, error) {
	v, ok := o.m[key]
	if !ok {
		return false, o.fail(key, "missing")
	}
	switch string(bytes.TrimSpace(v)) {
	case "true":
		return true, nil
	case "false":
		return false, nil
	}
	return false, o.fail(key, "must be true or false")
}

// optMap reads an optional free-form object (extra, extensions, outputSchema). Absent,
// null and {} read as nil, so they re-encode alike (omitted). Numbers stay json.Number so
// they re-encode unchanged.
func (o *refObject) optMap(key string) (map[string]any, error) {
	if !o.has(key) {
		return nil, nil
	}
	v := bytes.TrimSpace(o.m[key])
	if v[0] != '{' {
		return nil, o.fail(key, "must be an object")
	}
	d := json.NewDecoder(bytes.NewReader(v))
	d.UseNumber()
	var m map[string]any
	if err := d.Decode(&m); err != nil {
		return nil, o.fail(key, "bad object")
	}
	if len(m) == 0 {
		return nil, nil
	}
	return m, nil
}

// smallInt reads a JSON integer literal in [min, max]: no sign, fraction, exponent or
// leading zero.
func (o *refObject) smallInt(key string, min, max int) (int, error) {
	v, ok := o.m[key]
	if !ok {
		return 0, o.fail(key, "missing")
	}
	s := string(bytes.TrimSpace(v))
	if !isDecimal(s) || len(s) > 10 {
		return 0, o.fail(key, "must be a non-negative JSON integer")
	}
	n := 0
	for i := 0; i < len(s); i++ {
		n = n*10 + int(s[i]-'0')
	}
	if n < min || n > max {
		return 0, o.fail(key, fmt.Sprintf("must be between %d and %d", min, max))
	}
	return n, nil
}

// refDecodeBase64JSON is decodeBase64JSON as it was before it tried the strict decoder
// first: the character walk, then the decoder.
func refDecodeBase64JSON(value string, max int, reason Reason) ([]byte, error) {
	if value == "" {
		return nil, &DecodeError{Reason: reason, Msg: "header is empty"}
	}
	if len(value) > max {
		return nil, &DecodeError{Reason: reason, Msg: fmt.Sprintf("header exceeds %d bytes", max), Err: ErrTooLarge}
	}
	if len(value)%4 != 0 {
		return nil, &DecodeError{Reason: reason, Msg: "base64 is not padded to a multiple of 4"}
	}
	pad := 0
	for i := 0; i < len(value); i++ {
		c := value[i]
		switch {
		case c == '=':
			pad++
		case pad > 0:
			return nil, &DecodeError{Reason: reason, Msg: "base64 padding is not at the end"}
		case c >= 'A' && c <= 'Z', c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '+', c == '/':
		case c == '-' || c == '_':
			return nil, &DecodeError{Reason: reason, Msg: "URL-safe base64 is not accepted"}
		default:
			return nil, &DecodeError{Reason: reason, Msg: "base64 has a character outside the standard alphabet"}
		}
	}
	if pad > 2 {
		return nil, &DecodeError{Reason: reason, Msg: "base64 has too much padding"}
	}
	raw, err := base64.StdEncoding.Strict().DecodeString(value)
	if err != nil {
		return nil, &DecodeError{Reason: reason, Msg: "bad base64", Err: err}
	}
	if !utf8.Valid(raw) {
		return nil, &DecodeError{Reason: reason, Msg: "decoded header is not UTF-8"}
	}
	return raw, nil
}

// base64Cases probe the header checks: padding, alphabets, line breaks, UTF-8.
var base64Cases = []string{
	"", "e30=", "e30", "e30==", "e3 0=", "e30=\n", "e3\r\n0=", "QQ==QQ==", "Q===", "QQ=A", "QUJD", "QUJD-_8=", "QUJD+/8=",
	"////", "/w==", "/x==", "e30=e30=", "=e30", "\x00e30", "e30\x80", "gICA",
}

// TestBase64MatchesTheCharacterWalk: decodeBase64JSON accepts and refuses exactly what the
// character walk did, with the same messages.
func TestBase64MatchesTheCharacterWalk(t *testing.T) {
	for _, c := range base64Cases {
		checkBase64(t, c)
	}
}

func FuzzBase64MatchesTheCharacterWalk(f *testing.F) {
	for _, c := range base64Cases {
		f.Add(c)
	}
	f.Fuzz(checkBase64)
}

func checkBase64(t *testing.T, in string) {
	want, werr := refDecodeBase64JSON(in, 64, ReasonInvalidPayload)
	got, gerr := decodeBase64JSON(in, 64, ReasonInvalidPayload)
	if !bytes.Equal(want, got) || !sameError(werr, gerr) {
		t.Fatalf("%q: %q, %v; want %q, %v", in, got, gerr, want, werr)
	}
}

// sameError reports whether two decode errors are alike: both nil, or the same text.
func sameError(a, b error) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return a.Error() == b.Error()
}

// compareObjects checks every accessor of got against want, and of their member objects
// down to depth levels.
func compareObjects(t *testing.T, in []byte, want *refObject, got *object, depth int) {
	t.Helper()
	keys := map[string]bool{}
	for _, m := range got.members {
		keys[m.key] = true
	}
	if len(keys) != len(want.m) {
		t.Fatalf("%q: %d distinct keys, want %d", in, len(keys), len(want.m))
	}
	for k, raw := range want.m {
		m, ok := got.get(k)
		if !ok || m.val != string(bytes.TrimSpace(raw)) {
			t.Fatalf("%q: key %q = %v %+v, want %q", in, k, ok, m, raw)
		}
		ws, werr := want.str(k)
		gs, gerr := got.str(k)
		if ws != gs || !sameError(werr, gerr) {
			t.Fatalf("%q: str(%q) = %q, %v; want %q, %v", in, k, gs, gerr, ws, werr)
		}
		if want.has(k) != got.has(k) {
			t.Fatalf("%q: has(%q) differs", in, k)
		}
		wb, werr := want.boolean(k)
		gb, gerr := got.boolean(k)
		if wb != gb || !sameError(werr, gerr) {
			t.Fatalf("%q: boolean(%q) = %v, %v; want %v, %v", in, k, gb, gerr, wb, werr)
		}
		wi, werr := want.smallInt(k, 0, 1<<30)
		gi, gerr := got.smallInt(k, 0, 1<<30)
		if wi != gi || !sameError(werr, gerr) {
			t.Fatalf("%q: smallInt(%q) = %v, %v; want %v, %v", in, k, gi, gerr, wi, werr)
		}
		wm, werr := want.optMap(k)
		gm, gerr := got.optMap(k)
		if !reflect.DeepEqual(wm, gm) || !sameError(werr, gerr) {
			t.Fatalf("%q: optMap(%q) = %#v, %v; want %#v, %v", in, k, gm, gerr, wm, werr)
		}
		wo, werr := want.obj(k)
		go_, gerr := got.obj(k)
		if !sameError(werr, gerr) {
			t.Fatalf("%q: obj(%q) = %v; want %v", in, k, gerr, werr)
		}
		if werr == nil && depth > 0 {
			compareObjects(t, in, wo, go_, depth-1)
		}
	}
	if err := got.only(); (err == nil) != (len(want.m) == 0) {
		t.Fatalf("%q: only() = %v with %d keys", in, err, len(want.m))
	}
	all := make([]string, 0, len(keys))
	for k := range keys {
		all = append(all, k)
	}
	if err := got.only(all...); err != nil {
		t.Fatalf("%q: only(every key) = %v", in, err)
	}
}

// checkScannerAgainstEncodingJSON parses in with both and compares them.
func checkScannerAgainstEncodingJSON(t *testing.T, in []byte) {
	t.Helper()
	want, werr := refParseObject(in, "p", ReasonInvalidPayload)
	got, gerr := parseObject(in, "p", ReasonInvalidPayload)
	if !sameError(werr, gerr) {
		t.Fatalf("%q: error %v, want %v", in, gerr, werr)
	}
	if werr == nil {
		compareObjects(t, in, want, got, 4)
	}
}

// scannerCases are inputs that probe the JSON grammar and the decoding of strings.
var scannerCases = []string{
	`{}`, ` { } `, "\t{\n}\r", "\v{}", "\u00a0{}\u0085", `{"a":1}`, `{"a":1,}`, `{"a":1 "b":2}`, `{"a"}`, `{"a":}`, `{,}`, `{"a":1}}`, `{"a":1}x`, `{"a":1} {}`,
	`{"a":"x","a":"y"}`, `{"a":{"b":1},"a":"s"}`, `{"a":null}`, `{"a":nul}`, `{"a":true}`, `{"a":truex}`, `{"a":false }`, `{"a":fals}`,
	`{"a":0}`, `{"a":-0}`, `{"a":01}`, `{"a":-}`, `{"a":1.}`, `{"a":1.5}`, `{"a":.5}`, `{"a":1e5}`, `{"a":1E+5}`, `{"a":1e-}`, `{"a":1e}`, `{"a":+1}`, `{"a":2147483647}`, `{"a":99999999999}`,
	`{"a":"\u0041"}`, `{"\u0061":"b"}`, `{"a":"\ud83d\ude00"}`, `{"a":"\ud83d"}`, `{"a":"\ude00x"}`, `{"a":"\ud83dx"}`, `{"a":"\ud83d\u0041"}`, `{"a":"\uZZZZ"}`, `{"a":"\u12"}`,
	`{"a":"\x"}`, `{"a":"\/\b\f\n\r\t\"\\"}`, "{\"a\":\"\x01\"}", "{\"a\":\"\x7f\"}", `{"a":"é"}`, `{"é":"\u00e9"}`, "{\"a\":\"\xff\"}", "{\"\xff\":1}", `{"a":"\u2028<>&"}`,
	`{"a":[]}`, `{"a":[1,2,[3,{"b":[]}]]}`, `{"a":[1,]}`, `{"a":[,1]}`, `{"a":[1 2]}`, `{"a":{"b":{"c":{"d":{"e":{"f":"g"}}}}}}`, `{"a":{"b":{"c":{"d":{"e":{"f":}}}}}}`,
	`{"extra":{"name":"USDC","version":"2"}}`, `{"extra":{"name":"USDC","n":1}}`, `{"extra":{"a":"\u0041"}}`, `{"extra":{}}`, `{"extra":{"a":"x","a":"y"}}`, `{"extra":[]}`, `{"extra":"s"}`,
	`{"x402Version":1}`, `{"x402Version":2,"x402Version":1}`, `{"X402Version":1}`, `{"a":"unterminated}`, `{"a`, `{`, `[]`, `"s"`, ``, `{"a":1}` + "\x00",
}

// TestScannerMatchesEncodingJSON: the one-pass scanner reads exactly what encoding/json
// read into a map of raw values: the same refusals with the same errors, the same keys
// (the last of a duplicate), the same strings, objects, integers and free-form maps.
func TestScannerMatchesEncodingJSON(t *testing.T) {
	for _, c := range scannerCases {
		checkScannerAgainstEncodingJSON(t, []byte(c))
	}
	// Nesting at encoding/json's limit and one past it, in arrays and objects.
	for _, n := range []int{maxNesting - 1, maxNesting, maxNesting + 1} {
		checkScannerAgainstEncodingJSON(t, []byte(`{"a":`+strings.Repeat("[", n-1)+strings.Repeat("]", n-1)+`}`))
		checkScannerAgainstEncodingJSON(t, []byte(strings.Repeat(`{"a":`, n)+"1"+strings.Repeat("}", n)))
	}
	f := loadFixtures(t)
	for _, fx := range f.Payments {
		checkScannerAgainstEncodingJSON(t, fx.Payload)
		checkScannerAgainstEncodingJSON(t, fx.Requirements)
	}
}

// FuzzScannerMatchesEncodingJSON is TestScannerMatchesEncodingJSON on any input.
func FuzzScannerMatchesEncodingJSON(f *testing.F) {
	for _, c := range scannerCases {
		f.Add([]byte(c))
	}
	for _, fx := range loadFixtures(f).Payments {
		f.Add([]byte(fx.Payload))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		checkScannerAgainstEncodingJSON(t, in)
	})
}

// TestSmallUintsAndHexAreTheLibraries: the one-allocation integers equal big.Int's
// SetString, and hexInto equals encoding/hex, at their edges and at random.
func TestSmallUintsAndHexAreTheLibraries(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	nums := []string{"0", "1", "10000", "9999999999999999999", "18446744073709551615", "18446744073709551616", "115792089237316195423570985008687907853269984665640564039457584007913129639935"}
	for range 500 {
		nums = append(nums, strconv.FormatUint(rng.Uint64()>>rng.IntN(64), 10))
	}
	for _, s := range nums {
		got, msg := parseUint(s, MaxIntegerDigits)
		want, _ := new(big.Int).SetString(s, 10)
		if msg != "" || got.Cmp(want) != 0 || got.String() != s {
			t.Fatalf("parseUint(%q) = %v %q", s, got, msg)
		}
		if got.Add(got, big.NewInt(1)).Cmp(want.Add(want, big.NewInt(1))) != 0 {
			t.Fatalf("parseUint(%q) + 1 differs", s)
		}
	}
	for range 200 {
		b := make([]byte, rng.IntN(70))
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		s := hex.EncodeToString(b)
		if rng.IntN(2) == 0 {
			s = strings.ToUpper(s)
		}
		got := make([]byte, len(b))
		hexInto(got, s)
		if !bytes.Equal(got, b) {
			t.Fatalf("hexInto(%q) = %x", s, got)
		}
	}
}

// TestDecodersShareNoArena: payments decoded at once on many goroutines, each arena handed
// back and reused, equal the ones decoded alone, and keep their values after later decodes.
func TestDecodersShareNoArena(t *testing.T) {
	f := loadFixtures(t)
	want := make([]*Payment, len(f.Payments))
	for i, fx := range f.Payments {
		p, err := DecodePaymentHeader(fx.Header, fx.Value, nil)
		if err != nil {
			t.Fatal(err)
		}
		want[i] = p
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Go(func() {
			var kept []*Payment
			for n := range 200 {
				i := (g + n) % len(f.Payments)
				p, err := DecodePaymentHeader(f.Payments[i].Header, f.Payments[i].Value, nil)
				if err != nil || !reflect.DeepEqual(p, want[i]) {
					errs <- fmt.Errorf("goroutine %d, decode %d: %+v, %v", g, n, p, err)
					return
				}
				kept = append(kept, p)
			}
			for n, p := range kept {
				if !reflect.DeepEqual(p, want[(g+n)%len(f.Payments)]) {
					errs <- fmt.Errorf("goroutine %d: payment %d changed after later decodes", g, n)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
