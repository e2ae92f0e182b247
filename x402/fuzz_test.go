package x402

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"reflect"
	"regexp"
	"testing"
)

// The fuzz targets take (data, encode): with encode the data is the JSON and is
// base64-encoded first, so the fuzzer reaches the JSON checks without having to learn
// base64; without it the data is the header value itself. Seeds: testdata/fuzz/<Target>/
// (the real-client fixtures among them) and the fixtures loaded below.

var (
	reAddr    = regexp.MustCompile(`^0x[0-9a-fA-F]{40}$`)
	reNonce   = regexp.MustCompile(`^0x[0-9a-fA-F]{64}$`)
	reSig     = regexp.MustCompile(`^0x([0-9a-fA-F]{2})+$`)
	reUint    = regexp.MustCompile(`^(0|[1-9][0-9]*)$`)
	reStdB64  = regexp.MustCompile(`^([A-Za-z0-9+/]{4})*([A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$`)
	reTxHash  = regexp.MustCompile(`^0x[0-9a-fA-F]{64}$`)
	reCAIP2ID = regexp.MustCompile(`^eip155:[1-9][0-9]*$`)
)

func headerValue(data []byte, encode bool) string {
	if encode {
		return base64.StdEncoding.EncodeToString(data)
	}
	return string(data)
}

func FuzzDecodeXPayment(f *testing.F) {
	fuzzPaymentHeader(f, HeaderPayment, Version1)
}

func FuzzDecodePaymentSignature(f *testing.F) {
	fuzzPaymentHeader(f, HeaderPaymentSignature, Version2)
}

// FuzzDecodePermit2Payment is FuzzDecodePaymentSignature seeded with the real clients'
// Permit2 payments (exact over Permit2, and upto).
func FuzzDecodePermit2Payment(f *testing.F) {
	for _, fx := range loadPermit2Fixtures(f).Payments {
		f.Add([]byte(fx.Value), false)
		f.Add([]byte(fx.Payload), true)
	}
	fuzzPaymentDecoder(f, HeaderPaymentSignature, Version2)
}

func fuzzPaymentHeader(f *testing.F, header string, version int) {
	for _, fx := range loadFixtures(f).Payments {
		f.Add([]byte(fx.Value), false)
		f.Add([]byte(fx.Payload), true)
	}
	fuzzPaymentDecoder(f, header, version)
}

func fuzzPaymentDecoder(f *testing.F, header string, version int) {
	f.Fuzz(func(t *testing.T, data []byte, encode bool) {
		value := headerValue(data, encode)
		p, err := DecodePaymentHeader(header, value, nil)
		if err != nil {
			var de *DecodeError
			if p != nil || !errors.As(err, &de) || ReasonOf(err) == "" {
				t.Fatalf("refusal is not a bare *DecodeError: %v, %v", p, err)
			}
			return
		}
		if len(value) > MaxHeaderBytes || !reStdB64.MatchString(value) {
			t.Fatalf("accepted a header that is oversize or not standard padded base64: %q", value)
		}
		raw, _ := base64.StdEncoding.DecodeString(value)
		checkPaymentOracle(t, raw, version)
		checkPaymentInvariants(t, p, version)
	})
}

// checkPaymentOracle re-checks an accepted payload with the client's regexes, through a
// plain map decode independent of the decoder under test.
func checkPaymentOracle(t *testing.T, raw []byte, version int) {
	t.Helper()
	var m map[string]any
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	if err := d.Decode(&m); err != nil {
		t.Fatalf("accepted JSON a plain decode refuses: %v", err)
	}
	if v, _ := m["x402Version"].(json.Number); string(v) != map[int]string{1: "1", 2: "2"}[version] {
		t.Fatalf("accepted x402Version %v in a v%d header", m["x402Version"], version)
	}
	pl, _ := m["payload"].(map[string]any)
	if p2, ok := pl["permit2Authorization"].(map[string]any); ok && version == Version2 {
		checkPermit2Oracle(t, p2)
	} else {
		checkEIP3009Oracle(t, pl)
	}
	if !reSig.MatchString(str(pl, "signature")) {
		t.Fatalf("accepted signature %q", pl["signature"])
	}
	scheme, network := str(m, "scheme"), str(m, "network")
	if version == Version2 {
		acc, _ := m["accepted"].(map[string]any)
		scheme, network = str(acc, "scheme"), str(acc, "network")
		if !reAddr.MatchString(str(acc, "asset")) || !reAddr.MatchString(str(acc, "payTo")) || !reUint.MatchString(str(acc, "amount")) {
			t.Fatalf("accepted requirement %v", acc)
		}
	}
	if scheme != SchemeExact && (scheme != SchemeUpto || version != Version2) {
		t.Fatalf("accepted scheme %q", scheme)
	}
	if _, ok := NewRegistry().Lookup(network); !ok {
		t.Fatalf("accepted network %q", network)
	}
}

func str(m map[string]any, k string) string { s, _ := m[k].(string); return s }

