package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"
)

type row struct {
	section, measure, ours, peer, note string
	ratio                              float64 // 0: none
	higherBetter                       bool
	// ratioGoal, when set, is the ratio an earlier issue asks for: a row that cannot beat its
	// peer (a bound) is marked against it instead of "(we lose)".
	ratioGoal float64
	// goal is the goal column: an issue 27 goal's bound, met or NOT met (report.addGoal).
	goal string
}

type profile struct{ title, top string }

type report struct {
	c                *config
	sectionLoad      map[string]string
	started          time.Time
	loadBefore       string
	rows             []row
	profiles         []profile
	missing          []string
	notes            []string
	headline         []string // bullets for the README's Benchmarks section
	soak             string
	runtime          time.Duration
	challengeBody    int
	challengeHeaders string
	goals            map[string]goalResult // by goal id
	before           oldRows               // the rows of the run before (config.before)
	beforeWhat       string                // where they come from, for the goals table
}

func newReport(c *config) *report {
	r := &report{c: c, started: time.Now().UTC(), loadBefore: loadavg(), sectionLoad: map[string]string{}, goals: map[string]goalResult{}}
	r.beforeWhat = "bench/results.md of the run on bdd0759, `git show " + c.before + "`"
	old, err := loadBefore(c.root, c.before)
	if err != nil {
		logf("the run before: %v", err)
		r.beforeWhat = fmt.Sprintf("none: %v", err)
	}
	r.before = old
	return r
}

// add appends a row; the first row of a section records the load average at that moment.
func (r *report) add(x row) {
	if _, ok := r.sectionLoad[x.section]; !ok {
		r.sectionLoad[x.section] = loadavg()
	}
	r.rows = append(r.rows, x)
}

// sorted is the rows ordered by section title (which start with the item number),
// in the order they were added within a section.
func (r *report) sorted() []row {
	rows := slices.Clone(r.rows)
	slices.SortStableFunc(rows, func(a, b row) int { return strings.Compare(a.section, b.section) })
	return rows
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

func cmdOut(name string, args ...string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// wrk --version exits 1 after printing its version: keep the output whatever the status.
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if len(out) == 0 && err != nil {
		return "?"
	}
	return strings.TrimSpace(string(out))
}

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "?"
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "model name"); ok {
			return strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
		}
	}
	return "?"
}

func memTotal() string {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return "?"
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			var kb int
			fmt.Sscanf(strings.TrimSpace(v), "%d", &kb)
			return fmt.Sprintf("%.1f GiB", float64(kb)/(1<<20))
		}
	}
	return "?"
}

func commit() string {
	c := cmdOut("git", "rev-parse", "--short", "HEAD")
	if s := cmdOut("git", "status", "--porcelain", "--untracked-files=no"); s != "" && s != "?" {
		c += " (with uncommitted changes)"
	}
	return c
}

func (r *report) ratioCell(x row) string {
	if x.ratio == 0 {
		return "–"
	}
	s := fmt.Sprintf("%.2f×", x.ratio)
	if x.ratioGoal > 0 {
		if x.ratio < x.ratioGoal {
			s += " (below the goal)"
		}
		return s
	}
	if x.higherBetter && x.goal == "" && math.Round(x.ratio*100) < 100 { // a goal's row: its goal column judges it // as printed: 0.995 is 1.00×, a tie
		s += " (we lose)"
	}
	return s
}

// table is the plain-text table printed at the end of a run.
func (r *report) table() string {
	var b strings.Builder
	sec := ""
	for _, x := range r.sorted() {
		if x.section != sec {
			sec = x.section
			fmt.Fprintf(&b, "\n%s (load %s)\n", sec, r.sectionLoad[sec])
		}
		fmt.Fprintf(&b, "  %-62s %-18s %-22s %s %s\n", x.measure, x.ours, x.peer, r.ratioCell(x), x.goal)
	}
	if r.soak != "" {
		fmt.Fprintf(&b, "\nsoak: %s\n", r.soak)
	}
	for _, m := range r.missing {
		fmt.Fprintf(&b, "missing: %s\n", m)
	}
	return b.String()
}

func esc(s string) string { return strings.ReplaceAll(s, "|", "\\|") }

