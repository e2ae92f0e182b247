package main

import (
	"context"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// benchLine is one benchmark result: metrics by unit, the median over -count runs.
type benchLine struct {
	name    string
	metrics map[string]float64
}

var benchName = regexp.MustCompile(`^(Benchmark\S+?)(-\d+)?$`)

// parseBench reads `go test -bench` output: each result line is the name, the iterations,
// then value-unit pairs. Repeated names (-count) are reduced to the median per unit.
func parseBench(out string) []benchLine {
	vals := map[string]map[string][]float64{}
	var order []string
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		m := benchName.FindStringSubmatch(f[0])
		if m == nil {
			continue
		}
		if _, err := strconv.Atoi(f[1]); err != nil {
			continue
		}
		name := m[1]
		if vals[name] == nil {
			vals[name] = map[string][]float64{}
			order = append(order, name)
		}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				break
			}
			vals[name][f[i+1]] = append(vals[name][f[i+1]], v)
		}
	}
	var lines []benchLine
	for _, n := range order {
		l := benchLine{name: n, metrics: map[string]float64{}}
		for u, v := range vals[n] {
			l.metrics[u] = median(v)
		}
		lines = append(lines, l)
	}
	return lines
}

// goBench runs go test -bench in the module root and parses it. The output is kept in the
// run directory.
func (e *env) goBench(label string, bound time.Duration, args ...string) []benchLine {
	return parseBench(e.goBenchRaw(label, bound, args...))
}

// goBenchRaw is goBench's output, unparsed.
func (e *env) goBenchRaw(label string, bound time.Duration, args ...string) string {
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	full := append([]string{"test", "-run", "^$"}, args...)
	logf("go %s", strings.Join(full, " "))
	out, err := run(ctx, e.c.root, nil, "go", full...)
	_ = writeFile(filepath.Join(e.dir, label+".txt"), out)
	if err != nil {
		logf("  %s: %v (output in %s.txt)", label, err, label)
		e.rep.missing = append(e.rep.missing, fmt.Sprintf("`go %s` failed: %v (see the run directory's %s.txt)", strings.Join(full, " "), err, label))
	}
	return out
}

func find(lines []benchLine, pred func(string) bool) *benchLine {
	for i := range lines {
		if pred(lines[i].name) {
			return &lines[i]
		}
	}
	return nil
}

func fmtNs(ns float64) string {
	switch {
	case ns >= 1e6:
		return fmt.Sprintf("%.2f ms", ns/1e6)
	case ns >= 1e3:
		return fmt.Sprintf("%.1f µs", ns/1e3)
	default:
		return fmt.Sprintf("%.0f ns", ns)
	}
}

// --- 2b. the CPU of a verify against the bare recovery ----------------------------------------

