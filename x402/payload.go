package x402

import (
	"fmt"
	"math/big"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/ethereum/go-ethereum/common/hexutil"
)

var (
	defaultRegOnce sync.Once
	defaultReg     *Registry
)

// registryOr returns reg, or a shared registry of the built-in networks when reg is nil.
func registryOr(reg *Registry) *Registry {
	if reg != nil {
		return reg
	}
	defaultRegOnce.Do(func() { defaultReg = NewRegistry() })
	return defaultReg
}

// HeaderVersion returns the x402 version a payment header carries: 1 for X-PAYMENT, 2 for
// PAYMENT-SIGNATURE (case-insensitive, as HTTP header names are), 0 for any other name.
func HeaderVersion(header string) int {
	switch {
	case strings.EqualFold(header, HeaderPayment):
		return Version1
	case strings.EqualFold(header, HeaderPaymentSignature):
		return Version2
	}
	return 0
}

// DecodePaymentHeader decodes and checks the value of an X-PAYMENT (v1) or
// PAYMENT-SIGNATURE (v2) header into the normalised Payment. The inner x402Version must
// be the one of the header that carried it (docs/protocol.md#headers). A nil reg
// means the built-in networks. Every error is a *DecodeError.
func DecodePaymentHeader(header string, value string, reg *Registry) (*Payment, error) {
	want := HeaderVersion(header)
	if want == 0 {
		return nil, errPayload("", clip(header)+" is not a payment header")
	}
	raw, err := decodeBase64JSON(value, MaxHeaderBytes, ReasonInvalidPayload)
	if err != nil {
		return nil, err
	}
	return decodePayload(raw, registryOr(reg), want)
}

// DecodePayloadJSON decodes a payment payload given as JSON (the paymentPayload of a
// /verify or /settle body), in the shape its own x402Version names. A nil reg means the
// built-in networks. Every error is a *DecodeError.
func DecodePayloadJSON(raw []byte, reg *Registry) (*Payment, error) {
	if len(raw) > MaxPayloadJSONBytes {
		return nil, &DecodeError{Reason: ReasonInvalidPayload, Msg: fmt.Sprintf("payload exceeds %d bytes", MaxPayloadJSONBytes), Err: ErrTooLarge}
	}
	if !utf8.Valid(raw) {
		return nil, errPayload("", "payload is not UTF-8")
	}
	return decodePayload(raw, registryOr(reg), 0)
}

// decodePayload checks the version first (so a v2 payload in X-PAYMENT is refused as a
// version error), then the shape in the facilitator's order: scheme, network, payload.
func decodePayload(raw []byte, reg *Registry, want int) (*Payment, error) {
	o, err := parseObject(raw, "", ReasonInvalidPayload)
	if err != nil {
		return nil, err
	}
	defer o.release()
	v, err := readVersion(o)
	if err != nil {
		return nil, err
	}
	if want != 0 && v != want {
		return nil, &DecodeError{Reason: ReasonInvalidVersion, Field: "x402Version",
			Msg: fmt.Sprintf("version %d payload in a version %d header", v, want)}
	}
	if v == Version1 {
		return decodePayloadV1(o, reg)
	}
	return decodePayloadV2(o, reg)
}

func readVersion(o *object) (int, error) {
	if _, ok := o.get("x402Version"); !ok {
		return 0, &DecodeError{Reason: ReasonInvalidVersion, Field: "x402Version", Msg: "missing"}
	}
	v, err := o.smallInt("x402Version", Version1, Version2)
	if err != nil {
		return 0, &DecodeError{Reason: ReasonInvalidVersion, Field: "x402Version", Msg: "must be 1 or 2"}
	}
	return v, nil
}

// decodePayloadV1 reads {x402Version, scheme, network, payload} (x402@1.2.0
// PaymentPayloadSchema). "extensions" is tolerated because @x402/core's client adds it
// to v1 payloads when an extension is registered.
func decodePayloadV1(o *object, reg *Registry) (*Payment, error) {
	if err := o.only("x402Version", "scheme", "network", "payload", "extensions"); err != nil {
		return nil, err
	}
	scheme, err := readScheme(o, Version1)
	if err != nil {
		return nil, err
	}
	n, err := readNetwork(o, reg, Version1)
	if err != nil {
		return nil, err
	}
	p := &Payment{Version: Version1, Scheme: scheme, Network: n.CAIP2}
	if err := readSchemePayload(o, p); err != nil {
		return nil, err
	}
	if p.Extensions, err = o.optMap("extensions"); err != nil {
		return nil, err
	}
	return p, nil
}

