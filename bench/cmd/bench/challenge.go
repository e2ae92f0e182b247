package main

// The 402 path of bench/run: wrk against our gate, Caddy's respond answering the same bytes
// from the same process, and x402-express, with Caddy's CPU per request; and the same
// in process (BenchmarkChallengeAgainstRespond). Goals 5a-5c.

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// --- 1. the challenge path -------------------------------------------------------------------

var (
	wrkRPS  = regexp.MustCompile(`Requests/sec:\s+([0-9.]+)`)
	wrkReqs = regexp.MustCompile(`([0-9]+) requests in`)
	wrkPct  = regexp.MustCompile(`(?m)^\s+(50|99)%\s+([0-9.]+)(us|ms|s)\s*$`)
)

// wrkRun is one wrk run: its rate, p50 and p99 in ms, the requests it made, and the CPU
// seconds Caddy spent meanwhile, all and in user space (set by challenge for the targets
// Caddy serves).
type wrkRun struct{ rps, p50, p99, reqs, cpu, user float64 }

func (e *env) wrk(url string, d time.Duration) wrkRun {
	ctx, cancel := context.WithTimeout(context.Background(), d+30*time.Second)
	defer cancel()
	out, err := run(ctx, e.dir, nil, e.c.wrk, "-t2", "-c32", fmt.Sprintf("-d%ds", int(d.Seconds())), "--latency", url)
	if err != nil {
		e.tb.Fatalf("wrk %s: %v: %s", url, err, out)
	}
	m := wrkRPS.FindStringSubmatch(out)
	if m == nil {
		e.tb.Fatalf("wrk %s: no Requests/sec in %q", url, out)
	}
	var r wrkRun
	r.rps, _ = strconv.ParseFloat(m[1], 64)
	if m := wrkReqs.FindStringSubmatch(out); m != nil {
		r.reqs, _ = strconv.ParseFloat(m[1], 64)
	}
	for _, p := range wrkPct.FindAllStringSubmatch(out, -1) {
		v, _ := strconv.ParseFloat(p[2], 64)
		switch p[3] {
		case "us":
			v /= 1000
		case "s":
			v *= 1000
		}
		if p[1] == "50" {
			r.p50 = v
		} else {
			r.p99 = v
		}
	}
	if strings.Contains(out, "Socket errors") {
		logf("wrk %s: %s", url, strings.TrimSpace(out[strings.Index(out, "Socket errors"):]))
	}
	return r
}

// cpuPerRequest is the CPU µs of the server per request over runs: the CPU time of all the
// runs over all their requests (NaN without requests).
func cpuPerRequest(runs []wrkRun) float64 {
	return perRequest(runs, func(w wrkRun) float64 { return w.cpu })
}

// perRequest is µs per request over runs of the seconds each run's cpu gives (NaN without
// requests).
func perRequest(runs []wrkRun, cpuOf func(wrkRun) float64) float64 {
	var cpu, reqs float64
	for _, w := range runs {
		cpu += cpuOf(w)
		reqs += w.reqs
	}
	if reqs == 0 {
		return math.NaN()
	}
	return 1e6 * cpu / reqs
}

// challengeSection is the 402 path's section title.
const challengeSection = "1. Challenge (402)"