func (e *env) cpu() {
	sec := "2. Verify (CPU only, go test -bench)"
	// Five rounds, ours and the bound in turn, so that both see the same load: -count 5 would
	// run each five times in a row.
	var out []benchLine
	boundInFacilitator := true
	var all strings.Builder
	for i := range 5 {
		l := e.goBenchRaw(fmt.Sprintf("bench-verifycpu-%d", i), 3*time.Minute, "-bench", `BenchmarkVerifyCPU$|Ecrecover`, "-benchmem", "-count", "1", "./facilitator/")
		all.WriteString(l)
		if i == 0 && find(parseBench(l), func(n string) bool { return strings.Contains(n, "Ecrecover") }) == nil {
			boundInFacilitator = false
		}
		if !boundInFacilitator {
			// No bound benchmark in facilitator/ on this commit: the bare go-ethereum
			// crypto.Ecrecover of bench/ecrecover.
			all.WriteString(e.goBenchRaw(fmt.Sprintf("bench-ecrecover-%d", i), 3*time.Minute, "-bench", `BenchmarkEcrecover$`, "-benchmem", "-count", "1", "./bench/ecrecover/"))
		}
	}
	out = parseBench(all.String())
	v := find(out, func(n string) bool { return n == "BenchmarkVerifyCPU" })
	bound := find(out, func(n string) bool { return strings.Contains(n, "Ecrecover") })
	boundNote := "bench/ecrecover BenchmarkEcrecover (facilitator/ has no Ecrecover benchmark on this commit)"
	if boundInFacilitator && bound != nil {
		boundNote = "facilitator/" + bound.name
	}
	if v == nil || bound == nil {
		e.rep.missing = append(e.rep.missing, "the verify CPU comparison: BenchmarkVerifyCPU or the Ecrecover bound did not report")
	} else {
		r := bound.metrics["ns/op"] / v.metrics["ns/op"]
		e.rep.headline = append(e.rep.headline, fmt.Sprintf("**Verify, CPU only:** %s per verify against %s for the bare `crypto.Ecrecover` (%.2f× the bound; goal 0.8×)%s.",
			fmtNs(v.metrics["ns/op"]), fmtNs(bound.metrics["ns/op"]), r, lose(r/0.8, ": **under the goal**")))
		e.rep.add(row{section: sec, measure: "verify CPU (ns/op) vs bare crypto.Ecrecover (the bound)", ours: fmtNs(v.metrics["ns/op"]), peer: fmtNs(bound.metrics["ns/op"]), ratio: bound.metrics["ns/op"] / v.metrics["ns/op"], higherBetter: true, goal: 0.8,
			note: fmt.Sprintf("ratio = bound/ours (goal ≥ 0.8; ours includes the one recovery, so above 1 is noise); ours %.0f allocs, %.0f B per op; bound: %s; median of 5 rounds, the two in turn", v.metrics["allocs/op"], v.metrics["B/op"], boundNote)})
	}
	x := e.goBench("bench-x402", 3*time.Minute, "-bench", `BenchmarkDecodePaymentHeader|BenchmarkTransferWithAuthorizationHash|BenchmarkRecoverSigner`, "-benchmem", "-count", "3", "./x402/")
	for _, l := range x {
		goal := ""
		if strings.Contains(l.name, "DecodePaymentHeader") {
			goal = " (goal ≤ 8 µs)"
		}
		e.rep.add(row{section: sec, measure: strings.TrimPrefix(l.name, "Benchmark") + " (ns/op)", ours: fmtNs(l.metrics["ns/op"]), peer: "–",
			note: fmt.Sprintf("%.0f allocs, %.0f B per op%s; median of 3", l.metrics["allocs/op"], l.metrics["B/op"], goal)})
	}
	// The profile of the verify CPU path.
	prof := filepath.Join(e.dir, "verifycpu.pprof")
	testBin := filepath.Join(e.dir, "facilitator.test")
	e.goBench("bench-verifycpu-profile", 3*time.Minute, "-bench", `BenchmarkVerifyCPU$`, "-benchtime", "3s", "-cpuprofile", prof, "-o", testBin, "./facilitator/")
	e.rep.profiles = append(e.rep.profiles, profile{
		title: "BenchmarkVerifyCPU (go test -cpuprofile), where a verify's CPU goes",
		top:   e.pprofTop(testBin, prof),
	})
}

// --- 4. the verdict service ------------------------------------------------------------------

// engineTargets are the engine benchmarks the p99 target (100 µs) is for: an ERC-20
// transfer, a V3 swap and a Hyperliquid order, through Judge as the service evaluates; the
// others (an x402 payment, a Universal Router plan, a verdict the caller keeps) are reported
// without one.
var engineTargets = map[string]bool{"EvaluateERC20Transfer": true, "EvaluateV3Swap": true, "EvaluateHyperliquidOrder": true}

