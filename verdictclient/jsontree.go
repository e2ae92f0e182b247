package verdictclient

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
)

// maxJSONDepth bounds nesting in answers; verdicts nest about five levels deep.
const maxJSONDepth = 32

// errDuplicateKey and friends describe why strict parsing failed.
var (
	errDuplicateKey = errors.New("duplicate object key")
	errTooDeep      = errors.New("json nested too deeply")
	errTrailingData = errors.New("data after the json value")
)

// parseStrict decodes data into a tree of map[string]any, []any, string, json.Number,
// bool and nil, more strictly than encoding/json does for structs:
//
//   - keys match exactly: encoding/json would let "Outcome" or "OUTCOME" fill an
//     "outcome" field, which a JavaScript client of the same answer would not see;
//   - a repeated key in one object is an error: with {"outcome":"rejected",
//     "outcome":"approved"} encoding/json keeps the last value and other parsers the
//     first, and a verdict must not mean different things to different readers;
//   - nothing may follow the value, and nesting is bounded.
func parseStrict(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := parseValue(dec, 0)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errTrailingData
	}
	return v, nil
}

func parseValue(dec *json.Decoder, depth int) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	d, ok := tok.(json.Delim)
	if !ok {
		return tok, nil // string, json.Number, bool or nil
	}
	if depth >= maxJSONDepth {
		return nil, errTooDeep
	}
	switch d {
	case '{':
		m := make(map[string]any)
		for dec.More() {
			kt, err := dec.Token()
			if err != nil {
				return nil, err
			}
			k, _ := kt.(string) // the decoder guarantees a string key here
			if _, dup := m[k]; dup {
				return nil, errDuplicateKey
			}
			v, err := parseValue(dec, depth+1)
			if err != nil {
				return nil, err
			}
			m[k] = v
		}
		if _, err := dec.Token(); err != nil { // '}'
			return nil, err
		}
		return m, nil
	case '[':
		a := make([]any, 0, 4)
		for dec.More() {
			v, err := parseValue(dec, depth+1)
			if err != nil {
				return nil, err
			}
			a = append(a, v)
		}
		if _, err := dec.Token(); err != nil { // ']'
			return nil, err
		}
		return a, nil
	default:
		return nil, errors.New("unexpected delimiter")
	}
}
