package engine

import (
	"context"
	"encoding/json"
	"os"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/x402gate/x402gate/verdict"
	"github.com/x402gate/x402gate/verdictserver/engine/hyperliquid"
)

// hlMarks are the reference prices of the Hyperliquid golden rows.
var hlMarks = marks{"BTC": "100000", "ETH": "3000", "HYPE": "40"}

type hlGolden struct {
	Base map[string]any `json:"base"`
	Rows []struct {
		Name   string            `json:"name"`
		Policy map[string]any    `json:"policy"`
		Tx     json.RawMessage   `json:"tx"`
		Reason string            `json:"reason"`
		Field  *string           `json:"field"`
		Failed []string          `json:"failed"`
		Checks map[string]string `json:"checks"`
		USD    json.RawMessage   `json:"usd"`
	} `json:"rows"`
}

// hlTx reads a proposedTx as the API hands it over (numbers as json.Number), with protocol
// hyperliquid and chainId 1337 unless raw sets them.
func hlTx(t testing.TB, raw []byte) map[string]any {
	t.Helper()
	tree, err := verdict.ParseJSON(raw)
	if err != nil {
		t.Fatalf("tx: %v\n%s", err, raw)
	}
	tx, ok := tree.(map[string]any)
	if !ok {
		t.Fatalf("tx is not an object: %s", raw)
	}
	if _, ok := tx["protocol"]; !ok {
		tx["protocol"] = hyperliquid.Protocol
	}
	if _, ok := tx["chainId"]; !ok {
		tx["chainId"] = json.Number("1337")
	}
	return tx
}

// TestHyperliquidGolden runs the golden rows of testdata/hyperliquid_golden.json: each
// Hyperliquid action against its policy, with the expected reasonCode,
// triggeringPolicyField, the exact set of failed checks, further check statuses and the
// USD notional (docs/policy.md#hyperliquid-actions).
func TestHyperliquidGolden(t *testing.T) {
	raw, err := os.ReadFile("testdata/hyperliquid_golden.json")
	if err != nil {
		t.Fatal(err)
	}
	var g hlGolden
	if err := json.Unmarshal(raw, &g); err != nil {
		t.Fatal(err)
	}
	if len(g.Rows) < 20 {
		t.Fatalf("%d golden rows, want at least 20", len(g.Rows))
	}
	e := newEngine(t, Config{}, Deps{References: hlMarks})
	reasons := map[string]bool{}
	for _, row := range g.Rows {
		t.Run(row.Name, func(t *testing.T) {
			doc := map[string]any{}
			for k, v := range g.Base {
				doc[k] = v
			}
			for k, v := range row.Policy {
				doc[k] = v
			}
			pj, _ := json.Marshal(doc)
			v := e.Evaluate(context.Background(), Input{Escrow: escrow, ProposedTx: hlTx(t, row.Tx), Policy: mustPolicy(t, 1, string(pj))})
			body := mustBeValid(t, v)
			field := ""
			if v.TriggeringPolicyField != nil {
				field = *v.TriggeringPolicyField
			}
			want := ""
			if row.Field != nil {
				want = *row.Field
			}
			if string(v.ReasonCode) != row.Reason || field != want {
				t.Fatalf("%s %q, want %s %q: %s\n%s", v.ReasonCode, field, row.Reason, want, v.HumanReason, body)
			}
			reasons[row.Reason] = true
			var failedIDs []string
			for _, c := range v.Checks {
				if c.Status == verdict.CheckFailed {
					failedIDs = append(failedIDs, string(c.CheckID))
				}
			}
			sort.Strings(failedIDs)
			wantFailed := slices.Clone(row.Failed)
			sort.Strings(wantFailed)
			if !slices.Equal(failedIDs, wantFailed) {
				t.Errorf("failed checks %v, want %v\n%s", failedIDs, wantFailed, body)
			}
			for id, s := range row.Checks {
				if c := checkOf(v, verdict.CheckID(id)); string(c.Status) != s {
					t.Errorf("%s: %s (%s), want %s", id, c.Status, c.HumanReason, s)
				}
			}
			switch usd := strings.TrimSpace(string(row.USD)); usd {
			case "":
			case "null":
				if v.USDNotional != nil {
					t.Errorf("usdNotional %v, want null", *v.USDNotional)
				}
			default:
				var f float64
				if err := json.Unmarshal(row.USD, &f); err != nil {
					t.Fatal(err)
				}
				if v.USDNotional == nil || *v.USDNotional != f {
					t.Errorf("usdNotional %v, want %v", v.USDNotional, f)
				}
			}
			if row.Reason == string(verdict.ReasonDecodeFailure) {
				if v.Trust.Level != verdict.TrustLow || v.Evidence.DecodedAction["kind"] != "undecoded" {
					t.Errorf("a decode failure with trust %s, kind %v", v.Trust.Level, v.Evidence.DecodedAction["kind"])
				}
			} else if !strings.HasPrefix(v.Evidence.DecodedAction["kind"].(string), "hyperliquid.") {
				t.Errorf("kind %v", v.Evidence.DecodedAction["kind"])
			}
		})
	}
	for _, r := range []verdict.ReasonCode{verdict.ReasonAllowed, verdict.ReasonDecodeFailure, verdict.ReasonDataUnavailable, verdict.ReasonVenueNotAllowed,
		verdict.ReasonChainNotAllowed, verdict.ReasonAssetNotInUniverse, verdict.ReasonRecipientNotAllowed, verdict.ReasonSideNotAllowed,
		verdict.ReasonNoExecutionPriceBound, verdict.ReasonLeverageCapExceeded, verdict.ReasonSanctionedAddress, verdict.ReasonSinkRecipient,
		verdict.ReasonPerTxCapExceeded} {
		if !reasons[string(r)] {
			t.Errorf("no golden row ends in %s", r)
		}
	}
}

