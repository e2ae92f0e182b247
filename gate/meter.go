package gate

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/big"
	"net/http"
	"regexp"
	"strings"

	"go.uber.org/zap"

	"github.com/x402gate/x402gate/x402"
)

// Metering (docs/gate.md#metering): on an upto route the client signs a Permit2
// authorization for the route's price as a maximum, the upstream runs with its answer
// buffered (the authorization flow), and reports in a response header or trailer what the
// answer cost. The gate removes the report, refuses a cost above the maximum (nothing moves
// and the answer is not sent), and settles exactly the reported cost; a cost of 0 settles
// nothing.

// HeaderCost is the response header (or HTTP trailer) in which the upstream of an upto
// route reports what its answer cost, in ParsePrice's grammar with zero allowed: "0.0037
// USDC", "$0.0037", "0.0037" or "3700 base". The gate removes it from the answer.
const HeaderCost = "X402-Cost"

// HeaderSettlementOverrides is the reference servers' cost report, also read on an upto
// route: JSON {"amount": …} with the amount in base units ("3700"), as a percentage of
// the maximum with at most two decimals ("37%"), or in dollars ("$0.0037").
const HeaderSettlementOverrides = "Settlement-Overrides"

// Reasons of a cost report the gate refuses: the answer is not sent, nothing is settled,
// and the authorization stays unspent (502).
const (
	// ReasonCostAboveMaximum: the upstream reported a cost above the route's maximum.
	ReasonCostAboveMaximum x402.Reason = "cost_above_maximum"
	// ReasonInvalidCost: the upstream's cost report could not be read, or it came twice.
	ReasonInvalidCost x402.Reason = "invalid_cost"
)

// percentCost is a Settlement-Overrides percentage: an integer and at most two decimals.
var percentCost = regexp.MustCompile(`^([0-9]{1,3})(?:\.([0-9]{1,2}))?%$`)

// costReport is what an upto upstream reported, taken out of its answer.
type costReport struct {
	values    []string // HeaderCost values, header and trailer
	overrides []string // HeaderSettlementOverrides values
}

// takeCost removes the cost reports from an answer's header, where a trailer the upstream
// sent after its body is too (announced, or under http.TrailerPrefix), and from its
// Trailer announcement.
func takeCost(h http.Header) costReport {
	var c costReport
	for _, name := range []string{HeaderCost, HeaderSettlementOverrides} {
		var vs []string
		for _, k := range []string{http.CanonicalHeaderKey(name), http.TrailerPrefix + name, http.TrailerPrefix + http.CanonicalHeaderKey(name)} {
			vs = append(vs, h[k]...)
			delete(h, k)
		}
		if name == HeaderCost {
			c.values = vs
		} else {
			c.overrides = vs
		}
	}
	if announced := h.Values("Trailer"); len(announced) > 0 {
		h.Del("Trailer")
		for _, line := range announced {
			for _, name := range strings.Split(line, ",") {
				name = strings.TrimSpace(name)
				if name != "" && !strings.EqualFold(name, HeaderCost) && !strings.EqualFold(name, HeaderSettlementOverrides) {
					h.Add("Trailer", name)
				}
			}
		}
	}
	return c
}

// costError is a cost report the gate refuses.
type costError struct {
	reason x402.Reason
	msg    string
}

// amount is the cost to settle for the report c of an answer to a payment of at most max
// in the asset of o: the reported cost, or without a report the maximum or nothing, as
// Config.Unmetered says.
func (route *routeConfig) meteredAmount(c costReport, o *option, max *big.Int) (*big.Int, *costError) {
	var n *big.Int
	var err error
	switch {
	case len(c.values)+len(c.overrides) == 0:
		if route.unmeteredFree {
			return new(big.Int), nil
		}
		return max, nil
	case len(c.values)+len(c.overrides) > 1:
		return nil, &costError{ReasonInvalidCost, "the upstream reported its cost more than once"}
	case len(c.values) == 1:
		n, err = parseQuantity(c.values[0], o.decimals, o.symbol)
	default:
		n, err = parseOverrides(c.overrides[0], o, max)
	}
	if err != nil {
		return nil, &costError{ReasonInvalidCost, "the upstream's cost report cannot be read: " + err.Error()}
	}
	if n.Cmp(max) > 0 {
		return nil, &costError{ReasonCostAboveMaximum, fmt.Sprintf("the upstream reported a cost of %s, above the signed maximum %s", FormatAmount(n, o.decimals), FormatAmount(max, o.decimals))}
	}
	return n, nil
}

