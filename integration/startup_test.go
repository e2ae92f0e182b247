package integration_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/x402gate/x402gate/facilitator/journal"
	"github.com/x402gate/x402gate/internal/testenv"
)

// Start-up never waits on the chain (docs/facilitator.md#start-up): Caddy serves at once;
// a route whose network is not ready answers 503 network_unavailable with Retry-After
// until its RPC endpoint answered with the right chain id and its start-up reconcile ran.

// startupCaddyfile has a free route (/free), a route paid on base-sepolia (/paid/*) and,
// with wrongChain, a route paid on a network `base` whose RPC endpoint is the same local
// chain (chain id 84532, not base's 8453).
func startupCaddyfile(wrongChain bool) string {
	base, baseRoute := "", ""
	if wrongChain {
		base = `
			network base {
				rpc {env.X402_RPC_URL}
				asset {$X402_TOKEN}
				asset_name USDC
				asset_version 2
			}`
		baseRoute = `
		x402 /base/* {
			price 0.01 USDC
			pay_to {$PAY_TO}
			network base
		}`
	}
	return `{
` + globalOptions + `	x402 {
		facilitator {
			network base-sepolia {
				rpc {env.X402_RPC_URL}
				asset {$X402_TOKEN}
				asset_name USDC
				asset_version 2
			}` + base + `
			signer_key {file.{$X402_FACILITATOR_KEY_FILE}}
			journal sqlite {$X402_JOURNAL}
			receipt_timeout 3s
		}
	}
}

http://:{$API_PORT} {
	bind 127.0.0.1
	handle /free {
		respond "free" 200
	}
	handle {
		x402 /paid/* {
			price 0.01 USDC
			pay_to {$PAY_TO}
			network base-sepolia
		}` + baseRoute + `
		reverse_proxy {$UPSTREAM}
	}
}
`
}

// startupGate is a Caddy of these tests with its environment.
type startupGate struct {
	*fcGate
	env []string
}

// startStartupGate starts Caddy on rpcURL without waiting for its networks, with the
// SQLite journal at journalPath.
func startStartupGate(t *testing.T, g *fcGate, rpcURL, journalPath string, wrongChain bool) *startupGate {
	t.Helper()
	port := testenv.FreePort(t)
	g.api = "http://127.0.0.1:" + strconv.Itoa(port)
	s := &startupGate{fcGate: g, env: []string{
		"X402_RPC_URL=" + rpcURL,
		"X402_TOKEN=" + g.tok.Address.Hex(),
		"X402_FACILITATOR_KEY_FILE=" + writeKeyFile(t, g.chain.FacilitatorAccount()),
		"X402_JOURNAL=" + journalPath,
		"PAY_TO=" + g.payTo.Hex(),
		"UPSTREAM=" + g.up.srv.URL,
		"API_PORT=" + strconv.Itoa(port),
	}}
	g.caddy = testenv.StartCaddy(t, startupCaddyfile(wrongChain), testenv.CaddyOptions{
		Env: s.env, WaitPorts: []int{port}, NoWaitNetworks: true,
	})
	return s
}

func newStartupGate(t *testing.T, chain *testenv.Chain, tok *testenv.Token) *fcGate {
	return &fcGate{chain: chain, tok: tok, up: startUpstream(t), payTo: testenv.NewAccount(t).Address}
}

// servesFree checks that the route without x402 answers at once.
func (g *startupGate) servesFree(t *testing.T) {
	t.Helper()
	if r := mustDo(t, http.MethodGet, g.api+"/free", nil); r.Status != http.StatusOK || string(r.Body) != "free" {
		t.Fatalf("the free route: %d %s, want 200 free", r.Status, r.Body)
	}
}

// unavailable checks that path answers 503 network_unavailable with Retry-After, unpaid
// and paid, and that nothing reached the upstream or moved on chain. It returns the
// answer's message.
func (g *startupGate) unavailable(t *testing.T, path string) string {
	t.Helper()
	r := mustDo(t, http.MethodGet, g.api+path, nil)
	msg := wantNetworkUnavailable(t, r)
	g.refusedUnpaid(t, newPayer(t, g.tok), path, fcWant{status: http.StatusServiceUnavailable, reason: "network_unavailable"})
	return msg
}

func wantNetworkUnavailable(t *testing.T, r httpResult) string {
	t.Helper()
	var body struct {
		Error   string `json:"error"`
		Message string `json:"message"`
	}
	if r.Status != http.StatusServiceUnavailable || json.Unmarshal(r.Body, &body) != nil || body.Error != "network_unavailable" {
		t.Fatalf("answer %d %s, want 503 network_unavailable", r.Status, r.Body)
	}
	if ra := r.Header.Get("Retry-After"); ra == "" {
		t.Errorf("the 503 has no Retry-After")
	}
	return body.Message
}

