package engine

import (
	"context"
	"encoding/json"
	"math/big"
	"strings"
	"testing"

	"github.com/ethereum/go-ethereum/common"

	"github.com/x402gate/x402gate/verdict"
	"github.com/x402gate/x402gate/verdictserver/engine/erc20"
	"github.com/x402gate/x402gate/verdictserver/engine/uniswap"
	"github.com/x402gate/x402gate/x402"
)

// inModeDoc is doc with its mode member set (none for "").
func inModeDoc(doc string, m verdict.Mode) string {
	if m == "" {
		return doc
	}
	return `{"mode": "` + string(m) + `", ` + strings.TrimPrefix(strings.TrimSpace(doc), "{")
}

// TestModes: the same payment to a payee the policy does not list is rejected in enforce
// mode, approved with a warning in warn mode and approved in audit mode; both record the
// recipient check that would have failed (docs/policy.md#modes).
func TestModes(t *testing.T) {
	e := newEngine(t, Config{}, Deps{})
	tx := payment(set("payTo", stranger.Hex()))
	const wouldFail = "recipient 0x3333333333333333333333333333333333333333 is not in recipients.allowed"
	for _, tc := range []struct {
		mode    verdict.Mode // "": the policy does not say
		outcome verdict.Outcome
		reason  verdict.ReasonCode
		human   string
		would   bool
	}{
		{"", verdict.OutcomeRejected, verdict.ReasonRecipientNotAllowed, wouldFail, false},
		{verdict.ModeEnforce, verdict.OutcomeRejected, verdict.ReasonRecipientNotAllowed, wouldFail, false},
		{verdict.ModeWarn, verdict.OutcomeApproved, verdict.ReasonAllowed,
			"approved in warn mode under policy version 3; would have been rejected with recipient_not_allowed: " + wouldFail, true},
		{verdict.ModeAudit, verdict.OutcomeApproved, verdict.ReasonAllowed, "approved in audit mode under policy version 3", true},
	} {
		t.Run("mode "+string(tc.mode), func(t *testing.T) {
			v := e.Evaluate(context.Background(), Input{Escrow: escrow, ProposedTx: tx, Policy: mustPolicy(t, 3, inModeDoc(basePolicy, tc.mode))})
			body := mustBeValid(t, v)
			wantMode := tc.mode
			if wantMode == "" {
				wantMode = verdict.ModeEnforce
			}
			if v.Outcome != tc.outcome || v.ReasonCode != tc.reason || v.HumanReason != tc.human || v.Mode != wantMode {
				t.Fatalf("%s/%s %q in mode %q, want %s/%s %q in mode %q\n%s", v.Outcome, v.ReasonCode, v.HumanReason, v.Mode,
					tc.outcome, tc.reason, tc.human, wantMode, body)
			}
			if !strings.Contains(string(body), `"mode":"`+string(wantMode)+`"`) {
				t.Fatalf("the verdict does not say its mode:\n%s", body)
			}
			rc := checkOf(v, verdict.CheckRecipient)
			if !tc.would {
				if len(v.WouldFail) != 0 || rc.Status != verdict.CheckFailed {
					t.Fatalf("recipient %s, wouldFail %v", rc.Status, v.WouldFail)
				}
				return
			}
			if len(v.WouldFail) != 1 || v.WouldFail[0].CheckID != verdict.CheckRecipient || *v.WouldFail[0].Code != verdict.ReasonRecipientNotAllowed ||
				v.WouldFail[0].HumanReason != wouldFail || *v.WouldFail[0].TriggeringPolicyField != "recipients.allowed" {
				t.Fatalf("wouldFail %s", body)
			}
			if rc.Status != verdict.CheckNotChecked || !strings.HasPrefix(rc.HumanReason, "not enforced in "+string(tc.mode)+" mode") {
				t.Fatalf("recipient check %s %q", rc.Status, rc.HumanReason)
			}
		})
	}
}