func (e *env) verdict() {
	sec := "4. Verdict service"
	lines := e.goBench("bench-engine", 6*time.Minute, "-bench", `BenchmarkEvaluate`, "-benchmem", "-benchtime", "2s", "./verdictserver/engine/")
	for _, l := range lines {
		name := strings.TrimPrefix(l.name, "Benchmark")
		p99, ok := l.metrics["p99-ns"]
		if !ok {
			e.rep.add(row{section: sec, measure: "in process: " + name + " (ns/op; no percentiles reported)", ours: fmtNs(l.metrics["ns/op"]), peer: "–",
				note: fmt.Sprintf("%.0f allocs/op", l.metrics["allocs/op"])})
			continue
		}
		p50 := "–"
		if v, ok := l.metrics["p50-ns"]; ok {
			p50 = fmtNs(v)
		}
		cpu := ""
		if v, ok := l.metrics["cpu-ns/op"]; ok {
			cpu = fmt.Sprintf(", CPU %s/op", fmtNs(v))
		}
		if !engineTargets[name] {
			// measured and reported, but the target names other kinds
			e.rep.add(row{section: sec, measure: "in process: " + name + " p50 / p99", ours: p50 + " / " + fmtNs(p99), peer: "– (no target)",
				note: fmt.Sprintf("%s/op%s, %.0f allocs/op, %.0f B/op", fmtNs(l.metrics["ns/op"]), cpu, l.metrics["allocs/op"], l.metrics["B/op"])})
			continue
		}
		e.rep.add(row{section: sec, measure: "in process: " + name + " p50 / p99", ours: p50 + " / " + fmtNs(p99), peer: "100 µs (target p99)", ratio: 100e3 / p99, higherBetter: true,
			note: fmt.Sprintf("%s/op%s, %.0f allocs/op, %.0f B/op; ratio = target/p99", fmtNs(l.metrics["ns/op"]), cpu, l.metrics["allocs/op"], l.metrics["B/op"])})
	}
	if len(lines) == 0 {
		e.rep.missing = append(e.rep.missing, "the engine benchmarks reported nothing")
	}
	var p99s []string
	for _, l := range lines {
		if v, ok := l.metrics["p99-ns"]; ok {
			p99s = append(p99s, fmt.Sprintf("%s %s", strings.TrimPrefix(l.name, "BenchmarkEvaluate"), fmtNs(v)))
		}
	}
	if len(p99s) > 0 {
		e.rep.headline = append(e.rep.headline, "**Policy evaluation in process, p99** (target 100 µs for ERC20Transfer, V3Swap and HyperliquidOrder; on a loaded machine the tail is mostly waiting for a core): "+strings.Join(p99s, ", ")+".")
	}
	h := e.goBench("bench-verdict-http", 8*time.Minute, "-bench", `BenchmarkHTTP`, "-benchmem", "-benchtime", "3s", "./verdictserver/")
	var rates []string
	for _, l := range h {
		r, rate := httpRow(l)
		r.section = sec
		e.rep.add(r)
		if rate != "" {
			rates = append(rates, strings.TrimPrefix(l.name, "BenchmarkHTTP")+" "+rate)
		}
	}
	if len(rates) > 0 {
		e.rep.headline = append(e.rep.headline, "**Verdict service over HTTP** (targets: durable submits/s ≥ 4,000 on SQLite and ≥ 2,000 on PostgreSQL, status reads/s ≥ 20,000 and ≥ 15,000, submit to terminal verdict p99 ≤ 5 ms at 200 submits/s): "+strings.Join(rates, ", ")+".")
	}
	if len(h) == 0 {
		e.rep.missing = append(e.rep.missing, "submit + approval-status over HTTP (SQLite, PostgreSQL): no BenchmarkHTTP* in verdictserver/ on this commit")
	}
}

// httpTargets are issue 27's goals for the verdict service's HTTP benchmarks: a rate per
// second for the throughput rows, a p99 in µs for the latency rows.
var httpTargets = map[string]float64{
	"HTTPSubmit/sqlite": 4000, "HTTPSubmit/postgres": 2000,
	"HTTPStatus/sqlite": 20000, "HTTPStatus/postgres": 15000,
	"HTTPLatency/sqlite": 5000, "HTTPLatency/postgres": 5000,
}

