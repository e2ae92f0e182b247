package x402

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/big"
	"strconv"
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
// alone would match them case-insensitively, which no JS client does).
type object struct {
	path   string
	reason Reason
	m      map[string]json.RawMessage
}

func parseObject(raw []byte, path string, reason Reason) (*object, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '{' {
		return nil, &DecodeError{Reason: reason, Field: path, Msg: "must be a JSON object"}
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, &DecodeError{Reason: reason, Field: path, Msg: "bad JSON", Err: err}
	}
	return &object{path: path, reason: reason, m: m}, nil
}

func (o *object) field(key string) string {
	if o.path == "" {
		return key
	}
	return o.path + "." + key
}

func (o *object) fail(key, msg string) *DecodeError {
	return &DecodeError{Reason: o.reason, Field: o.field(key), Msg: msg}
}

// only refuses keys outside allowed.
func (o *object) only(allowed ...string) error {
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
func (o *object) has(key string) bool {
	v, ok := o.m[key]
	return ok && !bytes.Equal(bytes.TrimSpace(v), []byte("null"))
}

func (o *object) str(key string) (string, error) {
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
	v, ok := o.m[key]
	if !ok {
		return nil, o.fail(key, "missing")
	}
	return parseObject(v, o.field(key), o.reason)
}

func (o *object) boolean(key string) (bool, error) {
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
func (o *object) optMap(key string) (map[string]any, error) {
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
func (o *object) smallInt(key string, min, max int) (int, error) {
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
	return common.HexToAddress(s), nil
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
	n, ok := new(big.Int).SetString(s, 10)
	if !ok || n.BitLen() > 256 {
		return nil, "does not fit in uint256"
	}
	return n, ""
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