func (r *report) write(path string) {
	var b strings.Builder
	c := r.c
	rev, after := commit(), loadavg() // before results.md changes the work tree
	b.WriteString("# Benchmarks against peers: results\n\n")
	b.WriteString("Written by `bench/run` (`bench/cmd/bench`); do not edit by hand. Each comparison runs both sides in the\n" +
		"same run, on the same machine, against the same anvil (automine, chain id 84532), alternating the sides\n" +
		"over rounds; a figure is the median over the rounds. The ratio is ours/peer for rates and peer/ours for\n" +
		"latencies and costs, so above 1 means we are faster; \"(we lose)\" marks the rows below 1 that have no\n" +
		"goal of their own (a goal's row says met or NOT met in its goal column).\n\n")
	b.WriteString("| | |\n|---|---|\n")
	fmt.Fprintf(&b, "| date (UTC) | %s |\n", r.started.Format("2006-01-02 15:04"))
	fmt.Fprintf(&b, "| commit | %s |\n", rev)
	fmt.Fprintf(&b, "| machine | %s CPUs (`nproc`), %s, %s memory |\n", cmdOut("nproc"), cpuModel(), memTotal())
	fmt.Fprintf(&b, "| load average | %s before, %s after (1, 5, 15 min) |\n", r.loadBefore, after)
	fmt.Fprintf(&b, "| Go | %s |\n", runtime.Version())
	fmt.Fprintf(&b, "| node | %s; x402-express 1.2.0, x402 1.2.0, express 4.22.3, viem 2.57.20 (bench/package-lock.json) |\n", cmdOut(c.node, "--version"))
	fmt.Fprintf(&b, "| wrk | %s |\n", firstLine(cmdOut(c.wrk, "--version")))
	fmt.Fprintf(&b, "| runtime of bench/run | %s |\n", r.runtime.Round(time.Second))
	b.WriteString("\n")
	b.WriteString(r.goalsTable())
	b.WriteString("\n## Rows\n\n")

	b.WriteString("| measure | ours | peer | ratio | goal | notes |\n|---|---|---|---|---|---|\n")
	sec := ""
	for _, x := range r.sorted() {
		if x.section != sec {
			sec = x.section
			fmt.Fprintf(&b, "| **%s** | | | | | load average %s |\n", esc(sec), r.sectionLoad[sec])
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s |\n", esc(x.measure), esc(x.ours), esc(x.peer), r.ratioCell(x), esc(x.goal), esc(x.note))
	}
	b.WriteString("\n")
	if r.soak != "" {
		fmt.Fprintf(&b, "**Soak.** %s\n\n", r.soak)
	}
	for _, n := range r.notes {
		fmt.Fprintf(&b, "%s\n\n", n)
	}

	b.WriteString("## How each side is run\n\n")
	fmt.Fprintf(&b, `- **Challenge**: wrk -t2 -c32 -d%s --latency from its own process on loopback, %d rounds, the three
  targets in rotating order. Ours is the `+"`x402`"+` directive of our Caddy (`+"`go build ./cmd/caddy`"+`) on a route
  without placeholders; the `+"`respond`"+` site is in the same Caddy process and answers the same status, body
  (%d bytes, byte for byte) and headers (%s), its headers in one `+"`header`"+` handler and `+"`respond`"+` on the gate
  site's three paths, so a request passes the same path matchers on both sites (bench/README.md); the reference is an Express app with `+"`paymentMiddleware`"+` of
  x402-express 1.2.0 (bench/ref.mjs).
- **Verify**: the same Go client POSTs the same signed payloads (%d payers, fresh nonces each round) to each
  facilitator's HTTP `+"`/verify`"+`, %d concurrent, %s a round, %d rounds: ours is the `+"`x402_facilitator`"+`
  handler of the same Caddy (guardian off, the bundled engine); the reference is `+"`verify`"+` of
  `+"`x402/facilitator`"+` 1.2.0 behind Express (bench/ref.mjs, its viem clients made once, not per request as
  x402's example facilitator does). Like with like: HTTP facilitator against HTTP facilitator.
- **CPU only**: `+"`go test -bench 'BenchmarkVerifyCPU$|Ecrecover' ./facilitator/`"+` five times (with
  `+"`go test -bench BenchmarkEcrecover$ ./bench/ecrecover/`"+` in turn when facilitator/ has no bound), our recovery and
  checks against the bare go-ethereum `+"`crypto.Ecrecover`"+`.
- **Paid**: a Go closed-loop client at concurrency 1, 8 and 64, %s a run, %d rounds per concurrency, each request
  carrying a fresh pre-signed EIP-3009 payment (%d distinct payers, random nonces) to the same upstream (a Go
  HTTP server in the driver). Ours: Caddy's `+"`x402`"+` directive with the bundled facilitator (memory approval store,
  SQLite journal) and `+"`reverse_proxy`"+`. Reference: x402-express 1.2.0 calling the reference facilitator
  (x402 1.2.0 `+"`verify`"+`/`+"`settle`"+`, viem defaults) over HTTP, then fetching the upstream. A request
  counts as settled when it is 200 with an `+"`X-PAYMENT-RESPONSE`"+` naming a transaction. Every RPC of both
  facilitators passes through a timing proxy in the driver (one more loopback hop for both); the chain part of
  a request is from the start of its `+"`eth_sendRawTransaction`"+` to the answer carrying its receipt, and the
  overhead is the request's total minus that.
- **Verdict service**: `+"`go test -bench BenchmarkEvaluate -benchtime 2s ./verdictserver/engine/`"+` and
  `+"`go test -bench BenchmarkHTTP ./verdictserver/`"+`; the peer column holds the issue's targets.
- **Memory**: `+"`go test -bench 'Heap|1M|Million' -benchtime 1x`"+` in facilitator/approval/, gate/, verdictserver/ and
  verdictserver/store/; and
  the VmRSS of the Caddy process (/proc/PID/status) over a soak on the paid path (%s at c=%d).
- **Goals** (issue 27, and issue 24's p99): a goal's row gives its value against its bound, met or NOT met;
  the goals table gives the figure of the run before beside it. The paid verify CPU is
  `+"`BenchmarkPaidVerifyCPU`"+` against `+"`BenchmarkEcrecoverHashBound`"+` (./facilitator/, cpu-ns/op, five rounds in turn); the 402
  in process is `+"`BenchmarkChallengeAgainstRespond`"+` (./caddymodule/paygate/, five rounds); the signer pool is
  `+"`BenchmarkSettlePool -benchtime 256x`"+` (./facilitator/) and the tests of a key short of gas; issue 24's p99 is
  `+"`BenchmarkEvaluate/cpu`"+` (./verdictserver/, -benchtime 20000x -count 3, the median).
`, c.wrkDur, c.rounds, r.challengeBody, r.challengeHeaders, c.payers, c.verifyConc, c.verifyDur, c.rounds, c.paidDur, c.paidRounds, c.payers, c.soak, c.soakConc)
	b.WriteString("\n")

	if len(r.profiles) > 0 {
		b.WriteString("## Profiles\n\n")
		for _, p := range r.profiles {
			fmt.Fprintf(&b, "### %s\n\n```\n%s\n```\n\n", p.title, p.top)
		}
	}
	if len(r.missing) > 0 {
		b.WriteString("## Not measured in this run\n\n")
		for _, m := range r.missing {
			fmt.Fprintf(&b, "- %s\n", m)
		}
		b.WriteString("\n")
	}
	b.WriteString("## Rerun\n\n```sh\nbench/run            # everything, about 22 minutes, 10 of them the RSS soak at c=64 (goal 6e)\nSOAK=120 bench/run   # a 2-minute soak (goal 6e NOT met: too short)\nbench/run soak       # the soak alone (SOAK seconds, default 600)\nONLY=pool bench/run  # some sections; writes bench/out/partial.md\n```\n\n" +
		"bench/run installs wrk (apt-get) and the npm peers (`npm ci` in bench/), reuses anvil from\n" +
		"integration/node_modules (`npm ci` there when missing), builds Caddy into bench/out/, and keeps each run's logs\n" +
		"and profiles in bench/out/run-*. Figures from a shared machine are noisy: compare ratios from one run,\n" +
		"not absolute figures between runs.\n")
	if err := writeFile(path, b.String()); err != nil {
		logf("write %s: %v", path, err)
	}
	// The headline, for the README's Benchmarks section.
	var h strings.Builder
	fmt.Fprintf(&h, "Run of %s UTC on %s, load average %s → %s:\n\n", r.started.Format("2006-01-02 15:04"), rev, r.loadBefore, after)
	for _, l := range r.headline {
		fmt.Fprintf(&h, "- %s\n", l)
	}
	_ = writeFile(filepath.Join(c.out, "headline.md"), h.String())
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

func writeFile(path, s string) error { return os.WriteFile(path, []byte(s), 0o644) }