// TestHyperliquidEvidence: the decoded order, its legs, coins, trade fields and the
// reference price as a source; a send's amounts in coins.
func TestHyperliquidEvidence(t *testing.T) {
	e := newEngine(t, Config{}, Deps{References: hlMarks})
	pol := mustPolicy(t, 1, `{"venues": {"allowed": ["hyperliquid"]}, "chains": {"allowed": [1337]}, "orders": {"maxPriceDeviationBps": 2000}, "perps": {"maxLeverage": 10}}`)
	tx := hlTx(t, []byte(`{"action": {"type": "order", "grouping": "normalTpsl", "builder": {"b": "0x209693Bc6afc0C5328bA36FaF03C514EF312287C", "f": 10}, "orders": [
		{"a": 0, "b": true, "p": "100100", "s": "0.01", "r": false, "t": {"limit": {"tif": "Gtc"}}, "c": "0x0000000000000000000000000000abcd"},
		{"a": 0, "b": false, "p": "0", "s": "0.01", "r": true, "t": {"trigger": {"isMarket": true, "triggerPx": "95000", "tpsl": "sl"}}}]},
		"nonce": 1763640000000, "vaultAddress": "0x3333333333333333333333333333333333333333", "leverage": 3}`))
	v := e.Evaluate(context.Background(), Input{Escrow: escrow, ProposedTx: tx, Policy: pol})
	body := mustBeValid(t, v)
	if v.Outcome != verdict.OutcomeApproved {
		t.Fatalf("%s: %s\n%s", v.ReasonCode, v.HumanReason, body)
	}
	da := v.Evidence.DecodedAction
	if da["kind"] != hyperliquid.KindOrder || da["chainId"] != int64(1337) || da["grouping"] != "normalTpsl" || da["vaultAddress"] != stranger.Hex() || da["type"] != "order" {
		t.Errorf("decodedAction %v", da)
	}
	if b := da["builder"].(map[string]any); b["b"] != payee.Hex() || b["f"] != int64(10) {
		t.Errorf("builder %v", b)
	}
	legs := da["legs"].([]map[string]any)
	if len(legs) != 2 {
		t.Fatalf("legs %v", legs)
	}
	entry, stop := legs[0]["trade"].(*orderTrade), legs[1]["trade"].(*orderTrade)
	if entry.Side != SideLong || entry.Market != "BTC" || entry.LimitPrice != "100100" || entry.Size != "0.01" || entry.Leverage != "3" || legs[0]["cloid"] != "0x0000000000000000000000000000abcd" || legs[0]["tif"] != "Gtc" {
		t.Errorf("entry leg %v", legs[0])
	}
	// A market stop with p 0 is bound 10% past its trigger: 95000 × 0.9.
	if stop.Side != SideShort || !stop.ReduceOnly || stop.LimitPrice != "85500" || !slices.Equal(legs[1]["coins"].([]string), []string{"BTC"}) {
		t.Errorf("stop leg %v", legs[1])
	}
	if tr := legs[1]["trigger"].(map[string]any); tr["isMarket"] != true || tr["triggerPx"] != "95000" || tr["tpsl"] != "sl" {
		t.Errorf("trigger %v", tr)
	}
	screened := v.Evidence.Observations["sanctions"].(*Observation).Observed.(*screenObserved).Screened
	if !slices.Contains(screened, payee.Hex()) || !slices.Contains(screened, stranger.Hex()) {
		t.Errorf("the builder and the vault are not screened: %v", screened)
	}
	if lev := v.Evidence.Observations["leverage"].(*Observation).Observed.([]float64); !slices.Equal(lev, []float64{3, 3}) {
		t.Errorf("leverage observed %v", lev)
	}
	// The stop is a short: priced at the higher of its limit (85500) and the reference.
	if *v.USDNotional != 1001+1000 {
		t.Errorf("usdNotional %v", *v.USDNotional)
	}
	if !slices.ContainsFunc(v.DataFreshness.Sources, func(s map[string]any) bool { return s["name"] == "test.marks" }) {
		t.Errorf("sources %v", v.DataFreshness.Sources)
	}

	send := hlTx(t, []byte(`{"action": {"type": "spotSend", "destination": "0x209693Bc6afc0C5328bA36FaF03C514EF312287C", "token": "HYPE:0x0d01dc56dcaaca66ad901c959b4011ec", "amount": "2.5", "time": 1763640000000, "signatureChainId": "0xa4b1", "hyperliquidChain": "Mainnet"}}`))
	v = e.Evaluate(context.Background(), Input{Escrow: escrow, ProposedTx: send, Policy: pol})
	mustBeValid(t, v)
	da = v.Evidence.DecodedAction
	amounts := da["amounts"].([]map[string]any)
	if da["kind"] != hyperliquid.KindSpotSend || da["destination"] != payee.Hex() || len(amounts) != 1 || amounts[0]["coin"] != "HYPE" || amounts[0]["amount"] != "2.5" ||
		!slices.Equal(da["recipients"].([]string), []string{payee.Hex()}) || da["signatureChainId"] != "0xa4b1" || *v.USDNotional != 100 {
		t.Errorf("spotSend %v, usd %v", da, v.USDNotional)
	}
}

