package main

// Issue 27's goals, and issue 24's p99, as rows of bench/results.md: each goal's bound, the
// value this run measured, whether that value meets the bound, and the figure of the run
// before (bench/results.md as bench/run wrote it on bdd0759, the "before").

import (
	"context"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// goal is one bound a row of the run is held to.
type goal struct {
	id     string // the point and a letter: "1a"; "24" for issue 24's p99
	text   string // what is measured, and the bound in words
	bound  float64
	atMost bool   // met when the value is ≤ bound; otherwise when it is ≥ bound
	unit   string // how the value and the bound print (goal.format)
	// before is the goal's figure in the run before, if that run had the row.
	before func(old oldRows) (float64, bool)
}

// goals are issue 27's goals (and issue 24's p99) in the order of the issue.
var goals = []goal{
	{id: "1a", text: "overhead beyond the chain (eth_sendRawTransaction → receipt), p50 at c=1", bound: 1, atMost: true, unit: "ms",
		before: func(o oldRows) (float64, bool) { return o.num("c=1: overhead beyond the chain, p50 (ms)", "ours") }},
	{id: "1b", text: "paid p50 at c=1, ours / the reference's (same client, same anvil, same run)", bound: 0.25, atMost: true, unit: "x",
		before: func(o oldRows) (float64, bool) { return o.ratio("c=1: p50 / p99 (ms)", "ours", "peer") }},
	{id: "2a", text: "verify CPU per paid request (BenchmarkPaidVerifyCPU) / one bare Ecrecover plus the hash (BenchmarkEcrecoverHashBound), cpu-ns/op", bound: 1.1, atMost: true, unit: "x"},
	{id: "2b", text: "signature recoveries per paid request (BenchmarkPaidVerifyCPU recoveries/payment)", bound: 1, atMost: true, unit: "n"},
	{id: "3a", text: "settled/s at c=64 behind the 16-pending proxy, 2 signer keys / 1 key", bound: 1.8, unit: "x"},
	{id: "3b", text: "settled/s at c=64 behind the 16-pending proxy, 4 signer keys / 1 key", bound: 3.2, unit: "x"},
	{id: "3c", text: "a key short of gas leaves the pool with `relayer_insufficient_funds` (error and gauge): its tests pass", bound: 1, unit: "pass"},
	{id: "4a", text: "PostgreSQL: durable verdict submits/s over HTTP", bound: 2000, unit: "/s",
		before: func(o oldRows) (float64, bool) { return o.num("over HTTP: HTTPSubmit/postgres", "ours") }},
	{id: "4b", text: "PostgreSQL: approval-status reads/s over HTTP", bound: 15000, unit: "/s",
		before: func(o oldRows) (float64, bool) { return o.num("over HTTP: HTTPStatus/postgres", "ours") }},
	{id: "4c", text: "SQLite: durable verdict submits/s over HTTP", bound: 4000, unit: "/s",
		before: func(o oldRows) (float64, bool) { return o.num("over HTTP: HTTPSubmit/sqlite", "ours") }},
	{id: "4d", text: "SQLite: approval-status reads/s over HTTP", bound: 20000, unit: "/s",
		before: func(o oldRows) (float64, bool) { return o.num("over HTTP: HTTPStatus/sqlite", "ours") }},
	{id: "4e", text: "PostgreSQL: submit → terminal verdict over HTTP at 200 submits/s, p99", bound: 5, atMost: true, unit: "ms",
		before: func(o oldRows) (float64, bool) { return o.p99ms("over HTTP: HTTPLatency/postgres") }},
	{id: "4f", text: "SQLite: submit → terminal verdict over HTTP at 200 submits/s, p99", bound: 5, atMost: true, unit: "ms",
		before: func(o oldRows) (float64, bool) { return o.p99ms("over HTTP: HTTPLatency/sqlite") }},
	{id: "5a", text: "402 rate through Caddy / Caddy `respond`'s (same body and headers, same process; wrk)", bound: 1, unit: "x",
		before: func(o oldRows) (float64, bool) { return o.ratio("402 req/s vs Caddy `respond`", "ours", "peer") }},
	{id: "5b", text: "Caddy's CPU per request: `respond`'s / the 402's (/proc/PID/stat around each side's rounds)", bound: 1, unit: "x",
		before: func(o oldRows) (float64, bool) {
			return o.ratio("Caddy CPU µs per 402 vs Caddy `respond`", "peer", "ours")
		}},
	{id: "5c", text: "in process (BenchmarkChallengeAgainstRespond): `respond`'s CPU per request / the 402's", bound: 1, unit: "x"},
	{id: "6a", text: "heap per retry credit (BenchmarkMemoryLedgerHeap B/record)", bound: 300, atMost: true, unit: "B",
		before: func(o oldRows) (float64, bool) { return o.retryCredit() }},
	{id: "6b", text: "heap per approval (BenchmarkMemoryStoreHeap B/approval)", bound: 300, atMost: true, unit: "B",
		before: func(o oldRows) (float64, bool) { return o.perUnit("MemoryStoreHeap", "B/approval") }},
	{id: "6c", text: "1M retry credits", bound: 300, atMost: true, unit: "MiB",
		before: func(o oldRows) (float64, bool) { return million(o.retryCredit()) }},
	{id: "6d", text: "1M approvals", bound: 300, atMost: true, unit: "MiB",
		before: func(o oldRows) (float64, bool) { return million(o.perUnit("MemoryStoreHeap", "B/approval")) }},
	{id: "6e", text: "Caddy RSS over a 10-minute soak at c=64: growth from the end of the first sixth to the end (flat: at most 10%)", bound: maxSoakGrowth, atMost: true, unit: "%",
		before: func(o oldRows) (float64, bool) { return o.soakGrowth() }},
	{id: "24", text: "issue 24: BenchmarkEvaluate/cpu/windows+signed (./verdictserver/), p99", bound: 150, atMost: true, unit: "µs"},
}

// maxSoakGrowth is the RSS growth, in percent, under which a soak counts as flat.
const maxSoakGrowth = 10

func goalByID(id string) goal {
	for _, g := range goals {
		if g.id == id {
			return g
		}
	}
	panic(fatalError{"no goal " + id})
}

// met tells whether v meets the goal. A NaN (a figure that could not be computed) does not.
func (g goal) met(v float64) bool {
	if math.IsNaN(v) {
		return false
	}
	if g.atMost {
		return v <= g.bound
	}
	return v >= g.bound
}

// format prints v in the goal's unit.
func (g goal) format(v float64) string {
	switch g.unit {
	case "ms":
		return fmt.Sprintf("%.2f ms", v)
	case "µs":
		return fmt.Sprintf("%.1f µs", v)
	case "x":
		return fmt.Sprintf("%.3f×", v)
	case "/s":
		return fmtThousands(v) + "/s"
	case "B":
		return fmt.Sprintf("%.0f B", v)
	case "MiB":
		return fmt.Sprintf("%.0f MiB", v)
	case "%":
		return fmt.Sprintf("%+.1f%%", v)
	case "pass":
		if v >= 1 {
			return "pass"
		}
		return "FAIL"
	default:
		return fmtMetric(v)
	}
}

// boundText is the bound as the goal column prints it: "≤ 1.00 ms".
func (g goal) boundText() string {
	if g.unit == "pass" {
		return "tests pass"
	}
	b := g.format(g.bound)
	if g.unit == "x" {
		b = strconv.FormatFloat(g.bound, 'f', -1, 64) + "×"
	}
	if g.atMost {
		return "≤ " + b
	}
	return "≥ " + b
}

// goalResult is what the run measured of one goal.
type goalResult struct {
	after string // the value as printed, or why there is none
	met   bool
}

// meet records value v of goal id and returns the row's goal cell: the value against the
// bound, met or NOT met.
func (r *report) meet(id string, v float64) string {
	g := goalByID(id)
	return r.judge(id, g.format(v), g.met(v))
}

// judge records goal id's result, after as printed, and returns the row's goal cell.
func (r *report) judge(id, after string, met bool) string {
	r.goals[id] = goalResult{after: after, met: met}
	cell := fmt.Sprintf("%s: %s (goal %s)", id, after, goalByID(id).boundText())
	if met {
		return cell + ": met"
	}
	return cell + ": **NOT met**"
}

// addGoal appends x, whose value v is goal id's measure, with its goal cell.
func (r *report) addGoal(x row, id string, v float64) {
	x.goal = r.meet(id, v)
	r.add(x)
}

// measured tells whether a section recorded goal id.
func (r *report) measured(id string) bool {
	_, ok := r.goals[id]
	return ok
}

// unmeasured records that this run did not measure goal id, and why.
func (r *report) unmeasured(id, why string) {
	r.goals[id] = goalResult{after: "not measured: " + why}
	r.missing = append(r.missing, fmt.Sprintf("goal %s (%s): %s", id, goalByID(id).text, why))
}

// goalsTable is the "Issue 27 goals" table: each goal, its figure before, this run's, and
// whether this run meets it. A goal no section measured is "not measured".
func (r *report) goalsTable() string {
	var b strings.Builder
	fmt.Fprintf(&b, "## Issue 27 goals\n\nEach goal of issue 27 (and issue 24's p99): the figure of the run before (%s), this run's, and whether this run meets the goal. "+
		"\"–\": the run before had no such row. The rows below give each figure's details.\n\n", r.beforeWhat)
	b.WriteString("| # | goal | bound | before | after | met |\n|---|---|---|---|---|---|\n")
	for _, g := range goals {
		before := "–"
		if g.before != nil {
			if v, ok := g.before(r.before); ok {
				before = g.format(v)
			}
		}
		res, ok := r.goals[g.id]
		after, met := res.after, "**NOT met**"
		switch {
		case !ok:
			after, met = "not measured (section not run)", "not measured"
		case res.met:
			met = "met"
		case strings.HasPrefix(res.after, "not measured"):
			met = "not measured"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s |\n", g.id, esc(g.text), esc(g.boundText()), esc(before), esc(after), met)
	}
	return b.String()
}

// --- the run before ---------------------------------------------------------------------------

// defaultBefore is bench/results.md as bench/run wrote it on bdd0759 (its commit row says
// bdd0759; the file at bdd0759 itself is the run before that one, on 684d33d).
const defaultBefore = "85034fb:bench/results.md"

// oldRow is one row of a results.md table, its cells by column name.
type oldRow struct {
	measure string
	cells   map[string]string
}

// oldRows are the rows of a results.md, in file order.
type oldRows []oldRow

// loadBefore reads the results.md of the run before from git (rev:path).
func loadBefore(root, revPath string) (oldRows, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := run(ctx, root, nil, "git", "show", revPath)
	if err != nil {
		return nil, fmt.Errorf("git show %s: %v: %s", revPath, err, snippet([]byte(out)))
	}
	return parseResults(out), nil
}

// parseResults reads the rows of the measure table of a results.md: the table whose header
// starts with "measure"; a section's title row (bold) is skipped.
func parseResults(md string) oldRows {
	var rows oldRows
	var cols []string
	for _, line := range strings.Split(md, "\n") {
		if !strings.HasPrefix(line, "|") {
			cols = nil
			continue
		}
		cells := splitRow(line)
		switch {
		case len(cells) > 0 && cells[0] == "measure":
			cols = cells
		case cols == nil || len(cells) != len(cols) || strings.HasPrefix(cells[0], "---") || strings.HasPrefix(cells[0], "**"):
		default:
			r := oldRow{measure: cells[0], cells: map[string]string{}}
			for i, c := range cols {
				r.cells[c] = cells[i]
			}
			rows = append(rows, r)
		}
	}
	return rows
}

// splitRow splits a Markdown table row into its cells, "\|" being a | inside a cell.
func splitRow(line string) []string {
	line = strings.TrimSpace(line)
	line = strings.TrimSuffix(strings.TrimPrefix(line, "|"), "|")
	var cells []string
	var cur strings.Builder
	for i := 0; i < len(line); i++ {
		switch {
		case line[i] == '\\' && i+1 < len(line) && line[i+1] == '|':
			cur.WriteByte('|')
			i++
		case line[i] == '|':
			cells = append(cells, strings.TrimSpace(cur.String()))
			cur.Reset()
		default:
			cur.WriteByte(line[i])
		}
	}
	return append(cells, strings.TrimSpace(cur.String()))
}

// find is the first row whose measure starts with prefix.
func (o oldRows) find(prefix string) (oldRow, bool) {
	for _, r := range o {
		if strings.HasPrefix(r.measure, prefix) {
			return r, true
		}
	}
	return oldRow{}, false
}

var firstNumber = regexp.MustCompile(`[-+]?[0-9][0-9,]*(\.[0-9]+)?`)

// leadingNumber is the first number in s ("1,738 submits/s": 1738).
func leadingNumber(s string) (float64, bool) {
	m := firstNumber.FindString(s)
	if m == "" {
		return 0, false
	}
	v, err := strconv.ParseFloat(strings.ReplaceAll(m, ",", ""), 64)
	return v, err == nil
}

// num is the first number of the column col of the row measure.
func (o oldRows) num(measure, col string) (float64, bool) {
	r, ok := o.find(measure)
	if !ok {
		return 0, false
	}
	return leadingNumber(r.cells[col])
}

// ratio is the first number of column a over that of column b, of the row measure.
func (o oldRows) ratio(measure, a, b string) (float64, bool) {
	x, ok1 := o.num(measure, a)
	y, ok2 := o.num(measure, b)
	if !ok1 || !ok2 || y == 0 {
		return 0, false
	}
	return x / y, true
}

// p99ms is the second of "p50 / p99" in the ours column of the row measure, in ms.
func (o oldRows) p99ms(measure string) (float64, bool) {
	r, ok := o.find(measure)
	if !ok {
		return 0, false
	}
	_, p99, ok := strings.Cut(r.cells["ours"], "/")
	if !ok {
		return 0, false
	}
	return parseMs(p99)
}

// parseMs reads a duration as fmtNs prints it ("850 ns", "3.4 µs", "1.20 ms") in ms.
func parseMs(s string) (float64, bool) {
	v, ok := leadingNumber(s)
	if !ok {
		return 0, false
	}
	switch {
	case strings.Contains(s, "ms"):
		return v, true
	case strings.Contains(s, "µs"):
		return v / 1e3, true
	case strings.Contains(s, "ns"):
		return v / 1e6, true
	}
	return 0, false
}

// perUnit is the figure before " "+unit in the ours column of the row measure
// ("341 B-data/grant, 533 B/grant", "B/grant": 533).
func (o oldRows) perUnit(measure, unit string) (float64, bool) {
	r, ok := o.find(measure)
	if !ok {
		return 0, false
	}
	for _, part := range strings.Split(r.cells["ours"], ",") {
		if v, u, ok := strings.Cut(strings.TrimSpace(part), " "); ok && u == unit {
			f, err := strconv.ParseFloat(v, 64)
			return f, err == nil
		}
	}
	return 0, false
}

// retryCredit is the heap per retry credit: BenchmarkMemoryLedgerHeap's B/record, or before
// it BenchmarkMemoryRetryStoreHeap's B/grant.
func (o oldRows) retryCredit() (float64, bool) {
	if v, ok := o.perUnit("MemoryLedgerHeap", "B/record"); ok {
		return v, true
	}
	return o.perUnit("MemoryRetryStoreHeap", "B/grant")
}

// soakGrowth is the soak row's RSS growth after warm-up, in percent.
func (o oldRows) soakGrowth() (float64, bool) {
	r, ok := o.find("Caddy RSS over a")
	if !ok {
		return 0, false
	}
	m := regexp.MustCompile(`([-+]?[0-9.]+)% after warm-up`).FindStringSubmatch(r.cells["notes"])
	if m == nil {
		return 0, false
	}
	v, err := strconv.ParseFloat(m[1], 64)
	return v, err == nil
}

// million is the MiB of 1M records of bytesEach.
func million(bytesEach float64, ok bool) (float64, bool) { return mib1M(bytesEach), ok }

func mib1M(bytesEach float64) float64 { return bytesEach * 1e6 / (1 << 20) }