// httpRow is the row of one verdict HTTP benchmark, and its headline figure: the rate of a
// throughput benchmark against its target, or the p50 and p99 of submit to terminal
// verdict against the target p99.
func httpRow(l benchLine) (row, string) {
	name := strings.TrimPrefix(l.name, "Benchmark")
	goal := httpTargets[name]
	var keys, parts []string
	for u := range l.metrics {
		keys = append(keys, u)
	}
	sort.Strings(keys)
	main, value := "", 0.0
	for _, u := range keys {
		if strings.HasSuffix(u, "/s") {
			main, value = fmt.Sprintf("%.0f %s", l.metrics[u], u), l.metrics[u]
			continue
		}
		parts = append(parts, fmt.Sprintf("%s %s", fmtMetric(l.metrics[u]), u))
	}
	r := row{measure: "over HTTP: " + name, ours: main, peer: "–", higherBetter: true, note: strings.Join(parts, ", ")}
	if p99, ok := l.metrics["verdict-p99-µs"]; ok {
		main = fmtNs(l.metrics["verdict-p50-µs"]*1e3) + " / " + fmtNs(p99*1e3)
		r.measure = "over HTTP: " + name + ", submit → terminal verdict p50 / p99 at 200 submits/s (polling every 1 ms)"
		r.ours = main
		if goal > 0 && p99 > 0 {
			r.peer, r.ratio = fmtNs(goal*1e3)+" (target p99)", goal/p99
			r.note += "; ratio = target/p99"
		}
		return r, "p50 / p99 " + main
	}
	if goal > 0 && value > 0 {
		r.peer, r.ratio = fmt.Sprintf("%s/s (target)", fmtThousands(goal)), value/goal
		r.note += "; ratio = rate/target"
	}
	return r, main
}

// fmtThousands is n with a comma between thousands: 15,000.
func fmtThousands(n float64) string {
	s := strconv.FormatInt(int64(n), 10)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

func fmtMetric(v float64) string {
	if v == float64(int64(v)) {
		return strconv.FormatInt(int64(v), 10)
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

// --- 5. memory -------------------------------------------------------------------------------

// maxHeapPerRecord is issue 27's bound (point 6) on the heap of an approval and of a retry
// credit's record (BenchmarkMemoryLedgerHeap's B/record), in bytes.
const maxHeapPerRecord = 300

// heapGoal is the note of a heap figure of v bytes per what against its bound, if it has one.
func heapGoal(what string, v float64) string {
	if what != "approval" && what != "record" {
		return ""
	}
	if v <= maxHeapPerRecord {
		return fmt.Sprintf(" (goal ≤ %d B each: met)", maxHeapPerRecord)
	}
	return fmt.Sprintf(" (goal ≤ %d B each: NOT met)", maxHeapPerRecord)
}

func (e *env) memory() {
	pkgs := []string{"./facilitator/approval/", "./gate/", "./verdictserver/", "./verdictserver/store/"}
	args := append([]string{"-bench", `Heap|1M|Million`, "-benchmem", "-benchtime", "1x"}, pkgs...)
	lines := e.goBench("bench-memory", 8*time.Minute, args...)
	for _, l := range lines {
		var keys []string
		for u := range l.metrics {
			keys = append(keys, u)
		}
		sort.Strings(keys)
		keys = slices.DeleteFunc(keys, func(u string) bool { return u == "ns/op" || u == "B/op" || u == "allocs/op" })
		var parts, perMillion []string
		for _, u := range keys {
			v := l.metrics[u]
			parts = append(parts, fmt.Sprintf("%.0f %s", v, u))
			if what, ok := strings.CutPrefix(u, "B/"); ok && what != "op" {
				perMillion = append(perMillion, fmt.Sprintf("1M %ss ≈ %.0f MiB", what, v*1e6/(1<<20))+heapGoal(what, v))
			}
		}
		if len(perMillion) > 0 {
			e.rep.headline = append(e.rep.headline, fmt.Sprintf("**Heap** (%s): %s.", strings.TrimPrefix(l.name, "Benchmark"), strings.Join(perMillion, "; ")))
		}
		e.rep.add(row{section: "5. Memory", measure: strings.TrimPrefix(l.name, "Benchmark") + " (-benchtime 1x)", ours: strings.Join(parts, ", "), peer: "–", note: strings.Join(perMillion, "; ")})
	}
	if len(lines) == 0 {
		e.rep.missing = append(e.rep.missing, "the heap of 1M approval records and 1M retry credits: no benchmark matching Heap|1M|Million in facilitator/approval/, gate/, verdictserver/ or verdictserver/store/ on this commit")
	}
}
