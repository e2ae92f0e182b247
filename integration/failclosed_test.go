package integration_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"

	"github.com/x402gate/x402gate/internal/testenv"
)

// The fail-closed matrix (docs/failure-modes.md): every answer of the verdict service that
// is not an explicit valid approval, every fault of the chain's RPC and every store that
// goes away must leave the upstream uncalled and the payer's tokens where they were. Each
// case goes through the built Caddy binary with a real chain; only the faults themselves
// come from a fake (a verdict service or an RPC proxy that misbehaves on demand) or from
// stopping a real server.

// fcCaddyfile is the Caddyfile of the matrix: one bundled facilitator whose RPC, store,
// journal and guardian are the case's, in front of a counting upstream under /paid/*.
func fcCaddyfile(store, journal, guardian string) string {
	return `{
` + globalOptions + `	x402 {
		facilitator {
			` + testChainFacilitator + `
			` + store + `
			` + journal + `
			` + guardian + `
			receipt_timeout 3s
			reconcile_interval 1s
		}
	}
}

http://:{$API_PORT} {
	bind 127.0.0.1
	log {
		output stderr
		format x402_redact json
	}
	x402 /paid/* {
		price 0.01 USDC
		pay_to {$PAY_TO}
		network base-sepolia
		mime_type application/json
	}
	reverse_proxy {$UPSTREAM}
}
`
}

// fcGate is one Caddy of the matrix with its chain, token, upstream and payee.
type fcGate struct {
	chain *testenv.Chain
	tok   *testenv.Token
	up    *upstream
	payTo common.Address
	caddy *testenv.Caddy
	api   string
}

// fcOptions says what a matrix Caddy runs on; empty fields take the embedded defaults.
type fcOptions struct {
	rpcURL   string // default: anvil itself
	store    string // default: store memory
	journal  string // default: journal sqlite (in Caddy's data directory)
	guardian string // default: guardian_mode off
	env      []string
}

func startFCGate(t *testing.T, chain *testenv.Chain, tok *testenv.Token, o fcOptions) *fcGate {
	t.Helper()
	g := &fcGate{chain: chain, tok: tok, up: startUpstream(t), payTo: testenv.NewAccount(t).Address}
	if o.rpcURL == "" {
		o.rpcURL = chain.RPCURL
	}
	if o.store == "" {
		o.store = "store memory"
	}
	if o.journal == "" {
		o.journal = "journal sqlite"
	}
	if o.guardian == "" {
		o.guardian = "guardian_mode off"
	}
	port := testenv.FreePort(t)
	g.api = "http://127.0.0.1:" + strconv.Itoa(port)
	g.caddy = testenv.StartCaddy(t, fcCaddyfile(o.store, o.journal, o.guardian), testenv.CaddyOptions{
		Env: append([]string{
			"X402_RPC_URL=" + o.rpcURL,
			"X402_TOKEN=" + tok.Address.Hex(),
			"X402_FACILITATOR_KEY_FILE=" + writeKeyFile(t, chain.FacilitatorAccount()),
			"PAY_TO=" + g.payTo.Hex(),
			"UPSTREAM=" + g.up.srv.URL,
			"API_PORT=" + strconv.Itoa(port),
		}, o.env...),
		WaitPorts: []int{port},
	})
	return g
}

// newPayer is a fresh account holding 1 token, so that no two cases share a payer (the
// verdict fault server tells cases apart by the payer, and per-payer limits stay apart).
func newPayer(t *testing.T, tok *testenv.Token) testenv.Account {
	t.Helper()
	p := testenv.NewAccount(t)
	tok.Mint(t, p.Address, big.NewInt(1_000_000))
	return p
}

// signerNonce is the facilitator account's mined transaction count, read from anvil itself.
func signerNonce(t *testing.T, chain *testenv.Chain) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, err := chain.Client.PendingNonceAt(ctx, chain.FacilitatorAccount().Address)
	if err != nil {
		t.Fatalf("signer nonce: %v", err)
	}
	return n
}

// fcWant is what a refused case must answer: its status and a reason the body carries,
// and, for verdict faults, the guardian status.
type fcWant struct {
	status   int
	reason   string
	guardian string
}