// TestHyperliquidCoinTable: an operator's table replaces the built-in one, and the coin
// names a perp index; the spot pair names need no table.
func TestHyperliquidCoinTable(t *testing.T) {
	d := hyperliquid.Decoder{Perps: map[int64]string{0: "kPEPE", 159: "HYPE"}}
	order := func(a int) map[string]any {
		return map[string]any{"protocol": "hyperliquid", "chainId": int64(1337), "action": map[string]any{"type": "order", "grouping": "na",
			"orders": []any{map[string]any{"a": a, "b": true, "p": "1", "s": "1", "r": false, "t": map[string]any{"limit": map[string]any{"tif": "Gtc"}}}}}}
	}
	for _, tc := range []struct {
		a    int
		coin string
	}{{0, "kPEPE"}, {159, "HYPE"}, {10000, "PURR/USDC"}, {10107, "@107"}, {1, ""}, {99999, "@89999"}, {100000, ""}} {
		act, err := d.Decode(order(tc.a))
		switch {
		case tc.coin == "" && err == nil:
			t.Errorf("a=%d decoded to %v", tc.a, act.Legs[0].Coins)
		case tc.coin != "" && err != nil:
			t.Errorf("a=%d: %v", tc.a, err)
		case tc.coin != "" && act.Legs[0].Trade.Market != tc.coin:
			t.Errorf("a=%d: market %s, want %s", tc.a, act.Legs[0].Trade.Market, tc.coin)
		}
	}
	// Registered through Deps.Decoders, it replaces the built-in decoder.
	e := newEngine(t, Config{}, Deps{Decoders: []Decoder{d}})
	pol := mustPolicy(t, 1, `{"venues": {"allowed": ["hyperliquid"]}, "chains": {"allowed": [1337]}, "assets": {"hyperliquid": ["HYPE"]}}`)
	if v := e.Evaluate(context.Background(), Input{Escrow: escrow, ProposedTx: order(159), Policy: pol}); v.ReasonCode != verdict.ReasonAllowed {
		t.Errorf("HYPE by the operator's table: %s %s", v.ReasonCode, v.HumanReason)
	}
	if v := e.Evaluate(context.Background(), Input{Escrow: escrow, ProposedTx: order(1), Policy: pol}); v.ReasonCode != verdict.ReasonDecodeFailure {
		t.Errorf("index 1 outside the operator's table: %s", v.ReasonCode)
	}
}