// TestModesNeverLetThrough: a sanctioned payee, and a payment the service cannot price under
// a cap, are rejected in every mode (docs/policy.md#modes).
func TestModesNeverLetThrough(t *testing.T) {
	e := newEngine(t, Config{}, Deps{})
	for _, tc := range []struct {
		name   string
		tx     map[string]any
		reason verdict.ReasonCode
	}{
		{"a sanctioned payee", payment(set("payTo", listed.Hex())), verdict.ReasonSanctionedAddress},
		{"an unpriced asset under a cap", payment(set("asset", tkn.Hex())), verdict.ReasonDataUnavailable},
	} {
		for _, m := range []verdict.Mode{verdict.ModeWarn, verdict.ModeAudit} {
			t.Run(tc.name+" in "+string(m), func(t *testing.T) {
				v := e.Evaluate(context.Background(), Input{Escrow: escrow, ProposedTx: tc.tx, Policy: mustPolicy(t, 3, inModeDoc(basePolicy, m))})
				body := mustBeValid(t, v)
				if v.Outcome != verdict.OutcomeRejected || v.ReasonCode != tc.reason || v.Mode != m {
					t.Fatalf("%s/%s in %s, want rejected/%s\n%s", v.Outcome, v.ReasonCode, v.Mode, tc.reason, body)
				}
				// the payee and the unknown token fail the allow-lists too: those are let through
				if len(v.WouldFail) == 0 {
					t.Fatalf("no check was let through\n%s", body)
				}
			})
		}
	}
}

