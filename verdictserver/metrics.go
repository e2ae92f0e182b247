package verdictserver

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/x402gate/x402gate/verdict"
	"github.com/x402gate/x402gate/verdictserver/store"
)

// The verdict service's metrics (docs/caddy.md#metrics, docs/grafana.md). The collectors live
// at package level, as the gate's do: the verdict app registers them on the registry of every
// config load (Server.Collectors), so values survive reloads. A terminal verdict is counted
// once, by the instance that completed its record, after the spend windows had their say
// (complete); a record another instance completed first is not counted again. No label
// carries an agent, a key or a request value: outcome, mode and reason code are bounded sets,
// and a value outside them is "other".
var (
	verdictsTotal = newChildren(prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "caddy", Subsystem: "verdict", Name: "verdicts_total",
		Help: "Terminal verdicts stored, by outcome, the mode of the policy that judged them (none without a policy) and reason code.",
	}, []string{"outcome", "mode", "reason"}))
	wouldRefuseTotal = newChildren(prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "caddy", Subsystem: "verdict", Name: "would_refuse_total",
		Help: "Approvals in warn or audit mode that enforce mode would have refused, by mode and the code of the first check let through.",
	}, []string{"mode", "reason"}))
	windowRefusalsTotal = newChildren(prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "caddy", Subsystem: "verdict", Name: "spend_window_refusals_total",
		Help: "Failed spend_window checks, by mode and code: refusals in enforce mode (and data_unavailable in any), would-be refusals let through in warn or audit.",
	}, []string{"mode", "reason"}))
	decisionSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: "caddy", Subsystem: "verdict", Name: "decision_seconds",
		Help:    "Time from a record's submission to its terminal verdict, queue and store included.",
		Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
	})
	evaluationSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: "caddy", Subsystem: "verdict", Name: "evaluation_seconds",
		Help:    "Time of the policy engine's evaluation of one record, before the spend windows and the store.",
		Buckets: []float64{.00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .1},
	})
	replaysTotal = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "caddy", Subsystem: "verdict", Name: "replays_total",
		Help: "Replays of a draft policy over stored actions that ran (docs/replay.md).",
	})
)

// queueDepthOpts describes the gauge of the evaluation queue's depth, one per Server.
var queueDepthOpts = prometheus.GaugeOpts{
	Namespace: "caddy", Subsystem: "verdict", Name: "queue_depth",
	Help: "Records waiting in this instance's evaluation queue (pending records the queue could not take wait in the store for the sweeper).",
}

// Collectors are the verdict service's collectors, for a metrics registry: the package's
// counters and histograms, shared by every Server of the process, and the depth of s's queue.
func (s *Server) Collectors() []prometheus.Collector {
	depth := prometheus.NewGaugeFunc(queueDepthOpts, func() float64 { return float64(len(s.queue)) })
	return []prometheus.Collector{verdictsTotal.vec, wouldRefuseTotal.vec, windowRefusalsTotal.vec,
		decisionSeconds, evaluationSeconds, replaysTotal, depth}
}

// children pre-resolves the counters of a vector by label values: after a combination's
// first use, counting it takes a map read under a read lock and allocates nothing.
type children struct {
	vec *prometheus.CounterVec
	mu  sync.RWMutex
	m   map[[3]string]prometheus.Counter
}

// newChildren pre-resolves the counters of vec as they are first used.
func newChildren(vec *prometheus.CounterVec) *children {
	return &children{vec: vec, m: map[[3]string]prometheus.Counter{}}
}

// inc adds one to the counter of the label values (as many as the vector has; the rest empty).
func (c *children) inc(values ...string) {
	var key [3]string
	copy(key[:], values)
	c.mu.RLock()
	ctr, ok := c.m[key]
	c.mu.RUnlock()
	if !ok {
		c.mu.Lock()
		if ctr, ok = c.m[key]; !ok {
			ctr = c.vec.WithLabelValues(values...)
			c.m[key] = ctr
		}
		c.mu.Unlock()
	}
	ctr.Inc()
}

// verdictNote is what the metrics count of a verdict, copied out of it: label values from
// bounded sets, never the verdict's own strings.
type verdictNote struct {
	outcome, mode, reason string
	wouldRefuse           string // the code of the first check a lenient mode let through; "" when none
	windowRefused         string // the code of a failed spend_window check; "" when none
	took                  time.Duration
}

// noteOf notes the engine's verdict v, whose evaluation took took.
func noteOf(v *verdict.Verdict, took time.Duration) verdictNote {
	n := verdictNote{outcome: outcomeLabel(v.Outcome), mode: verdictModeLabel(v.Mode), reason: reasonLabel(v.ReasonCode), took: took}
	if len(v.WouldFail) > 0 && v.Mode.Lenient() {
		n.wouldRefuse = checkCodeLabel(v.WouldFail[0])
	}
	return n
}

// afterWindow is n once the spend_window check (as the engine made it, before a lenient mode
// let it through) decided the record's status.
func (n verdictNote) afterWindow(check verdict.Check, status string) verdictNote {
	if check.Status != verdict.CheckFailed {
		return n
	}
	n.windowRefused = checkCodeLabel(check)
	if status == store.StatusRejected {
		n.outcome, n.reason = outcomeLabel(verdict.OutcomeRejected), n.windowRefused
	} else if n.wouldRefuse == "" {
		n.wouldRefuse = n.windowRefused
	}
	return n
}

// completed counts the terminal verdict of a record submitted at submitted, stored here.
func (s *Server) completed(submitted time.Time, n verdictNote) {
	verdictsTotal.inc(n.outcome, n.mode, n.reason)
	if n.wouldRefuse != "" && n.outcome == string(verdict.OutcomeApproved) { // a refusal (data_unavailable) is one already
		wouldRefuseTotal.inc(n.mode, n.wouldRefuse)
	}
	if n.windowRefused != "" {
		windowRefusalsTotal.inc(n.mode, n.windowRefused)
	}
	evaluationSeconds.Observe(n.took.Seconds())
	if d := s.now().Sub(submitted); d >= 0 {
		decisionSeconds.Observe(d.Seconds())
	}
}

// outcomeLabel is a terminal verdict's outcome.
func outcomeLabel(o verdict.Outcome) string {
	switch o {
	case verdict.OutcomeApproved, verdict.OutcomeRejected:
		return string(o)
	}
	return "other"
}

// verdictModeLabel is the mode of a verdict: none when no policy judged it.
func verdictModeLabel(m verdict.Mode) string {
	switch {
	case m == "":
		return "none"
	case m.Known():
		return string(m)
	}
	return "other"
}

// reasonLabel bounds a reason code to those this build knows: an engine may answer a code
// this version does not know (docs/verdict.md), and an unbounded label is a cardinality leak.
func reasonLabel(c verdict.ReasonCode) string {
	if c.Known() {
		return string(c)
	}
	return "other"
}

// checkCodeLabel is the code of a failed check, bounded as reasonLabel.
func checkCodeLabel(c verdict.Check) string {
	if c.Code == nil {
		return "other"
	}
	return reasonLabel(*c.Code)
}