// refusedUnpaid pays path on g with a fresh payment of payer and checks that the answer
// is want, that the upstream never saw path, that the payer's and the payee's balances
// did not move and that no authorization of the payer was used.
func (g *fcGate) refusedUnpaid(t *testing.T, payer testenv.Account, path string, want fcWant) httpResult {
	t.Helper()
	bal := balances(t, g.tok, payer.Address, g.payTo)
	header, auth := goV1Header(t, g.tok, payer, g.payTo)
	r, err := do(t, http.MethodGet, g.api+path, "", map[string]string{"X-PAYMENT": header})
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	checkRefusal(t, r, want)
	if n := g.up.count(path); n != 0 {
		t.Errorf("the upstream saw %s %d times, want 0", path, n)
	}
	wantDelta(t, g.tok, payer.Address, bal[0], 0)
	wantDelta(t, g.tok, g.payTo, bal[1], 0)
	if g.tok.AuthorizationState(t, payer.Address, auth.Nonce) {
		t.Errorf("the payer's authorization was used on chain")
	}
	return r
}

func checkRefusal(t *testing.T, r httpResult, want fcWant) {
	t.Helper()
	if r.Status != want.status {
		t.Errorf("status %d, want %d: %s", r.Status, want.status, r.Body)
	}
	var body struct {
		Error    string `json:"error"`
		Guardian *struct {
			Status     string `json:"status"`
			ReasonCode string `json:"reasonCode"`
		} `json:"guardian"`
	}
	if err := json.Unmarshal(r.Body, &body); err != nil {
		t.Errorf("the answer is not JSON: %v: %s", err, r.Body)
		return
	}
	if body.Error != want.reason {
		t.Errorf("reason %q, want %q: %s", body.Error, want.reason, r.Body)
	}
	if want.guardian != "" && (body.Guardian == nil || body.Guardian.Status != want.guardian) {
		t.Errorf("guardian status: want %q: %s", want.guardian, r.Body)
	}
}

// ---- the verdict service's faults ----

// faultReply is one scripted answer of the verdict fault server. slow holds the request
// until the client gives up.
type faultReply struct {
	status int
	header map[string]string
	body   string
	slow   bool
}

// verdictFaultCase is one row of the verdict part of the matrix: how the fault server
// answers a submit (POST /transactions), a reconcile (GET /transactions?traceId=) and a
// status read; a nil function answers as a healthy service that has created the record.
type verdictFaultCase struct {
	name           string
	submit, status func() faultReply
	reconcile      func() faultReply
	want           fcWant
	maxPosts       int // the POSTs the gate may send for one payment (docs/verdict.md#fail-closed: no blind repeat)
}

func reply(status int, body string) func() faultReply {
	return func() faultReply { return faultReply{status: status, body: body} }
}

func envelopeWith(mutate func(v map[string]any)) string {
	v := testenv.ApprovedVerdict()
	if mutate != nil {
		mutate(v)
	}
	return testenv.VerdictEnvelope(v)
}

// approvedEnvelope is a valid approval: what the fault server's redirect target and its
// oversized answer would approve with, were they followed or read.
var approvedEnvelope = envelopeWith(nil)

const verdictAnswerCap = 1 << 20 // verdictclient.MaxResponseBytes

