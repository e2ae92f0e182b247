package x402

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/big"
	"math/bits"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/ethereum/go-ethereum/common"
)

// Size caps, checked before any decoding.
//
// Node.js, which runs every reference x402 client and server, refuses an HTTP message
// whose header section exceeds 16 KiB (--max-http-header-size, default 16384), so no
// real client can send, and no real client can receive, an x402 header larger than that.
// A 65-byte EOA payment is about 1 KiB of base64 in v1 and 2 KiB in v2; an ERC-6492
// signature with factory calldata adds one or two more. Anything near the cap is not a
// payment.
const (
	// MaxHeaderBytes caps the base64 value of X-PAYMENT, PAYMENT-SIGNATURE,
	// PAYMENT-REQUIRED, X-PAYMENT-RESPONSE and PAYMENT-RESPONSE.
	MaxHeaderBytes = 16 << 10
	// MaxPayloadJSONBytes caps a payment payload's JSON (DecodePayloadJSON): the decoded
	// size of a MaxHeaderBytes header, since a payload reaches a facilitator only after
	// travelling in a header.
	MaxPayloadJSONBytes = MaxHeaderBytes / 4 * 3
	// MaxRequirementsJSONBytes caps one requirement's JSON (DecodeRequirementsJSON). v1
	// requirements travel in a 402 body and may carry an outputSchema, so the cap is
	// larger than a header's.
	MaxRequirementsJSONBytes = 64 << 10
	// MaxIntegerDigits is the length of the largest uint256 in decimal; longer integer
	// strings are refused before parsing.
	MaxIntegerDigits = 78
	// MaxValueDigits is x402@1.2.0's EvmMaxAtomicUnits: an authorization value is at
	// most 18 decimal characters (zod ExactEvmPayloadAuthorizationSchema).
	MaxValueDigits = 18
)

// EncodeHeader encodes v as a header value: standard padded base64 of its JSON, as every
// x402 transport does (docs/protocol.md#payment-payload).
func EncodeHeader(v any) (string, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("encode header: %w", err)
	}
	return base64.StdEncoding.EncodeToString(b), nil
}

