package x402

import (
	"encoding/json"
	"errors"
	"math/big"
	"strings"
	"testing"

	"github.com/ethereum/go-ethereum/common"
)

// permit2Fixtures is testdata/permit2.json, written by
// integration/scripts/make-permit2-fixtures.mjs with the real @x402/evm 2.27 clients.
type permit2Fixtures struct {
	Signer      string `json:"signer"`
	Facilitator string `json:"facilitator"`
	Payments    []struct {
		Name            string          `json:"name"`
		Header          string          `json:"header"`
		ChainID         int64           `json:"chainId"`
		Requirements    json.RawMessage `json:"requirements"`
		PaymentRequired string          `json:"paymentRequired"`
		Value           string          `json:"value"`
		Payload         json.RawMessage `json:"payload"`
	} `json:"payments"`
}

func loadPermit2Fixtures(t testing.TB) permit2Fixtures {
	t.Helper()
	var f permit2Fixtures
	readFixture(t, "permit2.json", "make-permit2-fixtures.mjs", &f)
	if len(f.Payments) < 4 {
		t.Fatalf("fixtures hold %d payments", len(f.Payments))
	}
	return f
}

// TestRealClientPermit2PaymentsDecodeAndRecoverTheSigner: every Permit2 header the real
// @x402/evm 2.27 clients produced (exact over Permit2 and upto) decodes, matches the
// requirements it paid, hashes to the PermitWitnessTransferFrom digest the client signed
// (the recovered signer is the client's key) and re-encodes to the client's own JSON.
func TestRealClientPermit2PaymentsDecodeAndRecoverTheSigner(t *testing.T) {
	f := loadPermit2Fixtures(t)
	signer := common.HexToAddress(f.Signer)
	for _, fx := range f.Payments {
		t.Run(fx.Name, func(t *testing.T) {
			p, err := DecodePaymentHeader(fx.Header, fx.Value, nil)
			if err != nil {
				t.Fatal(err)
			}
			fromJSON, err := DecodePayloadJSON(fx.Payload, nil)
			if err != nil {
				t.Fatal(err)
			}
			assertSamePayment(t, p, fromJSON)
			req, err := DecodeRequirementsJSON(fx.Requirements, Version2, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := req.Matches(p); err != nil {
				t.Fatal(err)
			}
			a := p.Permit2
			if a == nil || p.Transfer() != TransferPermit2 || req.Transfer() != TransferPermit2 || a.Upto != (p.Scheme == SchemeUpto) {
				t.Fatalf("payment %+v, transfer %q/%q", p.Permit2, p.Transfer(), req.Transfer())
			}
			if a.Spender != a.Proxy() || (a.Upto && a.Facilitator != common.HexToAddress(f.Facilitator)) {
				t.Fatalf("spender %s, facilitator %s", a.Spender.Hex(), a.Facilitator.Hex())
			}
			if fac, ok := req.FacilitatorAddress(); a.Upto && (!ok || fac != a.Facilitator) {
				t.Fatalf("extra.facilitatorAddress %s, %v", fac.Hex(), ok)
			}
			// The mirror carries the Permit2 nonce, so the payment's identity holds it.
			var nonce [32]byte
			a.Nonce.FillBytes(nonce[:])
			if p.Authorization.Nonce != nonce || p.Authorization.Value.Cmp(a.Amount) != 0 || p.Authorization.ValidBefore.Cmp(a.Deadline) != 0 {
				t.Fatalf("mirror %+v", p.Authorization)
			}
			h, err := Permit2Hash(big.NewInt(fx.ChainID), a)
			if err != nil {
				t.Fatal(err)
			}
			got, err := RecoverSigner(h, p.Signature)
			if err != nil {
				t.Fatal(err)
			}
			if got != signer || a.From != signer {
				t.Fatalf("recovered %s, from %s; want %s", got.Hex(), a.From.Hex(), signer.Hex())
			}
			assertClientJSON(t, p, p.PayloadV2(), fx.Payload, fx.PaymentRequired)
			if _, err := p.PayloadV1(nil); ReasonOf(err) != ReasonInvalidVersion {
				t.Fatalf("a Permit2 payment in v1 form: %v", err)
			}
		})
	}
}

// TestPermit2HashBindsEveryField: changing any signed field, the chain or the witness
// type (exact or upto) changes the digest, so the client's signature no longer recovers
// to the payer.
func TestPermit2HashBindsEveryField(t *testing.T) {
	f := loadPermit2Fixtures(t)
	signer := common.HexToAddress(f.Signer)
	for _, fx := range f.Payments {
		p, err := DecodePayloadJSON(fx.Payload, nil)
		if err != nil {
			t.Fatal(err)
		}
		one := big.NewInt(1)
		for name, change := range map[string]func(a *Permit2Authorization){
			"token":       func(a *Permit2Authorization) { a.Token[0] ^= 1 },
			"amount":      func(a *Permit2Authorization) { a.Amount = new(big.Int).Add(a.Amount, one) },
			"spender":     func(a *Permit2Authorization) { a.Spender[19] ^= 1 },
			"nonce":       func(a *Permit2Authorization) { a.Nonce = new(big.Int).Add(a.Nonce, one) },
			"deadline":    func(a *Permit2Authorization) { a.Deadline = new(big.Int).Add(a.Deadline, one) },
			"to":          func(a *Permit2Authorization) { a.To[0] ^= 1 },
			"validAfter":  func(a *Permit2Authorization) { a.ValidAfter = one },
			"facilitator": func(a *Permit2Authorization) { a.Facilitator[0] ^= 1 },
			"witness":     func(a *Permit2Authorization) { a.Upto = !a.Upto },
			"chain":       nil,
		} {
			if name == "facilitator" && !p.Permit2.Upto {
				continue // the exact witness has no facilitator
			}
			t.Run(fx.Name+"/"+name, func(t *testing.T) {
				a, chain := *p.Permit2, big.NewInt(fx.ChainID)
				if change == nil {
					chain = big.NewInt(fx.ChainID + 1)
				} else {
					change(&a)
				}
				h, err := Permit2Hash(chain, &a)
				if err != nil {
					t.Fatal(err)
				}
				if got, _ := RecoverSigner(h, p.Signature); got == signer {
					t.Fatalf("the signature still recovers to the payer after changing %s", name)
				}
			})
		}
	}
}

// TestPermit2MatchRefusals: a Permit2 payment that does not pay the requirement is refused
// with the reference facilitator's reason, naming the field.
func TestPermit2MatchRefusals(t *testing.T) {
	f := loadPermit2Fixtures(t)
	exact, upto := f.Payments[0], f.Payments[2]
	cases := []struct {
		name    string
		fx      int
		payload string
		req     string
		v       any
		reason  Reason
		field   string
	}{
		{"spender is not the proxy", 0, "payload.permit2Authorization.spender", "", UptoPermit2ProxyAddress.Hex(), ReasonPermit2InvalidSpender, "spender"},
		{"upto spender is the exact proxy", 2, "payload.permit2Authorization.spender", "", ExactPermit2ProxyAddress.Hex(), ReasonPermit2InvalidSpender, "spender"},
		{"witness pays someone else", 0, "payload.permit2Authorization.witness.to", "", "0x0000000000000000000000000000000000000001", ReasonPermit2RecipientMismatch, "witness.to"},
		{"another token", 0, "payload.permit2Authorization.permitted.token", "", "0x0000000000000000000000000000000000000001", ReasonPermit2TokenMismatch, "permitted.token"},
		{"exact permits more", 0, "payload.permit2Authorization.permitted.amount", "", "1500000000000000001", ReasonPermit2AmountMismatch, "permitted.amount"},
		{"exact settles less than permitted", 0, "", "amount", "1", ReasonValueMismatch, "accepted.amount"},
		{"upto settles more than permitted", 2, "", "amount", "2000000000000000001", ReasonUptoSettlementExceedsAmount, "permitted.amount"},
		{"requirement asks EIP-3009", 0, "", "extra", map[string]any{"name": "USDC", "version": "2"}, ReasonUnsupportedPayloadType, "payload"},
		{"requirement asks another method", 2, "", "extra", map[string]any{"assetTransferMethod": "erc7710"}, ReasonUnsupportedPayloadType, "payload"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fx := []json.RawMessage{exact.Payload, nil, upto.Payload}[c.fx]
			rq := []json.RawMessage{exact.Requirements, nil, upto.Requirements}[c.fx]
			payload, reqs := jsonMap(t, fx), jsonMap(t, rq)
			if c.payload != "" {
				payload = with(payload, c.payload, c.v)
			} else {
				reqs = with(reqs, c.req, c.v)
			}
			p, err := DecodePayloadJSON(mustJSON(t, payload), nil)
			if err != nil {
				t.Fatal(err)
			}
			r, err := DecodeRequirementsJSON(mustJSON(t, reqs), Version2, nil)
			if err != nil {
				t.Fatal(err)
			}
			err = r.Matches(p)
			if ReasonOf(err) != c.reason || !strings.Contains(err.Error(), c.field) {
				t.Fatalf("Matches = %v, want %s on %s", err, c.reason, c.field)
			}
		})
	}
	// upto at settlement: any amount up to the signed maximum matches.
	p, _ := DecodePayloadJSON(upto.Payload, nil)
	for _, amount := range []string{"0", "1", "740000000000000000", "2000000000000000000"} {
		r, err := DecodeRequirementsJSON(mustJSON(t, with(jsonMap(t, upto.Requirements), "amount", amount)), Version2, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Matches(p); err != nil {
			t.Fatalf("upto settling %s of 2e18: %v", amount, err)
		}
	}
	// An EIP-3009 payment does not match a Permit2 requirement.
	v3 := loadFixtures(t).Payments[2]
	p3, err := DecodePayloadJSON(v3.Payload, nil)
	if err != nil {
		t.Fatal(err)
	}
	r3, _ := DecodeRequirementsJSON(mustJSON(t, with(jsonMap(t, v3.Requirements), "extra", map[string]any{"assetTransferMethod": "permit2"})), Version2, nil)
	if err := r3.Matches(p3); ReasonOf(err) != ReasonUnsupportedPayloadType {
		t.Fatalf("EIP-3009 payment for a Permit2 requirement: %v", err)
	}
}

// TestPermit2PayloadRefusals: the decoder refuses a malformed Permit2 payload, and one in
// x402 v1, with the field it refuses.
func TestPermit2PayloadRefusals(t *testing.T) {
	f := loadPermit2Fixtures(t)
	exact, upto := jsonMap(t, f.Payments[0].Payload), jsonMap(t, f.Payments[2].Payload)
	const a = "payload.permit2Authorization."
	cases := []struct {
		name  string
		in    map[string]any
		field string
	}{
		{"facilitator in an exact witness", with(exact, a+"witness.facilitator", f.Facilitator), a + "witness.facilitator"},
		{"upto witness without facilitator", with(upto, a+"witness.facilitator", del{}), a + "witness.facilitator"},
		{"both authorizations", with(exact, "payload.authorization", map[string]any{}), "payload.authorization"},
		{"unknown key", with(exact, a+"extra", "x"), a + "extra"},
		{"hex nonce", with(exact, a+"nonce", "0x01"), a + "nonce"},
		{"amount past uint256", with(exact, a+"permitted.amount", strings.Repeat("9", 78)), a + "permitted.amount"},
		{"amount of 79 digits", with(exact, a+"permitted.amount", "1"+strings.Repeat("0", 78)), a + "permitted.amount"},
		{"deadline missing", with(exact, a+"deadline", del{}), a + "deadline"},
		{"token not an address", with(exact, a+"permitted.token", "USDT"), a + "permitted.token"},
		{"signature not hex", with(upto, "payload.signature", "0xzz"), "payload.signature"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := DecodePayloadJSON(mustJSON(t, c.in), nil)
			var de *DecodeError
			if ReasonOf(err) != ReasonInvalidPayload || !errors.As(err, &de) || de.Field != c.field {
				t.Fatalf("err = %v, want invalid_payload on %s", err, c.field)
			}
		})
	}
	// A v1 X-PAYMENT never carries Permit2: the key is unknown there.
	v1 := jsonMap(t, loadFixtures(t).Payments[0].Payload)
	pl := exact["payload"].(map[string]any)
	v1 = with(with(v1, "payload.permit2Authorization", pl["permit2Authorization"]), "payload.authorization", del{})
	if _, err := DecodePaymentHeader(HeaderPayment, b64(mustJSON(t, v1)), nil); ReasonOf(err) != ReasonInvalidPayload || !strings.Contains(err.Error(), "permit2Authorization") {
		t.Fatalf("v1 Permit2 payload: %v", err)
	}
}