var verdictFaultCases = []verdictFaultCase{
	{name: "verdict pending at the bound",
		status: reply(200, testenv.VerdictEnvelope(testenv.PendingVerdict())),
		want:   fcWant{402, "invalid_payment", "timeout"}},
	{name: "verdict rejected",
		status: reply(200, testenv.VerdictEnvelope(testenv.RejectedVerdict("recipient", "recipient_not_allowed"))),
		want:   fcWant{402, "invalid_payment", "rejected"}},
	{name: "malformed JSON status",
		status: reply(200, `{"verdict":{"schemaVersion":1,"outcome":"approved","reasonCode":"allowed"`),
		want:   fcWant{402, "invalid_payment", "error"}},
	{name: "malformed JSON submit",
		submit:    reply(201, `{"requestHash":"req-1",`),
		reconcile: reply(200, `{"transactions":[{"requestHash":`),
		want:      fcWant{402, "invalid_payment", "error"}},
	{name: "unknown outcome",
		status: reply(200, envelopeWith(func(v map[string]any) { v["outcome"] = "approve" })),
		want:   fcWant{402, "invalid_payment", "error"}},
	{name: "approved with a violation code",
		status: reply(200, envelopeWith(func(v map[string]any) { v["reasonCode"] = "recipient_not_allowed" })),
		want:   fcWant{402, "invalid_payment", "error"}},
	{name: "approved with a failed check",
		status: reply(200, envelopeWith(func(v map[string]any) {
			c := v["checks"].([]any)[4].(map[string]any)
			c["status"], c["code"] = "failed", "recipient_not_allowed"
		})),
		want: fcWant{402, "invalid_payment", "error"}},
	{name: "approved without humanReason",
		status: reply(200, envelopeWith(func(v map[string]any) { delete(v, "humanReason") })),
		want:   fcWant{402, "invalid_payment", "error"}},
	{name: "401 on submit",
		submit: reply(401, `{"statusCode":401,"message":"Unauthorized"}`),
		want:   fcWant{402, "invalid_payment", "error"}},
	{name: "403 on status",
		status: reply(403, `{"statusCode":403,"message":"Forbidden"}`),
		want:   fcWant{402, "invalid_payment", "error"}},
	{name: "404 on status",
		status: reply(404, `{"statusCode":404,"message":"Not Found"}`),
		want:   fcWant{402, "invalid_payment", "error"}},
	{name: "429 storm",
		submit: func() faultReply {
			return faultReply{status: 429, header: map[string]string{"Retry-After": "0"}, body: `{"statusCode":429}`}
		},
		reconcile: func() faultReply {
			return faultReply{status: 429, header: map[string]string{"Retry-After": "0"}, body: `{"statusCode":429}`}
		},
		status: func() faultReply {
			return faultReply{status: 429, header: map[string]string{"Retry-After": "0"}, body: `{"statusCode":429}`}
		},
		want: fcWant{402, "invalid_payment", "error"}, maxPosts: 1},
	{name: "429 storm on status",
		status: func() faultReply {
			return faultReply{status: 429, header: map[string]string{"Retry-After": "0"}, body: `{"statusCode":429}`}
		},
		want: fcWant{402, "invalid_payment", "error"}},
	{name: "503 storm",
		submit:    reply(503, `{"statusCode":503}`),
		reconcile: reply(503, `{"statusCode":503}`),
		status:    reply(503, `{"statusCode":503}`),
		want:      fcWant{402, "invalid_payment", "error"}, maxPosts: 1},
	{name: "500 storm on status",
		status: reply(500, `{"statusCode":500}`),
		want:   fcWant{402, "invalid_payment", "error"}},
	{name: "slow service past the deadline",
		submit:    func() faultReply { return faultReply{slow: true} },
		reconcile: func() faultReply { return faultReply{slow: true} },
		status:    func() faultReply { return faultReply{slow: true} },
		want:      fcWant{402, "invalid_payment", "error"}, maxPosts: 1},
	{name: "redirect on status",
		status: func() faultReply {
			return faultReply{status: 307, header: map[string]string{"Location": "/redirected/approval-status"}}
		},
		want: fcWant{402, "invalid_payment", "error"}},
	{name: "redirect on submit",
		submit: func() faultReply {
			return faultReply{status: 307, header: map[string]string{"Location": "/redirected/transactions"}}
		},
		reconcile: reply(200, `{"transactions":[]}`),
		want:      fcWant{402, "invalid_payment", "error"}},
	{name: "oversized status body",
		status: reply(200, strings.Replace(approvedEnvelope, "{", "{"+strings.Repeat(" ", verdictAnswerCap), 1)),
		want:   fcWant{402, "invalid_payment", "error"}},
	{name: "wrong content type",
		status: func() faultReply {
			return faultReply{status: 200, header: map[string]string{"Content-Type": "text/plain"}, body: approvedEnvelope}
		},
		want: fcWant{402, "invalid_payment", "error"}},
}

// verdictFaultServer plays the verdict service for the gate's facilitator. It tells the
// cases apart by the payer (escrowAddress of the submit, then the requestHash it hands
// out), counts the submits per payer and the requests that followed a redirect.
type verdictFaultServer struct {
	srv       *httptest.Server
	closing   chan struct{}
	mu        sync.Mutex
	cases     map[string]verdictFaultCase // by lower-case payer address
	traces    map[string]string           // traceId -> payer
	posts     map[string]int
	redirects int
}

func startVerdictFaultServer(t *testing.T) *verdictFaultServer {
	t.Helper()
	s := &verdictFaultServer{closing: make(chan struct{}), cases: map[string]verdictFaultCase{},
		traces: map[string]string{}, posts: map[string]int{}}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(func() {
		close(s.closing)
		s.srv.Close()
	})
	return s
}

func (s *verdictFaultServer) add(payer common.Address, c verdictFaultCase) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cases[strings.ToLower(payer.Hex())] = c
}

func (s *verdictFaultServer) postsOf(payer common.Address) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.posts[strings.ToLower(payer.Hex())]
}

func (s *verdictFaultServer) redirected() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.redirects
}

