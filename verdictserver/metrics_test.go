package verdictserver

import (
	"fmt"
	"math/big"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/x402gate/x402gate/verdict"
)

// sample is the value of a counter, or a histogram's count, of the verdict service's
// collectors, by its name and label values in the order of its labels ("" when absent).
func sample(t *testing.T, name string, values ...string) float64 {
	t.Helper()
	var c prometheus.Collector
	switch name {
	case "verdicts":
		c = verdictsTotal.vec.WithLabelValues(values...)
	case "would_refuse":
		c = wouldRefuseTotal.vec.WithLabelValues(values...)
	case "window_refusals":
		c = windowRefusalsTotal.vec.WithLabelValues(values...)
	case "decision":
		c = decisionSeconds
	case "evaluation":
		c = evaluationSeconds
	case "replays":
		c = replaysTotal
	default:
		t.Fatalf("no metric %s", name)
	}
	var m dto.Metric
	if err := c.(prometheus.Metric).Write(&m); err != nil {
		t.Fatal(err)
	}
	if h := m.GetHistogram(); h != nil {
		return float64(h.GetSampleCount())
	}
	return m.GetCounter().GetValue()
}

// delta is what a metric's sample should grow by.
type delta struct {
	name   string
	values []string
	by     float64
}

// checkDeltas runs f and checks that each sample grew by its delta, no more and no less.
func checkDeltas(t *testing.T, want []delta, f func()) {
	t.Helper()
	before := make([]float64, len(want))
	for i, d := range want {
		before[i] = sample(t, d.name, d.values...)
	}
	f()
	for i, d := range want {
		if got := sample(t, d.name, d.values...) - before[i]; got != d.by {
			t.Errorf("%s%v grew by %v, want %v", d.name, d.values, got, d.by)
		}
	}
}

// TestVerdictMetricsByMode: the same refused payment under enforce, warn and audit moves the
// verdict counter of its outcome, mode and reason code, and the would-refuse counter only
// under warn and audit; a full spend window moves the window refusals and, in enforce mode,
// the rejections with spend_window_exceeded; every stored verdict is timed once. A replay
// counts as a replay, never as a verdict.
func TestVerdictMetricsByMode(t *testing.T) {
	e := newEnv(t, sqliteStore(t), nil)
	const reason = string(verdict.ReasonRecipientNotAllowed)
	var agentID string
	for i, mode := range []string{"enforce", "warn", "audit"} {
		t.Run(mode+" refuses a stranger", func(t *testing.T) {
			want := []delta{
				{"verdicts", []string{"rejected", mode, reason}, 0},
				{"verdicts", []string{"approved", mode, "allowed"}, 1},
				{"would_refuse", []string{mode, reason}, 1},
				{"window_refusals", []string{mode, string(verdict.ReasonSpendWindowExceeded)}, 0},
				{"decision", nil, 1}, {"evaluation", nil, 1}, {"replays", nil, 0},
			}
			if mode == "enforce" {
				want[0].by, want[1].by, want[2].by = 1, 0, 0
			}
			doc := strings.Replace(allowPolicy, "{", `{"mode": "`+mode+`",`, 1)
			a := e.agent("metrics-"+mode, common.BigToAddress(big.NewInt(int64(0xE7A0+i))), doc)
			agentID = a.ID
			checkDeltas(t, want, func() {
				sub := e.submit(a.Key, submitBody(a.Wallet, strangerPay, ""))
				if sub.status != http.StatusCreated {
					t.Fatalf("submit = %d %s", sub.status, sub.raw)
				}
				e.await(a.Key, sub.body["requestHash"].(string))
			})
		})
		t.Run(mode+" fills a window", func(t *testing.T) {
			const full = string(verdict.ReasonSpendWindowExceeded)
			want := []delta{
				{"verdicts", []string{"approved", mode, "allowed"}, 3},
				{"verdicts", []string{"rejected", mode, full}, 0},
				{"would_refuse", []string{mode, full}, 1},
				{"window_refusals", []string{mode, full}, 1},
				{"decision", nil, 3}, {"evaluation", nil, 3},
			}
			if mode == "enforce" {
				want[0].by, want[1].by, want[2].by = 2, 1, 0
			}
			pol := strings.Replace(windowPolicy(`{"period": "day", "capUsd": 0.02}`), "{", `{"mode": "`+mode+`", `, 1)
			a := e.agent("metrics-window-"+mode, common.BigToAddress(big.NewInt(int64(0xE7B0+i))), pol)
			checkDeltas(t, want, func() { payAll(t, []*env{e}, a, 3) })
		})
	}
	t.Run("a replay", func(t *testing.T) {
		checkDeltas(t, []delta{{"replays", nil, 1}, {"decision", nil, 0}, {"evaluation", nil, 0}}, func() {
			if _, err := e.srv.Operator().Replay(t.Context(), agentID, []byte(allowPolicy), 0); err != nil {
				t.Fatal(err)
			}
		})
	})
}

// TestVerdictMetricsCountEachRecordOnce: two instances on one store, whose sweepers hand
// every pending record to their workers each millisecond, both evaluate records, and a record
// is counted by the one that completed it only.
func TestVerdictMetricsCountEachRecordOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "verdict.db")
	eager := func(_ *Config, d *Deps) { d.SweepInterval = time.Millisecond }
	envs := []*env{newEnv(t, sqliteAt(path)(t), eager), newEnv(t, sqliteAt(path)(t), eager)}
	a := envs[0].agent("metrics-shared", common.HexToAddress("0xA11CE000000000000000000000000000000000E7"), allowPolicy)
	const n = 20
	checkDeltas(t, []delta{{"verdicts", []string{"approved", "enforce", "allowed"}, n}, {"decision", nil, n}}, func() {
		payAll(t, envs, a, n)
	})
}

// TestVerdictMetricLabelsAreBounded: a reason code or a mode this build does not know is
// counted as "other", so a label never takes an engine's or a client's arbitrary string; a
// warn verdict refused anyway (data_unavailable, which every mode enforces) is no would-be
// refusal; counting a verdict allocates nothing.
func TestVerdictMetricLabelsAreBounded(t *testing.T) {
	code := verdict.ReasonCode("made_up_" + fmt.Sprint(1))
	v := &verdict.Verdict{Outcome: verdict.OutcomeRejected, Mode: "lenientish", ReasonCode: code,
		WouldFail: []verdict.Check{{Code: &code}}}
	n := noteOf(v, 0)
	if n.outcome != "rejected" || n.mode != "other" || n.reason != "other" || n.wouldRefuse != "" {
		t.Fatalf("note %+v", n)
	}
	v.Mode = verdict.ModeWarn
	if n = noteOf(v, 0); n.wouldRefuse != "other" {
		t.Fatalf("note %+v, want the unknown would-fail code as other", n)
	}
	unpriced := verdict.ReasonDataUnavailable
	rejected := noteOf(&verdict.Verdict{Outcome: verdict.OutcomeRejected, Mode: verdict.ModeWarn, ReasonCode: unpriced,
		WouldFail: []verdict.Check{{Code: &code}}}, 0)
	checkDeltas(t, []delta{{"would_refuse", []string{"warn", "other"}, 0}, {"verdicts", []string{"rejected", "warn", string(unpriced)}, 1}}, func() {
		(&Server{now: time.Now}).completed(time.Now(), rejected)
	})
	if allocs := testing.AllocsPerRun(100, func() { verdictsTotal.inc(n.outcome, n.mode, n.reason) }); allocs != 0 {
		t.Errorf("counting a verdict allocates %v times", allocs)
	}
}
