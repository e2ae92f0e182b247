package engine

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"

	"github.com/x402gate/x402gate/internal/testenv"
	"github.com/x402gate/x402gate/verdict"
	"github.com/x402gate/x402gate/verdictserver/engine/prices"
	"github.com/x402gate/x402gate/verdictserver/engine/sanctions"
	"github.com/x402gate/x402gate/verdictserver/policy"
	"github.com/x402gate/x402gate/x402"
)

var (
	clock    = time.Date(2026, 11, 20, 12, 0, 0, 0, time.UTC)
	escrow   = common.HexToAddress("0x1111111111111111111111111111111111111111")
	payee    = common.HexToAddress("0x209693Bc6afc0C5328bA36FaF03C514EF312287C")
	stranger = common.HexToAddress("0x3333333333333333333333333333333333333333")
	usdc     = x402.BaseSepolia.USDC.Address
	weth     = common.HexToAddress("0x4200000000000000000000000000000000000006")
	listed   = common.HexToAddress("0x5a1e000000000000000000000000000000000001") // in sanctions/testdata
)

// payment is a PaymentAction as the API hands it over: a JSON object decoded with UseNumber.
func payment(mut ...func(map[string]any)) map[string]any {
	tx := map[string]any{
		"protocol": "payment", "rail": "x402", "chainId": json.Number("84532"),
		"payTo": payee.Hex(), "asset": usdc.Hex(), "amount": "10000",
		"resource": "https://api.example.com/report",
	}
	for _, m := range mut {
		m(tx)
	}
	return tx
}

func set(k string, v any) func(map[string]any) { return func(tx map[string]any) { tx[k] = v } }
func del(k string) func(map[string]any)        { return func(tx map[string]any) { delete(tx, k) } }

// basePolicy allows x402 payments of USDC on Base Sepolia to the payee and to self, up to 5 USD.
const basePolicy = `{
	"venues": {"allowed": ["payment"]},
	"chains": {"allowed": [84532]},
	"assets": {"universe": {"84532": ["0x036CbD53842c5426634e7929541eC2318f3dCF7e"]}},
	"recipients": {"allowed": ["self", "0x209693Bc6afc0C5328bA36FaF03C514EF312287C"]},
	"limits": {"perTxUsd": 5}
}`

func mustPolicy(t testing.TB, version int64, doc string) *policy.Policy {
	t.Helper()
	d, err := policy.Parse([]byte(doc))
	if err != nil {
		t.Fatalf("policy: %v", err)
	}
	return &policy.Policy{Version: version, Doc: d}
}

