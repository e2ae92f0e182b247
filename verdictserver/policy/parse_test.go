package policy

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/x402gate/x402gate/verdict"
)

const (
	usdcBase   = "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913"
	router     = "0x2626664c2603336E57B271c5C0b26F421741e481"
	payee      = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C"
	payeeLower = "0x209693bc6afc0c5328ba36faf03c514ef312287c"
	badSum     = "0x209693bC6afc0C5328bA36FaF03C514EF312287C" // one letter's case flipped
)

func TestParseAcceptsValidDocuments(t *testing.T) {
	for _, tc := range []struct {
		name, doc string
		check     func(t *testing.T, d *Document)
	}{
		{"an empty document is valid and configures nothing", `{}`, func(t *testing.T, d *Document) {
			if d.Venues != nil || d.Recipients != nil || d.Limits != nil {
				t.Errorf("sections set: %+v", d)
			}
		}},
		{"a policy in warn mode", `{"mode": "warn"}`, func(t *testing.T, d *Document) {
			if d.Mode != verdict.ModeWarn {
				t.Errorf("mode %q, want warn", d.Mode)
			}
		}},
		{"every section of the contract", `{
			"description": "all of it",
			"mode": "audit",
			"venues": {"allowed": ["payment", "uniswap", "hyperliquid"]},
			"chains": {"allowed": [8453, 84532]},
			"contracts": {"8453": {"` + router + `": ["0x04e45aaf", "0xb858183f", "0x"]}},
			"assets": {"universe": {"8453": ["` + usdcBase + `"]}, "hyperliquid": ["BTC", "ETH", "@107"]},
			"recipients": {"allowed": ["self", "` + payee + `"]},
			"trading": {"sides": ["buy", "long"]},
			"swaps": {"requireMinOut": true, "maxSlippageBps": 100},
			"orders": {"requireLimitPrice": true, "maxPriceDeviationBps": 500},
			"perps": {"maxLeverage": 5},
			"limits": {"perTxUsd": 250.5},
			"sinks": {"extra": ["` + payeeLower + `"]}
		}`, func(t *testing.T, d *Document) {
			if got := d.Chains.Allowed; len(got) != 2 || got[1] != 84532 {
				t.Errorf("chains %v", got)
			}
			if got := d.Contracts["8453"][router]; len(got) != 3 {
				t.Errorf("selectors %v", got)
			}
			if *d.Swaps.MaxSlippageBps != 100 || !*d.Orders.RequireLimitPrice || *d.Perps.MaxLeverage != 5 || *d.Limits.PerTxUSD != 250.5 {
				t.Errorf("numbers %+v %+v %+v %+v", d.Swaps, d.Orders, d.Perps, d.Limits)
			}
			if d.Recipients.Allowed[0] != Self || d.Assets.Universe["8453"][0] != usdcBase || d.Sinks.Extra[0] != payeeLower {
				t.Errorf("lists %+v %+v %+v", d.Recipients, d.Assets, d.Sinks)
			}
		}},
		{"an empty allow-list is configured, not absent", `{"recipients": {"allowed": []}}`, func(t *testing.T, d *Document) {
			if d.Recipients.Allowed == nil {
				t.Error("recipients.allowed [] read as unconfigured")
			}
		}},
		{"a section without its member is unconfigured", `{"recipients": {}}`, func(t *testing.T, d *Document) {
			if d.Recipients == nil || d.Recipients.Allowed != nil {
				t.Errorf("recipients %+v", d.Recipients)
			}
		}},
		{"an all-upper-case address needs no checksum", `{"sinks": {"extra": ["0x209693BC6AFC0C5328BA36FAF03C514EF312287C"]}}`, nil},
		{"basis points at both bounds", `{"swaps": {"maxSlippageBps": 0}, "orders": {"maxPriceDeviationBps": 10000}}`, nil},
		{"the largest chain id", `{"chains": {"allowed": [9223372036854775807]}}`, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := Parse([]byte(tc.doc))
			if err != nil {
				t.Fatalf("refused: %v", err)
			}
			if tc.check != nil {
				tc.check(t, d)
			}
		})
	}
}