func (s *verdictFaultServer) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	var (
		payer string
		op    string
	)
	s.mu.Lock()
	switch {
	case strings.HasPrefix(r.URL.Path, "/redirected/"):
		s.redirects++
		s.mu.Unlock()
		// What a client that followed the redirect would read: an approval.
		w.Header().Set("Content-Type", "application/json")
		if r.Method == http.MethodPost {
			w.WriteHeader(http.StatusCreated)
			_, _ = io.WriteString(w, `{"id":"t","requestHash":"req-redirected","status":"PENDING"}`)
			return
		}
		_, _ = io.WriteString(w, approvedEnvelope)
		return
	case r.Method == http.MethodPost && r.URL.Path == "/transactions":
		var sub struct {
			EscrowAddress string         `json:"escrowAddress"`
			Metadata      map[string]any `json:"metadata"`
		}
		_ = json.Unmarshal(body, &sub)
		payer, op = strings.ToLower(sub.EscrowAddress), "submit"
		s.posts[payer]++
		if tr, ok := sub.Metadata["traceId"].(string); ok {
			s.traces[tr] = payer
		}
	case r.Method == http.MethodGet && r.URL.Path == "/transactions":
		payer, op = s.traces[r.URL.Query().Get("traceId")], "reconcile"
	case r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/approval-status"):
		payer, op = strings.TrimSuffix(strings.TrimPrefix(r.URL.Path, "/transactions/req-"), "/approval-status"), "status"
	}
	c, known := s.cases[payer]
	s.mu.Unlock()
	if !known {
		w.WriteHeader(http.StatusNotFound)
		return
	}
	record := fmt.Sprintf(`{"id":"t-%s","requestHash":"req-%s","description":"pay","status":"PENDING"}`, payer, payer)
	var f func() faultReply
	def := faultReply{status: 200, body: approvedEnvelope}
	switch op {
	case "submit":
		f, def = c.submit, faultReply{status: 201, body: record}
	case "reconcile":
		f, def = c.reconcile, faultReply{status: 200, body: `{"transactions":[` + record + `]}`}
	case "status":
		f = c.status
	}
	a := def
	if f != nil {
		a = f()
	}
	if a.slow {
		select {
		case <-r.Context().Done():
		case <-s.closing:
		}
		return
	}
	w.Header().Set("Content-Type", "application/json")
	for k, v := range a.header {
		w.Header().Set(k, v)
	}
	w.WriteHeader(a.status)
	_, _ = io.WriteString(w, a.body)
}

// TestFailClosedVerdictService runs every non-approval answer of the verdict service
// (docs/verdict.md#fail-closed, docs/failure-modes.md) through a gate in guardian_mode
// required: each is a 402 invalid_payment (the v1 value of verdict_not_approved) with the
// guardian status, the upstream is never called, nothing is settled, and no submit is
// repeated blindly. A first payment that the fault server approves shows that
// the server is wired in, so every refusal comes from the fault.
func TestFailClosedVerdictService(t *testing.T) {
	chain, tok := testenv.StartChainWithToken(t)
	fs := startVerdictFaultServer(t)
	g := startFCGate(t, chain, tok, fcOptions{
		guardian: "guardian_mode required\n\t\t\tverdict_url " + fs.srv.URL + "\n\t\t\tverdict_key {env.VERDICT_KEY}\n" +
			"\t\t\tverdict_poll 50ms 3 100ms\n\t\t\tverdict_rate 1000 1000",
		env: []string{"VERDICT_KEY=" + canary.verdictKey},
	})

	t.Run("an approval is served and settled once", func(t *testing.T) {
		payer := newPayer(t, tok)
		fs.add(payer.Address, verdictFaultCase{name: "approved"})
		bal := balances(t, tok, payer.Address, g.payTo)
		header, _ := goV1Header(t, tok, payer, g.payTo)
		r := mustDo(t, http.MethodGet, g.api+"/paid/approved", map[string]string{"X-PAYMENT": header})
		if r.Status != http.StatusOK {
			t.Fatalf("an approved payment: status %d: %s", r.Status, r.Body)
		}
		if g.up.count("/paid/approved") != 1 {
			t.Errorf("the upstream saw the approved request %d times, want 1", g.up.count("/paid/approved"))
		}
		wantDelta(t, tok, payer.Address, bal[0], -price)
		wantDelta(t, tok, g.payTo, bal[1], price)
	})
	if t.Failed() {
		t.FailNow()
	}
	nonce := signerNonce(t, chain)

	t.Run("cases", func(t *testing.T) {
		for _, c := range verdictFaultCases {
			t.Run(c.name, func(t *testing.T) {
				t.Parallel()
				payer := newPayer(t, tok)
				fs.add(payer.Address, c)
				g.refusedUnpaid(t, payer, "/paid/"+strings.ReplaceAll(c.name, " ", "-"), c.want)
				maxPosts := c.maxPosts
				if maxPosts == 0 {
					maxPosts = 1
				}
				if n := fs.postsOf(payer.Address); n < 1 || n > maxPosts {
					t.Errorf("the gate submitted the payment %d times, want 1..%d", n, maxPosts)
				}
			})
		}
	})
	if n := fs.redirected(); n != 0 {
		t.Errorf("the gate followed %d redirects of the verdict service", n)
	}
	if n := signerNonce(t, chain); n != nonce {
		t.Errorf("the facilitator sent %d transactions during the refused cases", n-nonce)
	}
}

