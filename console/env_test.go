package console

import (
	"context"
	"fmt"
	"html"
	"io"
	"math/big"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/x402gate/x402gate/facilitator/journal"
	"github.com/x402gate/x402gate/internal/sqldb"
	"github.com/x402gate/x402gate/internal/testenv"
	"github.com/x402gate/x402gate/verdictserver"
	"github.com/x402gate/x402gate/verdictserver/engine"
	"github.com/x402gate/x402gate/verdictserver/store"
)

// Test chain, token and parties: Base Sepolia, its USDC, and addresses no one holds.
const testChain = 84532

var (
	testAsset  = common.HexToAddress("0x036CbD53842c5426634e7929541eC2318f3dCF7e")
	allowedPay = common.HexToAddress("0x209693Bc6afc0C5328bA36FaF03C514EF312287C")
	otherPay   = common.HexToAddress("0x5555555555555555555555555555555555555555")
	payer      = common.HexToAddress("0x1111111111111111111111111111111111111111")
)

// allowPolicy allows x402 payments on the test chain in the test asset to allowedPay.
var allowPolicy = fmt.Sprintf(`{
  "description": "pay one allowed payee <b>bold</b>",
  "venues": {"allowed": ["payment"]},
  "chains": {"allowed": [%d]},
  "assets": {"universe": {"%d": [%q]}},
  "recipients": {"allowed": [%q]}
}`, testChain, testChain, testAsset.Hex(), allowedPay.Hex())

const adminKey = "test-admin-key-0123456789abcdef"

// env is a verdict service on a real store with the real engine, its public API, a
// settlement journal on SQLite, and the console in front of them.
type env struct {
	t       testing.TB
	st      *store.Store
	srv     *verdictserver.Server
	op      *verdictserver.Operator
	api     *httptest.Server
	journal *journal.DB
	console *httptest.Server
	clock   *clock
	logs    *observer.ObservedLogs
}

// clock is the console's clock, which a test moves on.
type clock struct {
	mu sync.Mutex
	at time.Time
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.at.IsZero() {
		return time.Now()
	}
	return c.at
}

func (c *clock) set(t time.Time) {
	c.mu.Lock()
	c.at = t
	c.mu.Unlock()
}

// newEnv starts the service and the console with cfg; tls serves the console over TLS.
func newEnv(t testing.TB, cfg Config, tls bool) *env {
	t.Helper()
	return newEnvWith(t, cfg, tls, nil)
}

// newEnvWith is newEnv with the engine wrapped by wrap, when not nil.
func newEnvWith(t testing.TB, cfg Config, tls bool, wrap func(engine.Engine) engine.Engine) *env {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	db, err := sqldb.OpenSQLite(ctx, filepath.Join(dir, "verdict.db"))
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	var eng engine.Engine
	eng, err = engine.New(engine.Config{}, engine.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	if wrap != nil {
		eng = wrap(eng)
	}
	core, logs := observer.New(zapcore.DebugLevel)
	e := &env{t: t, st: st, clock: &clock{}, logs: logs}
	fast := &verdictserver.RateConfig{Rate: 1000, Burst: 1000}
	e.srv, err = verdictserver.New(verdictserver.Config{RateKey: fast, RateIP: fast, AdminKey: adminKey},
		verdictserver.Deps{Store: st, Engine: eng, SweepInterval: 50 * time.Millisecond, Logger: zap.New(core)})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.srv.Close() })
	e.op = e.srv.Operator()
	e.api = httptest.NewServer(e.srv.Handler())
	t.Cleanup(e.api.Close)
	if e.journal, err = journal.OpenSQLite(ctx, filepath.Join(dir, "journal.db")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.journal.Close() })
	c, err := New(cfg, Deps{Service: e.srv, Journal: e.journal, Logger: zap.New(core), Now: e.clock.now})
	if err != nil {
		t.Fatal(err)
	}
	if tls {
		e.console = httptest.NewTLSServer(c)
	} else {
		e.console = httptest.NewServer(c)
	}
	t.Cleanup(e.console.Close)
	return e
}

// agent is a registered agent: its id, a key and its wallet on the test chain.
type agent struct {
	ID, Key string
	Wallet  common.Address
}

// agent creates an agent with a wallet of its own, a policy (when not "") and a key with
// scopes.
func (e *env) agent(name, policy string, scopes ...string) agent {
	e.t.Helper()
	ctx := context.Background()
	a, err := e.op.CreateAgent(ctx, name)
	if err != nil {
		e.t.Fatal(err)
	}
	_, key, err := e.op.CreateKey(ctx, a.ID, scopes)
	if err != nil {
		e.t.Fatal(err)
	}
	w := common.BytesToAddress(crypto.Keccak256([]byte(name))[:20])
	if _, err := e.op.AddWallet(ctx, a.ID, testChain, w.Hex()); err != nil {
		e.t.Fatal(err)
	}
	if policy != "" {
		if _, err := e.op.SetPolicy(ctx, a.ID, []byte(policy), "test"); err != nil {
			e.t.Fatal(err)
		}
	}
	return agent{ID: a.ID, Key: key, Wallet: w}
}

