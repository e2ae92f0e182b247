package docs

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

func compilePolicySchema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(PolicySchema))
	if err != nil {
		t.Fatalf("policy.schema.json is not JSON: %v", err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	if err := c.AddResource("policy.schema.json", doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile("policy.schema.json")
	if err != nil {
		t.Fatalf("policy.schema.json does not compile: %v", err)
	}
	return s
}

// TestPolicyExampleMatchesSchema: the example document on docs/policy.md is valid, and the
// schema refuses what the page says it refuses.
func TestPolicyExampleMatchesSchema(t *testing.T) {
	s := compilePolicySchema(t)
	page, err := os.ReadFile("policy.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(page), "```json\n")
	example, _, ok2 := strings.Cut(rest, "```")
	if !ok || !ok2 {
		t.Fatal("policy.md has no json example")
	}
	valid := func(js string) error {
		v, err := jsonschema.UnmarshalJSON(strings.NewReader(js))
		if err != nil {
			t.Fatalf("%s: %v", js, err)
		}
		return s.Validate(v)
	}
	if err := valid(example); err != nil {
		t.Errorf("the example on policy.md is refused: %v", err)
	}
	for name, js := range map[string]string{
		"a version written in the document":  `{"version": 3}`,
		"an unknown member of a section":     `{"limits": {"perTxUSD": 5}}`,
		"a short address":                    `{"sinks": {"extra": ["0x1234"]}}`,
		"a selector of 3 bytes":              `{"contracts": {"8453": {"0x2626664c2603336E57B271c5C0b26F421741e481": ["0x04e45a"]}}}`,
		"a chain id key with a leading zero": `{"assets": {"universe": {"08453": []}}}`,
		"a chain id of zero":                 `{"chains": {"allowed": [0]}}`,
		"basis points above 10000":           `{"swaps": {"maxSlippageBps": 10001}}`,
		"self outside recipients":            `{"sinks": {"extra": ["self"]}}`,
		"an unknown side":                    `{"trading": {"sides": ["hold"]}}`,
		"a negative cap":                     `{"limits": {"perTxUsd": -1}}`,
		"a leverage of zero":                 `{"perps": {"maxLeverage": 0}}`,
	} {
		if valid(js) == nil {
			t.Errorf("%s: accepted %s", name, js)
		}
	}
	for name, js := range map[string]string{
		"an empty document":          `{}`,
		"every trading section":      `{"trading": {"sides": ["buy", "long"]}, "swaps": {"requireMinOut": true, "maxSlippageBps": 100}, "orders": {"requireLimitPrice": true, "maxPriceDeviationBps": 500}, "perps": {"maxLeverage": 5}, "assets": {"hyperliquid": ["BTC", "@107"]}}`,
		"a native transfer selector": `{"contracts": {"8453": {"0x2626664c2603336E57B271c5C0b26F421741e481": ["0x", "0x04e45aaf"]}}}`,
		"an empty allow-list":        `{"recipients": {"allowed": []}}`,
	} {
		if err := valid(js); err != nil {
			t.Errorf("%s: refused %s: %v", name, js, err)
		}
	}
}
