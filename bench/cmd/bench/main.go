// Command bench runs the peer comparisons of bench/run side by side and writes
// bench/results.md: x402gate against Caddy's own respond and the reference x402 stack (npm
// x402-express 1.2.0 and the facilitator of x402 1.2.0), on one machine, one anvil, in one
// run, alternating the two sides over several rounds and reporting medians and ratios. It
// also runs the Go benchmarks of the verify CPU path, the policy engine, the verdict service
// and the memory cost, and an RSS soak of the Caddy process on the paid path.
//
// It is started by bench/run, which installs wrk and the npm peers and builds Caddy first.
// Everything it starts (anvil, Caddy, node, wrk) is stopped when it exits.
package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/ethereum/go-ethereum/crypto"

	"github.com/x402gate/x402gate/internal/testenv"
)

type config struct {
	root, out, caddy, node, wrk, results string
	before                               string // git rev:path of the run before's results.md
	only                                 map[string]bool
	rounds, paidRounds                   int
	wrkDur, verifyDur, paidDur           time.Duration
	soak                                 time.Duration
	verifyConc, soakConc                 int
	payers                               int
	started                              int64
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "[%s] %s\n", time.Now().UTC().Format("15:04:05"), fmt.Sprintf(format, args...))
}

func main() {
	var c config
	var only string
	flag.StringVar(&c.root, "root", ".", "module root")
	flag.StringVar(&c.out, "out", "bench/out", "directory for logs, profiles and the run's files")
	flag.StringVar(&c.caddy, "caddy", "bench/out/caddy", "the Caddy binary built from ./cmd/caddy")
	flag.StringVar(&c.node, "node", "node", "node")
	flag.StringVar(&c.wrk, "wrk", "wrk", "wrk")
	flag.StringVar(&c.results, "results", "bench/results.md", "where to write the results")
	flag.StringVar(&c.before, "before", defaultBefore, "the results.md of the run before, as git rev:path (the goals table's before column)")
	flag.StringVar(&only, "only", "challenge,verify,cpu,paid,schemes,verdict,memory,pool,soak", "sections to run")
	flag.IntVar(&c.rounds, "rounds", 3, "rounds of the challenge and verify comparisons")
	flag.IntVar(&c.paidRounds, "paid-rounds", 2, "rounds of the paid-path comparison per concurrency")
	flag.DurationVar(&c.wrkDur, "wrk-duration", 5*time.Second, "one wrk run")
	flag.DurationVar(&c.verifyDur, "verify-duration", 5*time.Second, "one /verify run")
	flag.DurationVar(&c.paidDur, "paid-duration", 6*time.Second, "one paid-path run")
	flag.DurationVar(&c.soak, "soak", goalSoak, "the RSS soak on the paid path")
	flag.IntVar(&c.verifyConc, "verify-conc", 8, "concurrent /verify requests")
	flag.IntVar(&c.soakConc, "soak-conc", 64, "concurrent paid requests of the RSS soak")
	flag.IntVar(&c.payers, "payers", 64, "distinct payer accounts")
	flag.Int64Var(&c.started, "started", 0, "when bench/run started (Unix seconds), for the reported runtime")
	flag.Parse()
	c.only = map[string]bool{}
	for _, s := range strings.Split(only, ",") {
		c.only[strings.TrimSpace(s)] = true
	}

	tb := &benchTB{}
	code := 0
	func() {
		defer func() {
			if r := recover(); r != nil {
				if f, ok := r.(fatalError); ok {
					logf("FAILED: %s", f.msg)
				} else {
					logf("PANIC: %v", r)
				}
				code = 1
			}
		}()
		sigs := make(chan os.Signal, 1)
		signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
		go func() {
			<-sigs
			logf("interrupted: stopping what was started")
			stopAll()
			tb.runCleanups()
			os.Exit(130)
		}()
		runAll(&c, tb)
	}()
	stopAll()
	tb.runCleanups()
	os.Exit(code)
}

// env is what the run shares between its sections.
type env struct {
	c                     *config
	tb                    *benchTB
	dir                   string // this run's directory under c.out
	chain                 *testenv.Chain
	token                 *testenv.Token
	proxy                 *rpcProxy
	signer                *signer
	caddy                 *proc
	admin                 string
	gateURL               string // our gate's paid route
	respURL               string // Caddy respond with the same 402
	facURL                string // our facilitator HTTP API
	apiKey                string
	refFac                *proc
	refGate               *proc
	refFacURL, refGateURL string
	upstream              string
	rep                   *report
	caddyfile             string
}