func checkEIP3009Oracle(t *testing.T, pl map[string]any) {
	t.Helper()
	auth, _ := pl["authorization"].(map[string]any)
	for k, re := range map[string]*regexp.Regexp{"from": reAddr, "to": reAddr, "nonce": reNonce,
		"value": reUint, "validAfter": reUint, "validBefore": reUint} {
		if !re.MatchString(str(auth, k)) {
			t.Fatalf("accepted authorization.%s = %q", k, auth[k])
		}
	}
	if len(str(auth, "value")) > MaxValueDigits {
		t.Fatalf("accepted value %q", auth["value"])
	}
}

// checkPermit2Oracle re-checks an accepted permit2Authorization with @x402/evm's rules:
// addresses, decimal integer strings.
func checkPermit2Oracle(t *testing.T, a map[string]any) {
	t.Helper()
	pm, _ := a["permitted"].(map[string]any)
	w, _ := a["witness"].(map[string]any)
	for _, c := range []struct {
		m  map[string]any
		k  string
		re *regexp.Regexp
	}{{a, "from", reAddr}, {a, "spender", reAddr}, {a, "nonce", reUint}, {a, "deadline", reUint},
		{pm, "token", reAddr}, {pm, "amount", reUint}, {w, "to", reAddr}, {w, "validAfter", reUint}} {
		if !c.re.MatchString(str(c.m, c.k)) || len(str(c.m, c.k)) > MaxIntegerDigits {
			t.Fatalf("accepted permit2Authorization %s = %q", c.k, c.m[c.k])
		}
	}
}

func checkPaymentInvariants(t *testing.T, p *Payment, version int) {
	t.Helper()
	a := p.Authorization
	if p.Version != version || (p.Scheme != SchemeExact && p.Scheme != SchemeUpto) || !reCAIP2ID.MatchString(p.Network) {
		t.Fatalf("version %d scheme %q network %q", p.Version, p.Scheme, p.Network)
	}
	if len(p.Signature) == 0 || a.Value == nil || a.ValidAfter == nil || a.ValidBefore == nil ||
		a.Value.Sign() < 0 || a.ValidAfter.Sign() < 0 || a.ValidBefore.Sign() < 0 || a.ValidBefore.BitLen() > 256 || a.ValidAfter.BitLen() > 256 {
		t.Fatalf("bad authorization %+v", a)
	}
	if (version == Version2) != (p.Accepted != nil) || (p.Accepted != nil && (p.Accepted.Amount == nil || p.Accepted.Amount.Sign() < 0)) {
		t.Fatalf("accepted %+v", p.Accepted)
	}
	var v any
	if version == Version1 {
		w, err := p.PayloadV1(nil)
		if err != nil {
			t.Fatal(err)
		}
		v = w
	} else {
		v = p.PayloadV2()
	}
	h, err := EncodeHeader(v)
	if err != nil {
		t.Fatal(err)
	}
	q, err := DecodePaymentHeader(map[int]string{1: HeaderPayment, 2: HeaderPaymentSignature}[version], h, nil)
	if err != nil {
		t.Fatalf("re-encoded payment does not decode: %v", err)
	}
	assertSamePayment(t, p, q)
	if !reflect.DeepEqual(p.Accepted, q.Accepted) || !reflect.DeepEqual(p.Resource, q.Resource) {
		t.Fatalf("re-encoding changed accepted/resource: %+v vs %+v", p.Accepted, q.Accepted)
	}
	// Hashing and recovery take any decoded payment without panicking.
	if hash, err := TransferWithAuthorizationHash(BaseSepolia.ChainID, BaseSepolia.USDC.Address, "USDC", "2", a); err == nil {
		_, _ = RecoverSigner(hash, p.Signature)
	}
	if p.Permit2 != nil {
		if p.Permit2.Upto != (p.Scheme == SchemeUpto) || version != Version2 {
			t.Fatalf("Permit2 payment of scheme %q in v%d", p.Scheme, version)
		}
		hash, err := Permit2Hash(BaseSepolia.ChainID, p.Permit2)
		if err != nil {
			t.Fatalf("a decoded Permit2 authorization does not hash: %v", err)
		}
		_, _ = RecoverSigner(hash, p.Signature)
	} else if p.Scheme == SchemeUpto {
		t.Fatal("upto payment without Permit2")
	}
}

func FuzzDecodePaymentRequired(f *testing.F) {
	for _, fx := range loadFixtures(f).Payments {
		if fx.PaymentRequired != "" {
			f.Add([]byte(fx.PaymentRequired), false)
			raw, _ := base64.StdEncoding.DecodeString(fx.PaymentRequired)
			f.Add(raw, true)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte, encode bool) {
		value := headerValue(data, encode)
		pr, err := DecodePaymentRequired(value)
		if err != nil {
			if pr != nil || ReasonOf(err) == "" {
				t.Fatalf("bad refusal: %v, %v", pr, err)
			}
			return
		}
		if len(value) > MaxHeaderBytes || !reStdB64.MatchString(value) {
			t.Fatalf("accepted a bad header %q", value)
		}
		if pr.X402Version != Version2 || pr.Resource == nil || pr.Resource.URL == "" || len(pr.Accepts) == 0 || len(pr.Accepts) > maxAccepts {
			t.Fatalf("accepted %+v", pr)
		}
		for _, e := range pr.Accepts {
			if e.Scheme == "" || e.Amount == "" || e.Asset == "" || e.PayTo == "" || e.MaxTimeoutSeconds <= 0 {
				t.Fatalf("accepted entry %+v", e)
			}
		}
		h, err := EncodePaymentRequired(pr)
		if err != nil {
			if errors.Is(err, ErrTooLarge) {
				return // Go's JSON escaping (<, >, &) can grow a header that was just under the cap
			}
			t.Fatal(err)
		}
		pr2, err := DecodePaymentRequired(h)
		if err != nil || !reflect.DeepEqual(pr, pr2) {
			t.Fatalf("round trip: %+v vs %+v (%v)", pr, pr2, err)
		}
	})
}