// ---- the chain's RPC ----

// rpcFaultProxy stands between the facilitator and anvil. Its mode decides what the
// facilitator gets: "pass" (anvil's answers), "down" (the port is closed), "slow" (no
// answer until the caller gives up), "garbage" (a 200 that is not JSON), "wrong" (JSON-RPC
// answers with other ids and nonsense results), "no-receipt" (anvil's answers, except that
// every eth_getTransactionReceipt is answered null).
type rpcFaultProxy struct {
	target  string
	addr    string
	closing chan struct{}

	mu   sync.Mutex
	mode string
	srv  *http.Server
}

func startRPCFaultProxy(t *testing.T, target string) *rpcFaultProxy {
	t.Helper()
	p := &rpcFaultProxy{target: target, mode: "pass", closing: make(chan struct{})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p.addr = ln.Addr().String()
	p.serveOn(ln)
	t.Cleanup(func() {
		close(p.closing)
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.srv != nil {
			_ = p.srv.Close()
		}
	})
	return p
}

func (p *rpcFaultProxy) url() string { return "http://" + p.addr }

func (p *rpcFaultProxy) serveOn(ln net.Listener) {
	p.srv = &http.Server{Handler: http.HandlerFunc(p.serve), ReadHeaderTimeout: 10 * time.Second}
	go func(srv *http.Server) { _ = srv.Serve(ln) }(p.srv)
}

// set switches the mode; "down" closes the port and every connection, and leaving it
// listens on the same port again.
func (p *rpcFaultProxy) set(t *testing.T, mode string) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case mode == "down" && p.srv != nil:
		_ = p.srv.Close()
		p.srv = nil
	case mode != "down" && p.srv == nil:
		ln, err := net.Listen("tcp", p.addr)
		if err != nil {
			t.Fatalf("listen again on %s: %v", p.addr, err)
		}
		p.serveOn(ln)
	}
	p.mode = mode
}

func (p *rpcFaultProxy) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 8<<20))
	if err != nil {
		return
	}
	p.mu.Lock()
	mode := p.mode
	p.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	switch mode {
	case "slow":
		select {
		case <-r.Context().Done():
		case <-p.closing:
		}
		return
	case "garbage":
		_, _ = io.WriteString(w, "<html>502 bad gateway</html>")
		return
	case "wrong":
		if bytes.HasPrefix(bytes.TrimSpace(body), []byte("[")) {
			_, _ = io.WriteString(w, `[{"jsonrpc":"2.0","id":987654,"result":"0xzz"}]`)
			return
		}
		_, _ = io.WriteString(w, `{"jsonrpc":"2.0","id":987654,"result":{"unexpected":true}}`)
		return
	}
	resp, err := http.Post(p.target, "application/json", bytes.NewReader(body))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	if mode == "no-receipt" {
		out = dropReceipts(body, out)
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(out)
}

// dropReceipts answers null to every eth_getTransactionReceipt in req (one call or a
// batch), keeping the other answers of resp.
func dropReceipts(req, resp []byte) []byte {
	type call struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
	}
	var calls []call
	batch := bytes.HasPrefix(bytes.TrimSpace(req), []byte("["))
	if batch {
		_ = json.Unmarshal(req, &calls)
	} else {
		var c call
		_ = json.Unmarshal(req, &c)
		calls = []call{c}
	}
	drop := map[string]bool{}
	for _, c := range calls {
		if c.Method == "eth_getTransactionReceipt" {
			drop[string(c.ID)] = true
		}
	}
	if len(drop) == 0 {
		return resp
	}
	var answers []map[string]json.RawMessage
	if batch {
		_ = json.Unmarshal(resp, &answers)
	} else {
		var a map[string]json.RawMessage
		_ = json.Unmarshal(resp, &a)
		answers = []map[string]json.RawMessage{a}
	}
	for _, a := range answers {
		if a != nil && drop[string(a["id"])] {
			a["result"] = json.RawMessage("null")
			delete(a, "error")
		}
	}
	var out []byte
	if batch {
		out, _ = json.Marshal(answers)
	} else {
		out, _ = json.Marshal(answers[0])
	}
	return out
}

