package x402

import (
	"encoding/json"
	"errors"
	"sync"
)

// The strict decoders read a payment header in one pass: scan checks the JSON syntax as
// encoding/json does (the same grammar, whitespace and nesting limit) and splits each
// object into its members, building the member objects of the first few levels on the
// way, so no byte is scanned twice and no reflection runs. Strings without escapes and
// with printable ASCII only are sliced out of the input as they are; every other string,
// and any free-form object with more than strings in it, is decoded by encoding/json
// itself, so the values are exactly what it gives. On a syntax error encoding/json is
// asked again, for its error.

// maxNesting is encoding/json's limit of nested arrays and objects.
const maxNesting = 10000

// builtDepth is how deep member objects are built while scanning (the root is 1): a
// payload's authorization and its accepted requirement's extra are at 3. Deeper objects
// are checked, and split when a decoder asks for them.
const builtDepth = 4

// member is one key of an object: its raw JSON value, without surrounding whitespace.
type member struct {
	key   string
	val   string
	plain bool    // val is a string without escapes, of printable ASCII
	obj   *object // val as an object, when it is one within builtDepth
}

// scanner reads one JSON text. Its objects and members come from an arena.
type scanner struct {
	s string
	i int
	a *arena
}

// arena holds the objects and members of one text. A decoder that is done with the text
// hands it back (object.release) for the next one: the values it read are strings of the
// text, not of the arena.
type arena struct {
	objs []object
	mems []member
}

var arenas = sync.Pool{New: func() any { return &arena{objs: make([]object, 0, 16), mems: make([]member, 0, 64)} }}

func (p *scanner) newObject() *object {
	a := p.a
	if len(a.objs) == cap(a.objs) {
		a.objs = make([]object, 0, 16)
	}
	a.objs = a.objs[:len(a.objs)+1]
	return &a.objs[len(a.objs)-1]
}

// keep stores the members of one object in the arena.
func (p *scanner) keep(ms []member) []member {
	if len(ms) == 0 {
		return nil
	}
	a := p.a
	if cap(a.mems)-len(a.mems) < len(ms) {
		a.mems = make([]member, 0, max(64, len(ms)))
	}
	start := len(a.mems)
	a.mems = append(a.mems, ms...)
	return a.mems[start:len(a.mems):len(a.mems)]
}

// release hands the arena of a root object back; o and every object of its text are
// unusable afterwards.
func (o *object) release() {
	a := o.arena
	if a == nil {
		return
	}
	clear(a.objs)
	clear(a.mems)
	a.objs, a.mems = a.objs[:0], a.mems[:0]
	arenas.Put(a)
}