func TestParseNamesTheFieldAtFault(t *testing.T) {
	for _, tc := range []struct {
		name, doc, field string
	}{
		{"not json", `{"venues":`, ""},
		{"not an object", `[]`, ""},
		{"a duplicate key", `{"limits": {"perTxUsd": 1}, "limits": {"perTxUsd": 1000}}`, ""},
		{"trailing data", `{} {}`, ""},
		{"a version written in the document", `{"version": 7}`, "version"},
		{"an unknown mode", `{"mode": "shadow"}`, "mode"},
		{"a mode in capitals", `{"mode": "Warn"}`, "mode"},
		{"a misspelt constraint", `{"limits": {"perTxUSD": 5}}`, "limits.perTxUSD"},
		{"an unknown section member", `{"venues": {"allowed": ["payment"], "denied": []}}`, "venues.denied"},
		{"a venue that is not a string", `{"venues": {"allowed": ["payment", 7]}}`, "venues.allowed.1"},
		{"a venue with capitals", `{"venues": {"allowed": ["Payment"]}}`, "venues.allowed.0"},
		{"a repeated venue", `{"venues": {"allowed": ["payment", "payment"]}}`, "venues.allowed"},
		{"a chain id of zero", `{"chains": {"allowed": [8453, 0]}}`, "chains.allowed.1"},
		{"a chain id as a string", `{"chains": {"allowed": ["8453"]}}`, "chains.allowed.0"},
		{"a chain id written as a fraction", `{"chains": {"allowed": [8453.0]}}`, "chains.allowed.0"},
		{"a chain id written with an exponent", `{"chains": {"allowed": [1e3]}}`, "chains.allowed.0"},
		{"a chain id beyond 64 bits", `{"chains": {"allowed": [9223372036854775808]}}`, "chains.allowed.0"},
		{"a chain key with a leading zero", `{"assets": {"universe": {"08453": []}}}`, "assets.universe.08453"},
		{"a chain key beyond 64 bits", `{"assets": {"universe": {"9999999999999999999": []}}}`, "assets.universe.9999999999999999999"},
		{"a contract chain key that is not a number", `{"contracts": {"base": {}}}`, "contracts.base"},
		{"a contract address of 19 bytes", `{"contracts": {"8453": {"0x2626664c2603336E57B271c5C0b26F421741e4": []}}}`, "contracts.8453.0x2626664c2603336E57B271c5C0b26F421741e4"},
		{"a contract address with a wrong checksum", `{"contracts": {"8453": {"` + badSum + `": []}}}`, "contracts.8453." + badSum},
		{"the same contract twice in two cases", `{"contracts": {"8453": {"` + payee + `": [], "` + payeeLower + `": []}}}`, "contracts.8453."},
		{"a selector of 3 bytes", `{"contracts": {"8453": {"` + router + `": ["0x04e45a"]}}}`, "contracts.8453." + router + ".0"},
		{"a selector without 0x", `{"contracts": {"8453": {"` + router + `": ["0x04e45aaf", "04e45aaf"]}}}`, "contracts.8453." + router + ".1"},
		{"an asset that is not an address", `{"assets": {"universe": {"8453": ["USDC"]}}}`, "assets.universe.8453.0"},
		{"an asset with a wrong checksum", `{"assets": {"universe": {"8453": ["` + usdcBase + `", "` + badSum + `"]}}}`, "assets.universe.8453.1"},
		{"a repeated asset", `{"assets": {"universe": {"84532": ["` + payee + `", "` + payeeLower + `"]}}}`, "assets.universe.84532.1"},
		{"a hyperliquid coin with a space", `{"assets": {"hyperliquid": ["BT C"]}}`, "assets.hyperliquid.0"},
		{"a recipient that is neither self nor an address", `{"recipients": {"allowed": ["self", "me"]}}`, "recipients.allowed.1"},
		{"a recipient with a wrong checksum", `{"recipients": {"allowed": ["` + badSum + `"]}}`, "recipients.allowed.0"},
		{"self as a sink", `{"sinks": {"extra": ["self"]}}`, "sinks.extra.0"},
		{"an unknown side", `{"trading": {"sides": ["buy", "hold"]}}`, "trading.sides.1"},
		{"requireMinOut as a string", `{"swaps": {"requireMinOut": "yes"}}`, "swaps.requireMinOut"},
		{"requirePriceLimit as a number", `{"swaps": {"requirePriceLimit": 1}}`, "swaps.requirePriceLimit"},
		{"a known contract of an unknown kind", `{"knownContracts": {"8453": {"` + router + `": "uniswap.router"}}}`, "knownContracts.8453." + router},
		{"a Universal Router without its version", `{"knownContracts": {"8453": {"` + router + `": "uniswap.universalRouter"}}}`, "knownContracts.8453." + router},
		{"a known contract with a wrong checksum", `{"knownContracts": {"8453": {"` + badSum + `": "uniswap.swapRouter02"}}}`, "knownContracts.8453." + badSum},
		{"a known contract on chain 0", `{"knownContracts": {"0": {"` + router + `": "uniswap.swapRouter02"}}}`, "knownContracts.0"},
		{"slippage above 10000 bps", `{"swaps": {"maxSlippageBps": 10001}}`, "swaps.maxSlippageBps"},
		{"negative slippage", `{"swaps": {"maxSlippageBps": -1}}`, "swaps.maxSlippageBps"},
		{"fractional bps", `{"orders": {"maxPriceDeviationBps": 12.5}}`, "orders.maxPriceDeviationBps"},
		{"bps written as 100.0", `{"orders": {"maxPriceDeviationBps": 100.0}}`, "orders.maxPriceDeviationBps"},
		{"a leverage of zero", `{"perps": {"maxLeverage": 0}}`, "perps.maxLeverage"},
		{"a negative cap", `{"limits": {"perTxUsd": -0.01}}`, "limits.perTxUsd"},
		{"a cap as a string", `{"limits": {"perTxUsd": "250"}}`, "limits.perTxUsd"},
		{"a description that is not a string", `{"description": 5}`, "description"},
		{"a section that is not an object", `{"limits": 5}`, "limits"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := Parse([]byte(tc.doc))
			if err == nil {
				t.Fatalf("accepted: %+v", d)
			}
			var pe *Errors
			if !errors.As(err, &pe) || len(pe.Problems) == 0 {
				t.Fatalf("error %T %v is not *Errors with problems", err, err)
			}
			found := false
			for _, p := range pe.Problems {
				if p.Field == tc.field || (strings.HasSuffix(tc.field, ".") && strings.HasPrefix(p.Field, tc.field)) {
					found = true
				}
				if p.Problem == "" {
					t.Errorf("problem without text at %q", p.Field)
				}
			}
			if !found {
				t.Errorf("no problem names %q: %v", tc.field, err)
			}
		})
	}
}