const paidPath = "/paid"

// The routes of the ways to pay beside EIP-3009 (schemes): exact over Permit2, and upto over
// Permit2 whose upstream reports uptoCost, half the price.
const (
	permit2Path = "/paid-permit2"
	uptoPath    = "/paid-upto"
	uptoCost    = "0.0005 USDC"
)

func runAll(c *config, tb *benchTB) {
	started := time.Now()
	if c.started > 0 {
		started = time.Unix(c.started, 0)
	}
	rep := newReport(c)
	if err := os.MkdirAll(c.out, 0o755); err != nil {
		tb.Fatalf("%v", err)
	}
	dir, err := os.MkdirTemp(c.out, "run-")
	if err != nil {
		tb.Fatalf("%v", err)
	}
	dir, _ = filepath.Abs(dir)
	tb.tmp = dir
	e := &env{c: c, tb: tb, dir: dir, rep: rep}
	logf("run directory %s (logs, profiles)", dir)

	needChain := c.only["challenge"] || c.only["verify"] || c.only["paid"] || c.only["schemes"] || c.only["soak"]
	if needChain {
		e.setUp()
	}
	if c.only["challenge"] {
		e.challenge()
	}
	if c.only["verify"] {
		e.verify()
	}
	if c.only["paid"] {
		e.paid()
	}
	if c.only["schemes"] {
		e.schemes()
	}
	if c.only["soak"] {
		e.soakRSS()
	}
	// The Go benchmarks run with the servers stopped: they have the machine to themselves.
	stopAll()
	tb.runCleanups()
	if c.only["challenge"] {
		e.challengeInProcess()
	}
	if c.only["cpu"] {
		e.cpu()
	}
	if c.only["verdict"] {
		e.verdict()
	}
	if c.only["memory"] {
		e.memory()
	}
	if c.only["pool"] {
		e.pool()
	}
	rep.runtime = time.Since(started)
	rep.write(c.results)
	fmt.Println(rep.table())
	logf("wrote %s in %s", c.results, rep.runtime.Round(time.Second))
}

