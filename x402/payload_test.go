package x402

import (
	"encoding/base64"
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestDecodePaymentHeaderAcceptsWellFormedPayloads(t *testing.T) {
	v1, v2 := v1Map(t), v2Map(t)
	a := testAuthorization()
	for _, tc := range []struct {
		name    string
		header  string
		json    map[string]any
		version int
	}{
		{"v1 payload in X-PAYMENT", HeaderPayment, v1, 1},
		{"header names are case-insensitive", "x-payment", v1, 1},
		{"v1 payload may carry extensions (@x402/core client)", HeaderPayment, with(v1, "extensions", map[string]any{}), 1},
		{"v2 payload in PAYMENT-SIGNATURE", HeaderPaymentSignature, v2, 2},
		{"v2 payload without resource", HeaderPaymentSignature, with(v2, "resource", del{}), 2},
		{"v2 resource may be null", HeaderPaymentSignature, with(v2, "resource", nil), 2},
		{"v2 resource may carry 2.27 fields", HeaderPaymentSignature, with(v2, "resource.serviceName", "svc"), 2},
		{"v2 extensions may be present", HeaderPaymentSignature, with(v2, "extensions", map[string]any{"bazaar": map[string]any{"info": 1.5}}), 2},
		{"v2 extra may be null", HeaderPaymentSignature, with(v2, "accepted.extra", nil), 2},
		{"v2 accepted may carry unknown fields", HeaderPaymentSignature, with(v2, "accepted.paymentFlow", "authorization"), 2},
		{"addresses in lower case", HeaderPayment, with(v1, "payload.authorization.to", strings.ToLower(payTo.Hex())), 1},
		{"value of 18 digits", HeaderPayment, with(v1, "payload.authorization.value", "999999999999999999"), 1},
		{"validAfter zero (v2 client)", HeaderPaymentSignature, with(v2, "payload.authorization.validAfter", "0"), 2},
		{"smart-wallet signature longer than 65 bytes", HeaderPayment, with(v1, "payload.signature", "0x"+strings.Repeat("ab", 400)), 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := DecodePaymentHeader(tc.header, b64(mustJSON(t, tc.json)), nil)
			if err != nil {
				t.Fatal(err)
			}
			if p.Version != tc.version || p.Scheme != "exact" || p.Network != "eip155:84532" {
				t.Fatalf("got version %d scheme %q network %q", p.Version, p.Scheme, p.Network)
			}
			if p.Authorization.From != a.From || p.Authorization.Nonce != a.Nonce {
				t.Fatalf("authorization = %+v", p.Authorization)
			}
			if (p.Accepted != nil) != (tc.version == 2) {
				t.Fatalf("accepted present = %v for v%d", p.Accepted != nil, tc.version)
			}
		})
	}
}