// decodePayloadV2 reads {x402Version, resource?, accepted, payload, extensions?}
// (@x402/core PaymentPayloadV2Schema).
func decodePayloadV2(o *object, reg *Registry) (*Payment, error) {
	if err := o.only("x402Version", "resource", "accepted", "payload", "extensions"); err != nil {
		return nil, err
	}
	ao, err := o.obj("accepted")
	if err != nil {
		return nil, err
	}
	acc, err := decodeRequirementsV2(ao, reg)
	if err != nil {
		return nil, err
	}
	p := &Payment{Version: Version2, Scheme: acc.Scheme, Network: acc.Network, Accepted: acc}
	if o.has("resource") {
		res, err := o.resource("resource")
		if err != nil {
			return nil, err
		}
		p.Resource = &res
	}
	if err := readSchemePayload(o, p); err != nil {
		return nil, err
	}
	if p.Extensions, err = o.optMap("extensions"); err != nil {
		return nil, err
	}
	return p, nil
}

// readScheme reads the scheme: exact in both versions, upto in v2 only (@x402/evm 2.27
// has no v1 upto client).
func readScheme(o *object, version int) (string, error) {
	s, err := o.str("scheme")
	if err != nil {
		return "", err
	}
	if s != SchemeExact && (s != SchemeUpto || version != Version2) {
		return "", &DecodeError{Reason: ReasonInvalidScheme, Field: o.field("scheme"), Msg: fmt.Sprintf("scheme %s is not supported in x402 v%d", clip(s), version)}
	}
	return s, nil
}

// readNetwork resolves the network in the form its version uses: the v1 name, or the
// CAIP-2 id for v2. The other form is refused.
func readNetwork(o *object, reg *Registry, version int) (Network, error) {
	s, err := o.str("network")
	if err != nil {
		return Network{}, err
	}
	n, ok := reg.Lookup(s)
	if ok && ((version == Version1 && n.Name == s) || (version == Version2 && n.CAIP2 == s)) {
		return n, nil
	}
	return Network{}, &DecodeError{Reason: ReasonInvalidNetwork, Field: o.field("network"), Msg: fmt.Sprintf("network %s is not supported in x402 v%d", clip(s), version)}
}

// resource reads the resource object under key.
func (o *object) resource(key string) (ResourceInfo, error) {
	ro, err := o.obj(key)
	if err != nil {
		return ResourceInfo{}, err
	}
	return decodeResource(ro)
}

// decodeResource reads a v2 ResourceInfo. Unknown keys are ignored: @x402/core 2.27 adds
// serviceName, tags and iconUrl, which clients echo back.
func decodeResource(o *object) (ResourceInfo, error) {
	var r ResourceInfo
	var err error
	if r.URL, err = o.nonEmptyStr("url"); err != nil {
		return r, err
	}
	if r.Description, err = o.optStr("description"); err != nil {
		return r, err
	}
	if r.MimeType, err = o.optStr("mimeType"); err != nil {
		return r, err
	}
	return r, nil
}

// readSchemePayload reads the payload of p's scheme: Permit2's for upto and for a v2 exact
// payload that carries permit2Authorization, EIP-3009's otherwise. A v1 payload is
// EIP-3009 only (@x402/evm 2.27 has no v1 Permit2 client), so a permit2Authorization in
// it is an unknown key.
func readSchemePayload(parent *object, p *Payment) error {
	o, err := parent.obj("payload")
	if err != nil {
		return err
	}
	if p.Version == Version2 && (p.Scheme == SchemeUpto || o.has("permit2Authorization")) {
		return readPermit2Payload(o, p)
	}
	return readExactPayload(o, p)
}

