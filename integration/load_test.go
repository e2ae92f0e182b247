//go:build x402load

package integration_test

import (
	"context"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/x402gate/x402gate/internal/testenv"
)

// The sustained-load runs of docs/reliability.md#load. They are not in CI: scripts/load
// runs them (go test -tags x402load), each for X402_LOAD_SECONDS (default 60) against the
// built Caddy on anvil, and prints the rates held, the errors by kind, and Caddy's resident
// memory sampled every second. A run fails on any answer other than the expected ones, or
// when Caddy's memory at the end is more than twice what it was after the first tenth of the
// run (a leak, not a warm-up).

func loadSeconds(t *testing.T) time.Duration {
	s := os.Getenv("X402_LOAD_SECONDS")
	if s == "" {
		return 60 * time.Second
	}
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 {
		t.Fatalf("X402_LOAD_SECONDS=%q is not a positive number of seconds", s)
	}
	return time.Duration(n) * time.Second
}

func loadConcurrency(t *testing.T, def int) int {
	s := os.Getenv("X402_LOAD_CONCURRENCY")
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 {
		t.Fatalf("X402_LOAD_CONCURRENCY=%q is not a positive number", s)
	}
	return n
}

// loadClient keeps connections alive across the run, as a busy client does.
var loadClient = &http.Client{
	Transport: &http.Transport{MaxIdleConns: 1024, MaxIdleConnsPerHost: 1024, IdleConnTimeout: time.Minute},
	Timeout:   requestBound,
}

// loadRun is a closed loop of workers, each sending one request after another until the
// run's time is up, and what they got.
type loadRun struct {
	mu       sync.Mutex
	outcomes map[string]int
	lat      []time.Duration
	rss      []int64 // kB, one sample per second
	elapsed  time.Duration
}

// run calls do from workers goroutines for d; do returns the outcome of one request
// ("200", "402", or an error kind). It samples pid's resident memory every second.
func runLoad(t *testing.T, pid, workers int, d time.Duration, do func(worker, n int) string) *loadRun {
	r := &loadRun{outcomes: map[string]int{}}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	go func() {
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			if kb, err := rssKB(pid); err == nil {
				r.mu.Lock()
				r.rss = append(r.rss, kb)
				r.mu.Unlock()
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	start := time.Now()
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for n := 0; ctx.Err() == nil; n++ {
				t0 := time.Now()
				o := do(w, n)
				lat := time.Since(t0)
				r.mu.Lock()
				r.outcomes[o]++
				r.lat = append(r.lat, lat)
				r.mu.Unlock()
			}
		}(w)
	}
	wg.Wait()
	r.elapsed = time.Since(start)
	return r
}

// rssKB reads VmRSS of pid.
func rssKB(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			return strconv.ParseInt(strings.Fields(v)[0], 10, 64)
		}
	}
	return 0, fmt.Errorf("no VmRSS for %d", pid)
}

// report logs the run and fails it on an outcome outside expected or on unbounded memory.
func (r *loadRun) report(t *testing.T, name string, expected ...string) {
	t.Helper()
	total := 0
	var kinds []string
	for k, n := range r.outcomes {
		total += n
		kinds = append(kinds, fmt.Sprintf("%s=%d", k, n))
	}
	sort.Strings(kinds)
	sort.Slice(r.lat, func(i, j int) bool { return r.lat[i] < r.lat[j] })
	pct := func(p float64) time.Duration {
		if len(r.lat) == 0 {
			return 0
		}
		return r.lat[min(len(r.lat)-1, int(p*float64(len(r.lat))))]
	}
	var first, peak, last int64
	if len(r.rss) > 0 {
		first, last = r.rss[min(len(r.rss)-1, len(r.rss)/10)], r.rss[len(r.rss)-1]
		for _, v := range r.rss {
			peak = max(peak, v)
		}
	}
	load, _ := os.ReadFile("/proc/loadavg")
	fmt.Printf("LOAD %s: %d requests in %.1f s = %.1f/s; outcomes %s; latency p50 %s p99 %s; caddy RSS %d MB after 10%%, peak %d MB, end %d MB; loadavg %s; GOMAXPROCS %d\n",
		name, total, r.elapsed.Seconds(), float64(total)/r.elapsed.Seconds(), strings.Join(kinds, " "),
		pct(0.5).Round(time.Millisecond), pct(0.99).Round(time.Millisecond), first/1024, peak/1024, last/1024,
		strings.TrimSpace(string(load)), runtime.GOMAXPROCS(0))
	ok := map[string]bool{}
	for _, e := range expected {
		ok[e] = true
	}
	for k, n := range r.outcomes {
		if !ok[k] {
			t.Errorf("%s: %d answers %q, which the run does not expect", name, n, k)
		}
	}
	if first > 0 && last > 2*first {
		t.Errorf("%s: Caddy's memory grew from %d MB to %d MB", name, first/1024, last/1024)
	}
}

