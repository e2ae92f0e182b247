package caddymodule

import (
	"context"
	"errors"
	"math/big"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/x402gate/x402gate/facilitator"
	"github.com/x402gate/x402gate/gate"
	"github.com/x402gate/x402gate/x402"
)

// The collectors live at package level and are registered on the registry of every config
// load (research/caddy.md §1.9): values survive reloads, and a handler used in several
// sites never registers twice. No label carries a payer, a key or a request value.
var (
	challengesTotal = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "caddy", Subsystem: "x402", Name: "challenges_total",
		Help: "Unpaid requests answered with a 402 payment challenge.",
	})
	verificationsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "caddy", Subsystem: "x402", Name: "verifications_total",
		Help: "Facilitator verifications by network, outcome (valid, invalid, error) and reason.",
	}, []string{"network", "outcome", "reason"})
	settlementsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "caddy", Subsystem: "x402", Name: "settlements_total",
		Help: "Facilitator settlements by network and outcome (success, failure, error).",
	}, []string{"network", "outcome"})
	settledAmountTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "caddy", Subsystem: "x402", Name: "settled_amount_total",
		Help: "Amount settled successfully, in the asset's base units.",
	}, []string{"network", "asset"})
	verdictDuration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: "caddy", Subsystem: "x402", Name: "verdict_duration_seconds",
		Help:    "Time to a terminal verdict from the verdict service, polling included.",
		Buckets: []float64{.05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
	})
	settleDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: "caddy", Subsystem: "x402", Name: "settle_duration_seconds",
		Help:    "Time of one facilitator settlement, receipt wait included.",
		Buckets: []float64{.1, .25, .5, 1, 2, 4, 8, 15, 30, 60},
	}, []string{"network"})
)

// registerMetrics registers every x402 collector on the config's registry. A collector
// that is already there (a second handler of the same config) is kept.
func registerMetrics(ctx caddy.Context) error {
	reg := ctx.GetMetricsRegistry()
	if reg == nil {
		return nil
	}
	for _, c := range []prometheus.Collector{challengesTotal, verificationsTotal, settlementsTotal,
		settledAmountTotal, verdictDuration, settleDuration} {
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if !errors.As(err, &are) {
				return err
			}
		}
	}
	return nil
}

// knownReasons bounds the reason label: a remote facilitator may answer any string, and
// an unbounded label is a cardinality leak.
var knownReasons = map[x402.Reason]bool{}

func init() {
	for _, r := range []x402.Reason{
		x402.ReasonInvalidVersion, x402.ReasonInvalidPayload, x402.ReasonInvalidRequirements,
		x402.ReasonInvalidScheme, x402.ReasonInvalidNetwork, x402.ReasonNetworkMismatch,
		x402.ReasonAssetMismatch, x402.ReasonAmountBelowMinimum, x402.ReasonMissingEIP712Domain,
		x402.ReasonInvalidSignature, x402.ReasonUndeployedWallet, x402.ReasonFactoryNotAllowed,
		x402.ReasonRecipientMismatch, x402.ReasonValidBefore, x402.ReasonValidAfter,
		x402.ReasonValueMismatch, x402.ReasonInsufficientFunds, x402.ReasonNonceUsed,
		x402.ReasonVerdictNotApproved, x402.ReasonApprovalNotFound, x402.ReasonApprovalStoreDown,
		x402.ReasonChainUnavailable, x402.ReasonDuplicateSettlement, x402.ReasonTransactionFailed,
		x402.ReasonTransferEventMismatch, x402.ReasonSettlementPending, x402.ReasonUnexpectedVerify,
		x402.ReasonUnexpectedSettle,
	} {
		knownReasons[r] = true
	}
}

func reasonLabel(wire string) string {
	if wire == "" {
		return ""
	}
	if r := x402.ReasonFromWire(wire); knownReasons[r] {
		return string(r)
	}
	return "other"
}

// networkLabel is the requirement's CAIP-2 id; it comes from the route's configuration,
// never from the request.
func networkLabel(r *x402.Requirements) string {
	if r == nil {
		return ""
	}
	return r.Network
}

// meteredFacilitator records verifications and settlements of the gate's facilitator.
type meteredFacilitator struct {
	next facilitator.Service
}

// Verify implements gate.Facilitator.
func (m meteredFacilitator) Verify(ctx context.Context, in facilitator.VerifyInput) (x402.VerifyResponse, error) {
	vr, err := m.next.Verify(ctx, in)
	outcome, reason := "valid", ""
	switch {
	case err != nil:
		outcome = "error"
	case !vr.IsValid:
		outcome, reason = "invalid", reasonLabel(vr.InvalidReason)
	}
	verificationsTotal.WithLabelValues(networkLabel(in.Requirements), outcome, reason).Inc()
	return vr, err
}

// Settle implements gate.Facilitator.
func (m meteredFacilitator) Settle(ctx context.Context, p *x402.Payment, r *x402.Requirements) (x402.SettleResponse, error) {
	start := time.Now()
	sr, err := m.next.Settle(ctx, p, r)
	network := networkLabel(r)
	settleDuration.WithLabelValues(network).Observe(time.Since(start).Seconds())
	outcome := "success"
	switch {
	case err != nil:
		outcome = "error"
	case !sr.Success:
		outcome = "failure"
	}
	settlementsTotal.WithLabelValues(network, outcome).Inc()
	if outcome == "success" && r != nil && r.Amount != nil {
		f, _ := new(big.Float).SetInt(r.Amount).Float64()
		settledAmountTotal.WithLabelValues(network, strings.ToLower(r.Asset.Hex())).Add(f)
	}
	return sr, err
}

// Supported implements gate.Facilitator.
func (m meteredFacilitator) Supported(ctx context.Context) (x402.SupportedResponse, error) {
	return m.next.Supported(ctx)
}

// SettlementStatus implements gate.SettlementChecker by passing through to the wrapped
// facilitator; it fails when that one cannot report a settlement's status (see
// SupportsSettlementStatus).
func (m meteredFacilitator) SettlementStatus(ctx context.Context, p *x402.Payment, r *x402.Requirements) (x402.SettleResponse, error) {
	c, ok := m.next.(gate.SettlementChecker)
	if !ok {
		return x402.SettleResponse{}, errors.New("the facilitator cannot report a settlement's status")
	}
	return c.SettlementStatus(ctx, p, r)
}

// SupportsSettlementStatus reports whether the wrapped facilitator can report a
// settlement's status; the gate grants pending-settlement retries only then.
func (m meteredFacilitator) SupportsSettlementStatus() bool {
	_, ok := m.next.(gate.SettlementChecker)
	return ok
}

// meteredVerdicts times the verdict service.
type meteredVerdicts struct {
	next facilitator.Verdicts
}

// VerifyPayment implements facilitator.Verdicts.
func (m meteredVerdicts) VerifyPayment(ctx context.Context, p *x402.Payment, r *x402.Requirements) (facilitator.VerdictResult, error) {
	start := time.Now()
	res, err := m.next.VerifyPayment(ctx, p, r)
	verdictDuration.Observe(time.Since(start).Seconds())
	return res, err
}

var (
	_ facilitator.Service  = meteredFacilitator{}
	_ facilitator.Verdicts = meteredVerdicts{}
)
