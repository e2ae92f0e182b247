package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"
)

// poolGoals are the goals (goals.go) of the settled rate with n signer keys, against one key.
var poolGoals = map[int]string{2: "3a", 4: "3b"}

// poolSection is the signer pool's section title.
const poolSection = "6. Signer key pool (settles at c=64, 16 pending per sender, a block a second)"

// pool runs BenchmarkSettlePool (facilitator/pool_bench_test.go): settles at c=64 with 1, 2
// and 4 signer keys, on anvil mining every second behind a proxy that admits 16 pending
// transactions per sender, as a go-ethereum node does (docs/facilitator.md#signer-pool).
// Each row is the settled rate of n keys against one key's. Then the tests of a key short
// of gas (relayer_insufficient_funds).
func (e *env) pool() {
	defer e.poolShortOfGas()
	out := e.goBench("bench-pool", 10*time.Minute, "-bench", `BenchmarkSettlePool$`, "-benchtime", "256x", "-benchmem", "./facilitator/")
	one := find(out, func(n string) bool { return n == "BenchmarkSettlePool/keys=1" })
	if one == nil {
		e.rep.missing = append(e.rep.missing, "the signer pool: BenchmarkSettlePool did not report")
		for _, id := range poolGoals {
			e.rep.unmeasured(id, "BenchmarkSettlePool did not report")
		}
		return
	}
	base := one.metrics["settled/s"]
	for _, n := range []int{1, 2, 4} {
		l := find(out, func(name string) bool { return name == fmt.Sprintf("BenchmarkSettlePool/keys=%d", n) })
		if l == nil {
			e.rep.missing = append(e.rep.missing, fmt.Sprintf("the signer pool with %d keys did not report", n))
			if id, ok := poolGoals[n]; ok {
				e.rep.unmeasured(id, fmt.Sprintf("BenchmarkSettlePool/keys=%d did not report", n))
			}
			continue
		}
		r := row{section: poolSection, measure: fmt.Sprintf("settled/s with %d signer key(s) vs 1 key", n),
			ours: fmt.Sprintf("%.1f/s", l.metrics["settled/s"]), peer: fmt.Sprintf("%.1f/s", base),
			note: fmt.Sprintf("%.0f%% settled, %.0f refused by the 16-pending proxy, p50 %.0f ms, %.2f cpu-ms and %.2f anvil-cpu-ms per settle; 256 settles",
				l.metrics["settled-%"], l.metrics["refused"], l.metrics["p50-ms"], l.metrics["cpu-ms/settle"], l.metrics["anvil-cpu-ms/settle"])}
		id, ok := poolGoals[n]
		if !ok {
			e.rep.add(r)
			continue
		}
		r.ratio, r.higherBetter = l.metrics["settled/s"]/base, true
		e.rep.addGoal(r, id, r.ratio)
	}
}

// shortOfGasTests are the tests of issue 27's "a key whose gas balance runs low is taken
// out of the pool with a distinct error and metric (relayer_insufficient_funds)": the
// facilitator's (the lane leaves the pool, a settle with every lane short is refused with
// relayer_insufficient_funds before anything is sent) and Caddy's gauge.
var shortOfGasTests = []struct{ pkg, run string }{
	{"./facilitator/", "^TestPoolTakesALaneShortOfGasOut$"},
	{"./caddymodule/paygate/", "^TestRelayerInsufficientFundsGauge$"},
}

// poolShortOfGas runs shortOfGasTests: goal 3c is met when they all pass.
func (e *env) poolShortOfGas() {
	pass := true
	var ran []string
	for _, t := range shortOfGasTests {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		out, err := goCmd(ctx, e.c.root, "test", "-count=1", "-run", t.run, t.pkg)
		cancel()
		_ = writeFile(filepath.Join(e.dir, fmt.Sprintf("test-short-of-gas-%d.txt", len(ran))), out)
		status := "ok"
		if err != nil {
			pass, status = false, "FAILED: "+snippet([]byte(out))
		}
		ran = append(ran, fmt.Sprintf("`go test -run '%s' %s` %s", t.run, t.pkg, status))
		logf("  go test -run %s %s: %s", t.run, t.pkg, status)
	}
	v, ours := 0.0, "FAIL"
	if pass {
		v, ours = 1, "pass"
	}
	e.rep.addGoal(row{section: poolSection, measure: "a key short of gas leaves the pool: `relayer_insufficient_funds` error and gauge", ours: ours, peer: "–",
		note: "tests, not a benchmark: " + strings.Join(ran, "; ")}, "3c", v)
}