func TestDecodePaymentHeaderRefusesMalformedInput(t *testing.T) {
	v1, v2 := v1Map(t), v2Map(t)
	good1 := b64(mustJSON(t, v1))
	// A payload whose standard base64 holds '+' or '/', which URL-safe base64 spells
	// '-' and '_'.
	urlSafe := ""
	for pad := ""; len(pad) < 3 && urlSafe == ""; pad += " " {
		std := b64(append([]byte(pad), mustJSON(t, with(v1, "extensions", map[string]any{"k": "???>>>"}))...))
		if strings.ContainsAny(std, "+/") {
			urlSafe = strings.NewReplacer("+", "-", "/", "_").Replace(std)
		}
	}
	if urlSafe == "" {
		t.Fatal("no test payload has '+' or '/' in base64")
	}
	auth := "payload.authorization."
	for _, tc := range []struct {
		name   string
		header string
		value  string
		reason Reason
		field  string
	}{
		{"empty header", HeaderPayment, "", ReasonInvalidPayload, ""},
		{"oversize header", HeaderPayment, strings.Repeat("A", MaxHeaderBytes+4), ReasonInvalidPayload, ""},
		{"not base64", HeaderPayment, "!!!!", ReasonInvalidPayload, ""},
		{"URL-safe base64", HeaderPayment, urlSafe, ReasonInvalidPayload, ""},
		{"unpadded base64", HeaderPayment, base64.RawStdEncoding.EncodeToString(mustJSON(t, v1)[:len(mustJSON(t, v1))-1]), ReasonInvalidPayload, ""},
		{"base64 broken by a newline", HeaderPayment, good1[:8] + "\n" + good1[8:], ReasonInvalidPayload, ""},
		{"base64 with padding in the middle", HeaderPayment, "QQ==QQ==", ReasonInvalidPayload, ""},
		{"non-canonical base64 bits", HeaderPayment, "QR==", ReasonInvalidPayload, ""},
		{"bad JSON", HeaderPayment, b64([]byte(`{"x402Version":1,`)), ReasonInvalidPayload, ""},
		{"JSON array", HeaderPayment, b64([]byte(`[1]`)), ReasonInvalidPayload, ""},
		{"trailing JSON", HeaderPayment, b64(append(mustJSON(t, v1), []byte(`{}`)...)), ReasonInvalidPayload, ""},
		{"not UTF-8", HeaderPayment, b64([]byte("{\"x\":\"\xff\"}")), ReasonInvalidPayload, ""},
		{"v2 payload in X-PAYMENT", HeaderPayment, b64(mustJSON(t, v2)), ReasonInvalidVersion, "x402Version"},
		{"v1 payload in PAYMENT-SIGNATURE", HeaderPaymentSignature, good1, ReasonInvalidVersion, "x402Version"},
		{"version 3", HeaderPayment, b64(mustJSON(t, with(v1, "x402Version", 3))), ReasonInvalidVersion, "x402Version"},
		{"version as a string", HeaderPayment, b64(mustJSON(t, with(v1, "x402Version", "1"))), ReasonInvalidVersion, "x402Version"},
		{"version as a float", HeaderPayment, b64([]byte(strings.Replace(string(mustJSON(t, v1)), `"x402Version":1`, `"x402Version":1.0`, 1))), ReasonInvalidVersion, "x402Version"},
		{"version missing", HeaderPayment, b64(mustJSON(t, with(v1, "x402Version", del{}))), ReasonInvalidVersion, "x402Version"},
		{"version key in another case", HeaderPayment, b64(mustJSON(t, with(with(v1, "x402Version", del{}), "X402Version", 1))), ReasonInvalidVersion, "x402Version"},
		{"not a payment header", "X-Other", good1, ReasonInvalidPayload, ""},
		{"unknown top-level field", HeaderPayment, b64(mustJSON(t, with(v1, "accepted", map[string]any{}))), ReasonInvalidPayload, "accepted"},
		{"unknown field in authorization", HeaderPayment, b64(mustJSON(t, with(v1, auth+"extra", "1"))), ReasonInvalidPayload, auth + "extra"},
		{"Permit2 payload shape", HeaderPayment, b64(mustJSON(t, with(v1, "payload.permit2Authorization", map[string]any{}))), ReasonInvalidPayload, "payload.permit2Authorization"},
		{"wrong scheme", HeaderPayment, b64(mustJSON(t, with(v1, "scheme", "upto"))), ReasonInvalidScheme, "scheme"},
		{"unknown network", HeaderPayment, b64(mustJSON(t, with(v1, "network", "ethereum"))), ReasonInvalidNetwork, "network"},
		{"CAIP-2 network in v1", HeaderPayment, b64(mustJSON(t, with(v1, "network", "eip155:84532"))), ReasonInvalidNetwork, "network"},
		{"v1 network name in v2", HeaderPaymentSignature, b64(mustJSON(t, with(v2, "accepted.network", "base-sepolia"))), ReasonInvalidNetwork, "accepted.network"},
		{"wrong scheme in accepted", HeaderPaymentSignature, b64(mustJSON(t, with(v2, "accepted.scheme", "escrow"))), ReasonInvalidScheme, "accepted.scheme"},
		{"upto in v1", HeaderPayment, b64(mustJSON(t, with(v1, "scheme", "upto"))), ReasonInvalidScheme, "scheme"},
		{"upto with an EIP-3009 payload", HeaderPaymentSignature, b64(mustJSON(t, with(v2, "accepted.scheme", "upto"))), ReasonInvalidPayload, "payload.authorization"},
		{"accepted missing", HeaderPaymentSignature, b64(mustJSON(t, with(v2, "accepted", del{}))), ReasonInvalidPayload, "accepted"},
		{"accepted amount not an integer", HeaderPaymentSignature, b64(mustJSON(t, with(v2, "accepted.amount", "0.01"))), ReasonInvalidPayload, "accepted.amount"},
		{"accepted payTo a role name", HeaderPaymentSignature, b64(mustJSON(t, with(v2, "accepted.payTo", "merchant"))), ReasonInvalidPayload, "accepted.payTo"},
		{"resource without url", HeaderPaymentSignature, b64(mustJSON(t, with(v2, "resource.url", del{}))), ReasonInvalidPayload, "resource.url"},
		{"resource not an object", HeaderPaymentSignature, b64(mustJSON(t, with(v2, "resource", "x"))), ReasonInvalidPayload, "resource"},
		{"extensions not an object", HeaderPaymentSignature, b64(mustJSON(t, with(v2, "extensions", []any{}))), ReasonInvalidPayload, "extensions"},
		{"payload missing", HeaderPayment, b64(mustJSON(t, with(v1, "payload", del{}))), ReasonInvalidPayload, "payload"},
		{"authorization missing", HeaderPayment, b64(mustJSON(t, with(v1, "payload.authorization", del{}))), ReasonInvalidPayload, "payload.authorization"},
		{"signature missing", HeaderPayment, b64(mustJSON(t, with(v1, "payload.signature", del{}))), ReasonInvalidPayload, "payload.signature"},
		{"signature odd length", HeaderPayment, b64(mustJSON(t, with(v1, "payload.signature", "0xabc"))), ReasonInvalidPayload, "payload.signature"},
		{"signature empty hex", HeaderPayment, b64(mustJSON(t, with(v1, "payload.signature", "0x"))), ReasonInvalidPayload, "payload.signature"},
		{"signature without 0x", HeaderPayment, b64(mustJSON(t, with(v1, "payload.signature", "abcd"))), ReasonInvalidPayload, "payload.signature"},
		{"signature not hex", HeaderPayment, b64(mustJSON(t, with(v1, "payload.signature", "0xzz"))), ReasonInvalidPayload, "payload.signature"},
		{"from too short", HeaderPayment, b64(mustJSON(t, with(v1, auth+"from", "0x1234"))), ReasonInvalidPayload, auth + "from"},
		{"to with 0X prefix", HeaderPayment, b64(mustJSON(t, with(v1, auth+"to", "0X"+payTo.Hex()[2:]))), ReasonInvalidPayload, auth + "to"},
		{"to of 21 bytes", HeaderPayment, b64(mustJSON(t, with(v1, auth+"to", payTo.Hex()+"00"))), ReasonInvalidPayload, auth + "to"},
		{"from a number", HeaderPayment, b64(mustJSON(t, with(v1, auth+"from", 12))), ReasonInvalidPayload, auth + "from"},
		{"nonce of 31 bytes", HeaderPayment, b64(mustJSON(t, with(v1, auth+"nonce", "0x"+strings.Repeat("ab", 31)))), ReasonInvalidPayload, auth + "nonce"},
		{"nonce missing", HeaderPayment, b64(mustJSON(t, with(v1, auth+"nonce", del{}))), ReasonInvalidPayload, auth + "nonce"},
		{"value with a fraction", HeaderPayment, b64(mustJSON(t, with(v1, auth+"value", "1.5"))), ReasonInvalidPayload, auth + "value"},
		{"value in exponent form", HeaderPayment, b64(mustJSON(t, with(v1, auth+"value", "1e4"))), ReasonInvalidPayload, auth + "value"},
		{"value negative", HeaderPayment, b64(mustJSON(t, with(v1, auth+"value", "-1"))), ReasonInvalidPayload, auth + "value"},
		{"value with leading zero", HeaderPayment, b64(mustJSON(t, with(v1, auth+"value", "010000"))), ReasonInvalidPayload, auth + "value"},
		{"value with spaces", HeaderPayment, b64(mustJSON(t, with(v1, auth+"value", " 10000"))), ReasonInvalidPayload, auth + "value"},
		{"value empty", HeaderPayment, b64(mustJSON(t, with(v1, auth+"value", ""))), ReasonInvalidPayload, auth + "value"},
		{"value as a JSON number", HeaderPayment, b64(mustJSON(t, with(v1, auth+"value", 10000))), ReasonInvalidPayload, auth + "value"},
		{"value of 19 digits", HeaderPayment, b64(mustJSON(t, with(v1, auth+"value", "1000000000000000000"))), ReasonInvalidPayload, auth + "value"},
		{"validBefore hex", HeaderPayment, b64(mustJSON(t, with(v1, auth+"validBefore", "0x10"))), ReasonInvalidPayload, auth + "validBefore"},
		{"validAfter beyond uint256", HeaderPayment, b64(mustJSON(t, with(v1, auth+"validAfter", "2"+strings.Repeat("0", 77)))), ReasonInvalidPayload, auth + "validAfter"},
		{"validAfter of 79 digits", HeaderPayment, b64(mustJSON(t, with(v1, auth+"validAfter", "1"+strings.Repeat("0", 78)))), ReasonInvalidPayload, auth + "validAfter"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := DecodePaymentHeader(tc.header, tc.value, nil)
			if p != nil {
				t.Fatalf("decoded %+v", p)
			}
			wantReason(t, err, tc.reason, tc.field)
		})
	}
}