// wantProblemFields parses doc, which must be refused, and checks the fields its problems
// name, in order; it returns the error.
func wantProblemFields(t *testing.T, doc, want string) error {
	t.Helper()
	_, err := Parse([]byte(doc))
	var pe *Errors
	if !errors.As(err, &pe) {
		t.Fatalf("error %v", err)
	}
	var fields []string
	for _, p := range pe.Problems {
		fields = append(fields, p.Field)
	}
	if got := strings.Join(fields, " "); got != want {
		t.Errorf("fields %q, want %q (%v)", got, want, err)
	}
	return err
}

func TestParseReportsEveryProblemAtOnce(t *testing.T) {
	err := wantProblemFields(t, `{"limits": {"perTxUsd": -1}, "chains": {"allowed": [0]}, "sinks": {"extra": ["0x1"]}}`,
		"chains.allowed.0 limits.perTxUsd sinks.extra.0")
	if !strings.Contains(err.Error(), "limits.perTxUsd: ") {
		t.Errorf("Error() does not name the field: %v", err)
	}
}

// TestParseReportsSchemaAndChecksumProblemsTogether: a checksum the schema cannot judge is
// reported with the schema's own problems, not only once they are fixed.
func TestParseReportsSchemaAndChecksumProblemsTogether(t *testing.T) {
	wantProblemFields(t, `{"limits": {"perTxUsd": -1}, "recipients": {"allowed": ["`+badSum+`"]}}`, "limits.perTxUsd recipients.allowed.0")
}

func TestParseRefusesOversizedDocuments(t *testing.T) {
	big := `{"description": "` + strings.Repeat("a", MaxDocumentBytes) + `"}`
	if _, err := Parse([]byte(big)); err == nil {
		t.Fatal("accepted a document over 1 MiB")
	}
}

// TestPolicyPageExampleParses: the example on docs/policy.md passes the semantic rules too.
func TestPolicyPageExampleParses(t *testing.T) {
	page, err := os.ReadFile("../../docs/policy.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, _ := strings.Cut(string(page), "```json\n")
	example, _, _ := strings.Cut(rest, "```")
	d, err := Parse([]byte(example))
	if err != nil {
		t.Fatalf("the example on policy.md is refused: %v", err)
	}
	if d.Limits == nil || *d.Limits.PerTxUSD != 5 || d.Recipients.Allowed[0] != Self {
		t.Errorf("example read as %+v", d)
	}
}
