package verdict

import (
	"encoding/json"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"
)

// JSONAppender is a value of a verdict's evidence that appends its own JSON, exactly what
// encoding/json writes for it, so that AppendJSON writes it without reflection. A nil
// pointer that implements it appends null, as encoding/json writes a nil pointer.
type JSONAppender interface {
	AppendJSON(b []byte) ([]byte, error)
}

// AppendJSON appends v's JSON to b, byte for byte what json.Marshal(v) writes (the signed
// and stored verdicts' JSON, docs/verdict.md#verdict), without encoding/json's reflection
// and its sorting of each map's keys: the evidence's maps and slices are walked by their
// types, and a value of any other type is handed to encoding/json (TestAppendJSONIsMarshal).
func (v *Verdict) AppendJSON(b []byte) ([]byte, error) {
	w := jsonWriters.Get().(*jsonWriter)
	defer w.recycle()
	w.b = b
	w.verdict(v)
	return w.b, w.err
}

// AppendJSONValue appends the JSON of v, a value of a verdict's evidence, to b: what
// json.Marshal(v) writes, as Verdict.AppendJSON writes it.
func AppendJSONValue(b []byte, v any) ([]byte, error) {
	w := jsonWriters.Get().(*jsonWriter)
	defer w.recycle()
	w.b = b
	w.value(v)
	return w.b, w.err
}

// AppendJSONString appends s as a JSON string, escaped as encoding/json escapes it (HTML's
// <, > and & too).
func AppendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = appendEscaped(append(b, s[start:i]...), c)
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if (r == utf8.RuneError && size == 1) || r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			switch r {
			case utf8.RuneError:
				b = append(b, `\ufffd`...)
			default:
				b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			}
			start = i + size
		}
		i += size
	}
	return append(append(b, s[start:]...), '"')
}

// AppendJSONArray appends s as a JSON array whose elements elem appends; a nil s is null, as
// encoding/json writes a nil slice. The first error ends it.
func AppendJSONArray[E any](b []byte, s []E, elem func([]byte, E) ([]byte, error)) ([]byte, error) {
	if s == nil {
		return append(b, "null"...), nil
	}
	b = append(b, '[')
	for i, e := range s {
		if i > 0 {
			b = append(b, ',')
		}
		var err error
		if b, err = elem(b, e); err != nil {
			return b, err
		}
	}
	return append(b, ']'), nil
}

const hexDigits = "0123456789abcdef"

// appendEscaped appends the escape of the ASCII byte c that a JSON string may not hold as
// it is (or that encoding/json escapes for HTML).
func appendEscaped(b []byte, c byte) []byte {
	switch c {
	case '\\', '"':
		return append(b, '\\', c)
	case '\b':
		return append(b, '\\', 'b')
	case '\f':
		return append(b, '\\', 'f')
	case '\n':
		return append(b, '\\', 'n')
	case '\r':
		return append(b, '\\', 'r')
	case '\t':
		return append(b, '\\', 't')
	}
	return append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
}

// AppendJSONFloat appends f as encoding/json writes a float64: like %g, with its own
// exponent cutoffs and no padding of the exponent. NaN and the infinities, which JSON
// cannot hold, are encoding/json's error.
func AppendJSONFloat(b []byte, f float64) ([]byte, error) {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		_, err := json.Marshal(f)
		return b, err
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if n := len(b); format == 'e' && n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
		b[n-2] = b[n-1] // e-09 → e-9
		b = b[:n-1]
	}
	return b, nil
}

// jsonWriter is the state of one AppendJSON: the bytes written, the first error, and the
// keys of the maps being written (each map's keys sorted at the end of keys, above those
// of the maps that hold it), recycled (jsonWriters).
type jsonWriter struct {
	b    []byte
	err  error
	keys []string
}

var jsonWriters = sync.Pool{New: func() any { return new(jsonWriter) }}

// maxRecycledKeys bounds the key stack a recycled jsonWriter keeps.
const maxRecycledKeys = 256

func (w *jsonWriter) recycle() {
	clear(w.keys)
	if cap(w.keys) > maxRecycledKeys {
		w.keys = nil
	}
	w.b, w.err, w.keys = nil, nil, w.keys[:0]
	jsonWriters.Put(w)
}

func (w *jsonWriter) raw(s string) { w.b = append(w.b, s...) }
func (w *jsonWriter) str(s string) { w.b = AppendJSONString(w.b, s) }
func (w *jsonWriter) int(n int64)  { w.b = strconv.AppendInt(w.b, n, 10) }

func (w *jsonWriter) float(f float64) {
	if w.err == nil {
		w.b, w.err = AppendJSONFloat(w.b, f)
	}
}

// value writes v: the types a verdict's evidence is made of by walking them, a
// JSONAppender by its method, anything else by encoding/json.
func (w *jsonWriter) value(v any) {
	switch x := v.(type) {
	case nil:
		w.raw("null")
	case string:
		w.str(x)
	case bool:
		w.raw(strconv.FormatBool(x))
	case int:
		w.int(int64(x))
	case int64:
		w.int(x)
	case float64:
		w.float(x)
	case map[string]any:
		w.object(x)
	case []any:
		writeArray(w, x, (*jsonWriter).value)
	case []map[string]any:
		writeArray(w, x, (*jsonWriter).object)
	case []string:
		writeArray(w, x, (*jsonWriter).str)
	case []int64:
		writeArray(w, x, (*jsonWriter).int)
	case JSONAppender:
		if w.err == nil {
			w.b, w.err = x.AppendJSON(w.b)
		}
	default:
		w.marshal(v)
	}
}

// marshal writes v with encoding/json.
func (w *jsonWriter) marshal(v any) {
	raw, err := json.Marshal(v)
	if err != nil && w.err == nil {
		w.err = err
	}
	w.b = append(w.b, raw...)
}

// writeArray writes s as a JSON array of its elements, each written by elem; a nil s is null.
func writeArray[E any](w *jsonWriter, s []E, elem func(*jsonWriter, E)) {
	if s == nil {
		w.raw("null")
		return
	}
	w.b = append(w.b, '[')
	for i, e := range s {
		if i > 0 {
			w.b = append(w.b, ',')
		}
		elem(w, e)
	}
	w.b = append(w.b, ']')
}

// object writes m with its keys sorted, as encoding/json writes a map; a nil m is null.
func (w *jsonWriter) object(m map[string]any) {
	if m == nil {
		w.raw("null")
		return
	}
	base := len(w.keys)
	for k := range m {
		w.keys = append(w.keys, k)
	}
	slices.SortFunc(w.keys[base:], strings.Compare)
	w.b = append(w.b, '{')
	for i := base; i < len(w.keys); i++ {
		if i > base {
			w.b = append(w.b, ',')
		}
		k := w.keys[i]
		w.str(k)
		w.b = append(w.b, ':')
		w.value(m[k])
	}
	w.b = append(w.b, '}')
	clear(w.keys[base:])
	w.keys = w.keys[:base]
}