// paysWithClient pays path with the real @x402/fetch client and checks the transfer.
func (g *startupGate) paysWithClient(t *testing.T, path string) {
	t.Helper()
	payer := newPayer(t, g.tok)
	out := payWith(t, payV2Script, payer, g.api+path, "X402_TOKEN="+g.tok.Address.Hex())
	if out.Status != http.StatusOK || out.PaymentResponseHeader == nil {
		t.Fatalf("@x402/fetch: status %d %s", out.Status, out.Body)
	}
	checkOnChain(t, g.chain, g.tok, decodeSettleResponse(t, *out.PaymentResponseHeader).Transaction, payer.Address, g.payTo)
}

// TestStartupRPCDown: with the RPC endpoint down, Caddy starts; the free route answers
// at once and the paid route 503 network_unavailable with Retry-After. When the endpoint
// comes up, the network becomes ready and a payment settles.
func TestStartupRPCDown(t *testing.T) {
	chain, tok := testenv.StartChainWithToken(t)
	proxy := startRPCFaultProxy(t, chain.RPCURL)
	proxy.set(t, "down")
	g := startStartupGate(t, newStartupGate(t, chain, tok), proxy.url(), filepath.Join(t.TempDir(), "journal.db"), false)
	g.servesFree(t)
	if msg := g.unavailable(t, "/paid/down"); !strings.Contains(msg, "eip155:84532") {
		t.Errorf("the 503's message %q does not name the network", msg)
	}
	proxy.set(t, "pass")
	g.caddy.WaitNetworks(t, time.Now().Add(2*time.Minute))
	g.paysWithClient(t, "/paid/up")
}

// stallProxy forwards JSON-RPC to a node, except that while stalled it holds every request
// that calls one of its methods until it is released.
type stallProxy struct {
	target  string
	methods []string
	url     string

	mu      sync.Mutex
	release chan struct{} // closed: nothing is held
	held    int
}

func startStallProxy(t *testing.T, target string, methods ...string) *stallProxy {
	t.Helper()
	p := &stallProxy{target: target, methods: methods, release: make(chan struct{})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p.url = "http://" + ln.Addr().String()
	srv := &http.Server{Handler: http.HandlerFunc(p.serve), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() {
		p.unstall()
		_ = srv.Close()
	})
	return p
}

func (p *stallProxy) unstall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.release:
	default:
		close(p.release)
	}
}

func (p *stallProxy) heldCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.held
}

func (p *stallProxy) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 8<<20))
	if err != nil {
		return
	}
	for _, m := range p.methods {
		if bytes.Contains(body, []byte(`"`+m+`"`)) {
			p.mu.Lock()
			p.held++
			release := p.release
			p.mu.Unlock()
			select {
			case <-release:
			case <-r.Context().Done():
				return
			}
			break
		}
	}
	resp, err := http.Post(p.target, "application/json", bytes.NewReader(body))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
}

