package paygate

import (
	"math/big"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/x402gate/x402gate/gate"
	"github.com/x402gate/x402gate/x402"
)

// settleSeries reads, for network, settlements_total{outcome="success"} and the sample
// count of settle_duration_seconds.
func settleSeries(t *testing.T, network string) (successes float64, timed uint64) {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(settlementsTotal, settleDuration)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			switch {
			case labels["network"] != network:
			case mf.GetName() == "caddy_x402_settlements_total" && labels["outcome"] == "success":
				successes = m.GetCounter().GetValue()
			case mf.GetName() == "caddy_x402_settle_duration_seconds":
				timed = m.GetHistogram().GetSampleCount()
			}
		}
	}
	return successes, timed
}

// TestObserveSettleCountsAMeteredZero: a metered cost of 0 the gate settled alone is counted
// as a successful settlement of amount 0, and adds no sample to the settle-time histogram,
// since no facilitator call was timed; one the facilitator settled is timed as any other.
func TestObserveSettleCountsAMeteredZero(t *testing.T) {
	const network = "eip155:999001" // a label no other test of the package uses
	req := &x402.Requirements{Network: network, Amount: new(big.Int)}
	ok := x402.SettleResponse{Success: true, Amount: "0"}
	for i, ev := range []gate.SettleEvent{{Requirements: req, Response: ok, Local: true}, {Requirements: req, Response: ok}} {
		observeSettle(ev)
		if successes, timed := settleSeries(t, network); successes != float64(i+1) || timed != uint64(i) {
			t.Fatalf("after %d settlements of 0 (the first Local): %v successes, %d timed; want %d and %d", i+1, successes, timed, i+1, i)
		}
	}
}
