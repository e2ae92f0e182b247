package main

import (
	"math"
	"strings"
	"testing"
	"time"
)

// TestGoalMet: a value past its bound is not met, at the bound it is, and a figure that
// could not be computed (NaN) never is.
func TestGoalMet(t *testing.T) {
	for _, c := range []struct {
		id   string
		v    float64
		want bool
	}{
		{"1a", 5.6, false}, {"1a", 1.0001, false}, {"1a", 1, true}, {"1a", 0.4, true}, {"1a", math.NaN(), false},
		{"1b", 0.26, false}, {"1b", 0.25, true},
		{"2a", 1.11, false}, {"2a", 1.1, true}, {"2b", 2, false}, {"2b", 1, true},
		{"3a", 1.79, false}, {"3a", 1.8, true}, {"3b", 3.19, false}, {"3b", 3.5, true}, {"3c", 0, false}, {"3c", 1, true},
		{"4a", 1738, false}, {"4a", 2000, true}, {"4b", 14999, false}, {"4c", 3999, false}, {"4d", 19999, false}, {"4d", 20850, true},
		{"4e", 5.01, false}, {"4f", 4.9, true},
		{"5a", 0.98, false}, {"5a", 1, true}, {"5b", 0.999, false}, {"5c", math.Inf(1), true},
		{"6a", 301, false}, {"6a", 300, true}, {"6b", 276, true}, {"6c", 508, false}, {"6d", 264, true},
		{"6e", 10.5, false}, {"6e", -0.3, true},
		{"24", 150.1, false}, {"24", 149, true},
	} {
		if got := goalByID(c.id).met(c.v); got != c.want {
			t.Errorf("goal %s (%s %s) met by %v = %v, want %v", c.id, goalByID(c.id).text, goalByID(c.id).boundText(), c.v, got, c.want)
		}
	}
}

// TestGoalCells: a row whose value is above its goal prints NOT met, in its goal column and
// in the goals table; one within prints met.
func TestGoalCells(t *testing.T) {
	r := testReport()
	r.addGoal(row{section: "3. Paid", measure: "c=1: overhead beyond the chain, p50 (ms)", ours: "5.6"}, "1a", 5.6)
	r.addGoal(row{section: "4. Verdict", measure: "over HTTP: HTTPSubmit/postgres", ours: "2100 submits/s"}, "4a", 2100)
	if got := r.rows[0].goal; got != "1a: 5.60 ms (goal ≤ 1.00 ms): **NOT met**" {
		t.Errorf("goal cell of 5.6 ms against ≤ 1 ms = %q", got)
	}
	if got := r.rows[1].goal; got != "4a: 2,100/s (goal ≥ 2,000/s): met" {
		t.Errorf("goal cell of 2,100/s against ≥ 2,000/s = %q", got)
	}
	table := r.goalsTable()
	for _, want := range []string{
		"| 1a | overhead beyond the chain (eth_sendRawTransaction → receipt), p50 at c=1 | ≤ 1.00 ms | 5.60 ms | 5.60 ms | **NOT met** |",
		"| 4a | PostgreSQL: durable verdict submits/s over HTTP | ≥ 2,000/s | 1,738/s | 2,100/s | met |",
		"| 2a |", "| 24 |",
	} {
		if !strings.Contains(table, want) {
			t.Errorf("goals table lacks %q:\n%s", want, table)
		}
	}
	if n := strings.Count(table, "\n| "); n != len(goals)+1 {
		t.Errorf("goals table has %d rows, want the header and %d goals:\n%s", n, len(goals), table)
	}
}

// TestGoalNotMeasured: a goal no section measured, or measured as missing, is "not measured"
// in the table, never met, and listed among what the run did not measure.
func TestGoalNotMeasured(t *testing.T) {
	r := testReport()
	r.unmeasured("5c", "BenchmarkChallengeAgainstRespond is not on this commit")
	table := r.goalsTable()
	for _, want := range []string{
		"| not measured: BenchmarkChallengeAgainstRespond is not on this commit | not measured |",
		"| 1a | overhead beyond the chain (eth_sendRawTransaction → receipt), p50 at c=1 | ≤ 1.00 ms | 5.60 ms | not measured (section not run) | not measured |",
	} {
		if !strings.Contains(table, want) {
			t.Errorf("goals table lacks %q:\n%s", want, table)
		}
	}
	if len(r.missing) != 1 || !strings.Contains(r.missing[0], "goal 5c") {
		t.Errorf("missing = %q, want goal 5c", r.missing)
	}
}