// pay submits a payment to payTo with prompt through the public API with key, waits for
// its verdict, and returns the request hash.
func (e *env) pay(a agent, payTo common.Address, prompt string, metadata map[string]any) string {
	e.t.Helper()
	if metadata == nil {
		metadata = map[string]any{}
	}
	body := map[string]any{
		"escrowAddress": a.Wallet.Hex(), "prompt": prompt, "arbiter": "policy", "metadata": metadata,
		"proposedTx": map[string]any{"protocol": "payment", "rail": "x402", "chainId": testChain,
			"payTo": payTo.Hex(), "asset": testAsset.Hex(), "amount": "10000"},
	}
	req, _ := http.NewRequest(http.MethodPost, e.api.URL+"/transactions", strings.NewReader(testenv.JSON(e.t, body)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Api-Key", a.Key)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	raw, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusCreated {
		e.t.Fatalf("submit: %d %s", res.StatusCode, raw)
	}
	hash := regexp.MustCompile(`"requestHash":"(0x[0-9a-f]+)"`).FindStringSubmatch(string(raw))
	if hash == nil {
		e.t.Fatalf("no requestHash in %s", raw)
	}
	for range 400 {
		tx, err := e.op.Transaction(context.Background(), hash[1])
		if err != nil {
			e.t.Fatal(err)
		}
		if tx.Status != store.StatusPending {
			return hash[1]
		}
		time.Sleep(10 * time.Millisecond)
	}
	e.t.Fatalf("no verdict for %s after 400 reads", hash[1])
	return ""
}

// settle journals a settlement of amount base units to payTo, created at at, and moves it
// to state.
func (e *env) settle(n int, payTo common.Address, amount int64, at time.Time, state journal.State) journal.Settlement {
	e.t.Helper()
	ctx := context.Background()
	s := journal.Settlement{
		AuthorizationKey: fmt.Sprintf("auth-%d", n), PaymentKey: fmt.Sprintf("pay-%d", n), Network: "base-sepolia",
		Asset: testAsset, Payer: payer, PayTo: payTo, Amount: big.NewInt(amount),
		TxHash: common.BigToHash(big.NewInt(int64(0xabc000 + n))), RawTx: []byte{1}, SenderNonce: uint64(n), CreatedAt: at,
	}
	if err := e.journal.Prepare(ctx, s); err != nil {
		e.t.Fatal(err)
	}
	if state != journal.StatePrepared {
		if err := e.journal.Update(ctx, s.AuthorizationKey, state, ""); err != nil {
			e.t.Fatal(err)
		}
	}
	return s
}

// browser is a client with a cookie jar that sends what a browser sends on the console's
// own forms: Origin and Sec-Fetch-Site same-origin.
type browser struct {
	t    testing.TB
	c    *http.Client
	base string
}

func (e *env) browser() *browser {
	jar, _ := cookiejar.New(nil)
	c := *e.console.Client() // a copy: the server's client is shared
	c.Jar = jar
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &browser{t: e.t, c: &c, base: e.console.URL}
}

// page is one answer.
type page struct {
	status int
	header http.Header
	body   string
}

func (b *browser) do(req *http.Request) page {
	b.t.Helper()
	res, err := b.c.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		b.t.Fatal(err)
	}
	return page{status: res.StatusCode, header: res.Header, body: string(raw)}
}

func (b *browser) get(path string) page {
	b.t.Helper()
	req, _ := http.NewRequest(http.MethodGet, b.base+path, nil)
	return b.do(req)
}

// post sends form to path as the console's own form would, with headers added on top
// ("Origin": "" removes it).
func (b *browser) post(path string, form url.Values, headers ...string) page {
	b.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, b.base+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", b.base)
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	for i := 0; i+1 < len(headers); i += 2 {
		if headers[i+1] == "" {
			req.Header.Del(headers[i])
		} else {
			req.Header.Set(headers[i], headers[i+1])
		}
	}
	return b.do(req)
}

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// csrf is the token of the first form of p.
func (p page) csrf(t testing.TB) string {
	t.Helper()
	m := csrfField.FindStringSubmatch(p.body)
	if m == nil {
		t.Fatalf("no csrf field on the page:\n%s", p.body)
	}
	return html.UnescapeString(m[1])
}

// signIn signs in with key and expects to land on the console.
func (b *browser) signIn(key string) {
	b.t.Helper()
	p := b.post("/console/signin", url.Values{"key": {key}, "csrf": {b.get("/console/signin").csrf(b.t)}})
	if p.status != http.StatusSeeOther || p.header.Get("Location") != "/console/" {
		b.t.Fatalf("sign in: %d %q\n%s", p.status, p.header.Get("Location"), p.body)
	}
}

var (
	inlineTag = regexp.MustCompile(`(?i)</?(span|a|small|strong|code|sup|em|b)\b[^>]*>`)
	anyTag    = regexp.MustCompile(`(?s)<[^>]*>`)
	spaces    = regexp.MustCompile(`\s+`)
)

// text is the visible text of an HTML body, roughly as a browser reads it: inline tags
// dropped, other tags a space, entities decoded, runs of white space one space.
func text(body string) string {
	s := anyTag.ReplaceAllString(inlineTag.ReplaceAllString(body, ""), " ")
	return spaces.ReplaceAllString(html.UnescapeString(s), " ")
}
