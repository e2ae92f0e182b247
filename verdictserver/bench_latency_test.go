package verdictserver

import (
	"bytes"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"
)

// Verdict latency as an agent sees it (bench/verdict.md#verdict-latency): submits arrive at
// a fixed rate whatever the answers do (an open loop, so a slow answer cannot hold back the
// next arrival and hide its own delay), and each one polls its approval status, the
// documented way to learn a verdict (docs/verdict-api.md#get-approval-status), from the
// 201 on, until the verdict is terminal.
const (
	latencyRate = 200              // submits per second
	latencyPoll = time.Millisecond // between two polls of one transaction
)

// BenchmarkHTTPLatency: b.N submits over loopback at latencyRate a second, each timed from
// the moment it was due to the first approval-status answer that holds its terminal
// verdict: the 201 (the record durable with its verdict, judged at the submit under the
// bench agents' policy without spend windows, docs/verdict-api.md#lifecycle) and the poll
// that sees it, the first one unless the record was left to the workers. Reports the p50, p99 and maximum of
// that time, and of the 201 alone.
func BenchmarkHTTPLatency(b *testing.B) {
	for _, sb := range benchStores {
		st, dbCPU := sb.open(b)
		be := newBenchEnv(b, st)
		b.Run(sb.name, func(b *testing.B) {
			defer meterDB(b, dbCPU)()
			verdicts, submits := make([]time.Duration, b.N), make([]time.Duration, b.N)
			var wg sync.WaitGroup
			b.ReportAllocs()
			cpu0 := cpuTime()
			b.ResetTimer()
			start := time.Now()
			for i := range b.N {
				due := start.Add(time.Duration(i) * time.Second / latencyRate)
				time.Sleep(time.Until(due))
				wg.Go(func() {
					var err error
					submits[i], verdicts[i], err = be.awaitVerdict(i, due)
					if err != nil {
						b.Error(err)
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
			reportPercentiles(b, "verdict", verdicts)
			reportPercentiles(b, "submit", submits)
		})
	}
}

// awaitVerdict submits agent i's body and polls its approval status until it is terminal;
// it returns the times from due to the 201 and to the terminal verdict.
func (be *benchEnv) awaitVerdict(i int, due time.Time) (submitted, judged time.Duration, err error) {
	hash, err := be.submit(i)
	if err != nil {
		return 0, 0, err
	}
	submitted = time.Since(due)
	path, key := "/transactions/"+hash+"/approval-status", be.agents[i%len(be.agents)].Key
	for {
		code, raw, err := be.do(http.MethodGet, path, key, "", http.StatusOK, true)
		switch {
		case err != nil:
			return 0, 0, err
		case code != http.StatusOK:
			return 0, 0, fmt.Errorf("approval status = %d %s", code, raw)
		case !bytes.Equal(raw, pendingVerdict):
			return submitted, time.Since(due), nil
		}
		time.Sleep(latencyPoll)
	}
}

// reportPercentiles reports the p50, p99 and maximum of ds, in µs, named after what.
func reportPercentiles(b *testing.B, what string, ds []time.Duration) {
	slices.Sort(ds)
	at := func(q float64) float64 { return float64(ds[int(q*float64(len(ds)-1))].Microseconds()) }
	b.ReportMetric(at(0.50), what+"-p50-µs")
	b.ReportMetric(at(0.99), what+"-p99-µs")
	b.ReportMetric(at(1), what+"-max-µs")
}