func (p *scanner) ws() {
	for p.i < len(p.s) {
		switch p.s[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

// object scans the object at p.i into o; depth is its nesting (the root is 1).
func (p *scanner) object(o *object, depth int) bool {
	if depth > maxNesting {
		return false
	}
	p.i++ // '{'
	p.ws()
	if p.i < len(p.s) && p.s[p.i] == '}' {
		p.i++
		return true
	}
	var buf [12]member
	ms := buf[:0]
	for {
		ks := p.i
		plainKey, ok := p.str()
		if !ok {
			return false
		}
		ke := p.i
		p.ws()
		if p.i >= len(p.s) || p.s[p.i] != ':' {
			return false
		}
		p.i++
		p.ws()
		if p.i >= len(p.s) {
			return false
		}
		m := member{}
		vs := p.i
		switch c := p.s[p.i]; {
		case c == '{' && depth < builtDepth:
			m.obj = p.newObject()
			ok = p.object(m.obj, depth+1)
		case c == '"':
			m.plain, ok = p.str()
		default:
			ok = p.value(depth)
		}
		if !ok {
			return false
		}
		m.val = p.s[vs:p.i]
		if plainKey {
			m.key = p.s[ks+1 : ke-1]
		} else if m.key, ok = unquote(p.s[ks:ke]); !ok {
			return false
		}
		ms = append(ms, m)
		p.ws()
		if p.i >= len(p.s) {
			return false
		}
		switch p.s[p.i] {
		case ',':
			p.i++
			p.ws()
			continue
		case '}':
			p.i++
			o.members = p.keep(ms)
			return true
		}
		return false
	}
}

// value checks the value at p.i inside a container at depth, without building anything.
// Nested containers are followed with a stack, not recursion.
func (p *scanner) value(depth int) bool {
	var buf [32]byte
	stack := buf[:0] // the open containers: '{' or '['
	for {
		// A value is expected.
		if p.i >= len(p.s) {
			return false
		}
		switch c := p.s[p.i]; {
		case c == '{' || c == '[':
			if depth+len(stack)+1 > maxNesting {
				return false
			}
			stack = append(stack, c)
			p.i++
			p.ws()
			if p.i < len(p.s) && p.s[p.i] == c+2 { // '}' or ']'
				p.i++
				stack = stack[:len(stack)-1]
				break
			}
			if c == '{' && !p.key() {
				return false
			}
			continue
		case c == '"':
			if _, ok := p.str(); !ok {
				return false
			}
		case c == '-' || (c >= '0' && c <= '9'):
			if !p.number() {
				return false
			}
		case c == 't':
			if !p.literal("true") {
				return false
			}
		case c == 'f':
			if !p.literal("false") {
				return false
			}
		case c == 'n':
			if !p.literal("null") {
				return false
			}
		default:
			return false
		}
		// A value ended: close containers until another value is expected.
		for {
			if len(stack) == 0 {
				return true
			}
			p.ws()
			if p.i >= len(p.s) {
				return false
			}
			top, c := stack[len(stack)-1], p.s[p.i]
			if c == top+2 {
				p.i++
				stack = stack[:len(stack)-1]
				continue
			}
			if c != ',' {
				return false
			}
			p.i++
			p.ws()
			if top == '{' && !p.key() {
				return false
			}
			break
		}
	}
}

// key scans an object key and its colon, and the whitespace after them.
func (p *scanner) key() bool {
	if _, ok := p.str(); !ok {
		return false
	}
	p.ws()
	if p.i >= len(p.s) || p.s[p.i] != ':' {
		return false
	}
	p.i++
	p.ws()
	return true
}

// str scans the string at p.i. plain is true when it has no escape and only printable
// ASCII, so that its bytes are its value.
func (p *scanner) str() (plain, ok bool) {
	s, i := p.s, p.i
	if i >= len(s) || s[i] != '"' {
		return false, false
	}
	i++
	plain = true
	for i < len(s) {
		c := s[i]
		switch {
		case c == '"':
			p.i = i + 1
			return plain, true
		case c == '\\':
			plain = false
			if i+1 >= len(s) {
				return false, false
			}
			switch s[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(s) || !isHex4(s[i+2:i+6]) {
					return false, false
				}
				i += 6
			default:
				return false, false
			}
		case c < 0x20:
			return false, false
		default:
			if c >= 0x7f {
				plain = false
			}
			i++
		}
	}
	return false, false
}

func isHex4(s string) bool {
	for i := 0; i < 4; i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
			return false
		}
	}
	return true
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// number scans -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (p *scanner) number() bool {
	s, i := p.s, p.i
	if s[i] == '-' {
		i++
	}
	switch {
	case i >= len(s):
		return false
	case s[i] == '0':
		i++
	case s[i] >= '1' && s[i] <= '9':
		for i < len(s) && isDigit(s[i]) {
			i++
		}
	default:
		return false
	}
	if i < len(s) && s[i] == '.' {
		i++
		if i >= len(s) || !isDigit(s[i]) {
			return false
		}
		for i < len(s) && isDigit(s[i]) {
			i++
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		if i >= len(s) || !isDigit(s[i]) {
			return false
		}
		for i < len(s) && isDigit(s[i]) {
			i++
		}
	}
	p.i = i
	return true
}

func (p *scanner) literal(lit string) bool {
	if len(p.s)-p.i < len(lit) || p.s[p.i:p.i+len(lit)] != lit {
		return false
	}
	p.i += len(lit)
	return true
}

// unquote decodes a JSON string literal as encoding/json does.
func unquote(lit string) (string, bool) {
	var s string
	if err := json.Unmarshal([]byte(lit), &s); err != nil {
		return "", false
	}
	return s, true
}

// splitObject scans raw, a JSON object after bytes.TrimSpace. The error is encoding/json's
// own for the same input.
func splitObject(raw []byte) (*object, error) {
	p := scanner{s: string(raw), a: arenas.Get().(*arena)}
	o := p.newObject()
	if p.object(o, 1) {
		p.ws()
		if p.i == len(p.s) {
			o.arena = p.a
			return o, nil
		}
	}
	o.arena = p.a
	o.release()
	var m map[string]json.RawMessage
	err := json.Unmarshal(raw, &m)
	if err == nil {
		// The scanner refused what encoding/json reads: fail closed all the same.
		err = errors.New("unreadable JSON")
	}
	return nil, err
}

// splitMember splits the object value of a member that was not built while scanning (it
// is valid JSON: the whole text was checked).
func splitMember(val string) (*object, bool) {
	p := scanner{s: val, a: &arena{}}
	o := p.newObject()
	if len(val) == 0 || val[0] != '{' || !p.object(o, 1) {
		return nil, false
	}
	p.ws()
	return o, p.i == len(p.s)
}
