package engine

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"

	"github.com/ethereum/go-ethereum/common"

	"github.com/x402gate/x402gate/verdict"
	"github.com/x402gate/x402gate/verdictserver/policy"
	"github.com/x402gate/x402gate/x402"
)

// gen draws random policies and actions from small pools, so that allow-lists, sinks,
// sanctions and prices meet the actions often.
type gen struct{ r *rand.Rand }

var (
	addrPool = []common.Address{escrow, payee, stranger, listed, usdc, weth, x402.Base.USDC.Address,
		{}, common.HexToAddress("0x000000000000000000000000000000000000dEaD"), common.HexToAddress("0x0000000000000000000000000000000000000001"),
		common.HexToAddress("0x0000000000000000000000000000000000000100"), common.HexToAddress("0xEeeeeEeeeEeEeeEeEeEeeEEEeeeeEeeeeeeeEEeE")}
	chainPool = []int64{84532, 8453, 1}
)

func (g gen) pick(n int) int { return g.r.IntN(n) }
func (g gen) coin() bool     { return g.r.IntN(2) == 0 }

func (g gen) addrs(allowSelf bool) []any {
	out := []any{}
	seen := map[common.Address]bool{}
	for range g.pick(4) {
		if allowSelf && g.pick(4) == 0 {
			if !slices.Contains(out, any(policy.Self)) {
				out = append(out, policy.Self)
			}
			continue
		}
		a := addrPool[g.pick(len(addrPool))]
		if !seen[a] {
			seen[a] = true
			out = append(out, a.Hex())
		}
	}
	return out
}

func (g gen) policy(t *testing.T) *policy.Policy {
	if g.pick(8) == 0 {
		return nil
	}
	doc := map[string]any{}
	if g.pick(5) > 0 {
		v := []any{}
		for _, p := range []string{"payment", "uniswap"} {
			if g.pick(8) > 0 {
				v = append(v, p)
			}
		}
		doc["venues"] = map[string]any{"allowed": v}
	}
	if g.pick(5) > 0 {
		v := []any{}
		for _, c := range chainPool {
			if g.pick(4) > 0 {
				v = append(v, c)
			}
		}
		doc["chains"] = map[string]any{"allowed": v}
	}
	if g.coin() {
		u := map[string]any{}
		for _, c := range chainPool {
			if g.coin() {
				var list []any
				for _, a := range g.addrs(false) {
					list = append(list, a)
				}
				if list == nil {
					list = []any{}
				}
				u[strconv.FormatInt(c, 10)] = list
			}
		}
		doc["assets"] = map[string]any{"universe": u}
	}
	if g.coin() {
		doc["recipients"] = map[string]any{"allowed": g.addrs(true)}
	}
	if g.coin() {
		doc["limits"] = map[string]any{"perTxUsd": []float64{0, 0.01, 1, 5, 1e6}[g.pick(5)]}
	}
	if g.pick(4) == 0 {
		doc["sinks"] = map[string]any{"extra": g.addrs(false)}
	}
	if g.pick(4) == 0 {
		doc["trading"] = map[string]any{"sides": []any{"buy"}}
		doc["perps"] = map[string]any{"maxLeverage": 3}
	}
	raw, _ := json.Marshal(doc)
	d, err := policy.Parse(raw)
	if err != nil {
		t.Fatalf("generated policy refused: %v\n%s", err, raw)
	}
	return &policy.Policy{Version: int64(1 + g.pick(100)), Doc: d}
}

// action returns a proposedTx and whether it is a well-formed payment.
func (g gen) action() (map[string]any, bool) {
	digits := make([]byte, 1+g.pick(12))
	for i := range digits {
		digits[i] = byte('0' + g.pick(10))
	}
	if digits[0] == '0' {
		digits[0] = '1'
	}
	tx := map[string]any{
		"protocol": "payment", "rail": "x402",
		"chainId": json.Number(strconv.FormatInt(chainPool[g.pick(len(chainPool))], 10)),
		"payTo":   addrPool[g.pick(len(addrPool))].Hex(),
		"asset":   addrPool[g.pick(7)].Hex(), // never the zero address
		"amount":  string(digits),
	}
	if g.coin() {
		tx["resource"] = "https://api.example.com/r"
	}
	if g.pick(3) > 0 {
		return tx, true
	}
	switch g.pick(10) {
	case 0:
		tx["protocol"] = []string{"uniswap", "hyperliquid", "", "PAYMENT"}[g.pick(4)]
	case 1:
		delete(tx, []string{"rail", "chainId", "payTo", "asset", "amount", "protocol"}[g.pick(6)])
	case 2:
		tx["payTo"] = "0x1234"
	case 3:
		tx["amount"] = []string{"0", "-1", "1.5", "01", "1e6", ""}[g.pick(6)]
	case 4:
		tx["chainId"] = []any{"84532", json.Number("8453.0"), json.Number("0"), json.Number("-1"), nil}[g.pick(5)]
	case 5:
		tx["network"] = "base"
	case 6:
		tx["asset"] = "0x0000000000000000000000000000000000000000"
	case 7:
		tx["rail"] = "ach"
	case 8:
		tx["amount"] = json.Number("100")
	case 9:
		return nil, false
	}
	return tx, false
}