// rpcFaultCases are the RPC faults that refuse a payment before anything is sent.
var rpcFaultCases = []struct {
	name, mode string
	want       fcWant
}{
	{"RPC down", "down", fcWant{402, "unexpected_verify_error", ""}},
	{"RPC slow past the deadline", "slow", fcWant{402, "unexpected_verify_error", ""}},
	{"RPC answers garbage", "garbage", fcWant{402, "unexpected_verify_error", ""}},
	{"RPC answers wrong JSON-RPC", "wrong", fcWant{402, "unexpected_verify_error", ""}},
}

// TestFailClosedRPC runs the chain's RPC faults through a gate whose facilitator reaches
// anvil through rpcFaultProxy (docs/failure-modes.md): each refuses the payment unserved
// and unsettled, and the facilitator sends nothing.
func TestFailClosedRPC(t *testing.T) {
	chain, tok := testenv.StartChainWithToken(t)
	proxy := startRPCFaultProxy(t, chain.RPCURL)
	g := startFCGate(t, chain, tok, fcOptions{rpcURL: proxy.url()})
	nonce := signerNonce(t, chain)
	for _, c := range rpcFaultCases {
		t.Run(c.name, func(t *testing.T) {
			proxy.set(t, c.mode)
			defer proxy.set(t, "pass")
			g.refusedUnpaid(t, newPayer(t, tok), "/paid/"+c.mode, c.want)
		})
	}
	if n := signerNonce(t, chain); n != nonce {
		t.Errorf("the facilitator sent %d transactions during the RPC faults", n-nonce)
	}
	// The proxy passes again: the same gate serves a payment, so the refusals came from
	// the faults.
	payer := newPayer(t, tok)
	header, _ := goV1Header(t, tok, payer, g.payTo)
	if r := mustDo(t, http.MethodGet, g.api+"/paid/after", map[string]string{"X-PAYMENT": header}); r.Status != http.StatusOK {
		t.Fatalf("a payment after the faults: status %d: %s", r.Status, r.Body)
	}
}

// TestFailClosedReceiptNeverComes: the transaction is mined but the RPC never shows its
// receipt. The gate answers 502 settlement_pending with the tx hash and a retry token and
// does not call the upstream; the authorization is broadcast once. Once the RPC answers
// again, the same payment with its X-PAYMENT-RETRY token is served without a second
// transfer (docs/gate.md#pending-settlements, docs/failure-modes.md).
func TestFailClosedReceiptNeverComes(t *testing.T) {
	chain, tok := testenv.StartChainWithToken(t)
	proxy := startRPCFaultProxy(t, chain.RPCURL)
	g := startFCGate(t, chain, tok, fcOptions{rpcURL: proxy.url()})
	payer := newPayer(t, tok)
	nonce := signerNonce(t, chain)
	from := blockNumber(t, chain)
	bal := balances(t, tok, payer.Address, g.payTo)

	proxy.set(t, "no-receipt")
	header, auth := goV1Header(t, tok, payer, g.payTo)
	r := mustDo(t, http.MethodGet, g.api+"/paid/receipt", map[string]string{"X-PAYMENT": header})
	checkRefusal(t, r, fcWant{502, "unexpected_settle_error", ""})
	if n := g.up.count("/paid/receipt"); n != 0 {
		t.Fatalf("the upstream saw a payment whose receipt never came %d times", n)
	}
	if s := decodeSettleResponse(t, r.Header.Get("X-PAYMENT-RESPONSE")); s.Success || !isHash(s.Transaction) {
		t.Errorf("the pending answer's settle response: %+v, want success false with the tx hash", s)
	}
	token := r.Header.Get("X-PAYMENT-RETRY")
	if token == "" {
		t.Fatalf("the pending answer carries no X-PAYMENT-RETRY token: %s", prettyHeaders(r.Header))
	}
	// Asked again while the receipt still does not come: still pending, still unserved.
	r = mustDo(t, http.MethodGet, g.api+"/paid/receipt", map[string]string{"X-PAYMENT": header, "X-PAYMENT-RETRY": token})
	checkRefusal(t, r, fcWant{502, "unexpected_settle_error", ""})
	if n := g.up.count("/paid/receipt"); n != 0 {
		t.Fatalf("the upstream saw a pending payment %d times", n)
	}

	proxy.set(t, "pass")
	r = mustDo(t, http.MethodGet, g.api+"/paid/receipt", map[string]string{"X-PAYMENT": header, "X-PAYMENT-RETRY": token})
	if r.Status != http.StatusOK {
		t.Fatalf("the pending payment once its receipt shows: status %d: %s", r.Status, r.Body)
	}
	if n := g.up.count("/paid/receipt"); n != 1 {
		t.Errorf("the upstream saw the payment %d times, want 1", n)
	}
	if got := len(transfers(t, chain, tok, payer.Address, g.payTo, from+1)); got != 1 {
		t.Errorf("%d transfers on chain, want 1", got)
	}
	if n := signerNonce(t, chain); n != nonce+1 {
		t.Errorf("the facilitator sent %d transactions, want 1 (the authorization broadcast once)", n-nonce)
	}
	if !tok.AuthorizationState(t, payer.Address, auth.Nonce) {
		t.Errorf("the authorization is not used on chain")
	}
	wantDelta(t, tok, payer.Address, bal[0], -price)
	wantDelta(t, tok, g.payTo, bal[1], price)
}

