package verdict

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/x402gate/x402gate/x402"
)

// TestPaymentActionOfPermit2AndUpto: the action of a Permit2 payment the real client made
// (x402/testdata/permit2.json) names its scheme and the transfer "permit2", and its amount
// is the permitted amount: for upto the maximum, the most that can move
// (docs/policy.md#payment-actions). The payer is the escrow address.
func TestPaymentActionOfPermit2AndUpto(t *testing.T) {
	b, err := os.ReadFile("../x402/testdata/permit2.json")
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Signer   string `json:"signer"`
		Payments []struct {
			Name         string          `json:"name"`
			Requirements json.RawMessage `json:"requirements"`
			Payload      json.RawMessage `json:"payload"`
		} `json:"payments"`
	}
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	for _, fx := range f.Payments {
		t.Run(fx.Name, func(t *testing.T) {
			p, err := x402.DecodePayloadJSON(fx.Payload, nil)
			if err != nil {
				t.Fatal(err)
			}
			r, err := x402.DecodeRequirementsJSON(fx.Requirements, x402.Version2, nil)
			if err != nil {
				t.Fatal(err)
			}
			act, from, err := NewPaymentAction(p, r)
			if err != nil {
				t.Fatal(err)
			}
			if act.Scheme != p.Scheme || act.Transfer != x402.TransferPermit2 || act.Amount != p.Permit2.Amount.String() ||
				act.PayTo != p.Permit2.To.Hex() || act.Asset != p.Permit2.Token.Hex() || from.Hex() != f.Signer {
				t.Fatalf("action = %+v from %s", act, from.Hex())
			}
			wire, _ := json.Marshal(act)
			if !strings.Contains(string(wire), `"scheme":"`+p.Scheme+`","transfer":"permit2"`) {
				t.Fatalf("wire form %s", wire)
			}
		})
	}
}