// decodeBase64JSON checks and decodes a header value: present, at most max bytes,
// standard padded base64 (the TS SDK's Base64EncodedRegex /^[A-Za-z0-9+/]*={0,2}$/, so
// URL-safe, unpadded or whitespace-broken input is refused), canonical, and valid UTF-8.
func decodeBase64JSON(value string, max int, reason Reason) ([]byte, error) {
	if value == "" {
		return nil, &DecodeError{Reason: reason, Msg: "header is empty"}
	}
	if len(value) > max {
		return nil, &DecodeError{Reason: reason, Msg: fmt.Sprintf("header exceeds %d bytes", max), Err: ErrTooLarge}
	}
	if len(value)%4 != 0 {
		return nil, &DecodeError{Reason: reason, Msg: "base64 is not padded to a multiple of 4"}
	}
	// The strict decoder refuses every character outside the alphabet and misplaced
	// padding, but lets CR and LF through: without them, its success is the answer, and
	// only a refusal needs the character walk below for its message.
	if strings.IndexByte(value, '\r') < 0 && strings.IndexByte(value, '\n') < 0 {
		if raw, err := base64.StdEncoding.Strict().DecodeString(value); err == nil {
			if !utf8.Valid(raw) {
				return nil, &DecodeError{Reason: reason, Msg: "decoded header is not UTF-8"}
			}
			return raw, nil
		}
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

// object is one JSON object being read field by field. Keys match exactly (encoding/json
// alone would match them case-insensitively, which no JS client does); of a key given
// twice, the last counts, as with encoding/json.
type object struct {
	// path names the object in errors: its parent's path and its key in the parent, or
	// path itself at the root. It is built only for an error.
	parent  *object
	key     string
	path    string
	reason  Reason
	members []member
	arena   *arena // set on the root: see release
}

func parseObject(raw []byte, path string, reason Reason) (*object, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '{' {
		return nil, &DecodeError{Reason: reason, Field: path, Msg: "must be a JSON object"}
	}
	o, err := splitObject(raw)
	if err != nil {
		return nil, &DecodeError{Reason: reason, Field: path, Msg: "bad JSON", Err: err}
	}
	o.path, o.reason = path, reason
	return o, nil
}

// get is the member named key; the last one when it is given twice.
func (o *object) get(key string) (*member, bool) {
	for i := len(o.members) - 1; i >= 0; i-- {
		if o.members[i].key == key {
			return &o.members[i], true
		}
	}
	return nil, false
}

func (o *object) field(key string) string {
	path := o.path
	if o.parent != nil {
		path = o.parent.field(o.key)
	}
	if path == "" {
		return key
	}
	return path + "." + key
}

func (o *object) fail(key, msg string) *DecodeError {
	return &DecodeError{Reason: o.reason, Field: o.field(key), Msg: msg}
}

// only refuses keys outside allowed.
func (o *object) only(allowed ...string) error {
	for i := range o.members {
		k := o.members[i].key
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
func (o *object) has(key string) bool {
	m, ok := o.get(key)
	return ok && m.val != "null"
}

func (o *object) str(key string) (string, error) {
	m, ok := o.get(key)
	if !ok {
		return "", o.fail(key, "missing")
	}
	v := m.val
	if len(v) == 0 || v[0] != '"' {
		return "", o.fail(key, "must be a string")
	}
	if m.plain {
		return v[1 : len(v)-1], nil
	}
	s, ok := unquote(v)
	if !ok {
		return "", o.fail(key, "bad string")
	}
	return s, nil
}

// optStr reads an optional string; absent and null read as "".
func (o *object) optStr(key string) (string, error) {
	if !o.has(key) {
		return "", nil
	}
	return o.str(key)
}

func (o *object) nonEmptyStr(key string) (string, error) {
	s, err := o.str(key)
	if err == nil && s == "" {
		err = o.fail(key, "is empty")
	}
	return s, err
}

func (o *object) obj(key string) (*object, error) {
	m, ok := o.get(key)
	if !ok {
		return nil, o.fail(key, "missing")
	}
	if m.obj == nil {
		if len(m.val) == 0 || m.val[0] != '{' {
			return nil, &DecodeError{Reason: o.reason, Field: o.field(key), Msg: "must be a JSON object"}
		}
		c, ok := splitMember(m.val)
		if !ok {
			return nil, &DecodeError{Reason: o.reason, Field: o.field(key), Msg: "bad JSON"}
		}
		m.obj = c
	}
	m.obj.parent, m.obj.key, m.obj.reason = o, key, o.reason
	return m.obj, nil
}

func (o *object) boolean(key string) (bool, error) {
	m, ok := o.get(key)
	if !ok {
		return false, o.fail(key, "missing")
	}
	switch m.val {
	case "true":
		return true, nil
	case "false":
		return false, nil
	}
	return false, o.fail(key, "must be true or false")
}

// optMap reads an optional free-form object (extra, extensions, outputSchema). Absent,
// null and {} read as nil, so they re-encode alike (omitted). Numbers stay json.Number so
// they re-encode unchanged. An object of plain strings is read from the scan; any other
// by encoding/json.
func (o *object) optMap(key string) (map[string]any, error) {
	if !o.has(key) {
		return nil, nil
	}
	m, _ := o.get(key)
	v := m.val
	if v[0] != '{' {
		return nil, o.fail(key, "must be an object")
	}
	if c := m.obj; c != nil && plainStrings(c) {
		if len(c.members) == 0 {
			return nil, nil
		}
		out := make(map[string]any, len(c.members))
		for _, cm := range c.members {
			out[cm.key] = cm.val[1 : len(cm.val)-1]
		}
		return out, nil
	}
	d := json.NewDecoder(strings.NewReader(v))
	d.UseNumber()
	var out map[string]any
	if err := d.Decode(&out); err != nil {
		return nil, o.fail(key, "bad object")
	}
	if len(out) == 0 {
		return nil, nil
	}
	return out, nil
}

// plainStrings reports whether every member of o is a plain string.
func plainStrings(o *object) bool {
	for i := range o.members {
		if !o.members[i].plain {
			return false
		}
	}
	return true
}

// smallInt reads a JSON integer literal in [min, max]: no sign, fraction, exponent or
// leading zero.
func (o *object) smallInt(key string, min, max int) (int, error) {
	m, ok := o.get(key)
	if !ok {
		return 0, o.fail(key, "missing")
	}
	s := m.val
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

// address reads a 20-byte hex address (^0x[0-9a-fA-F]{40}$, any case, checksum not
// enforced: viem's getAddress in the reference facilitator does not enforce it either).
func (o *object) address(key string) (common.Address, error) {
	s, err := o.str(key)
	if err != nil {
		return common.Address{}, err
	}
	if !isHexN(s, 40) {
		return common.Address{}, o.fail(key, "must be a 20-byte 0x-hex address")
	}
	var a common.Address
	hexInto(a[:], s[2:])
	return a, nil
}

// uint reads a canonical decimal integer string of at most maxDigits characters that fits
// in 256 bits.
func (o *object) uint(key string, maxDigits int) (*big.Int, error) {
	s, err := o.str(key)
	if err != nil {
		return nil, err
	}
	n, msg := parseUint(s, maxDigits)
	if msg != "" {
		return nil, o.fail(key, msg)
	}
	return n, nil
}

func parseUint(s string, maxDigits int) (*big.Int, string) {
	if !isDecimal(s) {
		return nil, "must be a decimal integer string without sign or leading zeros"
	}
	if len(s) > maxDigits {
		return nil, fmt.Sprintf("has more than %d digits", maxDigits)
	}
	if len(s) <= 19 { // below 10^19, so it fits a uint64: one allocation
		var u uint64
		for i := 0; i < len(s); i++ {
			u = u*10 + uint64(s[i]-'0')
		}
		return smallInt(u), ""
	}
	n, ok := new(big.Int).SetString(s, 10)
	if !ok || n.BitLen() > 256 {
		return nil, "does not fit in uint256"
	}
	return n, ""
}

// smallInt is u as a *big.Int whose one word lives beside it, in one allocation.
func smallInt(u uint64) *big.Int {
	n := new(struct {
		i big.Int
		w [64 / bits.UintSize]big.Word
	})
	if bits.UintSize == 64 {
		n.w[0] = big.Word(u)
	} else {
		n.w[0], n.w[len(n.w)-1] = big.Word(u), big.Word(u>>32)
	}
	return n.i.SetBits(n.w[:])
}

// hexInto decodes s, hex digits already checked (isHexN), into dst[:len(s)/2].
func hexInto(dst []byte, s string) {
	for i := 0; i+1 < len(s); i += 2 {
		dst[i/2] = unhex(s[i])<<4 | unhex(s[i+1])
	}
}

func unhex(c byte) byte {
	switch {
	case c >= '0' && c <= '9':
		return c - '0'
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10
	}
	return c - 'A' + 10
}

// clip quotes an input string for an error message, cut to 64 bytes: errors get logged,
// and the input is whatever a client sent.
func clip(s string) string {
	const max = 64
	if len(s) > max {
		return strconv.Quote(s[:max]) + "..."
	}
	return strconv.Quote(s)
}

// keyName is k as a field name: itself when short and printable ASCII, else clipped.
func keyName(k string) string {
	if len(k) > 64 {
		return clip(k)
	}
	for i := 0; i < len(k); i++ {
		if k[i] < 0x20 || k[i] > 0x7e || k[i] == '"' {
			return clip(k)
		}
	}
	return k
}

// isDecimal reports whether s is ^(0|[1-9][0-9]*)$.
func isDecimal(s string) bool {
	if s == "" || (s[0] == '0' && len(s) > 1) {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// isHexN reports whether s is "0x" followed by exactly n hex digits (n > 0), or by any
// positive even number of them when n == 0.
func isHexN(s string, n int) bool {
	if len(s) < 3 || s[0] != '0' || s[1] != 'x' {
		return false
	}
	h := s[2:]
	if n > 0 && len(h) != n {
		return false
	}
	if n == 0 && len(h)%2 != 0 {
		return false
	}
	for i := 0; i < len(h); i++ {
		c := h[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
			return false
		}
	}
	return true
}