// TestPermit2PaymentKey: a Permit2 payment's identity holds its Permit2 nonce, and its
// authorization key names the Permit2 contract (one nonce per payer over every token), so
// it never collides with an EIP-3009 payment's.
func TestPermit2PaymentKey(t *testing.T) {
	f := loadPermit2Fixtures(t)
	p, _ := DecodePayloadJSON(f.Payments[0].Payload, nil)
	r, _ := DecodeRequirementsJSON(f.Payments[0].Requirements, Version2, nil)
	k := KeyOf(p, r)
	if !k.Permit2 || !strings.HasSuffix(k.String(), ":permit2") {
		t.Fatalf("key %s", k)
	}
	if !strings.Contains(k.AuthorizationKey(), strings.ToLower(Permit2Address.Hex())) || strings.Contains(k.AuthorizationKey(), strings.ToLower(r.Asset.Hex())) {
		t.Fatalf("authorization key %s", k.AuthorizationKey())
	}
	e := k
	e.Permit2 = false
	if e.String() == k.String() || e.AuthorizationKey() == k.AuthorizationKey() {
		t.Fatal("a Permit2 key equals the EIP-3009 key of the same fields")
	}
	q, _ := DecodePayloadJSON(mustJSON(t, with(jsonMap(t, f.Payments[0].Payload), "payload.permit2Authorization.nonce", "7")), nil)
	if KeyOf(q, r).AuthorizationKey() == k.AuthorizationKey() {
		t.Fatal("two Permit2 nonces, one authorization key")
	}
}

func BenchmarkPermit2Hash(b *testing.B) {
	f := loadPermit2Fixtures(b)
	p, err := DecodePayloadJSON(f.Payments[0].Payload, nil)
	if err != nil {
		b.Fatal(err)
	}
	chain := big.NewInt(f.Payments[0].ChainID)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Permit2Hash(chain, p.Permit2); err != nil {
			b.Fatal(err)
		}
	}
}
