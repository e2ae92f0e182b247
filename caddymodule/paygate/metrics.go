package paygate

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
	"github.com/x402gate/x402gate/verdict"
	"github.com/x402gate/x402gate/x402"
)

// The collectors live at package level and are registered on the registry of every config
// load (docs/caddy.md#metrics): values survive reloads, and a handler used in several
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
	verdictWouldRefuse = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "caddy", Subsystem: "x402", Name: "verdict_would_refuse_total",
		Help: "Payments a verdict approved in warn or audit mode that enforce mode would have refused, by mode.",
	}, []string{"mode"})
	verdictDuration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: "caddy", Subsystem: "x402", Name: "verdict_duration_seconds",
		Help:    "Time to a terminal verdict from the verdict service, polling included.",
		Buckets: []float64{.05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
	})
	passesTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "caddy", Subsystem: "x402", Name: "passes_total",
		Help: "Access passes issued, requests a pass let in (by cookie, header or sign-in-with-x), and passes refused by reason.",
	}, []string{"event", "via", "reason"})
	networksUnavailable = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "caddy", Subsystem: "x402", Name: "networks_unavailable",
		Help: "Networks of the bundled facilitators that are not ready: chain id not checked yet, start-up reconcile not run, or a wrong chain id.",
	})
	relayerInsufficientFunds = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "caddy", Subsystem: "x402", Name: "relayer_insufficient_funds",
		Help: "Signer keys of the bundled facilitators out of the pool because their gas balance is under min_gas_balance.",
	})
	settleDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: "caddy", Subsystem: "x402", Name: "settle_duration_seconds",
		Help:    "Time of one facilitator settlement, receipt wait included.",
		Buckets: []float64{.1, .25, .5, 1, 2, 4, 8, 15, 30, 60},
	}, []string{"network"})
)

// collectors are every x402 collector; the Grafana dashboard queries only these
// (docs/grafana.md, TestDashboardQueriesOurMetrics).
var collectors = []prometheus.Collector{challengesTotal, verificationsTotal, settlementsTotal,
	settledAmountTotal, verdictWouldRefuse, verdictDuration, settleDuration, passesTotal, networksUnavailable,
	relayerInsufficientFunds}

// registerMetrics registers every x402 collector on the config's registry. A collector
// that is already there (a second handler of the same config) is kept.
func registerMetrics(ctx caddy.Context) error {
	reg := ctx.GetMetricsRegistry()
	if reg == nil {
		return nil
	}
	for _, c := range collectors {
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if !errors.As(err, &are) {
				return err
			}
		}
	}
	return nil
}

// reasonLabel is the reason of a refused payment, bounded to the x402 reason registry: a
// remote facilitator may answer any string, and an unbounded label is a cardinality leak.
func reasonLabel(wire string) string {
	if wire == "" {
		return ""
	}
	if r := x402.ReasonFromWire(wire); r.Known() {
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

// observeVerify counts one verification of a gate (gate.Options.OnVerify).
func observeVerify(ev gate.VerifyEvent) {
	outcome, reason := "valid", ""
	switch {
	case ev.Err != nil:
		outcome = "error"
	case !ev.Response.IsValid:
		outcome, reason = "invalid", reasonLabel(ev.Response.InvalidReason)
	}
	verificationsTotal.WithLabelValues(networkLabel(ev.Requirements), outcome, reason).Inc()
	if outcome == "valid" && len(ev.Response.GuardianWouldFail) > 0 {
		verdictWouldRefuse.WithLabelValues(modeLabel(ev.Response.GuardianMode)).Inc()
	}
}

// modeLabel is a verdict's mode, bounded to the lenient modes: a remote facilitator may
// answer any string (docs/verdict-api.md#modes).
func modeLabel(m string) string {
	if verdict.Mode(m).Lenient() {
		return m
	}
	return "other"
}

// observeSettle counts and times one settlement of a gate (gate.Options.OnSettle). A
// metered cost of 0 the gate settled alone (ev.Local) counts as a success of amount 0, and
// is not timed: no facilitator call was made.
func observeSettle(ev gate.SettleEvent) {
	network := networkLabel(ev.Requirements)
	if !ev.Local {
		settleDuration.WithLabelValues(network).Observe(ev.Duration.Seconds())
	}
	outcome := "success"
	switch {
	case ev.Err != nil:
		outcome = "error"
	case !ev.Response.Success:
		outcome = "failure"
	}
	settlementsTotal.WithLabelValues(network, outcome).Inc()
	if r := ev.Requirements; outcome == "success" && r != nil && r.Amount != nil {
		f, _ := new(big.Float).SetInt(r.Amount).Float64()
		settledAmountTotal.WithLabelValues(network, strings.ToLower(r.Asset.Hex())).Add(f)
	}
}

// observePass counts one pass event of a gate (gate.Options.OnPass); its reason is one of
// the gate's PassRefusal constants, a bounded set.
func observePass(ev gate.PassEvent) {
	passesTotal.WithLabelValues(ev.Event, ev.Via, string(ev.Reason)).Inc()
}

// meteredVerdicts times the verdict service.
type meteredVerdicts struct {
	next facilitator.Verdicts
}

// VerifyPayment implements facilitator.Verdicts.
func (m meteredVerdicts) VerifyPayment(ctx context.Context, p *x402.Payment, r *x402.Requirements) (verdict.GuardianResult, error) {
	start := time.Now()
	res, err := m.next.VerifyPayment(ctx, p, r)
	verdictDuration.Observe(time.Since(start).Seconds())
	return res, err
}

var _ facilitator.Verdicts = meteredVerdicts{}