func (e *env) setUp() {
	c := e.c
	logf("anvil with our token and %d funded payers (internal/testenv)", c.payers)
	e.chain, e.token = testenv.StartChainWithToken(e.tb, testenv.WithAccounts(c.payers+2))
	var err error
	if e.proxy, err = newRPCProxy(e.chain.RPCURL); err != nil {
		e.tb.Fatalf("rpc proxy: %v", err)
	}
	e.tb.Cleanup(e.proxy.close)

	// Accounts[0] signs our settlements, Accounts[1] the reference's; the rest pay. The payee
	// is a fresh address.
	var payers []payer
	for _, a := range e.chain.Accounts[2:] {
		payers = append(payers, payer{key: a.Key, addr: a.Address})
	}
	payToKey, _ := crypto.GenerateKey()
	payTo := crypto.PubkeyToAddress(payToKey.PublicKey)
	e.signer = newSigner(e.chain.ChainID, e.token.Address, payTo, bigInt(1000), payers)

	ourKey := filepath.Join(e.dir, "facilitator.key")
	refKey := filepath.Join(e.dir, "ref-facilitator.key")
	apiKeyFile := filepath.Join(e.dir, "facilitator-api.key")
	writeSecret(e.tb, ourKey, "0x"+hex.EncodeToString(crypto.FromECDSA(e.chain.Accounts[0].Key)))
	writeSecret(e.tb, refKey, "0x"+hex.EncodeToString(crypto.FromECDSA(e.chain.Accounts[1].Key)))
	var k [24]byte
	_, _ = rand.Read(k[:])
	e.apiKey = hex.EncodeToString(k[:])
	writeSecret(e.tb, apiKeyFile, e.apiKey)

	// The upstream both gates proxy to.
	upPort := freePort()
	e.upstream = fmt.Sprintf("http://127.0.0.1:%d%s", upPort, paidPath)
	up := &http.Server{Addr: fmt.Sprintf("127.0.0.1:%d", upPort), Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == uptoPath {
			w.Header().Set("X402-Cost", uptoCost) // the metered route's cost (docs/gate.md#metering)
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"city":"Lisbon","tempC":21}`)
	})}
	go func() { _ = up.ListenAndServe() }()
	e.tb.Cleanup(func() { _ = up.Close() })

	gatePort, respPort, facPort, adminPort := freePort(), freePort(), freePort(), freePort()
	e.admin = fmt.Sprintf("127.0.0.1:%d", adminPort)
	e.gateURL = fmt.Sprintf("http://127.0.0.1:%d%s", gatePort, paidPath)
	e.respURL = fmt.Sprintf("http://127.0.0.1:%d%s", respPort, paidPath)
	e.facURL = fmt.Sprintf("http://127.0.0.1:%d", facPort)
	e.caddyfile = fmt.Sprintf(`{
	admin %s
	auto_https off
	persist_config off
	x402 {
		facilitator {
			network base-sepolia {
				rpc {env.X402_RPC_URL}
				asset %s
				asset_name USDC
				asset_version 2
			}
			signer_key {file.%s}
		}
	}
}

http://127.0.0.1:%d {
	x402 %[5]s {
		price 0.001 USDC
		pay_to %[6]s
		network base-sepolia
		description "bench"
		mime_type application/json
	}
	x402 %[10]s {
		price 0.001 USDC
		pay_to %[6]s
		network base-sepolia
		description "bench"
		mime_type application/json
		transfer permit2
	}
	x402 %[11]s {
		scheme upto
		price 0.001 USDC
		pay_to %[6]s
		network base-sepolia
		description "bench"
		mime_type application/json
	}
	reverse_proxy 127.0.0.1:%[7]d
}

http://127.0.0.1:%d {
	x402_facilitator {
		api_key {file.%[9]s}
	}
}
`, e.admin, e.token.Address.Hex(), ourKey, gatePort, paidPath, payTo.Hex(), upPort, facPort, apiKeyFile, permit2Path, uptoPath)
	cf := filepath.Join(e.dir, "Caddyfile")
	if err := os.WriteFile(cf, []byte(e.caddyfile), 0o600); err != nil {
		e.tb.Fatalf("%v", err)
	}
	caddyBin, _ := filepath.Abs(e.c.caddy)
	data := filepath.Join(e.dir, "caddy-home")
	logf("caddy (%s): gate %s, facilitator %s", caddyBin, e.gateURL, e.facURL)
	e.caddy, err = start("caddy", filepath.Join(e.dir, "caddy.log"), e.dir,
		[]string{"X402_RPC_URL=" + e.proxy.url, "XDG_DATA_HOME=" + data, "XDG_CONFIG_HOME=" + data, "HOME=" + data},
		caddyBin, "run", "--config", cf, "--adapter", "caddyfile")
	if err != nil {
		e.tb.Fatalf("%v", err)
	}
	if err := waitHTTP(e.caddy, e.gateURL); err != nil {
		e.tb.Fatalf("%v", err)
	}

	refScript, _ := filepath.Abs(filepath.Join(e.c.root, "bench", "ref.mjs"))
	refFacPort, refGatePort := freePort(), freePort()
	e.refFacURL = fmt.Sprintf("http://127.0.0.1:%d", refFacPort)
	e.refGateURL = fmt.Sprintf("http://127.0.0.1:%d%s", refGatePort, paidPath)
	e.refFac, err = start("ref facilitator", filepath.Join(e.dir, "ref-facilitator.log"), e.dir, []string{
		fmt.Sprintf("REF_PORT=%d", refFacPort), "REF_RPC_URL=" + e.proxy.url, "REF_SIGNER_KEY_FILE=" + refKey,
	}, e.c.node, refScript, "facilitator")
	if err != nil {
		e.tb.Fatalf("%v", err)
	}
	e.refGate, err = start("ref gate", filepath.Join(e.dir, "ref-gate.log"), e.dir, []string{
		fmt.Sprintf("REF_PORT=%d", refGatePort), "REF_FACILITATOR_URL=" + e.refFacURL, "REF_UPSTREAM_URL=" + e.upstream,
		"REF_PAY_TO=" + payTo.Hex(), "REF_TOKEN=" + e.token.Address.Hex(), "REF_PRICE=1000", "REF_PATH=" + paidPath,
	}, e.c.node, refScript, "gate")
	if err != nil {
		e.tb.Fatalf("%v", err)
	}
	for _, w := range []struct {
		p   *proc
		url string
	}{{e.refFac, e.refFacURL + "/health"}, {e.refGate, strings.TrimSuffix(e.refGateURL, paidPath) + "/health"}} {
		if err := waitHTTP(w.p, w.url); err != nil {
			e.tb.Fatalf("%v", err)
		}
	}
	e.addRespondSite(respPort, cf)
}

// addRespondSite reads our 402 and adds a site that answers the gate site's paths with
// Caddy's respond, the same status, body and headers (respondSite), then reloads Caddy with it.
func (e *env) addRespondSite(port int, cf string) {
	resp, err := http.Get(e.gateURL)
	if err != nil {
		e.tb.Fatalf("our 402: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusPaymentRequired {
		e.tb.Fatalf("our gate answered %d, not 402: %s", resp.StatusCode, snippet(body))
	}
	if bytes.ContainsRune(body, '`') {
		e.tb.Fatalf("the 402 body holds a backtick; cannot quote it in a Caddyfile")
	}
	e.caddyfile += respondSite(port, resp.Header, body, resp.StatusCode)
	if err := os.WriteFile(cf, []byte(e.caddyfile), 0o600); err != nil {
		e.tb.Fatalf("%v", err)
	}
	req, _ := http.NewRequest(http.MethodPost, "http://"+e.admin+"/load", strings.NewReader(e.caddyfile))
	req.Header.Set("Content-Type", "text/caddyfile")
	lr, err := http.DefaultClient.Do(req)
	if err != nil {
		e.tb.Fatalf("caddy reload: %v", err)
	}
	lb, _ := io.ReadAll(lr.Body)
	lr.Body.Close()
	if lr.StatusCode != http.StatusOK {
		e.tb.Fatalf("caddy reload: %d %s", lr.StatusCode, snippet(lb))
	}
	if err := waitHTTP(e.caddy, e.respURL); err != nil {
		e.tb.Fatalf("%v", err)
	}
	r2, err := http.Get(e.respURL)
	if err != nil {
		e.tb.Fatalf("respond site: %v", err)
	}
	b2, _ := io.ReadAll(r2.Body)
	r2.Body.Close()
	if r2.StatusCode != resp.StatusCode || !bytes.Equal(b2, body) {
		e.tb.Fatalf("the respond site does not answer our 402 byte for byte (%d, %s)", r2.StatusCode, snippet(b2))
	}
	for _, h := range []http.Header{resp.Header, r2.Header} {
		h.Del("Date")
	}
	if !maps.EqualFunc(resp.Header, r2.Header, slices.Equal) {
		e.tb.Fatalf("the respond site's headers differ from our 402's: %v against %v", r2.Header, resp.Header)
	}
	var names []string
	for n := range resp.Header {
		names = append(names, n)
	}
	slices.Sort(names)
	e.rep.challengeHeaders = strings.Join(names, ", ")
	e.rep.challengeBody = len(body)
}