// unfinished is the journal's rows not finished yet.
func unfinished(t *testing.T, path string) []journal.Settlement {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	j, err := journal.OpenSQLite(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	rows, err := j.Unfinished(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

// TestStartupJournalDoesNotDelay: a journal holds a settlement left broadcast (its
// receipt never came before Caddy stopped). Caddy starts again while the node holds every
// receipt request: the free route and the paid route's 503 are answered while the
// start-up reconcile waits. Once the receipts come, the reconcile confirms the row and a
// payment settles.
func TestStartupJournalDoesNotDelay(t *testing.T) {
	chain, tok := testenv.StartChainWithToken(t)
	jpath := filepath.Join(t.TempDir(), "journal.db")

	// A settlement whose receipt the first Caddy never saw: 502 settlement_pending.
	hide := startRPCFaultProxy(t, chain.RPCURL)
	hide.set(t, "no-receipt")
	first := startStartupGate(t, newStartupGate(t, chain, tok), hide.url(), jpath, false)
	first.caddy.WaitNetworks(t, time.Now().Add(time.Minute))
	header, _ := goV1Header(t, tok, newPayer(t, tok), first.payTo)
	if r := mustDo(t, http.MethodGet, first.api+"/paid/pending", map[string]string{"X-PAYMENT": header}); r.Status != http.StatusBadGateway {
		t.Fatalf("a payment whose receipt is hidden: %d %s, want 502 settlement_pending", r.Status, r.Body)
	}
	first.caddy.Stop()
	if rows := unfinished(t, jpath); len(rows) != 1 || rows[0].State != journal.StateBroadcast {
		t.Fatalf("journal rows %+v, want one broadcast row", rows)
	}

	stall := startStallProxy(t, chain.RPCURL, "eth_getTransactionReceipt", "eth_getTransactionByHash", "eth_sendRawTransaction")
	// `caddy validate` of the same config and journal runs no reconcile and broadcasts
	// nothing: it asks the node for no receipt, and the row stays as it was.
	if out, err := first.validate(t, false, "X402_RPC_URL="+stall.url, "X402_JOURNAL="+jpath); err != nil {
		t.Fatalf("caddy validate: %v:\n%s", err, out)
	}
	if n := stall.heldCount(); n != 0 {
		t.Fatalf("caddy validate made %d receipt or broadcast calls: it ran a reconcile", n)
	}
	if rows := unfinished(t, jpath); len(rows) != 1 || rows[0].State != journal.StateBroadcast {
		t.Fatalf("journal rows %+v after caddy validate, want the one broadcast row", rows)
	}
	g := startStartupGate(t, newStartupGate(t, chain, tok), stall.url, jpath, false)
	for deadline := time.Now().Add(time.Minute); stall.heldCount() == 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the start-up reconcile asked for no receipt: the test would prove nothing")
		}
	}
	g.servesFree(t)
	if msg := g.unavailable(t, "/paid/reconciling"); !strings.Contains(msg, "starting") {
		t.Errorf("the 503's message %q does not say the network is starting", msg)
	}
	stall.unstall()
	g.caddy.WaitNetworks(t, time.Now().Add(2*time.Minute))
	if rows := unfinished(t, jpath); len(rows) != 0 {
		t.Errorf("journal rows %+v after the start-up reconcile, want none", rows)
	}
	g.paysWithClient(t, "/paid/after")
}

// TestStartupWrongChainID: the network `base` is served by an endpoint of another chain.
// Caddy starts; base's route answers 503 network_unavailable and an error log line names
// the network, while the free route and base-sepolia's paid route are served. `caddy
// validate` of the same config exits non-zero naming the network; without base it passes.
func TestStartupWrongChainID(t *testing.T) {
	chain, tok := testenv.StartChainWithToken(t)
	g := startStartupGate(t, newStartupGate(t, chain, tok), chain.RPCURL, filepath.Join(t.TempDir(), "journal.db"), true)
	g.servesFree(t)
	deadline := time.Now().Add(time.Minute)
	for !strings.Contains(g.caddy.Logs(), `"level":"error"`) || !strings.Contains(g.caddy.Logs(), "eip155:8453") {
		if time.Now().After(deadline) {
			t.Fatalf("no error log line names eip155:8453")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if msg := g.unavailable(t, "/base/x"); !strings.Contains(msg, "wrong_chain_id") || !strings.Contains(msg, "eip155:8453") {
		t.Errorf("the 503's message %q does not name the network and its wrong chain id", msg)
	}
	for r := mustDo(t, http.MethodGet, g.api+"/paid/x", nil); r.Status != http.StatusPaymentRequired; r = mustDo(t, http.MethodGet, g.api+"/paid/x", nil) {
		if r.Status != http.StatusServiceUnavailable || time.Now().After(deadline) {
			t.Fatalf("base-sepolia's route: %d %s, want 402 once its network is ready", r.Status, r.Body)
		}
		time.Sleep(50 * time.Millisecond)
	}
	g.paysWithClient(t, "/paid/y")

	out, err := g.validate(t, true)
	if err == nil || !strings.Contains(out, "eip155:8453") {
		t.Errorf("caddy validate: %v, want a failure naming eip155:8453:\n%s", err, out)
	}
	if out, err := g.validate(t, false); err != nil {
		t.Errorf("caddy validate without the wrong network: %v:\n%s", err, out)
	}
}

// validate runs `caddy validate` on the Caddyfile of g, with or without base; env, last,
// overrides g's environment and the temporary journal.
func (g *startupGate) validate(t *testing.T, wrongChain bool, env ...string) (string, error) {
	t.Helper()
	dir := t.TempDir()
	file := filepath.Join(dir, "Caddyfile")
	if err := os.WriteFile(file, []byte(startupCaddyfile(wrongChain)), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(testenv.CaddyBinary(t), "validate", "--config", file, "--adapter", "caddyfile")
	cmd.Env = append(os.Environ(), g.env...)
	cmd.Env = append(cmd.Env, testenv.CaddyAdminVar+"=127.0.0.1:"+strconv.Itoa(testenv.FreePort(t)),
		"HOME="+dir, "XDG_CONFIG_HOME="+dir, "XDG_DATA_HOME="+dir, "X402_JOURNAL="+filepath.Join(dir, "journal.db"))
	cmd.Env = append(cmd.Env, env...)
	out, err := cmd.CombinedOutput()
	testenv.ScanCanaries(t.Name()+": caddy validate output", out)
	return string(out), err
}
