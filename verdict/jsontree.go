package verdict

import (
	"encoding/json"
	"errors"
	"unicode/utf8"
)

// maxJSONDepth bounds nesting in answers; verdicts nest about five levels deep.
const maxJSONDepth = 32

// errDuplicateKey and friends describe why strict parsing failed.
var (
	errDuplicateKey  = errors.New("duplicate object key")
	errTooDeep       = errors.New("json nested too deeply")
	errTrailingData  = errors.New("data after the json value")
	errUnexpectedEnd = errors.New("unexpected end of json input")
	errSyntax        = errors.New("invalid json syntax")
)

// ParseJSON decodes data into a tree of map[string]any, []any, string, json.Number,
// bool and nil, more strictly than encoding/json does for structs:
//
//   - keys match exactly: encoding/json would let "Outcome" or "OUTCOME" fill an
//     "outcome" field, which a JavaScript client of the same answer would not see;
//   - a repeated key in one object is an error: with {"outcome":"rejected",
//     "outcome":"approved"} encoding/json keeps the last value and other parsers the
//     first, and a verdict must not mean different things to different readers;
//   - nothing may follow the value, and nesting is bounded.
//
// Otherwise it accepts exactly what encoding/json accepts and yields the same tree as
// json.Decoder with UseNumber (FuzzParseStrict checks both). It is a single pass over
// the bytes: about ten times faster than walking json.Decoder.Token, which matters
// because every poll validates a whole verdict (BenchmarkValidateVerdict).
func ParseJSON(data []byte) (any, error) {
	p := jsonParser{data: data}
	v, err := p.value(0)
	if err != nil {
		return nil, err
	}
	p.skipSpace()
	if p.pos != len(p.data) {
		return nil, errTrailingData
	}
	return v, nil
}

type jsonParser struct {
	data []byte
	pos  int
}

func (p *jsonParser) skipSpace() {
	for p.pos < len(p.data) {
		switch p.data[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return
		}
	}
}

// peek skips white space and returns the byte there, or errUnexpectedEnd at the end.
func (p *jsonParser) peek() (byte, error) {
	p.skipSpace()
	if p.pos >= len(p.data) {
		return 0, errUnexpectedEnd
	}
	return p.data[p.pos], nil
}

// expect skips white space and consumes c, which must come next.
func (p *jsonParser) expect(c byte) error {
	got, err := p.peek()
	if err != nil {
		return err
	}
	if got != c {
		return errSyntax
	}
	p.pos++
	return nil
}

// more is called after a member of an object or an array: it consumes the ',' that
// announces another member (true) or the closing byte that ends the list (false).
func (p *jsonParser) more(closing byte) (bool, error) {
	c, err := p.peek()
	if err != nil {
		return false, err
	}
	switch c {
	case ',':
		p.pos++
		return true, nil
	case closing:
		p.pos++
		return false, nil
	default:
		return false, errSyntax
	}
}

func (p *jsonParser) value(depth int) (any, error) {
	c, err := p.peek()
	if err != nil {
		return nil, err
	}
	switch {
	case c == '{':
		if depth >= maxJSONDepth {
			return nil, errTooDeep
		}
		return p.object(depth)
	case c == '[':
		if depth >= maxJSONDepth {
			return nil, errTooDeep
		}
		return p.array(depth)
	case c == '"':
		return p.str()
	case c == 't':
		return true, p.literal("true")
	case c == 'f':
		return false, p.literal("false")
	case c == 'n':
		return nil, p.literal("null")
	case c == '-' || c >= '0' && c <= '9':
		return p.number()
	default:
		return nil, errSyntax
	}
}

func (p *jsonParser) literal(word string) error {
	if len(p.data)-p.pos < len(word) {
		return errUnexpectedEnd
	}
	if string(p.data[p.pos:p.pos+len(word)]) != word {
		return errSyntax
	}
	p.pos += len(word)
	return nil
}

func (p *jsonParser) object(depth int) (any, error) {
	p.pos++ // '{'
	m := make(map[string]any, 8)
	p.skipSpace()
	if p.pos < len(p.data) && p.data[p.pos] == '}' {
		p.pos++
		return m, nil
	}
	for {
		c, err := p.peek()
		if err != nil {
			return nil, err
		}
		if c != '"' {
			return nil, errSyntax
		}
		k, err := p.str()
		if err != nil {
			return nil, err
		}
		if _, dup := m[k]; dup {
			return nil, errDuplicateKey
		}
		if err := p.expect(':'); err != nil {
			return nil, err
		}
		v, err := p.value(depth + 1)
		if err != nil {
			return nil, err
		}
		m[k] = v
		more, err := p.more('}')
		if err != nil {
			return nil, err
		}
		if !more {
			return m, nil
		}
	}
}

func (p *jsonParser) array(depth int) (any, error) {
	p.pos++ // '['
	a := make([]any, 0, 4)
	p.skipSpace()
	if p.pos < len(p.data) && p.data[p.pos] == ']' {
		p.pos++
		return a, nil
	}
	for {
		v, err := p.value(depth + 1)
		if err != nil {
			return nil, err
		}
		a = append(a, v)
		more, err := p.more(']')
		if err != nil {
			return nil, err
		}
		if !more {
			return a, nil
		}
	}
}

// str reads a string starting at its opening quote. Plain strings (no escape, valid
// UTF-8) are copied as they are; the rest go through encoding/json, so escapes and
// invalid UTF-8 (replaced by U+FFFD) come out exactly as encoding/json has them.
func (p *jsonParser) str() (string, error) {
	start := p.pos
	escaped, nonASCII := false, false
	for i := start + 1; i < len(p.data); i++ {
		switch c := p.data[i]; {
		case c == '"':
			p.pos = i + 1
			raw := p.data[start:p.pos]
			if !escaped && (!nonASCII || utf8.Valid(raw)) {
				return string(raw[1 : len(raw)-1]), nil
			}
			var s string
			if err := json.Unmarshal(raw, &s); err != nil {
				return "", errSyntax
			}
			return s, nil
		case c == '\\':
			escaped = true
			i++ // the escaped byte; encoding/json checks the escape itself
		case c < 0x20:
			return "", errSyntax
		case c >= 0x80:
			nonASCII = true
		}
	}
	return "", errUnexpectedEnd
}

// number reads a JSON number (RFC 8259 §6) and keeps its text as a json.Number.
func (p *jsonParser) number() (any, error) {
	d, start := p.data, p.pos
	i := start
	digits := func() int {
		n := 0
		for i < len(d) && d[i] >= '0' && d[i] <= '9' {
			i++
			n++
		}
		return n
	}
	if d[i] == '-' {
		i++
	}
	switch {
	case i >= len(d):
		return nil, errUnexpectedEnd
	case d[i] == '0':
		i++
	case d[i] >= '1' && d[i] <= '9':
		digits()
	default:
		return nil, errSyntax
	}
	if i < len(d) && d[i] == '.' {
		i++
		if digits() == 0 {
			return nil, errSyntax
		}
	}
	if i < len(d) && (d[i] == 'e' || d[i] == 'E') {
		i++
		if i < len(d) && (d[i] == '+' || d[i] == '-') {
			i++
		}
		if digits() == 0 {
			return nil, errSyntax
		}
	}
	p.pos = i
	return json.Number(d[start:i]), nil
}