func (g gen) context() map[string]any {
	if g.coin() {
		return nil
	}
	m := map[string]any{}
	for _, k := range []string{"traceId", "apiKey", "note", "sessionToken", "Password"} {
		if g.coin() {
			m[k] = "v-" + k
		}
	}
	if g.coin() {
		m["steps"] = []any{map[string]any{"secretRef": "x", "tool": "fetch"}}
	}
	return m
}

// TestEveryVerdictIsConsistent is the property test of docs/policy.md#check-order: for
// random policies, actions, contexts and sanctions lists, every verdict is terminal,
// consistent, parsed back unchanged by the client's strict parser, and decided by the first
// failed check in the fixed order; a malformed action is never approved.
func TestEveryVerdictIsConsistent(t *testing.T) {
	withList := newEngine(t, Config{}, Deps{})
	without := newEngine(t, Config{}, Deps{})
	without.SetSanctions(nil)
	counts := map[verdict.ReasonCode]int{}
	for seed := uint64(1); seed <= 3000; seed++ {
		g := gen{rand.New(rand.NewPCG(seed, 402))}
		pol := g.policy(t)
		tx, wellFormed := g.action()
		in := Input{Escrow: addrPool[g.pick(4)], ProposedTx: tx, Policy: pol, Metadata: g.context(), ContextLogs: g.context()}
		e := withList
		if g.pick(4) == 0 {
			e = without
		}
		v := e.Evaluate(context.Background(), in)
		mustBeValid(t, v)
		counts[v.ReasonCode]++
		fail := func(format string, args ...any) {
			t.Helper()
			body, _ := json.Marshal(v)
			t.Fatalf("seed %d: "+format+"\n%s", append([]any{seed}, append(args, body)...)...)
		}
		switch {
		case pol == nil:
			if v.ReasonCode != verdict.ReasonVenueNotAllowed || v.PolicyVersion != nil {
				fail("no policy: %s %v", v.ReasonCode, v.PolicyVersion)
			}
		case !wellFormed:
			if v.ReasonCode != verdict.ReasonDecodeFailure || v.Trust.Level != verdict.TrustLow {
				fail("malformed action: %s trust %s", v.ReasonCode, v.Trust.Level)
			}
		default:
			if v.PolicyVersion == nil || *v.PolicyVersion != pol.Version {
				fail("policyVersion %v", v.PolicyVersion)
			}
			var first *verdict.Check
			for _, id := range reasonOrder {
				if c := checkOf(v, id); c.Status == verdict.CheckFailed {
					first = &c
					break
				}
			}
			if first == nil {
				if v.Outcome != verdict.OutcomeApproved {
					fail("no failed check but %s", v.Outcome)
				}
				if checkOf(v, verdict.CheckVenue).Status != verdict.CheckPassed || checkOf(v, verdict.CheckChain).Status != verdict.CheckPassed {
					fail("approved without venue and chain passing")
				}
				if _, sink := builtinSink(common.HexToAddress(tx["payTo"].(string))); sink || tx["payTo"] == tx["asset"] {
					fail("approved a payment to a sink")
				}
				if e == withList && (e.sanctions.Load().Contains(common.HexToAddress(tx["payTo"].(string))) || e.sanctions.Load().Contains(in.Escrow)) {
					fail("approved a sanctioned party")
				}
			} else if v.ReasonCode != *first.Code || v.HumanReason != first.HumanReason {
				fail("reasonCode %s, but the first failed check is %s (%s)", v.ReasonCode, first.CheckID, *first.Code)
			}
		}
		for _, top := range []struct {
			name string
			m    map[string]any
		}{{"metadata", in.Metadata}, {"contextLogs", in.ContextLogs}} {
			for k := range top.m {
				if !slices.Contains(v.Redaction.Fields, top.name+"."+k) {
					fail("redaction does not name %s.%s", top.name, k)
				}
			}
		}
	}
	t.Logf("reason codes over 3000 random inputs: %v", counts)
	for _, c := range []verdict.ReasonCode{verdict.ReasonAllowed, verdict.ReasonDecodeFailure, verdict.ReasonVenueNotAllowed, verdict.ReasonChainNotAllowed,
		verdict.ReasonAssetNotInUniverse, verdict.ReasonRecipientNotAllowed, verdict.ReasonSanctionedAddress, verdict.ReasonSinkRecipient,
		verdict.ReasonPerTxCapExceeded, verdict.ReasonDataUnavailable} {
		if counts[c] == 0 {
			t.Errorf("the generator never produced %s: widen it", c)
		}
	}
}
