package main

import (
	"fmt"
	"time"
)

// poolGoals are issue 27's bounds of the settled rate with n signer keys, against one key.
var poolGoals = map[int]float64{2: 1.8, 4: 3.2}

// pool runs BenchmarkSettlePool (facilitator/pool_bench_test.go): settles at c=64 with 1, 2
// and 4 signer keys, on anvil mining every second behind a proxy that admits 16 pending
// transactions per sender, as a go-ethereum node does (docs/facilitator.md#signer-pool).
// Each row is the settled rate of n keys against one key's.
func (e *env) pool() {
	sec := "6. Signer key pool (settles at c=64, 16 pending per sender, a block a second)"
	out := e.goBench("bench-pool", 10*time.Minute, "-bench", `BenchmarkSettlePool$`, "-benchtime", "256x", "-benchmem", "./facilitator/")
	one := find(out, func(n string) bool { return n == "BenchmarkSettlePool/keys=1" })
	if one == nil {
		e.rep.missing = append(e.rep.missing, "the signer pool: BenchmarkSettlePool did not report")
		return
	}
	base := one.metrics["settled/s"]
	for _, n := range []int{1, 2, 4} {
		l := find(out, func(name string) bool { return name == fmt.Sprintf("BenchmarkSettlePool/keys=%d", n) })
		if l == nil {
			e.rep.missing = append(e.rep.missing, fmt.Sprintf("the signer pool with %d keys did not report", n))
			continue
		}
		r := row{section: sec, measure: fmt.Sprintf("settled/s with %d signer key(s) vs 1 key", n),
			ours: fmt.Sprintf("%.1f/s", l.metrics["settled/s"]), peer: fmt.Sprintf("%.1f/s", base),
			note: fmt.Sprintf("%.0f%% settled, %.0f refused by the 16-pending proxy, p50 %.0f ms, %.2f cpu-ms and %.2f anvil-cpu-ms per settle; 256 settles",
				l.metrics["settled-%"], l.metrics["refused"], l.metrics["p50-ms"], l.metrics["cpu-ms/settle"], l.metrics["anvil-cpu-ms/settle"])}
		if n > 1 {
			r.ratio, r.higherBetter, r.goal = l.metrics["settled/s"]/base, true, poolGoals[n]
		}
		e.rep.add(r)
	}
}