// readSignature reads payload.signature: 0x-hex of even length.
func readSignature(o *object, p *Payment) error {
	sig, err := o.str("signature")
	if err != nil {
		return err
	}
	if !isHexN(sig, 0) {
		return o.fail("signature", "must be 0x-hex of even length")
	}
	p.Signature = make([]byte, len(sig)/2-1)
	hexInto(p.Signature, sig[2:])
	return nil
}

// readExactPayload reads payload {signature, authorization} with the x402@1.2.0 zod
// rules (ExactEvmPayloadSchema): unknown keys are refused.
func readExactPayload(o *object, p *Payment) error {
	if err := o.only("signature", "authorization"); err != nil {
		return err
	}
	if err := readSignature(o, p); err != nil {
		return err
	}
	ao, err := o.obj("authorization")
	if err != nil {
		return err
	}
	if err := ao.only("from", "to", "value", "validAfter", "validBefore", "nonce"); err != nil {
		return err
	}
	a := &p.Authorization
	if a.From, err = ao.address("from"); err != nil {
		return err
	}
	if a.To, err = ao.address("to"); err != nil {
		return err
	}
	if a.Value, err = ao.uint("value", MaxValueDigits); err != nil {
		return err
	}
	if a.ValidAfter, err = ao.uint("validAfter", MaxIntegerDigits); err != nil {
		return err
	}
	if a.ValidBefore, err = ao.uint("validBefore", MaxIntegerDigits); err != nil {
		return err
	}
	nonce, err := ao.str("nonce")
	if err != nil {
		return err
	}
	if !isHexN(nonce, 64) {
		return ao.fail("nonce", "must be 32 bytes of 0x-hex")
	}
	hexInto(a.Nonce[:], nonce[2:])
	return nil
}

// JSON renders a as its wire form: checksummed addresses, decimal integers, 0x-hex nonce.
func (a Authorization) JSON() AuthorizationJSON {
	return AuthorizationJSON{
		From:        a.From.Hex(),
		To:          a.To.Hex(),
		Value:       bigString(a.Value),
		ValidAfter:  bigString(a.ValidAfter),
		ValidBefore: bigString(a.ValidBefore),
		Nonce:       hexutil.Encode(a.Nonce[:]),
	}
}

func bigString(n *big.Int) string {
	if n == nil {
		return "0"
	}
	return n.String()
}

func (p *Payment) exactPayload() ExactEVMPayload {
	if p.Permit2 != nil {
		return p.permit2Payload()
	}
	return ExactEVMPayload{Signature: hexutil.Encode(p.Signature), Authorization: p.Authorization.JSON()}
}

// PayloadV1 renders p in the v1 shape (the X-PAYMENT JSON), with the v1 network name from
// reg (nil means the built-in networks). Extensions have no place in v1 and are dropped;
// a Permit2 payment has no v1 shape.
func (p *Payment) PayloadV1(reg *Registry) (PayloadV1, error) {
	if p.Permit2 != nil {
		return PayloadV1{}, &DecodeError{Reason: ReasonInvalidVersion, Field: "x402Version", Msg: "a Permit2 payment has no x402 v1 form"}
	}
	n, ok := registryOr(reg).Lookup(p.Network)
	if !ok {
		return PayloadV1{}, &DecodeError{Reason: ReasonInvalidNetwork, Field: "network", Msg: fmt.Sprintf("network %q has no v1 name", p.Network)}
	}
	return PayloadV1{X402Version: Version1, Scheme: p.Scheme, Network: n.Name, Payload: p.exactPayload()}, nil
}

// PayloadV2 renders p in the v2 shape (the PAYMENT-SIGNATURE JSON). A v1 payment has no
// accepted requirement; one is filled in from what the payment states (scheme, network,
// amount = value, payTo = to), with asset and extra left empty.
func (p *Payment) PayloadV2() PayloadV2 {
	var acc RequirementsV2
	if p.Accepted != nil {
		acc = p.Accepted.V2()
	} else {
		acc = RequirementsV2{Scheme: p.Scheme, Network: p.Network, Amount: bigString(p.Authorization.Value), PayTo: p.Authorization.To.Hex()}
	}
	var res *ResourceInfo
	if p.Resource != nil {
		r := *p.Resource
		res = &r
	}
	return PayloadV2{X402Version: Version2, Resource: res, Accepted: acc, Payload: p.exactPayload(), Extensions: p.Extensions}
}