// ---- the stores ----

// TestFailClosedStores stops each store a running gate depends on (docs/failure-modes.md):
// Redis (approvals and settlement claims), PostgreSQL (the settlement journal) and a
// SQLite journal that can no longer be written. A payment is then refused unserved and
// unsettled, because the gate's payment ledger, kept in the same store
// (docs/gate.md#payment-ledger), must be written before verify and settle.
func TestFailClosedStores(t *testing.T) {
	chain, tok := testenv.StartChainWithToken(t)

	t.Run("Redis down", func(t *testing.T) {
		redis := testenv.StartRedisServer(t, testenv.RedisConfig{Password: canary.redisPassword})
		g := startFCGate(t, chain, tok, fcOptions{store: "store redis {env.REDIS_URL}", env: []string{"REDIS_URL=" + redis.URL}})
		g.paidOnce(t, "/paid/redis-up")
		nonce := signerNonce(t, chain)
		redis.Stop()
		g.refusedUnpaid(t, newPayer(t, tok), "/paid/redis-down", fcWant{503, "retry_store_unavailable", ""})
		if n := signerNonce(t, chain); n != nonce {
			t.Errorf("the facilitator sent %d transactions with Redis down", n-nonce)
		}
	})

	t.Run("PostgreSQL down", func(t *testing.T) {
		pg := testenv.StartPostgresServer(t, testenv.PostgresConfig{Password: canary.pgPassword})
		g := startFCGate(t, chain, tok, fcOptions{journal: "journal postgres {env.PG_DSN}", env: []string{"PG_DSN=" + pg.DSN}})
		g.paidOnce(t, "/paid/pg-up")
		nonce := signerNonce(t, chain)
		pg.Stop()
		g.refusedUnpaid(t, newPayer(t, tok), "/paid/pg-down", fcWant{503, "retry_store_unavailable", ""})
		if n := signerNonce(t, chain); n != nonce {
			t.Errorf("the facilitator sent %d transactions with PostgreSQL down", n-nonce)
		}
	})

	t.Run("SQLite file unwritable", func(t *testing.T) {
		dir := t.TempDir()
		db := filepath.Join(dir, "journal.db")
		g := startFCGate(t, chain, tok, fcOptions{journal: "journal sqlite {$JOURNAL_DB}", env: []string{"JOURNAL_DB=" + db}})
		g.paidOnce(t, "/paid/sqlite-ok")
		nonce := signerNonce(t, chain)
		immutable(t, db, db+"-wal")
		g.refusedUnpaid(t, newPayer(t, tok), "/paid/sqlite-ro", fcWant{503, "retry_store_unavailable", ""})
		if n := signerNonce(t, chain); n != nonce {
			t.Errorf("the facilitator sent %d transactions with the journal unwritable", n-nonce)
		}
	})
}

// paidOnce pays path with a fresh payer and wants it served: the store works before the
// fault.
func (g *fcGate) paidOnce(t *testing.T, path string) {
	t.Helper()
	header, _ := goV1Header(t, g.tok, newPayer(t, g.tok), g.payTo)
	if r := mustDo(t, http.MethodGet, g.api+path, map[string]string{"X-PAYMENT": header}); r.Status != http.StatusOK {
		t.Fatalf("a payment before the fault: status %d: %s", r.Status, r.Body)
	}
}

// immutable makes files unwritable even for root: `chattr +i` (a file mode does not stop
// root). The SQLite -shm file is left alone: it is memory-mapped, and writing a mapped
// immutable file kills the process with SIGBUS instead of failing the write. This needs a
// filesystem with the immutable attribute (ext4, xfs, btrfs; not tmpfs) and
// CAP_LINUX_IMMUTABLE; without them the test fails saying so.
func immutable(t *testing.T, files ...string) {
	t.Helper()
	if out, err := exec.Command("chattr", append([]string{"+i"}, files...)...).CombinedOutput(); err != nil {
		t.Fatalf("chattr +i (needs e2fsprogs, CAP_LINUX_IMMUTABLE and a filesystem with the immutable attribute, e.g. ext4): %v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("chattr", append([]string{"-i"}, files...)...).CombinedOutput(); err != nil {
			t.Errorf("chattr -i: %v: %s", err, out)
		}
	})
	for _, f := range files {
		if fh, err := os.OpenFile(f, os.O_WRONLY, 0); err == nil {
			fh.Close()
			t.Fatalf("%s is still writable after chattr +i", f)
		}
	}
}