func TestDecodePaymentHeaderOversizeIsErrTooLarge(t *testing.T) {
	_, err := DecodePaymentHeader(HeaderPayment, strings.Repeat("A", MaxHeaderBytes+4), nil)
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("err = %v, want ErrTooLarge", err)
	}
}

func TestDecodePayloadJSONDetectsVersion(t *testing.T) {
	for _, tc := range []struct {
		name string
		json map[string]any
		want int
	}{
		{"v1 shape", v1Map(t), 1},
		{"v2 shape", v2Map(t), 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := DecodePayloadJSON(mustJSON(t, tc.json), nil)
			if err != nil {
				t.Fatal(err)
			}
			if p.Version != tc.want {
				t.Fatalf("version = %d", p.Version)
			}
		})
	}
	_, err := DecodePayloadJSON([]byte(strings.Repeat(" ", MaxPayloadJSONBytes+1)), nil)
	wantReason(t, err, ReasonInvalidPayload, "")
}

func TestPayloadRoundTripsBetweenVersions(t *testing.T) {
	p1, err := DecodePaymentHeader(HeaderPayment, b64(mustJSON(t, v1Map(t))), nil)
	if err != nil {
		t.Fatal(err)
	}
	w1, err := p1.PayloadV1(nil)
	if err != nil {
		t.Fatal(err)
	}
	h, err := EncodeHeader(w1)
	if err != nil {
		t.Fatal(err)
	}
	back, err := DecodePaymentHeader(HeaderPayment, h, nil)
	if err != nil {
		t.Fatal(err)
	}
	assertSamePayment(t, p1, back)

	// v1 -> normal -> v2 -> normal keeps the authorization and signature.
	// A v1 payment has no asset; the synthesized accepted must be filled to decode.
	pv2 := p1.PayloadV2()
	pv2.Accepted.Asset = BaseSepolia.USDC.Address.Hex()
	pv2.Accepted.MaxTimeoutSeconds = 60
	h2, err := EncodeHeader(pv2)
	if err != nil {
		t.Fatal(err)
	}
	p2, err := DecodePaymentHeader(HeaderPaymentSignature, h2, nil)
	if err != nil {
		t.Fatal(err)
	}
	if p2.Network != p1.Network || p2.Authorization.Nonce != p1.Authorization.Nonce || string(p2.Signature) != string(p1.Signature) {
		t.Fatal("v1 -> v2 changed the payment")
	}

	// v2 -> normal -> v2 and -> v1.
	q, err := DecodePaymentHeader(HeaderPaymentSignature, b64(mustJSON(t, v2Map(t))), nil)
	if err != nil {
		t.Fatal(err)
	}
	h3, _ := EncodeHeader(q.PayloadV2())
	q2, err := DecodePaymentHeader(HeaderPaymentSignature, h3, nil)
	if err != nil {
		t.Fatal(err)
	}
	assertSamePayment(t, q, q2)
	if !reflect.DeepEqual(*q2.Resource, *q.Resource) || q2.Accepted.Asset != q.Accepted.Asset {
		t.Fatal("v2 round trip changed accepted or resource")
	}
	w, err := q.PayloadV1(nil)
	if err != nil || w.Network != "base-sepolia" || w.X402Version != 1 {
		t.Fatalf("PayloadV1 = %+v, %v", w, err)
	}
}

func assertSamePayment(t *testing.T, a, b *Payment) {
	t.Helper()
	if a.Version != b.Version || a.Scheme != b.Scheme || a.Network != b.Network || string(a.Signature) != string(b.Signature) {
		t.Fatalf("payments differ: %+v vs %+v", a, b)
	}
	x, y := a.Authorization, b.Authorization
	if x.From != y.From || x.To != y.To || x.Nonce != y.Nonce || x.Value.Cmp(y.Value) != 0 ||
		x.ValidAfter.Cmp(y.ValidAfter) != 0 || x.ValidBefore.Cmp(y.ValidBefore) != 0 {
		t.Fatalf("authorizations differ: %+v vs %+v", x, y)
	}
	if (a.Permit2 == nil) != (b.Permit2 == nil) || (a.Permit2 != nil && *a.Permit2.JSON() != *b.Permit2.JSON()) {
		t.Fatalf("Permit2 authorizations differ: %+v vs %+v", a.Permit2, b.Permit2)
	}
}