// parseOverrides reads a Settlement-Overrides value: JSON {"amount": …}, in base units, a
// percentage of max, or dollars.
func parseOverrides(v string, o *option, max *big.Int) (*big.Int, error) {
	var j struct {
		Amount *string `json:"amount"`
	}
	d := json.NewDecoder(bytes.NewReader([]byte(v)))
	d.DisallowUnknownFields()
	if err := d.Decode(&j); err != nil || j.Amount == nil {
		return nil, fmt.Errorf("%s is not {\"amount\": \"…\"}", HeaderSettlementOverrides)
	}
	a := *j.Amount
	if m := percentCost.FindStringSubmatch(a); m != nil {
		hundredths, _ := new(big.Int).SetString(m[1]+(m[2] + "00")[:2], 10)
		return new(big.Int).Quo(new(big.Int).Mul(max, hundredths), big.NewInt(10000)), nil
	}
	if strings.HasPrefix(a, "$") {
		return parseQuantity(a, o.decimals, o.symbol)
	}
	return parseBaseUnits(a)
}

// settleMetered settles the payment of res, authorized on an upto route, for the cost its
// upstream reported in c: a refused report answers 502 (nothing moves), a cost of 0 is
// settled without the facilitator, and any other cost is settled as the requirement's
// amount. The result is recorded on the payment's record.
func (g *Gate) settleMetered(ctx context.Context, res *Result, c costReport) *Result {
	o := g.route.optionOf(res.Requirements)
	n, cerr := g.route.meteredAmount(c, o, res.Requirements.Amount)
	if cerr != nil {
		g.log.Warn("x402 cost report refused", zap.String("payer", res.Payer), zap.String("reason", string(cerr.reason)))
		g.forget(ctx, res.hold)
		return g.errorResult(res.Requirements, res.Version, http.StatusBadGateway, cerr.reason, cerr.msg+"; nothing was charged")
	}
	req := *res.Requirements
	req.Amount = n
	if n.Sign() == 0 {
		g.settleNothing(ctx, &req, res.payment, res.Verdict)
		s := g.settlement(&req, res.payment, x402.SettleResponse{Success: true})
		return g.record(ctx, &req, res.payment, res.hold, g.settled(&req, res.payment, s, res.Verdict))
	}
	return g.record(ctx, &req, res.payment, res.hold, g.settle(ctx, &req, res.payment, res.Verdict))
}

// settleNothing accounts for a metered cost of 0, which moves nothing: the answer is free
// whatever happens here. A payment a verdict approved is still sent to the facilitator for
// 0, which spends its authorization and reports the verdict's spend reservation released
// (docs/spend-windows.md#reporting); any other is not, as the reference does. Either way
// OnSettle sees a successful settlement of 0 (Local when the facilitator was not asked).
func (g *Gate) settleNothing(ctx context.Context, req *x402.Requirements, p *x402.Payment, verdict *VerdictOutcome) {
	if verdict == nil || verdict.Status != "approved" {
		if g.onSettle != nil {
			g.onSettle(SettleEvent{Requirements: req, Response: x402.SettleResponse{Success: true, Amount: "0", Network: req.Network}, Local: true})
		}
		return
	}
	if ev := g.settleCall(ctx, req, p); ev.Err != nil || !ev.Response.Success {
		g.log.Warn("x402 settle of a cost of 0 refused; nothing moved", zap.String("payer", p.Authorization.From.Hex()),
			zap.String("reason", ev.Response.ErrorReason), zap.Error(ev.Err))
	}
}