func (e *env) challenge() {
	targets := []struct{ name, url string }{
		{"x402gate `x402`", e.gateURL},
		{"Caddy `respond`", e.respURL},
		{"x402-express 1.2.0", e.refGateURL},
	}
	// Every target answers 402 with its challenge; check before measuring.
	for _, t := range targets {
		resp, err := http.Get(t.url)
		if err != nil {
			e.tb.Fatalf("%s: %v", t.name, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusPaymentRequired {
			e.tb.Fatalf("%s answered %d, not 402", t.name, resp.StatusCode)
		}
	}
	runs := make([][]wrkRun, len(targets))
	for r := range e.c.rounds {
		for k := range targets {
			i := (k + r) % len(targets) // rotate who goes first
			logf("challenge round %d/%d: wrk -t2 -c32 -d%s %s", r+1, e.c.rounds, e.c.wrkDur, targets[i].name)
			u0, k0 := cpuSplit(e.caddy.pid())
			w := e.wrk(targets[i].url, e.c.wrkDur)
			u1, k1 := cpuSplit(e.caddy.pid())
			w.cpu, w.user = u1+k1-u0-k0, u1-u0
			logf("  %.0f req/s, p50 %.2f ms, p99 %.2f ms, Caddy's CPU %.1f µs a request (meaningful for the first two)", w.rps, w.p50, w.p99, 1e6*w.cpu/w.reqs)
			runs[i] = append(runs[i], w)
		}
	}
	med := func(i int, f func(wrkRun) float64) float64 { return medianOf(runs[i], f) }
	rps := func(w wrkRun) float64 { return w.rps }
	ours, resp, ref := med(0, rps), med(1, rps), med(2, rps)
	perRound := func(i int) string {
		var s []string
		for _, w := range runs[i] {
			s = append(s, fmt.Sprintf("%.0f", w.rps))
		}
		return strings.Join(s, ", ")
	}
	e.rep.addGoal(row{section: challengeSection, measure: "402 req/s vs Caddy `respond`, same body and headers, same binary", ours: fmt.Sprintf("%.0f", ours), peer: fmt.Sprintf("%.0f", resp), ratio: ours / resp, higherBetter: true,
		note: fmt.Sprintf("rounds: ours %s; respond %s", perRound(0), perRound(1))}, "5a", ours/resp)
	oursCPU, respCPU := cpuPerRequest(runs[0]), cpuPerRequest(runs[1])
	e.rep.addGoal(row{section: challengeSection, measure: "Caddy CPU µs per 402 vs Caddy `respond`", ours: fmt.Sprintf("%.1f", oursCPU), peer: fmt.Sprintf("%.1f", respCPU), ratio: respCPU / oursCPU, higherBetter: true,
		note: "utime+stime of the Caddy process (/proc/PID/stat) around each of the side's wrk runs, summed, over the requests they served; ratio = peer/ours; load moves it less than the rate; " + cpuSplitNote(runs[0], runs[1])}, "5b", respCPU/oursCPU)
	e.rep.add(row{section: challengeSection, measure: "402 req/s vs x402-express 1.2.0", ours: fmt.Sprintf("%.0f", ours), peer: fmt.Sprintf("%.0f", ref), ratio: ours / ref, higherBetter: true,
		note: fmt.Sprintf("rounds: express %s", perRound(2))})
	goal := ": met"
	if ours/resp < 1.0 {
		goal = ": **not met**"
	}
	e.rep.headline = append(e.rep.headline, fmt.Sprintf("**402 path:** %.2f× the rate of Caddy's own `respond` serving the same 402 from the same binary (%.0f against %.0f requests/s; goal ≥ 1.0×%s)%s; %.1f× `x402-express` 1.2.0.",
		ours/resp, ours, resp, goal, lose(ours/resp, " (slower than `respond`; results.md has the profile)"), ours/ref))
	p99 := func(w wrkRun) float64 { return w.p99 }
	e.rep.add(row{section: challengeSection, measure: "402 p99 latency (ms) vs Caddy `respond`", ours: fmt.Sprintf("%.2f", med(0, p99)), peer: fmt.Sprintf("%.2f", med(1, p99)), ratio: med(1, p99) / med(0, p99), higherBetter: true,
		note: "ratio = peer/ours: above 1 is better for us"})

	// The profile of our 402 path under the same load, taken in an extra, unmeasured run.
	e.profileCaddy("challenge", "Caddy serving our 402 (wrk -t2 -c32)", 5, func() { e.wrk(e.gateURL, 7*time.Second) })
}

// cpuSplitNote is goal 5b's CPU per request split into user space (Caddy, net/http and the
// handlers) and the kernel (the connection's syscalls, the scheduler's wakeups), ours against
// respond's: the handlers' work is in the first, and the two sides' differ mostly in the
// second from run to run (bench/README.md, "Issue 27: the 402 path against respond").
func cpuSplitNote(ours, respond []wrkRun) string {
	user := func(w wrkRun) float64 { return w.user }
	sys := func(w wrkRun) float64 { return w.cpu - w.user }
	ou, ru := perRequest(ours, user), perRequest(respond, user)
	ok, rk := perRequest(ours, sys), perRequest(respond, sys)
	return fmt.Sprintf("user µs/req ours %.1f, respond %.1f (%.2f×); kernel ours %.1f, respond %.1f (%.2f×)", ou, ru, ru/ou, ok, rk, rk/ok)
}

// The in-process benchmark of goal 5c, written on the "recov" engineer's branch.
const (
	challengeRespondBench = "BenchmarkChallengeAgainstRespond"
	challengeRespondPkg   = "./caddymodule/paygate/"
)

// challengeInProcess adds goal 5c: BenchmarkChallengeAgainstRespond (./caddymodule/paygate/),
// the unpaid 402 through our handler against Caddy's respond handler answering the same
// bytes, in process, five rounds in turn.
func (e *env) challengeInProcess() {
	const name, pkg = challengeRespondBench, challengeRespondPkg
	if !e.hasBenchmark(pkg, name) {
		e.rep.unmeasured("5c", name+" (sub-benchmarks x402 and respond, "+pkg+") is not on this commit")
		return
	}
	e.rep.challengeAgainstRespond(e.alternate("bench-challenge-respond", name+"$", pkg, 5))
}

// challengeAgainstRespond adds goal 5c from the rounds of BenchmarkChallengeAgainstRespond:
// respond's CPU per request against the 402's.
func (r *report) challengeAgainstRespond(out []benchLine) {
	const name, pkg = challengeRespondBench, challengeRespondPkg
	x := find(out, func(n string) bool { return n == name+"/x402" })
	resp := find(out, func(n string) bool { return n == name+"/respond" })
	if x == nil || resp == nil {
		r.unmeasured("5c", name+" did not report its sub-benchmarks x402 and respond")
		return
	}
	xv, rv, unit := cpuPair(x, resp)
	r.addGoal(row{section: challengeSection, measure: "in process: " + strings.TrimPrefix(name, "Benchmark") + ", the 402 vs `respond` (" + unit + ")",
		ours: fmtNs(xv), peer: fmtNs(rv), ratio: rv / xv, higherBetter: true,
		note: fmt.Sprintf("%s%s; median of 5 rounds, the two in turn; ratio = respond/ours; ours %.0f allocs, %.0f B per op; respond %.0f allocs, %.0f B per op",
			pkg, name, x.metrics["allocs/op"], x.metrics["B/op"], resp.metrics["allocs/op"], resp.metrics["B/op"])}, "5c", rv/xv)
}
