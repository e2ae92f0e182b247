package policy

import (
	"bytes"
	"errors"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/x402gate/x402gate/docs"
)

// FuzzParse: Parse never panics, every refusal is an *Errors with problems, and it never
// accepts a document that the schema, applied directly by the validator to the document as
// encoding/json reads it, refuses.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		`{}`,
		`{"venues": {"allowed": ["payment"]}, "chains": {"allowed": [84532]}}`,
		`{"recipients": {"allowed": ["self", "0x209693Bc6afc0C5328bA36FaF03C514EF312287C"]}, "limits": {"perTxUsd": 5}}`,
		`{"contracts": {"8453": {"0x2626664c2603336E57B271c5C0b26F421741e481": ["0x04e45aaf", "0x"]}}}`,
		`{"assets": {"universe": {"8453": ["0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913"]}, "hyperliquid": ["BTC"]}}`,
		`{"swaps": {"requireMinOut": true, "maxSlippageBps": 100}, "orders": {"maxPriceDeviationBps": 1e2}}`,
		`{"perps": {"maxLeverage": 5}, "trading": {"sides": ["buy"]}, "sinks": {"extra": []}}`,
		`{"limits": {"perTxUsd": 1}, "limits": {"perTxUsd": 2}}`,
		`{"version": 1}`,
	} {
		f.Add([]byte(s))
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(docs.PolicySchema))
	if err != nil {
		f.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	if err := c.AddResource("direct.json", doc); err != nil {
		f.Fatal(err)
	}
	direct := c.MustCompile("direct.json")
	f.Fuzz(func(t *testing.T, raw []byte) {
		d, err := Parse(raw)
		if err != nil {
			var pe *Errors
			if !errors.As(err, &pe) || len(pe.Problems) == 0 {
				t.Fatalf("refusal %T %v is not *Errors with problems", err, err)
			}
			return
		}
		if d == nil {
			t.Fatal("accepted without a document")
		}
		v, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
		if err != nil {
			t.Fatalf("accepted what encoding/json cannot read: %v", err)
		}
		if err := direct.Validate(v); err != nil {
			t.Fatalf("accepted what the schema refuses: %v", err)
		}
	})
}