// ---- the documented matrix ----

// TestFailureModesDocNamesTests holds docs/failure-modes.md and the tests together: every
// row of its tables names a test of this package that exists (a top-level test, one of
// its literal subtests, or a case of the matrix tables), every case of the matrix tables
// has a row, and a table case's row states the case's expected status and reasons.
func TestFailureModesDocNamesTests(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "docs", "failure-modes.md"))
	if err != nil {
		t.Fatal(err)
	}
	known := testNames(t)
	// The cases of the tables, with what their rows must say.
	want := map[string]fcWant{}
	for _, c := range verdictFaultCases {
		want["TestFailClosedVerdictService/cases/"+subtestName(c.name)] = c.want
	}
	for _, c := range rpcFaultCases {
		want["TestFailClosedRPC/"+subtestName(c.name)] = c.want
	}
	for n := range want {
		known[n] = true
	}
	rows := 0
	documented := map[string]bool{}
	for i, line := range strings.Split(string(doc), "\n") {
		cells := strings.Split(strings.Trim(strings.TrimSpace(line), "|"), "|")
		if !strings.HasPrefix(strings.TrimSpace(line), "|") || len(cells) != 3 {
			continue
		}
		name := strings.Trim(strings.TrimSpace(cells[2]), "`")
		if name == "test" || strings.HasPrefix(name, "---") {
			continue
		}
		rows++
		documented[name] = true
		if !known[name] {
			t.Errorf("docs/failure-modes.md:%d names %q, which is not a test of this package", i+1, name)
			continue
		}
		if w, ok := want[name]; ok {
			result := cells[1]
			for _, s := range []string{strconv.Itoa(w.status) + " ", "`" + w.reason + "`"} {
				if !strings.Contains(result, s) {
					t.Errorf("docs/failure-modes.md:%d: the row of %s does not say %q: %s", i+1, name, s, result)
				}
			}
			if w.guardian != "" && !strings.Contains(result, "guardian `"+w.guardian+"`") {
				t.Errorf("docs/failure-modes.md:%d: the row of %s does not say guardian `%s`", i+1, name, w.guardian)
			}
		}
	}
	if rows == 0 {
		t.Fatal("docs/failure-modes.md has no table rows")
	}
	for n := range want {
		if !documented[n] {
			t.Errorf("the case %s has no row in docs/failure-modes.md", n)
		}
	}
	for _, n := range []string{"TestFailClosedReceiptNeverComes", "TestFailClosedStores/Redis_down",
		"TestFailClosedStores/PostgreSQL_down", "TestFailClosedStores/SQLite_file_unwritable"} {
		if !documented[n] {
			t.Errorf("%s has no row in docs/failure-modes.md", n)
		}
	}
}

// subtestName is how go test names a subtest: spaces become underscores.
func subtestName(s string) string { return strings.ReplaceAll(s, " ", "_") }

// testNames parses this package's test files and returns the names of its top-level
// tests and of their subtests whose names are string literals (t.Run("…", …), nested).
func testNames(t *testing.T) map[string]bool {
	t.Helper()
	fset := token.NewFileSet()
	files, err := filepath.Glob("*_test.go")
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, f := range files {
		file, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range file.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv != nil || !strings.HasPrefix(fn.Name.Name, "Test") || fn.Body == nil {
				continue
			}
			names[fn.Name.Name] = true
			collectRuns(fn.Body, fn.Name.Name, names)
		}
	}
	return names
}

// collectRuns records prefix/<name> for every t.Run("<name>", func…) in n, and recurses
// into the subtest's function with that prefix.
func collectRuns(n ast.Node, prefix string, names map[string]bool) {
	ast.Inspect(n, func(x ast.Node) bool {
		call, ok := x.(*ast.CallExpr)
		if !ok || len(call.Args) != 2 {
			return true
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok || sel.Sel.Name != "Run" {
			return true
		}
		lit, ok := call.Args[0].(*ast.BasicLit)
		if !ok || lit.Kind != token.STRING {
			return true
		}
		s, err := strconv.Unquote(lit.Value)
		if err != nil {
			return true
		}
		full := prefix + "/" + subtestName(s)
		names[full] = true
		if body, ok := call.Args[1].(*ast.FuncLit); ok {
			collectRuns(body.Body, full, names)
		}
		return false
	})
}