// respondSite is a Caddyfile site on port that answers status, body and the headers of h
// (but those net/http writes itself) with Caddy's respond, like with like the gate site: the
// headers in one handler, and respond on the gate site's three paths, which Caddy orders as it
// orders the gate's x402 routes (the longest path first), so a request for paidPath passes
// the same path matchers on both sites (bench/README.md).
func respondSite(port int, h http.Header, body []byte, status int) string {
	var site strings.Builder
	fmt.Fprintf(&site, "\nhttp://127.0.0.1:%d {\n\theader {\n", port)
	for _, name := range slices.Sorted(maps.Keys(h)) {
		switch name {
		case "Date", "Content-Length", "Server":
			continue
		}
		for _, v := range h[name] {
			fmt.Fprintf(&site, "\t\t+%s `%s`\n", name, v)
		}
	}
	site.WriteString("\t}\n")
	for _, path := range []string{paidPath, permit2Path, uptoPath} {
		fmt.Fprintf(&site, "\trespond %s `%s` %d\n", path, body, status)
	}
	site.WriteString("}\n")
	return site.String()
}

func writeSecret(tb *benchTB, path, v string) {
	if err := os.WriteFile(path, []byte(v+"\n"), 0o600); err != nil {
		tb.Fatalf("%v", err)
	}
}

func goCmd(ctx context.Context, root string, args ...string) (string, error) {
	return run(ctx, root, nil, "go", args...)
}
