package integration_test

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/x402gate/x402gate/internal/testenv"
)

// traceCaddyfile is the Caddyfile of bench/run's paid section (bench/cmd/bench): the
// bundled facilitator with its default SQLite journal, which also keeps the gate's payment
// ledger, and one paid route proxied to an upstream.
const traceCaddyfile = `{
	admin {$CADDY_ADMIN}
	auto_https off
	persist_config off
	x402 {
		facilitator {
			` + testChainFacilitator + `
		}
	}
}

http://127.0.0.1:{$API_PORT} {
	x402 /paid {
		price 0.01 USDC
		pay_to {$X402_PAY_TO}
		network base-sepolia
		description "bench"
		mime_type application/json
	}
	reverse_proxy {$UPSTREAM}
}
`

// TestTracePaidRequestThroughCaddy traces paid requests at c=1 as bench/run sends them:
// one HTTP client with keep-alive, the built Caddy with the bench's Caddyfile, anvil with
// automine. Each span is the client's request, a JSON-RPC round trip of Caddy's
// (testenv.TraceCalls), the upstream's call, and, with X402_TRACE_FSYNC=1 and strace on
// the PATH, each fsync Caddy makes (the commits of the journal and of the payment ledger,
// in one SQLite file).
// Two requests are traced one after the other, so what the first leaves behind in front
// of the second shows. It checks the order a paid request must keep: the broadcast comes
// after the payment was verified and simulated, the upstream runs only after the receipt
// was read, and the client's answer comes after the upstream's. Run with -v to see the
// trace (bench/paid-request.md):
//
//	go test -count=1 -v -run TestTracePaidRequestThroughCaddy ./integration/
//	X402_TRACE_FSYNC=1 go test -count=1 -v -run TestTracePaidRequestThroughCaddy ./integration/
//	X402_TRACE_LOOP=5s X402_TRACE_RUNTIME=/tmp/rt.out go test -count=1 -v -run TestTracePaidRequestThroughCaddy ./integration/
func TestTracePaidRequestThroughCaddy(t *testing.T) {
	chain, tok := testenv.StartChainWithToken(t)
	node := testenv.TraceCalls(t, chain.RPCURL)
	var mu sync.Mutex
	var spans []testenv.Span
	add := func(s testenv.Span) {
		mu.Lock()
		defer mu.Unlock()
		spans = append(spans, s)
	}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		at := time.Now()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"city":"Lisbon","tempC":21}`)
		add(testenv.Span{Start: at, End: time.Now(), What: "upstream"})
	}))
	t.Cleanup(up.Close)
	payTo := testenv.NewAccount(t).Address
	port := testenv.FreePort(t)
	caddy := testenv.StartCaddy(t, traceCaddyfile, testenv.CaddyOptions{
		Env: []string{
			"X402_RPC_URL=" + node.URL,
			"X402_TOKEN=" + tok.Address.Hex(),
			"X402_PAY_TO=" + payTo.Hex(),
			"X402_FACILITATOR_KEY_FILE=" + writeKeyFile(t, chain.FacilitatorAccount()),
			"UPSTREAM=" + up.URL,
			"API_PORT=" + strconv.Itoa(port),
		},
		WaitPorts: []int{port},
	})
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}, Timeout: requestBound}
	url := fmt.Sprintf("http://127.0.0.1:%d/paid", port)
	payer := chain.Accounts[1]
	pay := func() time.Duration {
		header, _ := goV1Header(t, tok, payer, payTo)
		req, err := http.NewRequest(http.MethodGet, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("X-PAYMENT", header)
		start := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		end := time.Now()
		add(testenv.Span{Start: start, End: end, What: "client GET /paid"})
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("paid request: %d %s", resp.StatusCode, body)
		}
		return end.Sub(start)
	}
	pay() // warm the connections, the fee cache and the signer's nonce
	pay()
	time.Sleep(50 * time.Millisecond) // let the writes after the answers land
	stop := traceFsyncs(t, caddy.Pid())
	mu.Lock()
	spans = nil
	mu.Unlock()
	node.Reset()
	pay()
	pay()
	time.Sleep(50 * time.Millisecond)
	mu.Lock()
	all := node.LogTrace(t, append(spans, stop()...))
	mu.Unlock()
	var names []string
	for _, what := range all {
		if !strings.HasPrefix(what, "fsync") {
			names = append(names, what)
		}
	}
	if d, err := time.ParseDuration(os.Getenv("X402_TRACE_LOOP")); err == nil && d > 0 {
		traceLoop(t, caddy, d, pay)
	}
	// The order one paid request keeps, twice over.
	trace := strings.Join(names, "\n")
	for range 2 {
		for _, want := range []string{"client GET /paid", "rpc eth_call+eth_call+eth_getCode", "rpc eth_call",
			"rpc eth_sendRawTransaction", "rpc eth_getTransactionReceipt\n", "upstream"} {
			i := strings.Index(trace, want)
			if i < 0 {
				t.Fatalf("trace lacks %q after the phases before it:\n%s", want, trace)
			}
			trace = trace[i+len(want):]
		}
	}
}

// traceLoop sends paid requests one after another for d, after the trace, and logs how
// many were answered and their p50 and p90: for a comparison of two builds back to back on
// a busy machine (bench/paid-request.md). With X402_TRACE_RUNTIME set to a path, it saves
// there a Go runtime trace of Caddy (its admin /debug/pprof/trace) over 2 s of the loop,
// whose blocking profiles name the waits: go tool trace -pprof=syscall (fsyncs, socket
// writes), -pprof=net, -pprof=sched.
func traceLoop(t *testing.T, caddy *testenv.Caddy, d time.Duration, pay func() time.Duration) {
	saved := make(chan struct{})
	if out := os.Getenv("X402_TRACE_RUNTIME"); out != "" {
		go func() {
			defer close(saved)
			time.Sleep(d / 4)
			resp, err := http.Get(caddy.AdminURL + "/debug/pprof/trace?seconds=2")
			if err != nil {
				t.Errorf("runtime trace: %v", err)
				return
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			if err == nil {
				err = os.WriteFile(out, b, 0o600)
			}
			if err != nil {
				t.Errorf("runtime trace: %v", err)
			}
		}()
	} else {
		close(saved)
	}
	var lat []time.Duration
	for end := time.Now().Add(d); time.Now().Before(end); {
		lat = append(lat, pay())
	}
	<-saved
	slices.Sort(lat)
	t.Logf("loop: %d paid requests in %s at c=1, p50 %.2f ms, p90 %.2f ms", len(lat), d, msOf(lat[len(lat)/2]), msOf(lat[len(lat)*9/10]))
}

// traceFsyncs attaches strace to pid when X402_TRACE_FSYNC=1, and returns the function
// that stops it and returns pid's fsync and fdatasync calls meanwhile. strace stops Caddy
// at every system call, so the other spans of such a trace take longer than they do; its
// order is the point. Otherwise, or without strace, it returns none.
func traceFsyncs(t *testing.T, pid int) (stop func() []testenv.Span) {
	none := func() []testenv.Span { return nil }
	if os.Getenv("X402_TRACE_FSYNC") != "1" {
		return none
	}
	bin, err := exec.LookPath("strace")
	if err != nil {
		t.Log("no strace on the PATH: the trace names no fsync")
		return none
	}
	out := filepath.Join(t.TempDir(), "strace.out")
	cmd := exec.Command(bin, "-f", "-ttt", "-T", "-e", "trace=fsync,fdatasync", "-o", out, "-p", strconv.Itoa(pid))
	if err := cmd.Start(); err != nil {
		t.Logf("strace: %v: the trace names no fsync", err)
		return none
	}
	time.Sleep(300 * time.Millisecond) // attached to every thread
	return func() []testenv.Span {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
		f, err := os.Open(out)
		if err != nil {
			return nil
		}
		defer f.Close()
		return parseFsyncs(f)
	}
}

// parseFsyncs reads strace -f -ttt -T lines: "PID SECONDS.MICROS fsync(FD) = 0 <DURATION>",
// or a call split by another thread's into "<unfinished ...>" and "<... fsync resumed>".
func parseFsyncs(r io.Reader) []testenv.Span {
	var out []testenv.Span
	open := map[string]time.Time{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 3 {
			continue
		}
		sec, err := strconv.ParseFloat(f[1], 64)
		if err != nil {
			continue
		}
		at := time.Unix(0, int64(sec*1e9))
		line := strings.Join(f[2:], " ")
		switch {
		case strings.HasSuffix(line, "<unfinished ...>"):
			open[f[0]] = at
		case strings.HasPrefix(line, "<..."):
			if start, ok := open[f[0]]; ok {
				out = append(out, testenv.Span{Start: start, End: at, What: "fsync (a journal or ledger commit)"})
				delete(open, f[0])
			}
		default:
			d := f[len(f)-1]
			if !strings.HasPrefix(d, "<") {
				continue
			}
			secs, err := strconv.ParseFloat(strings.Trim(d, "<>"), 64)
			if err != nil {
				continue
			}
			out = append(out, testenv.Span{Start: at, End: at.Add(time.Duration(secs * 1e9)), What: "fsync (a journal or ledger commit)"})
		}
	}
	return out
}

// msOf is d in milliseconds.
func msOf(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