// TestFailedChecksSuggestACorrection is the golden table of docs/verdict-api.md#observations:
// each failed check's observation has the observed and the expected value and, where one
// makes sense, the correction that passes the check.
func TestFailedChecksSuggestACorrection(t *testing.T) {
	e := newEngine(t, Config{}, Deps{References: hlMarks})
	const chain = 84532
	v2 := func(sig string, args ...any) map[string]any {
		return evmTx("uniswap", chain, v2Router, pack(t, uniswap.RouterABI, sig, args...), nil)
	}
	const (
		swapIn  = "swapExactTokensForTokens(uint256,uint256,address[],address,uint256)"
		swapOut = "swapTokensForExactTokens(uint256,uint256,address[],address,uint256)"
	)
	usdcWeth := []common.Address{usdc, weth}
	hl := func(raw string) map[string]any { return hlTx(t, []byte(raw)) }
	const hlBase = `{"venues": {"allowed": ["hyperliquid"]}, "chains": {"allowed": [1337]}, `
	for _, tc := range []struct {
		name, policy string // policy "": the agent has none
		tx           map[string]any
		check        verdict.CheckID
		observed     string // JSON
		expected     string // JSON
		suggestion   string
	}{
		{"an agent without a policy", "", payment(), verdict.CheckVenue, `"payment"`, `[]`, "the agent has no policy: its operator must set one"},
		{"a venue the policy does not list", basePolicy, payment(set("protocol", "evm"), set("to", payee.Hex()), set("value", "1")), verdict.CheckVenue,
			`"evm"`, `["payment"]`, "use one of venues.allowed: payment"},
		{"a policy without venues", `{"chains": {"allowed": [84532]}}`, payment(), verdict.CheckVenue,
			`"payment"`, `[]`, "venues.allowed allows nothing: the policy's operator must add to it"},
		{"a chain the policy does not list", basePolicy, payment(set("chainId", json.Number("8453")), set("asset", x402.Base.USDC.Address.Hex())), verdict.CheckChain,
			`8453`, `[84532]`, "use one of chains.allowed: 84532"},
		{"a payee the policy does not list", basePolicy, payment(set("payTo", stranger.Hex())), verdict.CheckRecipient,
			`["0x3333333333333333333333333333333333333333"]`, `["self","0x209693Bc6afc0C5328bA36FaF03C514EF312287C"]`,
			"use one of recipients.allowed: self (0x1111111111111111111111111111111111111111), 0x209693Bc6afc0C5328bA36FaF03C514EF312287C"},
		{"an asset outside the universe", `{"venues": {"allowed": ["payment"]}, "chains": {"allowed": [84532]}, "assets": {"universe": {"84532": ["` + weth.Hex() + `"]}}}`,
			payment(), verdict.CheckAsset, `["` + usdc.Hex() + `"]`, `["` + weth.Hex() + `"]`, "use one of assets.universe.84532: " + weth.Hex()},
		{"a payment over the cap: the amount that fits", basePolicy, payment(set("amount", "7500000")), verdict.CheckPerTxCap,
			`7.5`, `5`, "lower the amount to <= 5 USD (5000000 base units of " + usdc.Hex() + ")"},
		{"a payment in a token without a price", basePolicy, payment(set("asset", tkn.Hex())), verdict.CheckPerTxCap,
			`"no USD price for ` + tkn.Hex() + `"`, `5`, "use an asset the service can price, or ask the policy's operator to price " + tkn.Hex()},
		{"a call to a contract the policy does not list", evmContracts, evmTx("evm", chain, weth, pack(t, erc20.ABI, "transfer(address,uint256)", payee, e18(1)), nil),
			verdict.CheckContractSelector, `{"selector":"0xa9059cbb","to":"` + weth.Hex() + `"}`, `["0x036CbD53842c5426634e7929541eC2318f3dCF7e"]`,
			"use one of contracts.84532: 0x036CbD53842c5426634e7929541eC2318f3dCF7e"},
		{"a selector the policy does not list", evmContracts, evmTx("evm", chain, usdc, pack(t, erc20.ABI, "transferFrom(address,address,uint256)", escrow, payee, e6(1)), nil),
			verdict.CheckContractSelector, `{"selector":"0x23b872dd","to":"` + usdc.Hex() + `"}`, `["0xa9059cbb","0x095ea7b3"]`,
			"use one of contracts.84532.0x036CbD53842c5426634e7929541eC2318f3dCF7e: 0xa9059cbb, 0x095ea7b3"},
		{"a swap whose minimum output allows 10% slippage: the least minimum output within 100 bps", uniPolicy,
			v2(swapIn, e6(3000), milli18(900), usdcWeth, escrow, deadline), verdict.CheckSlippageGuard, "", `{"maxSlippageBps":100,"requireMinOut":true}`,
			"set amountOutMinimum (or amountOutMin) >= 990000000000000000 base units of " + weth.Hex()},
		{"an exact-output swap paying up to 5% more: the largest maximum input within 100 bps", uniPolicy,
			v2(swapOut, e18(1), e6(3150), usdcWeth, escrow, deadline), verdict.CheckSlippageGuard, "", `{"maxSlippageBps":100,"requireMinOut":true}`,
			"set amountInMaximum (or amountInMax) <= 3030000000 base units of " + usdc.Hex()},
		{"a swap without a minimum output", uniPolicy, v2(swapIn, e6(3000), new(big.Int), usdcWeth, escrow, deadline), verdict.CheckSlippageGuard,
			"", `{"maxSlippageBps":100,"requireMinOut":true}`, "set a non-zero minimum output (amountOutMinimum or amountOutMin)"},
		{"a side the policy does not list", uniBuyOnly, v2(swapIn, e18(1), e6(2990), []common.Address{weth, usdc}, escrow, deadline), verdict.CheckSide,
			`["sell"]`, `["buy"]`, "use one of trading.sides: buy"},
		{"leverage over the cap", hlBase + `"perps": {"maxLeverage": 5}}`,
			hl(`{"action": {"type": "updateLeverage", "asset": 1, "isCross": true, "leverage": 20}}`), verdict.CheckLeverage,
			`[20]`, `5`, "lower the leverage to <= 5x"},
		{"a limit price far from the reference", hlBase + `"orders": {"maxPriceDeviationBps": 100}}`,
			hl(`{"action": {"type": "order", "orders": [{"a": 0, "b": true, "p": "110000", "s": "0.01", "r": false, "t": {"limit": {"tif": "Gtc"}}}], "grouping": "na"}}`),
			verdict.CheckExecutionPriceBound, "", `{"maxPriceDeviationBps":100,"requireLimitPrice":false}`,
			"set the limit price within 100 bps of the reference 100000: between 99000 and 101000"},
		{"a payment to the token contract", `{"venues": {"allowed": ["payment"]}, "chains": {"allowed": [84532]}}`, payment(set("payTo", usdc.Hex())),
			verdict.CheckSinkRecipient, `["` + usdc.Hex() + `"]`, `"not the token contract"`, "send to a recipient, not to the token contract " + usdc.Hex()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := Input{Escrow: escrow, ProposedTx: tc.tx}
			if tc.policy != "" {
				in.Policy = mustPolicy(t, 4, tc.policy)
			}
			v := e.Evaluate(context.Background(), in)
			body := mustBeValid(t, v)
			if c := checkOf(v, tc.check); c.Status != verdict.CheckFailed {
				t.Fatalf("%s is %s (%s)\n%s", tc.check, c.Status, c.HumanReason, body)
			}
			o, ok := v.Evidence.Observations[string(tc.check)]
			if !ok {
				t.Fatalf("no observation of %s\n%s", tc.check, body)
			}
			raw, _ := json.Marshal(o)
			var got struct {
				Observed   json.RawMessage `json:"observed"`
				Expected   json.RawMessage `json:"expected"`
				Suggestion string          `json:"suggestion"`
			}
			if err := json.Unmarshal(raw, &got); err != nil {
				t.Fatal(err)
			}
			if tc.observed != "" && string(got.Observed) != tc.observed {
				t.Errorf("observed %s, want %s", got.Observed, tc.observed)
			}
			if string(got.Expected) != tc.expected {
				t.Errorf("expected %s, want %s", got.Expected, tc.expected)
			}
			if got.Suggestion != tc.suggestion {
				t.Errorf("suggestion %q, want %q", got.Suggestion, tc.suggestion)
			}
		})
	}
}