func newEngine(t testing.TB, cfg Config, o Deps) *Evaluator {
	t.Helper()
	if o.Now == nil {
		o.Now = func() time.Time { return clock }
	}
	if o.Contracts == nil {
		o.Contracts = testContracts
	}
	if o.Sanctions == nil && cfg.Sanctions == "" {
		cfg.Sanctions = "sanctions/testdata/sdn_advanced.xml" // dated 2026-11-20: fresh at clock
	}
	if o.Prices == nil {
		tab, err := prices.New(clock.Add(-time.Hour), prices.Entry{ChainID: 84532, Asset: weth, Symbol: "WETH", Decimals: 18, USD: "3000"})
		if err != nil {
			t.Fatal(err)
		}
		o.Prices = tab
	}
	e, err := New(cfg, o)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// checkOf returns the verdict's check id.
func checkOf(v *verdict.Verdict, id verdict.CheckID) verdict.Check {
	for _, c := range v.Checks {
		if c.CheckID == id {
			return c
		}
	}
	return verdict.Check{}
}

// mustBeValid asserts the rules every verdict keeps: consistent, written by AppendJSON as
// encoding/json writes it, parsed back by the client's strict parser to the same JSON, the twelve checks in table order, never pending.
func mustBeValid(t testing.TB, v *verdict.Verdict) []byte {
	t.Helper()
	if v == nil {
		t.Fatal("nil verdict")
	}
	if v.Outcome == verdict.OutcomePending || !v.Terminal() {
		t.Fatalf("outcome %q is not terminal", v.Outcome)
	}
	if err := v.Consistent(); err != nil {
		t.Fatalf("inconsistent: %v", err)
	}
	if len(v.Checks) != len(checks) {
		t.Fatalf("%d checks", len(v.Checks))
	}
	for i, c := range checks {
		if v.Checks[i].CheckID != c.id {
			t.Fatalf("check %d is %s, want %s", i, v.Checks[i].CheckID, c.id)
		}
	}
	if v.LatencyMs < 0 {
		t.Fatalf("latencyMs %d", v.LatencyMs)
	}
	body, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if appended, err := v.AppendJSON(nil); err != nil || string(appended) != string(body) {
		t.Fatalf("AppendJSON, which the service stores, is not encoding/json's (%v):\n%s\n%s", err, appended, body)
	}
	back, err := verdict.ParseVerdict(body, "test")
	if err != nil {
		t.Fatalf("the client refuses the verdict: %v\n%s", err, body)
	}
	again, _ := json.Marshal(back)
	if string(again) != string(body) {
		t.Fatalf("round trip changed the verdict:\n%s\n%s", body, again)
	}
	return body
}

// TestPaymentDecodedAction: a payment's evidence.decodedAction names its payee and token
// checksummed (docs/policy.md#evidence) however the request wrote them, through Evaluate and
// through Judge, whose memory is recycled.
func TestPaymentDecodedAction(t *testing.T) {
	const want = `{"amount":"10000","amounts":[{"amount":"10000","asset":"0x036CbD53842c5426634e7929541eC2318f3dCF7e"}],` +
		`"asset":"0x036CbD53842c5426634e7929541eC2318f3dCF7e","assets":["0x036CbD53842c5426634e7929541eC2318f3dCF7e"],` +
		`"chainId":84532,"kind":"x402.payment","payTo":"0x209693Bc6afc0C5328bA36FaF03C514EF312287C","protocol":"payment","rail":"x402",` +
		`"recipients":["0x209693Bc6afc0C5328bA36FaF03C514EF312287C"],"resource":"https://api.example.com/report",` +
		`"to":"0x209693Bc6afc0C5328bA36FaF03C514EF312287C"}`
	e := newEngine(t, Config{}, Deps{})
	in := Input{Escrow: escrow, ProposedTx: payment(set("payTo", strings.ToLower(payee.Hex())), set("asset", strings.ToLower(usdc.Hex()))),
		Policy: mustPolicy(t, 3, basePolicy)}
	if got := testenv.JSON(t, e.Evaluate(context.Background(), in).Evidence.DecodedAction); got != want {
		t.Errorf("Evaluate's decodedAction\n%s, want\n%s", got, want)
	}
	for range 2 {
		e.Judge(context.Background(), in, func(v *verdict.Verdict) {
			if got := testenv.JSON(t, v.Evidence.DecodedAction); got != want {
				t.Errorf("Judge's decodedAction\n%s, want\n%s", got, want)
			}
		})
	}
}

func TestPaymentVerdicts(t *testing.T) {
	type want struct {
		outcome verdict.Outcome
		reason  verdict.ReasonCode
		field   string // verdict triggeringPolicyField; "" is null
		status  map[verdict.CheckID]verdict.CheckStatus
	}
	P, F, N := verdict.CheckPassed, verdict.CheckFailed, verdict.CheckNotChecked
	for _, tc := range []struct {
		name   string
		policy string // "" = no policy
		escrow common.Address
		tx     map[string]any
		want   want
	}{
		{"a payment to an allowed payee within the cap is approved", basePolicy, escrow, payment(),
			want{verdict.OutcomeApproved, verdict.ReasonAllowed, "", map[verdict.CheckID]verdict.CheckStatus{
				"venue": P, "chain": P, "contract_selector": N, "asset": P, "recipient": P, "side": N, "slippage_guard": N,
				"execution_price_bound": N, "leverage": N, "sanctions": P, "sink_recipient": P, "per_tx_cap": P}}},
		{"a payment to a payee the policy does not list is recipient_not_allowed", basePolicy, escrow, payment(set("payTo", stranger.Hex())),
			want{verdict.OutcomeRejected, verdict.ReasonRecipientNotAllowed, "recipients.allowed", map[verdict.CheckID]verdict.CheckStatus{"recipient": F}}},
		{"self is the agent's own wallet", basePolicy, escrow, payment(set("payTo", escrow.Hex())),
			want{verdict.OutcomeApproved, verdict.ReasonAllowed, "", map[verdict.CheckID]verdict.CheckStatus{"recipient": P}}},
		{"self is not another agent's wallet", basePolicy, stranger, payment(set("payTo", escrow.Hex())),
			want{verdict.OutcomeRejected, verdict.ReasonRecipientNotAllowed, "recipients.allowed", nil}},
		{"a lower-case payTo matches a checksummed allow-list entry", basePolicy, escrow, payment(set("payTo", strings.ToLower(payee.Hex()))),
			want{verdict.OutcomeApproved, verdict.ReasonAllowed, "", nil}},
		{"unconfigured recipients are not_checked", `{"venues": {"allowed": ["payment"]}, "chains": {"allowed": [84532]}}`, escrow, payment(set("payTo", stranger.Hex())),
			want{verdict.OutcomeApproved, verdict.ReasonAllowed, "", map[verdict.CheckID]verdict.CheckStatus{"asset": N, "recipient": N, "per_tx_cap": N, "sanctions": P, "sink_recipient": P}}},
		{"an empty recipient list allows none", `{"venues": {"allowed": ["payment"]}, "chains": {"allowed": [84532]}, "recipients": {"allowed": []}}`, escrow, payment(),
			want{verdict.OutcomeRejected, verdict.ReasonRecipientNotAllowed, "recipients.allowed", nil}},
		{"a venue the policy does not allow", `{"venues": {"allowed": ["uniswap"]}, "chains": {"allowed": [84532]}}`, escrow, payment(),
			want{verdict.OutcomeRejected, verdict.ReasonVenueNotAllowed, "venues.allowed", map[verdict.CheckID]verdict.CheckStatus{"venue": F, "chain": P}}},
		{"a policy without venues allows nothing", `{"chains": {"allowed": [84532]}}`, escrow, payment(),
			want{verdict.OutcomeRejected, verdict.ReasonVenueNotAllowed, "venues.allowed", nil}},
		{"a chain the policy does not allow", `{"venues": {"allowed": ["payment"]}, "chains": {"allowed": [8453]}}`, escrow, payment(),
			want{verdict.OutcomeRejected, verdict.ReasonChainNotAllowed, "chains.allowed", map[verdict.CheckID]verdict.CheckStatus{"chain": F}}},
		{"a policy without chains allows none", `{"venues": {"allowed": ["payment"]}}`, escrow, payment(),
			want{verdict.OutcomeRejected, verdict.ReasonChainNotAllowed, "chains.allowed", nil}},
		{"an asset outside the chain's universe", basePolicy, escrow, payment(set("asset", weth.Hex()), set("amount", "1000000000000000")),
			want{verdict.OutcomeRejected, verdict.ReasonAssetNotInUniverse, "assets.universe.84532", map[verdict.CheckID]verdict.CheckStatus{"asset": F}}},
		{"a universe for another chain leaves this one unconfigured", `{"venues": {"allowed": ["payment"]}, "chains": {"allowed": [84532]}, "assets": {"universe": {"8453": []}}}`, escrow, payment(),
			want{verdict.OutcomeApproved, verdict.ReasonAllowed, "", map[verdict.CheckID]verdict.CheckStatus{"asset": N}}},
		{"a payment over the cap", basePolicy, escrow, payment(set("amount", "5000001")),
			want{verdict.OutcomeRejected, verdict.ReasonPerTxCapExceeded, "limits.perTxUsd", map[verdict.CheckID]verdict.CheckStatus{"per_tx_cap": F}}},
		{"a payment of exactly the cap passes", basePolicy, escrow, payment(set("amount", "5000000")),
			want{verdict.OutcomeApproved, verdict.ReasonAllowed, "", nil}},
		{"a cap of 0.3 allows exactly 0.3 USD (the cap as written, not its binary float)", `{"venues": {"allowed": ["payment"]}, "chains": {"allowed": [84532]}, "limits": {"perTxUsd": 0.3}}`, escrow,
			payment(set("amount", "300000")), want{verdict.OutcomeApproved, verdict.ReasonAllowed, "", nil}},
		{"a cap of 0.3 refuses one base unit more", `{"venues": {"allowed": ["payment"]}, "chains": {"allowed": [84532]}, "limits": {"perTxUsd": 0.3}}`, escrow,
			payment(set("amount", "300001")), want{verdict.OutcomeRejected, verdict.ReasonPerTxCapExceeded, "limits.perTxUsd", nil}},
		{"a capped payment in a token without a price is data_unavailable", `{"venues": {"allowed": ["payment"]}, "chains": {"allowed": [8453]}, "limits": {"perTxUsd": 5}}`, escrow,
			payment(set("chainId", json.Number("8453")), set("asset", usdc.Hex())),
			want{verdict.OutcomeRejected, verdict.ReasonDataUnavailable, "limits.perTxUsd", map[verdict.CheckID]verdict.CheckStatus{"per_tx_cap": F}}},
		{"a sanctioned payee", basePolicy, escrow, payment(set("payTo", listed.Hex())),
			want{verdict.OutcomeRejected, verdict.ReasonRecipientNotAllowed, "recipients.allowed", map[verdict.CheckID]verdict.CheckStatus{"recipient": F, "sanctions": F}}},
		{"a sanctioned payee with recipients unconfigured", `{"venues": {"allowed": ["payment"]}, "chains": {"allowed": [84532]}}`, escrow, payment(set("payTo", listed.Hex())),
			want{verdict.OutcomeRejected, verdict.ReasonSanctionedAddress, "", map[verdict.CheckID]verdict.CheckStatus{"sanctions": F}}},
		{"a sanctioned agent wallet", basePolicy, listed, payment(),
			want{verdict.OutcomeRejected, verdict.ReasonSanctionedAddress, "", map[verdict.CheckID]verdict.CheckStatus{"sanctions": F, "recipient": P}}},
		{"a sanctioned asset contract", `{"venues": {"allowed": ["payment"]}, "chains": {"allowed": [84532]}}`, escrow, payment(set("asset", listed.Hex())),
			want{verdict.OutcomeRejected, verdict.ReasonSanctionedAddress, "", nil}},
		{"the zero address is a sink", `{"venues": {"allowed": ["payment"]}, "chains": {"allowed": [84532]}}`, escrow, payment(set("payTo", "0x0000000000000000000000000000000000000000")),
			want{verdict.OutcomeRejected, verdict.ReasonSinkRecipient, "", map[verdict.CheckID]verdict.CheckStatus{"sink_recipient": F}}},
		{"0x…dEaD is a sink", `{"venues": {"allowed": ["payment"]}, "chains": {"allowed": [84532]}}`, escrow, payment(set("payTo", "0x000000000000000000000000000000000000dEaD")),
			want{verdict.OutcomeRejected, verdict.ReasonSinkRecipient, "", nil}},
		{"the ecrecover precompile is a sink", `{"venues": {"allowed": ["payment"]}, "chains": {"allowed": [84532]}}`, escrow, payment(set("payTo", "0x0000000000000000000000000000000000000001")),
			want{verdict.OutcomeRejected, verdict.ReasonSinkRecipient, "", nil}},
		{"the point-evaluation precompile 0x…0a is a sink", `{"venues": {"allowed": ["payment"]}, "chains": {"allowed": [84532]}}`, escrow, payment(set("payTo", "0x000000000000000000000000000000000000000a")),
			want{verdict.OutcomeRejected, verdict.ReasonSinkRecipient, "", nil}},
		{"0x…0b is not a built-in sink", `{"venues": {"allowed": ["payment"]}, "chains": {"allowed": [84532]}}`, escrow, payment(set("payTo", "0x000000000000000000000000000000000000000b")),
			want{verdict.OutcomeApproved, verdict.ReasonAllowed, "", nil}},
		{"the P-256 precompile 0x…0100 is a sink", `{"venues": {"allowed": ["payment"]}, "chains": {"allowed": [84532]}}`, escrow, payment(set("payTo", "0x0000000000000000000000000000000000000100")),
			want{verdict.OutcomeRejected, verdict.ReasonSinkRecipient, "", nil}},
		{"the native-asset sentinel is a sink", `{"venues": {"allowed": ["payment"]}, "chains": {"allowed": [84532]}}`, escrow, payment(set("payTo", "0xEeeeeEeeeEeEeeEeEeEeeEEEeeeeEeeeeeeeEEeE")),
			want{verdict.OutcomeRejected, verdict.ReasonSinkRecipient, "", nil}},
		{"paying the token contract itself is a sink", `{"venues": {"allowed": ["payment"]}, "chains": {"allowed": [84532]}}`, escrow, payment(set("payTo", usdc.Hex())),
			want{verdict.OutcomeRejected, verdict.ReasonSinkRecipient, "", nil}},
		{"sinks.extra adds a sink and names its field", `{"venues": {"allowed": ["payment"]}, "chains": {"allowed": [84532]}, "sinks": {"extra": ["0x3333333333333333333333333333333333333333"]}}`, escrow,
			payment(set("payTo", stranger.Hex())),
			want{verdict.OutcomeRejected, verdict.ReasonSinkRecipient, "sinks.extra", nil}},
		{"an allowed recipient that is a sink is still refused", `{"venues": {"allowed": ["payment"]}, "chains": {"allowed": [84532]}, "recipients": {"allowed": ["0x000000000000000000000000000000000000dEaD"]}}`, escrow,
			payment(set("payTo", "0x000000000000000000000000000000000000dEaD")),
			want{verdict.OutcomeRejected, verdict.ReasonSinkRecipient, "", map[verdict.CheckID]verdict.CheckStatus{"recipient": P, "sink_recipient": F}}},
		{"the first failed check in the fixed order decides: chain before recipient and cap", `{"venues": {"allowed": ["payment"]}, "chains": {"allowed": [8453]}, "recipients": {"allowed": []}, "limits": {"perTxUsd": 0}}`, escrow, payment(),
			want{verdict.OutcomeRejected, verdict.ReasonChainNotAllowed, "chains.allowed", map[verdict.CheckID]verdict.CheckStatus{"chain": F, "recipient": F, "per_tx_cap": F}}},
		{"sanctions come before sinks", `{"venues": {"allowed": ["payment"]}, "chains": {"allowed": [84532]}, "sinks": {"extra": ["0x5a1e000000000000000000000000000000000001"]}}`, escrow, payment(set("payTo", listed.Hex())),
			want{verdict.OutcomeRejected, verdict.ReasonSanctionedAddress, "", map[verdict.CheckID]verdict.CheckStatus{"sanctions": F, "sink_recipient": F}}},
		{"no policy is venue_not_allowed", "", escrow, payment(),
			want{verdict.OutcomeRejected, verdict.ReasonVenueNotAllowed, "", map[verdict.CheckID]verdict.CheckStatus{"venue": F, "chain": N, "recipient": N}}},
		{"an unknown protocol is decode_failure", basePolicy, escrow, payment(set("protocol", "uniswap")),
			want{verdict.OutcomeRejected, verdict.ReasonDecodeFailure, "", map[verdict.CheckID]verdict.CheckStatus{"venue": F, "chain": P, "recipient": N}}},
		{"an unknown protocol the policy allows is still decode_failure", `{"venues": {"allowed": ["payment", "teleport"]}, "chains": {"allowed": [84532]}}`, escrow, payment(set("protocol", "teleport")),
			want{verdict.OutcomeRejected, verdict.ReasonDecodeFailure, "", map[verdict.CheckID]verdict.CheckStatus{"venue": P, "chain": P}}},
		{"a missing payTo", basePolicy, escrow, payment(del("payTo")), want{verdict.OutcomeRejected, verdict.ReasonDecodeFailure, "", nil}},
		{"a missing amount", basePolicy, escrow, payment(del("amount")), want{verdict.OutcomeRejected, verdict.ReasonDecodeFailure, "", nil}},
		{"a missing rail", basePolicy, escrow, payment(del("rail")), want{verdict.OutcomeRejected, verdict.ReasonDecodeFailure, "", nil}},
		{"another rail", basePolicy, escrow, payment(set("rail", "card")), want{verdict.OutcomeRejected, verdict.ReasonDecodeFailure, "", nil}},
		{"a short payTo", basePolicy, escrow, payment(set("payTo", "0x209693Bc6afc0C5328bA36FaF03C514EF3122")), want{verdict.OutcomeRejected, verdict.ReasonDecodeFailure, "", nil}},
		{"a payTo with a wrong checksum", basePolicy, escrow, payment(set("payTo", "0x209693bC6afc0C5328bA36FaF03C514EF312287C")), want{verdict.OutcomeRejected, verdict.ReasonDecodeFailure, "", nil}},
		{"an asset that is not a string", basePolicy, escrow, payment(set("asset", json.Number("1"))), want{verdict.OutcomeRejected, verdict.ReasonDecodeFailure, "", nil}},
		{"the zero asset", basePolicy, escrow, payment(set("asset", "0x0000000000000000000000000000000000000000")), want{verdict.OutcomeRejected, verdict.ReasonDecodeFailure, "", nil}},
		{"a fractional amount", basePolicy, escrow, payment(set("amount", "0.01")), want{verdict.OutcomeRejected, verdict.ReasonDecodeFailure, "", nil}},
		{"a numeric amount", basePolicy, escrow, payment(set("amount", json.Number("10000"))), want{verdict.OutcomeRejected, verdict.ReasonDecodeFailure, "", nil}},
		{"a zero amount", basePolicy, escrow, payment(set("amount", "0")), want{verdict.OutcomeRejected, verdict.ReasonDecodeFailure, "", nil}},
		{"a negative amount", basePolicy, escrow, payment(set("amount", "-5")), want{verdict.OutcomeRejected, verdict.ReasonDecodeFailure, "", nil}},
		{"an amount with a leading zero", basePolicy, escrow, payment(set("amount", "010000")), want{verdict.OutcomeRejected, verdict.ReasonDecodeFailure, "", nil}},
		{"an amount of 2^256", basePolicy, escrow, payment(set("amount", "115792089237316195423570985008687907853269984665640564039457584007913129639936")), want{verdict.OutcomeRejected, verdict.ReasonDecodeFailure, "", nil}},
		{"a chainId as a string", basePolicy, escrow, payment(set("chainId", "84532")), want{verdict.OutcomeRejected, verdict.ReasonDecodeFailure, "", map[verdict.CheckID]verdict.CheckStatus{"chain": N}}},
		{"a fractional chainId", basePolicy, escrow, payment(set("chainId", json.Number("84532.5"))), want{verdict.OutcomeRejected, verdict.ReasonDecodeFailure, "", nil}},
		{"a chainId of zero", basePolicy, escrow, payment(set("chainId", json.Number("0"))), want{verdict.OutcomeRejected, verdict.ReasonDecodeFailure, "", nil}},
		{"a member a payment does not have", basePolicy, escrow, payment(set("network", "base")), want{verdict.OutcomeRejected, verdict.ReasonDecodeFailure, "", nil}},
		{"a resource that is not a string", basePolicy, escrow, payment(set("resource", json.Number("1"))), want{verdict.OutcomeRejected, verdict.ReasonDecodeFailure, "", nil}},
		{"no proposedTx at all", basePolicy, escrow, nil, want{verdict.OutcomeRejected, verdict.ReasonDecodeFailure, "", map[verdict.CheckID]verdict.CheckStatus{"venue": N, "chain": N}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEngine(t, Config{}, Deps{})
			in := Input{Escrow: tc.escrow, ProposedTx: tc.tx}
			if tc.policy != "" {
				in.Policy = mustPolicy(t, 3, tc.policy)
			}
			v := e.Evaluate(context.Background(), in)
			body := mustBeValid(t, v)
			if v.Outcome != tc.want.outcome || v.ReasonCode != tc.want.reason {
				t.Fatalf("outcome %s %s (%s), want %s %s\n%s", v.Outcome, v.ReasonCode, v.HumanReason, tc.want.outcome, tc.want.reason, body)
			}
			gotField := ""
			if v.TriggeringPolicyField != nil {
				gotField = *v.TriggeringPolicyField
			}
			if gotField != tc.want.field {
				t.Errorf("triggeringPolicyField %q, want %q", gotField, tc.want.field)
			}
			for id, st := range tc.want.status {
				if got := checkOf(v, id).Status; got != st {
					t.Errorf("check %s is %s, want %s (%s)", id, got, st, checkOf(v, id).HumanReason)
				}
			}
			if tc.policy == "" {
				if v.PolicyVersion != nil || !strings.Contains(v.HumanReason, "no policy") {
					t.Errorf("no policy: policyVersion %v, humanReason %q", v.PolicyVersion, v.HumanReason)
				}
			} else if v.PolicyVersion == nil || *v.PolicyVersion != 3 {
				t.Errorf("policyVersion %v, want 3", v.PolicyVersion)
			}
			if !v.Timestamp.Equal(clock) {
				t.Errorf("timestamp %v, want the engine's clock %v", v.Timestamp, clock)
			}
		})
	}
}

func TestPaymentEvidence(t *testing.T) {
	e := newEngine(t, Config{}, Deps{})
	v := e.Evaluate(context.Background(), Input{Escrow: escrow, ProposedTx: payment(), Policy: mustPolicy(t, 7, basePolicy)})
	mustBeValid(t, v)
	da := v.Evidence.DecodedAction
	for k, want := range map[string]any{
		"protocol": "payment", "chainId": int64(84532), "kind": "x402.payment", "rail": "x402",
		"to": payee.Hex(), "payTo": payee.Hex(), "asset": usdc.Hex(), "amount": "10000",
		"resource": "https://api.example.com/report",
	} {
		if da[k] != want {
			t.Errorf("decodedAction.%s = %v (%T), want %v", k, da[k], da[k], want)
		}
	}
	if r, _ := da["recipients"].([]string); len(r) != 1 || r[0] != payee.Hex() {
		t.Errorf("decodedAction.recipients %v", da["recipients"])
	}
	if a, _ := da["assets"].([]string); len(a) != 1 || a[0] != usdc.Hex() {
		t.Errorf("decodedAction.assets %v", da["assets"])
	}
	// An observation per check that ran, none for the others.
	for _, c := range v.Checks {
		_, has := v.Evidence.Observations[string(c.CheckID)]
		if has != (c.Status != verdict.CheckNotChecked) {
			t.Errorf("check %s (%s): observation present %v", c.CheckID, c.Status, has)
		}
	}
	cap := v.Evidence.Observations["per_tx_cap"].(*Observation)
	if cap.Observed != 0.01 || cap.Expected != 5.0 {
		t.Errorf("per_tx_cap observation %v", cap)
	}
	if v.USDNotional == nil || *v.USDNotional != 0.01 {
		t.Errorf("usdNotional %v, want 0.01", v.USDNotional)
	}
	scr := v.Evidence.Observations["sanctions"].(*Observation).Observed.(*screenObserved).Screened
	if len(scr) != 3 {
		t.Errorf("screened %v, want escrow, payTo and asset", scr)
	}
	// Sources: the sanctions list with its publication date, and the price table.
	names := map[string]string{}
	for _, s := range v.Evidence.Sources {
		m := s.(map[string]any)
		names[m["name"].(string)] = m["asOf"].(string) + " " + m["status"].(string)
	}
	if names["sanctions:sdn_advanced.xml"] != "2026-11-20T00:00:00Z fresh" || names["prices"] != "2026-11-20T11:00:00Z fresh" {
		t.Errorf("sources %v", names)
	}
	if v.DataFreshness.Overall != verdict.FreshnessFresh || len(v.DataFreshness.Sources) != 2 {
		t.Errorf("dataFreshness %+v", v.DataFreshness)
	}
	if v.Trust.Level != verdict.TrustHigh || v.Trust.Notes != nil {
		t.Errorf("trust %+v", v.Trust)
	}
}

func TestUnconfiguredCapStillPricesTheNotional(t *testing.T) {
	e := newEngine(t, Config{}, Deps{})
	v := e.Evaluate(context.Background(), Input{Escrow: escrow, ProposedTx: payment(set("amount", "2500000")),
		Policy: mustPolicy(t, 1, `{"venues": {"allowed": ["payment"]}, "chains": {"allowed": [84532]}}`)})
	mustBeValid(t, v)
	if checkOf(v, verdict.CheckPerTxCap).Status != verdict.CheckNotChecked {
		t.Errorf("per_tx_cap %+v", checkOf(v, verdict.CheckPerTxCap))
	}
	if v.USDNotional == nil || *v.USDNotional != 2.5 {
		t.Errorf("usdNotional %v, want 2.5", v.USDNotional)
	}
	// Unpriced: null.
	v = e.Evaluate(context.Background(), Input{Escrow: escrow, ProposedTx: payment(set("asset", stranger.Hex())),
		Policy: mustPolicy(t, 1, `{"venues": {"allowed": ["payment"]}, "chains": {"allowed": [84532]}}`)})
	mustBeValid(t, v)
	if v.USDNotional != nil || v.Outcome != verdict.OutcomeApproved {
		t.Errorf("unpriced, uncapped: usdNotional %v, outcome %s", v.USDNotional, v.Outcome)
	}
}

func TestFreshnessAndTrust(t *testing.T) {
	pol := mustPolicy(t, 1, basePolicy)
	old := sanctions.New("sanctions:old.txt", clock.Add(-49*time.Hour), []common.Address{listed})
	for _, tc := range []struct {
		name    string
		e       *Evaluator
		tx      map[string]any
		overall verdict.Freshness
		trust   verdict.TrustLevel
	}{
		{"a list within its TTL and the price table: fresh, high", newEngine(t, Config{}, Deps{}), payment(), verdict.FreshnessFresh, verdict.TrustHigh},
		{"a list older than the TTL: mixed, medium", newEngine(t, Config{}, Deps{Sanctions: old}), payment(), verdict.FreshnessMixed, verdict.TrustMedium},
		{"a longer TTL keeps the same list fresh", newEngine(t, Config{SanctionsTTL: Duration(72 * time.Hour)}, Deps{Sanctions: old}), payment(), verdict.FreshnessFresh, verdict.TrustHigh},
		{"no list loaded: medium", func() *Evaluator { e := newEngine(t, Config{}, Deps{}); e.SetSanctions(nil); return e }(), payment(), verdict.FreshnessFresh, verdict.TrustMedium},
		{"an action not decoded: low", newEngine(t, Config{}, Deps{}), payment(set("amount", "x")), verdict.FreshnessFresh, verdict.TrustLow},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := tc.e.Evaluate(context.Background(), Input{Escrow: escrow, ProposedTx: tc.tx, Policy: pol})
			mustBeValid(t, v)
			if v.DataFreshness.Overall != tc.overall || v.Trust.Level != tc.trust {
				t.Errorf("overall %s trust %s (%v), want %s %s", v.DataFreshness.Overall, v.Trust.Level, v.Trust.Notes, tc.overall, tc.trust)
			}
			if tc.trust != verdict.TrustHigh && v.Trust.Notes == nil {
				t.Error("trust below high without notes")
			}
		})
	}
}