// TestBeforeFromTheRunOnBdd0759: the figures of the "before" are read from the rows
// of bench/results.md as bench/run wrote them on bdd0759, by measure name.
func TestBeforeFromTheRunOnBdd0759(t *testing.T) {
	old := parseResults(bdd0759Rows)
	for _, c := range []struct {
		id   string
		want float64
	}{
		{"1a", 5.6}, {"1b", 19.0 / 21.5}, {"4a", 1738}, {"4b", 12568}, {"4c", 4124}, {"4d", 20850},
		{"5a", 39278.0 / 40188}, {"6a", 533}, {"6b", 276}, {"6c", 533e6 / (1 << 20)}, {"6d", 276e6 / (1 << 20)}, {"6e", -0.3},
	} {
		v, ok := goalByID(c.id).before(old)
		if !ok || math.Abs(v-c.want) > 1e-9 {
			t.Errorf("before of goal %s = %v, %v; want %v", c.id, v, ok, c.want)
		}
	}
	for _, id := range []string{"4e", "4f", "5b"} { // rows the run on bdd0759 did not have
		if v, ok := goalByID(id).before(old); ok {
			t.Errorf("before of goal %s = %v, want none", id, v)
		}
	}
}

// TestParseResultsWithGoalColumn: results.md as this driver writes it (with the goal
// column, escaped pipes) can be the next run's before.
func TestParseResultsWithGoalColumn(t *testing.T) {
	md := "| measure | ours | peer | ratio | goal | notes |\n|---|---|---|---|---|---|\n" +
		"| **4. Verdict service** | | | | | load average 1 1 1 |\n" +
		"| over HTTP: HTTPLatency/postgres, submit → terminal verdict p50 / p99 at 200 submits/s (polling every 1 ms) | 1.2 ms / 850 µs | – | – | ≤ 5.00 ms: met | a \\| b |\n"
	old := parseResults(md)
	if len(old) != 1 || old[0].cells["notes"] != "a | b" || old[0].cells["goal"] != "≤ 5.00 ms: met" {
		t.Fatalf("rows = %+v", old)
	}
	if v, ok := goalByID("4e").before(old); !ok || v != 0.85 {
		t.Errorf("before of 4e = %v, %v; want 0.85 ms", v, ok)
	}
}

// TestHTTPRowGoals: each verdict HTTP benchmark is held to its own goal, reads on SQLite to
// 20,000/s (not 10,000), and one that reports no rate meets none.
func TestHTTPRowGoals(t *testing.T) {
	r := testReport()
	for _, c := range []struct {
		l    benchLine
		id   string
		met  bool
		want float64
	}{
		{benchLine{"BenchmarkHTTPStatus/sqlite", map[string]float64{"reads/s": 15000}}, "4d", false, 15000},
		{benchLine{"BenchmarkHTTPStatus/postgres", map[string]float64{"reads/s": 15000}}, "4b", true, 15000},
		{benchLine{"BenchmarkHTTPSubmit/sqlite", map[string]float64{"submits/s": 3999}}, "4c", false, 3999},
		{benchLine{"BenchmarkHTTPLatency/postgres", map[string]float64{"verdict-p50-µs": 900, "verdict-p99-µs": 6000}}, "4e", false, 6},
		{benchLine{"BenchmarkHTTPLatency/sqlite", map[string]float64{"verdict-p50-µs": 900, "verdict-p99-µs": 4000}}, "4f", true, 4},
		{benchLine{"BenchmarkHTTPSubmit/postgres", map[string]float64{"ns/op": 400000}}, "4a", false, math.NaN()},
	} {
		_, _, id, v := httpRow(c.l)
		if id != c.id || !(v == c.want || math.IsNaN(v) && math.IsNaN(c.want)) {
			t.Errorf("httpRow(%s) = goal %s, %v; want %s, %v", c.l.name, id, v, c.id, c.want)
		}
		if cell := r.meet(id, v); strings.HasSuffix(cell, ": met") != c.met {
			t.Errorf("%s at %v: goal cell %q, want met %v", c.l.name, v, cell, c.met)
		}
	}
}