func FuzzDecodeSettleResponse(f *testing.F) {
	for _, fx := range loadFixtures(f).SettleResponses {
		f.Add([]byte(fx.Value), false)
		raw, _ := base64.StdEncoding.DecodeString(fx.Value)
		f.Add(raw, true)
	}
	f.Fuzz(func(t *testing.T, data []byte, encode bool) {
		value := headerValue(data, encode)
		sr, err := DecodeSettleResponse(value)
		if err != nil {
			if sr != nil || ReasonOf(err) != ReasonUnexpectedSettle {
				t.Fatalf("bad refusal: %v, %v", sr, err)
			}
			return
		}
		if len(value) > MaxHeaderBytes || !reStdB64.MatchString(value) {
			t.Fatalf("accepted a bad header %q", value)
		}
		if (sr.Transaction != "" && !reTxHash.MatchString(sr.Transaction)) || (sr.Success && sr.Transaction == "") ||
			(sr.Payer != "" && !reAddr.MatchString(sr.Payer)) || (sr.Amount != "" && !reUint.MatchString(sr.Amount)) || sr.Network == "" {
			t.Fatalf("accepted %+v", sr)
		}
		h, err := EncodeSettleResponse(sr)
		if err != nil {
			if errors.Is(err, ErrTooLarge) {
				return
			}
			t.Fatal(err)
		}
		sr2, err := DecodeSettleResponse(h)
		if err != nil || *sr2 != *sr {
			t.Fatalf("round trip: %+v vs %+v (%v)", sr, sr2, err)
		}
	})
}

func FuzzDecodeRequirementsJSON(f *testing.F) {
	for _, fx := range loadFixtures(f).Payments {
		f.Add([]byte(fx.Requirements), uint8(fx.Version))
	}
	for _, fx := range loadPermit2Fixtures(f).Payments { // exact over Permit2, and upto
		f.Add([]byte(fx.Requirements), uint8(Version2))
	}
	f.Fuzz(func(t *testing.T, raw []byte, version uint8) {
		r, err := DecodeRequirementsJSON(raw, int(version), nil)
		if err != nil {
			if r != nil || ReasonOf(err) == "" {
				t.Fatalf("bad refusal: %v, %v", r, err)
			}
			return
		}
		if version != 1 && version != 2 || (r.Scheme != SchemeExact && (r.Scheme != SchemeUpto || version != Version2)) || !reCAIP2ID.MatchString(r.Network) ||
			r.Amount == nil || r.Amount.Sign() < 0 || r.MaxTimeoutSeconds <= 0 {
			t.Fatalf("accepted %+v as v%d", r, version)
		}
		var again []byte
		if version == 1 {
			v1, err := r.V1(nil)
			if err != nil {
				t.Fatal(err)
			}
			again = mustJSON(t, v1)
		} else {
			again = mustJSON(t, r.V2())
		}
		r2, err := DecodeRequirementsJSON(again, int(version), nil)
		if err != nil {
			t.Fatalf("re-encoded requirement does not decode: %v", err)
		}
		if r2.Network != r.Network || r2.Amount.Cmp(r.Amount) != 0 || r2.Asset != r.Asset || r2.PayTo != r.PayTo ||
			r2.MaxTimeoutSeconds != r.MaxTimeoutSeconds || !reflect.DeepEqual(r2.Extra, r.Extra) {
			t.Fatalf("round trip: %+v vs %+v", r, r2)
		}
	})
}

func FuzzParseAmount(f *testing.F) {
	for _, s := range []string{"0.01", "1", "1.5", "0.000001", "-1", "1e3", ".5", "1.", "00.10"} {
		f.Add(s, uint8(6))
	}
	f.Fuzz(func(t *testing.T, human string, decimals uint8) {
		n, err := ParseAmount(human, int(decimals))
		if err != nil {
			if !errors.Is(err, ErrAmount) {
				t.Fatalf("error does not wrap ErrAmount: %v", err)
			}
			return
		}
		if n.Sign() < 0 || n.BitLen() > 256 {
			t.Fatalf("ParseAmount(%q) = %v", human, n)
		}
		back, err := ParseAmount(FormatAmount(n, int(decimals)), int(decimals))
		if err != nil || back.Cmp(n) != 0 {
			t.Fatalf("FormatAmount round trip of %q: %v, %v", human, back, err)
		}
	})
}