func TestSanctionsFromATextFileAndReload(t *testing.T) {
	e := newEngine(t, Config{Sanctions: "sanctions/testdata/list.txt"}, Deps{})
	pol := mustPolicy(t, 1, `{"venues": {"allowed": ["payment"]}, "chains": {"allowed": [84532]}}`)
	hit := common.HexToAddress("0x5a1e000000000000000000000000000000000004")
	v := e.Evaluate(context.Background(), Input{Escrow: escrow, ProposedTx: payment(set("payTo", hit.Hex())), Policy: pol})
	mustBeValid(t, v)
	if v.ReasonCode != verdict.ReasonSanctionedAddress {
		t.Fatalf("reason %s", v.ReasonCode)
	}
	if s := v.Evidence.Sources[0].(map[string]any); s["name"] != "sanctions:list.txt" || s["asOf"] != "2026-11-21T06:00:00Z" {
		t.Errorf("source %v", s)
	}
	if err := e.LoadSanctions(); err != nil {
		t.Fatal(err)
	}
	if _, err := New(Config{Sanctions: "sanctions/testdata/missing.txt"}, Deps{}); err == nil {
		t.Error("a missing sanctions file was accepted")
	}
}

func TestRedaction(t *testing.T) {
	e := newEngine(t, Config{}, Deps{})
	v := e.Evaluate(context.Background(), Input{
		Escrow: escrow, ProposedTx: payment(), Policy: mustPolicy(t, 1, basePolicy),
		Metadata: map[string]any{"traceId": "t-1", "apiKey": "sk_live_should_not_appear", "Authorization": "Bearer xyz"},
		ContextLogs: map[string]any{"steps": []any{
			map[string]any{"tool": "fetch", "accessToken": "tok"},
			map[string]any{"nested": map[string]any{"db_password": "pw", "ok": 1}},
		}},
	})
	body := mustBeValid(t, v)
	want := []string{"contextLogs.steps", "contextLogs.steps.0.accessToken", "contextLogs.steps.1.nested.db_password",
		"metadata.Authorization", "metadata.apiKey", "metadata.traceId"}
	if !v.Redaction.Redacted || strings.Join(v.Redaction.Fields, " ") != strings.Join(want, " ") {
		t.Errorf("redaction %+v, want %v", v.Redaction, want)
	}
	for _, secret := range []string{"sk_live_should_not_appear", "Bearer xyz", "tok\"", "\"pw\"", "t-1"} {
		if strings.Contains(string(body), secret) {
			t.Errorf("the verdict quotes %q", secret)
		}
	}
	v = e.Evaluate(context.Background(), Input{Escrow: escrow, ProposedTx: payment(), Policy: mustPolicy(t, 1, basePolicy)})
	if v.Redaction.Redacted || v.Redaction.Fields == nil || len(v.Redaction.Fields) != 0 {
		t.Errorf("nothing to withhold: %+v", v.Redaction)
	}
}