// TestSoakGoal: the RSS goal needs a flat soak of 10 minutes at c=64; a shorter one, or
// one at another concurrency, is not met even when flat.
func TestSoakGoal(t *testing.T) {
	for _, c := range []struct {
		d      time.Duration
		conc   int
		growth float64
		met    bool
	}{
		{2 * time.Minute, 64, 0.1, false},
		{10 * time.Minute, 8, 0.1, false},
		{10 * time.Minute, 64, 12, false},
		{10 * time.Minute, 64, -0.3, true},
	} {
		r := testReport()
		cell := r.soakGoal(c.d, c.conc, c.growth)
		if r.goals["6e"].met != c.met || strings.HasSuffix(cell, ": met") != c.met {
			t.Errorf("soak of %s at c=%d growing %+.1f%%: %q, %+v; want met %v", c.d, c.conc, c.growth, cell, r.goals["6e"], c.met)
		}
	}
}

func testReport() *report {
	return &report{c: &config{}, sectionLoad: map[string]string{}, goals: map[string]goalResult{}, before: parseResults(bdd0759Rows), beforeWhat: "test"}
}

// bdd0759Rows are rows of bench/results.md as bench/run wrote it on bdd0759 (git show 85034fb:bench/results.md).
const bdd0759Rows = "| measure | ours | peer | ratio | notes |\n|---|---|---|---|---|\n" +
	"| **1. Challenge (402)** | | | | load average 2.64 2.32 2.10 |\n" +
	"| 402 req/s vs Caddy `respond`, same body and headers, same binary | 39278 | 40188 | 0.98× (we lose) | goal ≥ 0.9×; rounds: ours 34818, 39278, 41674; respond 40188, 38374, 42193 |\n" +
	"| c=1: p50 / p99 (ms) | 19.0 / 33.0 | 21.5 / 544.7 | 1.14× | ratio of the p50s, peer/ours |\n" +
	"| c=1: overhead beyond the chain, p50 (ms) | 5.6 | 16.2 | 2.89× | total minus eth_sendRawTransaction→receipt (p50 of that chain part: ours 13.0 ms, peer 4.6 ms); server CPU: ours 27%, peer 41% of one core |\n" +
	"| c=8: overhead beyond the chain, p50 (ms) | 23.1 | 70.9 | 3.06× | total minus eth_sendRawTransaction→receipt |\n" +
	"| over HTTP: HTTPSubmit/sqlite | 4124 submits/s | 2,000/s (target) | 2.06× | 41405 B/op, 618 allocs/op, 357.40 cpu-µs/op, 242469 ns/op; ratio = rate/target |\n" +
	"| over HTTP: HTTPSubmit/postgres | 1738 submits/s | 2,000/s (target) | 0.87× (we lose) | 55647 B/op, 596 allocs/op, 453.50 cpu-µs/op, 575425 ns/op; ratio = rate/target |\n" +
	"| over HTTP: HTTPStatus/sqlite | 20850 reads/s | 10,000/s (target) | 2.08× | 16101 B/op, 145 allocs/op, 90.58 cpu-µs/op, 47961 ns/op; ratio = rate/target |\n" +
	"| over HTTP: HTTPStatus/postgres | 12568 reads/s | 10,000/s (target) | 1.26× | 16400 B/op, 145 allocs/op, 102.30 cpu-µs/op, 79568 ns/op; ratio = rate/target |\n" +
	"| **5. Memory** | | | | load average 2.64 2.75 2.35 |\n" +
	"| Caddy RSS over a 2m0s paid soak: start → end (MiB) | 90.0 → 83.4 | – | – | flat (-0.3% after warm-up; max 84.1 MiB) |\n" +
	"| MemoryStoreHeap (-benchtime 1x) | 276 B/approval, 212 B/claim | – | – | 1M approvals ≈ 264 MiB; 1M claims ≈ 203 MiB |\n" +
	"| MemoryRetryStoreHeap (-benchtime 1x) | 341 B-data/grant, 533 B/grant | – | – | 1M grants ≈ 508 MiB |\n"