func outcomeOf(resp *http.Response, err error) string {
	if err != nil {
		return "transport error"
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return strconv.Itoa(resp.StatusCode)
}

// loadCaddyfile is a gate with the bundled facilitator (memory approvals, SQLite journal,
// GUARDIAN_MODE off) before an upstream, with no access log.
const loadCaddyfile = `{
	admin {$CADDY_ADMIN}
	auto_https off
	log default {
		output stderr
		format x402_redact json
		level WARN
	}
	x402 {
		facilitator {
			` + testChainFacilitator + `
		}
	}
}

http://:{$API_PORT} {
	bind 127.0.0.1
	x402 {
		price 0.01 USDC
		pay_to {$X402_PAY_TO}
		network base-sepolia
		mime_type application/json
	}
	reverse_proxy {$UPSTREAM}
}
`

func startLoadGate(t *testing.T) (*testenv.Caddy, string, *testenv.Chain, *testenv.Token, *upstream) {
	chain, tok := testenv.StartChainWithToken(t, testenv.WithAccounts(20))
	up := startUpstream(t)
	port := testenv.FreePort(t)
	c := testenv.StartCaddy(t, loadCaddyfile, testenv.CaddyOptions{
		Env: []string{
			"X402_RPC_URL=" + chain.RPCURL, "X402_TOKEN=" + tok.Address.Hex(),
			"X402_FACILITATOR_KEY_FILE=" + writeKeyFile(t, chain.FacilitatorAccount()),
			"X402_PAY_TO=" + chain.Accounts[19].Address.Hex(), "UPSTREAM=" + up.srv.URL, "API_PORT=" + strconv.Itoa(port),
		},
		WaitPorts: []int{port},
	})
	return c, "http://127.0.0.1:" + strconv.Itoa(port), chain, tok, up
}

// TestLoadPaidPath sends paid requests from a pool of payments signed before the run (18
// payers, random nonces, valid for 15 minutes), each used once: every answer must be 200,
// and each is one settlement on anvil.
func TestLoadPaidPath(t *testing.T) {
	d := loadSeconds(t)
	c, api, chain, tok, up := startLoadGate(t)
	payTo := chain.Accounts[19].Address
	const pool = 20000
	headers := make([]string, pool)
	now := time.Now().Unix()
	var wg sync.WaitGroup
	for g := 0; g < runtime.GOMAXPROCS(0); g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := g; i < pool; i += runtime.GOMAXPROCS(0) {
				payer := chain.Accounts[1+i%18]
				a := testenv.Authorization{From: payer.Address, To: payTo, Value: big.NewInt(price),
					ValidAfter: big.NewInt(now - 600), ValidBefore: big.NewInt(now + 900), Nonce: testenv.RandomNonce(t)}
				headers[i] = goV1HeaderFor(t, tok, payer, a)
			}
		}(g)
	}
	wg.Wait()
	before := tok.BalanceOf(t, payTo)
	var next atomic.Int64
	r := runLoad(t, c.Pid(), loadConcurrency(t, 16), d, func(_, _ int) string {
		i := next.Add(1) - 1
		if i >= pool {
			return "pool exhausted"
		}
		req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("%s/paid/%d", api, i), nil)
		req.Header.Set("X-PAYMENT", headers[i])
		return outcomeOf(loadClient.Do(req))
	})
	r.report(t, "paid path", "200")
	moved := new(big.Int).Sub(tok.BalanceOf(t, payTo), before)
	if want := big.NewInt(int64(r.outcomes["200"]) * price); moved.Cmp(want) != 0 {
		t.Errorf("the payee received %s base units for %d paid answers, want %s", moved, r.outcomes["200"], want)
	}
	if up.count("") != r.outcomes["200"] {
		t.Errorf("the upstream ran %d times for %d paid answers", up.count(""), r.outcomes["200"])
	}
}

// TestLoadChallengePath sends unpaid requests: every answer must be the 402 challenge.
func TestLoadChallengePath(t *testing.T) {
	d := loadSeconds(t)
	c, api, _, _, up := startLoadGate(t)
	r := runLoad(t, c.Pid(), loadConcurrency(t, 32), d, func(w, n int) string {
		return outcomeOf(loadClient.Get(fmt.Sprintf("%s/api/%d/%d", api, w, n)))
	})
	r.report(t, "challenge path", "402")
	if up.count("") != 0 {
		t.Errorf("the upstream ran %d times for unpaid requests", up.count(""))
	}
}

// TestLoadVerdictAPI submits payments for verdicts and reads their status, half and half,
// on the verdict app (SQLite store) with rate limits raised past the load: every submit
// must be 201 and every read 200; after the run every submitted record gets its verdict.
func TestLoadVerdictAPI(t *testing.T) {
	d := loadSeconds(t)
	http.DefaultTransport.(*http.Transport).MaxIdleConnsPerHost = 1024 // doVerdictAPI's client keeps its connections
	f := newVerdictFleet(t, verdictSetup{})
	f.caddyfile = strings.Replace(f.caddyfile, "\tverdict {\n", "\tverdict {\n\t\trate_limit key 100000 100000\n\t\trate_limit ip 100000 100000\n", 1)
	in := f.start(t)
	var mu sync.Mutex
	var hashes []string
	r := runLoad(t, in.caddy.Pid(), loadConcurrency(t, 16), d, func(w, n int) string {
		mu.Lock()
		var h string
		if n%2 == 1 && len(hashes) > 0 {
			h = hashes[(w*7919+n)%len(hashes)]
		}
		mu.Unlock()
		if h != "" {
			res, err := doVerdictAPI(http.MethodGet, in.verdictAPI+"/transactions/"+h+"/approval-status", f.key, "")
			if err != nil {
				return "transport error"
			}
			return "read " + strconv.Itoa(res.Status)
		}
		status, hash, err := f.submitVerdict(in, f.okPayTo, fmt.Sprintf("load-%d-%d", w, n))
		if err != nil {
			return "transport error"
		}
		if status == http.StatusCreated {
			mu.Lock()
			hashes = append(hashes, hash)
			mu.Unlock()
		}
		return "submit " + strconv.Itoa(status)
	})
	r.report(t, "verdict API", "submit 201", "read 200")
	for _, h := range hashes {
		f.awaitVerdict(t, in, h)
	}
	fmt.Printf("LOAD verdict API: all %d submitted records judged\n", len(hashes))
}
