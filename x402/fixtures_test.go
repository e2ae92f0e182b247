package x402

import (
	"encoding/json"
	"math/big"
	"os"
	"reflect"
	"testing"

	"github.com/ethereum/go-ethereum/common"
)

// fixtureFile is testdata/fixtures.json, written by integration/scripts/make-fixtures.mjs
// with the real npm clients (x402 1.2.0, @x402/core and @x402/evm 2.27).
type fixtureFile struct {
	Signer   string `json:"signer"`
	PayTo    string `json:"payTo"`
	Payments []struct {
		Name            string          `json:"name"`
		Header          string          `json:"header"`
		Version         int             `json:"version"`
		ChainID         int64           `json:"chainId"`
		Requirements    json.RawMessage `json:"requirements"`
		PaymentRequired string          `json:"paymentRequired"`
		Value           string          `json:"value"`
		Payload         json.RawMessage `json:"payload"`
	} `json:"payments"`
	SettleResponses []struct {
		Name   string `json:"name"`
		Header string `json:"header"`
		Value  string `json:"value"`
	} `json:"settleResponses"`
}

func loadFixtures(t testing.TB) fixtureFile {
	t.Helper()
	var f fixtureFile
	readFixture(t, "fixtures.json", "make-fixtures.mjs", &f)
	if len(f.Payments) < 5 || len(f.SettleResponses) < 4 {
		t.Fatalf("fixtures hold %d payments and %d settle responses", len(f.Payments), len(f.SettleResponses))
	}
	return f
}

// readFixture decodes testdata/name, written by integration/scripts/script, into v.
func readFixture(t testing.TB, name, script string, v any) {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatalf("read fixtures (run `node scripts/%s` in integration/): %v", script, err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatal(err)
	}
}

// TestRealClientPaymentsDecodeAndRecoverTheSigner: every header a real client produced
// decodes, matches the requirements it paid, hashes to the digest the client signed
// (the recovered signer is the client's key) and re-encodes to the client's own JSON.
func TestRealClientPaymentsDecodeAndRecoverTheSigner(t *testing.T) {
	f := loadFixtures(t)
	signer := common.HexToAddress(f.Signer)
	for _, fx := range f.Payments {
		t.Run(fx.Name, func(t *testing.T) {
			p, err := DecodePaymentHeader(fx.Header, fx.Value, nil)
			if err != nil {
				t.Fatal(err)
			}
			if p.Version != fx.Version {
				t.Fatalf("version = %d", p.Version)
			}
			fromJSON, err := DecodePayloadJSON(fx.Payload, nil)
			if err != nil {
				t.Fatal(err)
			}
			assertSamePayment(t, p, fromJSON)

			req, err := DecodeRequirementsJSON(fx.Requirements, fx.Version, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := req.Matches(p); err != nil {
				t.Fatal(err)
			}
			name, version, ok := req.Domain()
			if !ok {
				t.Fatal("requirements carry no EIP-712 domain")
			}
			h, err := TransferWithAuthorizationHash(big.NewInt(fx.ChainID), req.Asset, name, version, p.Authorization)
			if err != nil {
				t.Fatal(err)
			}
			got, err := RecoverSigner(h, p.Signature)
			if err != nil {
				t.Fatal(err)
			}
			if got != signer || p.Authorization.From != signer {
				t.Fatalf("recovered %s, from %s; want %s", got.Hex(), p.Authorization.From.Hex(), signer.Hex())
			}
			if _, err := RecoverSigner(h, p.Signature[:64]); ReasonOf(err) != ReasonInvalidSignature {
				t.Fatalf("truncated signature: %v", err)
			}

			// Re-encoding in the client's own version gives the client's JSON.
			var ours any
			if fx.Version == 1 {
				ours, err = p.PayloadV1(nil)
				if err != nil {
					t.Fatal(err)
				}
			} else {
				ours = p.PayloadV2()
			}
			assertClientJSON(t, p, ours, fx.Payload, fx.PaymentRequired)
		})
	}
}

// assertClientJSON: ours, p re-encoded, is the client's payload JSON, and p's accepted
// requirement is the first entry of the client's PAYMENT-REQUIRED, when there is one.
func assertClientJSON(t *testing.T, p *Payment, ours any, payload json.RawMessage, paymentRequired string) {
	t.Helper()
	want := jsonMap(t, payload)
	if e, ok := want["extensions"].(map[string]any); ok && len(e) == 0 {
		delete(want, "extensions") // {} and absent mean the same; omitempty drops it
	}
	if got := jsonMap(t, mustJSON(t, ours)); !reflect.DeepEqual(got, want) {
		t.Fatalf("re-encoded payload differs:\n got %v\nwant %v", got, want)
	}
	if paymentRequired == "" {
		return
	}
	pr, err := DecodePaymentRequired(paymentRequired)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(jsonMap(t, mustJSON(t, pr.Accepts[0])), jsonMap(t, mustJSON(t, p.Accepted.V2()))) {
		t.Fatal("accepted differs from the PAYMENT-REQUIRED entry")
	}
}

func TestRealSDKSettleResponsesDecode(t *testing.T) {
	f := loadFixtures(t)
	for _, fx := range f.SettleResponses {
		t.Run(fx.Name, func(t *testing.T) {
			sr, err := DecodeSettleResponse(fx.Value)
			if err != nil {
				t.Fatal(err)
			}
			if sr.Payer != f.Signer || sr.Network == "" {
				t.Fatalf("decoded %+v", sr)
			}
		})
	}
}

func jsonMap(t testing.TB, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func BenchmarkDecodePaymentHeader(b *testing.B) {
	f := loadFixtures(b)
	for _, fx := range f.Payments[:3] {
		b.Run(fx.Header+"/"+fx.Name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(fx.Value)))
			for b.Loop() {
				if _, err := DecodePaymentHeader(fx.Header, fx.Value, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