// TestPaidVerifyCPUGoals: the paid verify CPU is held to 1.1× one recovery plus the hash by
// cpu-ns/op (ns/op unless both report cpu-ns/op), and to one recovery per payment.
func TestPaidVerifyCPUGoals(t *testing.T) {
	for _, c := range []struct {
		out      string
		met2a    bool
		after2a  string
		met2b    bool
		measured bool
	}{
		{"BenchmarkPaidVerifyCPU-2 1000 60000 ns/op 48500 cpu-ns/op 1.000 recoveries/payment 1392 B/op 13 allocs/op\n" +
			"BenchmarkEcrecoverHashBound-2 1000 90000 ns/op 45400 cpu-ns/op 80 B/op 1 allocs/op\n", true, "1.068×", true, true},
		{"BenchmarkPaidVerifyCPU-2 1000 60000 ns/op 100000 cpu-ns/op 2.000 recoveries/payment\n" +
			"BenchmarkEcrecoverHashBound-2 1000 90000 ns/op 45400 cpu-ns/op\n", false, "2.203×", false, true},
		{"BenchmarkPaidVerifyCPU-2 1000 50000 ns/op 1.000 recoveries/payment\n" +
			"BenchmarkEcrecoverHashBound-2 1000 40000 ns/op\n", false, "1.250×", true, true},
		{"BenchmarkPaidVerifyCPU-2 1000 50000 ns/op 30000 cpu-ns/op 1.000 recoveries/payment\n" + // ns/op when one has no cpu-ns/op
			"BenchmarkEcrecoverHashBound-2 1000 40000 ns/op\n", false, "1.250×", true, true},
		{"BenchmarkPaidVerifyCPU-2 1000 50000 ns/op 1.000 recoveries/payment\n", false, "", false, false},
	} {
		r := testReport()
		r.paidVerifyCPU("2. Verify", parseBench(c.out))
		g2a, g2b := r.goals["2a"], r.goals["2b"]
		if !c.measured {
			if g2a.met || g2b.met || !strings.HasPrefix(g2a.after, "not measured") || len(r.missing) != 2 {
				t.Errorf("without the bound: 2a %+v, 2b %+v, missing %q; want both not measured", g2a, g2b, r.missing)
			}
			continue
		}
		if g2a.met != c.met2a || g2a.after != c.after2a || g2b.met != c.met2b {
			t.Errorf("%q: 2a %+v, 2b %+v; want 2a %s met %v, 2b met %v", c.out, g2a, g2b, c.after2a, c.met2a, c.met2b)
		}
	}
}

// TestChallengeAgainstRespondGoal: goal 5c is respond's CPU per request over ours, met at
// 1.0× or more; without both sub-benchmarks it is not measured.
func TestChallengeAgainstRespondGoal(t *testing.T) {
	for _, c := range []struct {
		out   string
		after string
		met   bool
	}{
		{"BenchmarkChallengeAgainstRespond/x402-2 1000000 700 ns/op 650 cpu-ns/op 416 B/op 3 allocs/op\n" +
			"BenchmarkChallengeAgainstRespond/respond-2 1000000 690 ns/op 700 cpu-ns/op 400 B/op 4 allocs/op\n", "1.077×", true},
		{"BenchmarkChallengeAgainstRespond/x402-2 1000000 700 ns/op 750 cpu-ns/op\n" +
			"BenchmarkChallengeAgainstRespond/respond-2 1000000 690 ns/op 700 cpu-ns/op\n", "0.933×", false},
		{"BenchmarkChallengeAgainstRespond/x402-2 1000000 700 ns/op 750 cpu-ns/op\n", "not measured: BenchmarkChallengeAgainstRespond did not report its sub-benchmarks x402 and respond", false},
	} {
		r := testReport()
		r.challengeAgainstRespond(parseBench(c.out))
		if g := r.goals["5c"]; g.after != c.after || g.met != c.met {
			t.Errorf("%q: 5c %+v, want %s met %v", c.out, g, c.after, c.met)
		}
	}
}

// TestCPUPerRequest: Caddy's CPU per request of a side is its CPU over all its rounds over
// all their requests, and nothing when it served none.
func TestCPUPerRequest(t *testing.T) {
	if got := cpuPerRequest([]wrkRun{{cpu: 3, reqs: 100000}, {cpu: 1, reqs: 20000}}); math.Abs(got-4e6/120000) > 1e-9 {
		t.Errorf("cpuPerRequest = %v µs, want %v", got, 4e6/120000)
	}
	if got := cpuPerRequest([]wrkRun{{cpu: 1}}); !math.IsNaN(got) || goalByID("5b").met(1/got) {
		t.Errorf("cpuPerRequest of no requests = %v, want NaN and goal 5b not met", got)
	}
}

// TestCPUSplitNote: goal 5b's note splits each side's CPU per request into user space and
// kernel, each summed over the side's rounds.
func TestCPUSplitNote(t *testing.T) {
	ours := []wrkRun{{cpu: 3, user: 2, reqs: 100000}, {cpu: 1, user: 0.5, reqs: 20000}}
	respond := []wrkRun{{cpu: 3, user: 2.5, reqs: 100000}}
	want := "user µs/req ours 20.8, respond 25.0 (1.20×); kernel ours 12.5, respond 5.0 (0.40×)"
	if got := cpuSplitNote(ours, respond); got != want {
		t.Errorf("cpuSplitNote = %q, want %q", got, want)
	}
}