// FuzzHyperliquidDecode: whatever Hyperliquid action arrives, decoding never panics, a
// decoded action is complete, and Evaluate under a permissive policy approves only what
// decodes; what does not decode is decode_failure.
func FuzzHyperliquidDecode(f *testing.F) {
	raw, err := os.ReadFile("testdata/hyperliquid_golden.json")
	if err != nil {
		f.Fatal(err)
	}
	var g hlGolden
	if err := json.Unmarshal(raw, &g); err != nil {
		f.Fatal(err)
	}
	for _, row := range g.Rows {
		f.Add([]byte(row.Tx))
	}
	f.Add([]byte(`{"action": {"type": "order", "orders": [], "grouping": "na"}}`))
	f.Add([]byte(`{"action": {"type": "order", "orders": [{"a": -1}], "grouping": "na"}}`))
	f.Add([]byte(`{"action": null, "chainId": "1337"}`))
	e := newEngine(f, Config{}, Deps{References: hlMarks})
	pol := mustPolicy(f, 1, `{"venues": {"allowed": ["hyperliquid"]}, "chains": {"allowed": [1337]}}`)
	f.Fuzz(func(t *testing.T, raw []byte) {
		tree, err := verdict.ParseJSON(raw)
		if err != nil {
			return
		}
		tx, ok := tree.(map[string]any)
		if !ok {
			return
		}
		if _, ok := tx["protocol"]; !ok {
			tx["protocol"] = hyperliquid.Protocol
		}
		act, derr := hyperliquid.Decoder{}.Decode(tx)
		if derr == nil && !complete(act, hyperliquid.Protocol, 0) {
			t.Fatalf("incomplete action from %s", raw)
		}
		v := e.Evaluate(context.Background(), Input{Escrow: escrow, ProposedTx: tx, Policy: pol})
		mustBeValid(t, v)
		if tx["protocol"] != hyperliquid.Protocol {
			return
		}
		if derr != nil && v.ReasonCode != verdict.ReasonDecodeFailure {
			t.Fatalf("%s for an action that does not decode (%v): %s", v.ReasonCode, derr, raw)
		}
		if v.Approved() && derr != nil {
			t.Fatalf("approved an action that does not decode: %s", raw)
		}
	})
}

// BenchmarkEvaluateHyperliquidOrder is one approved Hyperliquid perp order through every
// check: decode, venue and chain, the coin universe, side, execution price bound against
// the reference, leverage, screening against the OFAC fixture, the notional against the
// cap, evidence. Beside ns/op and allocations it reports the CPU time per evaluation and
// the 50th and 99th percentiles of single evaluations (as benchEvaluate does).
func BenchmarkEvaluateHyperliquidOrder(b *testing.B) {
	pol := mustPolicy(b, 1, `{"venues": {"allowed": ["hyperliquid"]}, "chains": {"allowed": [1337]}, "assets": {"hyperliquid": ["BTC", "ETH"]},
		"trading": {"sides": ["long", "short"]}, "orders": {"requireLimitPrice": true, "maxPriceDeviationBps": 100}, "perps": {"maxLeverage": 5},
		"limits": {"perTxUsd": 2000}, "recipients": {"allowed": ["self"]}}`)
	in := Input{Escrow: escrow, Policy: pol, ProposedTx: hlTx(b, []byte(`{"action": {"type": "order", "orders": [{"a": 0, "b": true, "p": "100500", "s": "0.01", "r": false, "t": {"limit": {"tif": "Gtc"}}}], "grouping": "na"}, "nonce": 1763640000000, "leverage": 3}`))}
	benchEvaluate(b, Deps{References: hlMarks}, in)
}