func TestSensitiveNames(t *testing.T) {
	for name, want := range map[string]bool{
		"apiKey": true, "KEY": true, "client_secret": true, "refreshToken": true, "PASSWORD": true,
		"authorization": true, "x-Authorization-Header": true, "traceId": false, "prompt": false, "monkey": true,
	} {
		if Sensitive(name) != want {
			t.Errorf("Sensitive(%q) = %v", name, !want)
		}
	}
}

func TestLatencyIsMeasuredAndTheClockIsTheEngines(t *testing.T) {
	e := newEngine(t, Config{}, Deps{})
	v := e.Evaluate(context.Background(), Input{Escrow: escrow, ProposedTx: payment(), Policy: mustPolicy(t, 1, basePolicy)})
	if v.LatencyMs < 0 || !v.Timestamp.Equal(clock) {
		t.Errorf("latencyMs %d timestamp %v", v.LatencyMs, v.Timestamp)
	}
}

// TestConcurrentEvaluationsAndASanctionsSwap: one Evaluator serves many workers while the
// list is reloaded (run with -race).
func TestConcurrentEvaluationsAndASanctionsSwap(t *testing.T) {
	e := newEngine(t, Config{}, Deps{})
	pol := mustPolicy(t, 1, basePolicy)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 50 {
			if err := e.LoadSanctions(); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	errs := make(chan string, 8)
	for range 8 {
		go func() {
			for range 50 {
				v := e.Evaluate(context.Background(), Input{Escrow: escrow, ProposedTx: payment(), Policy: pol})
				if v.Outcome != verdict.OutcomeApproved || v.Consistent() != nil {
					errs <- string(v.ReasonCode)
					return
				}
			}
			errs <- ""
		}()
	}
	for range 8 {
		if s := <-errs; s != "" {
			t.Errorf("a concurrent evaluation answered %s", s)
		}
	}
	<-done
}
