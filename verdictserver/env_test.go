package verdictserver

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"go.uber.org/zap"

	"github.com/x402gate/x402gate/internal/sqldb"
	"github.com/x402gate/x402gate/internal/testenv"
	"github.com/x402gate/x402gate/verdict"
	"github.com/x402gate/x402gate/verdictserver/engine"
	"github.com/x402gate/x402gate/verdictserver/store"
)

// Test chain, token and parties: Base Sepolia, its USDC, and addresses no one holds.
const testChain = 84532

var (
	testAsset   = common.HexToAddress("0x036CbD53842c5426634e7929541eC2318f3dCF7e")
	allowedPay  = common.HexToAddress("0x209693Bc6afc0C5328bA36FaF03C514EF312287C")
	strangerPay = common.HexToAddress("0x5555555555555555555555555555555555555555")
)

// allowPolicy allows x402 payments on the test chain in the test asset to allowedPay.
var allowPolicy = fmt.Sprintf(`{
  "description": "test: pay one allowed payee",
  "venues": {"allowed": ["payment"]},
  "chains": {"allowed": [%d]},
  "assets": {"universe": {"%d": [%q]}},
  "recipients": {"allowed": [%q]}
}`, testChain, testChain, testAsset.Hex(), allowedPay.Hex())

// storeOpener opens a fresh store for one test: SQLite in t.TempDir() or a database of
// its own on a real PostgreSQL.
type storeOpener func(t testing.TB) *store.Store

func sqliteAt(path string) storeOpener {
	return func(t testing.TB) *store.Store {
		t.Helper()
		db, err := sqldb.OpenSQLite(context.Background(), path)
		if err != nil {
			t.Fatal(err)
		}
		st, err := store.Open(context.Background(), db)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
}

func sqliteStore(t testing.TB) *store.Store {
	return sqliteAt(filepath.Join(t.TempDir(), "verdict.db"))(t)
}

// pgServers holds one PostgreSQL server per test, which stops it when it ends.
var pgServers = map[string]*testenv.PostgresServer{}

// postgresDSN creates a database of its own on the test's PostgreSQL server.
func postgresDSN(t testing.TB) string {
	t.Helper()
	srv := pgServers[t.Name()]
	if srv == nil {
		srv = testenv.StartPostgresServer(t, testenv.PostgresConfig{})
		pgServers[t.Name()] = srv
		t.Cleanup(func() { delete(pgServers, t.Name()) })
	}
	return srv.CreateDatabase(t, fmt.Sprintf("verdict_api_%d", time.Now().UnixNano()))
}

// postgresAt opens a store on the database at dsn.
func postgresAt(t testing.TB, dsn string) *store.Store {
	t.Helper()
	db, err := sqldb.OpenPostgres(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func postgresStore(t testing.TB) *store.Store { return postgresAt(t, postgresDSN(t)) }

// env is one running verdict service over a real store and the real engine.
type env struct {
	t        testing.TB
	st       *store.Store
	srv      *Server
	api      *httptest.Server
	admin    *httptest.Server
	adminKey string
}

// newEnv starts a Server on st (SQLite when nil) with the real engine; tweak edits its
// config and dependencies.
func newEnv(t testing.TB, st *store.Store, tweak func(*Config, *Deps)) *env {
	t.Helper()
	if st == nil {
		st = sqliteStore(t)
	}
	t.Cleanup(func() { _ = st.Close() })
	eng, err := engine.New(engine.Config{}, engine.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, st: st, adminKey: "test-admin-key-0123456789abcdef"}
	fast := &RateConfig{Rate: 1000, Burst: 1000}
	cfg := Config{RateKey: fast, RateIP: fast, AdminKey: e.adminKey}
	deps := Deps{Store: st, Engine: eng, SweepInterval: 50 * time.Millisecond, Logger: zap.NewNop()}
	if tweak != nil {
		tweak(&cfg, &deps)
	}
	e.srv, err = New(cfg, deps)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.srv.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.srv.Close() })
	e.api = httptest.NewServer(e.srv.Handler())
	t.Cleanup(e.api.Close)
	e.admin = httptest.NewServer(e.srv.AdminHandler())
	t.Cleanup(e.admin.Close)
	return e
}

// agent is a registered agent with a key, a wallet on the test chain and, when policy is
// not empty, a policy.
type agent struct {
	ID     string
	Key    string
	Wallet common.Address
}

func (e *env) agent(name string, wallet common.Address, policy string, scopes ...string) agent {
	e.t.Helper()
	ctx := context.Background()
	op := e.srv.Operator()
	a, err := op.CreateAgent(ctx, name)
	if err != nil {
		e.t.Fatal(err)
	}
	_, key, err := op.CreateKey(ctx, a.ID, scopes)
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := op.AddWallet(ctx, a.ID, testChain, wallet.Hex()); err != nil {
		e.t.Fatal(err)
	}
	if policy != "" {
		if _, err := op.SetPolicy(ctx, a.ID, []byte(policy), "test"); err != nil {
			e.t.Fatal(err)
		}
	}
	return agent{ID: a.ID, Key: key, Wallet: wallet}
}

// payment is a PaymentAction proposedTx paying payTo 0.01 test USDC.
func payment(payTo common.Address) map[string]any {
	return map[string]any{
		"protocol": "payment", "rail": "x402", "chainId": testChain,
		"payTo": payTo.Hex(), "asset": testAsset.Hex(), "amount": "10000",
	}
}

func submitBody(escrow common.Address, payTo common.Address, trace string) map[string]any {
	b := map[string]any{
		"escrowAddress": escrow.Hex(), "prompt": "pay for the weather report",
		"proposedTx": payment(payTo), "arbiter": "policy",
		"metadata": map[string]any{"environment": "test"},
	}
	if trace != "" {
		b["metadata"].(map[string]any)["traceId"] = trace
	}
	return b
}

// answer is one HTTP answer.
type answer struct {
	status int
	header http.Header
	raw    []byte
	body   map[string]any
}

// call sends one request to url; body is JSON-encoded unless it is a string or nil.
// headers are set as given (so a test can send two credentials at once). Every answer is
// held to docs/openapi.json (checkOpenAPI).
func call(t testing.TB, method, url string, body any, headers ...string) answer {
	t.Helper()
	a := rawCall(t, method, url, body, headers...)
	checkOpenAPI(t, method, url, a.status, a.raw)
	return a
}

// rawCall is call without the OpenAPI check, for a request sent to the wrong handler.
func rawCall(t testing.TB, method, url string, body any, headers ...string) answer {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		rd = strings.NewReader(testenv.JSON(t, b))
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Add(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	a := answer{status: resp.StatusCode, header: resp.Header, raw: raw}
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &a.body); err != nil {
			t.Fatalf("%s %s: answer is not a json object: %q", method, url, raw)
		}
	}
	return a
}

// submit posts a body with key and returns the answer.
func (e *env) submit(key string, body any) answer {
	e.t.Helper()
	return call(e.t, http.MethodPost, e.api.URL+"/transactions", body, "x-api-key", key)
}

// status reads the approval status of hash with key.
func (e *env) status(key, hash string) answer {
	e.t.Helper()
	return call(e.t, http.MethodGet, e.api.URL+"/transactions/"+hash+"/approval-status", nil, "x-api-key", key)
}

// await polls the approval status until the verdict is terminal, within a bound on the
// number of reads (not on time), and returns it validated by the client's own rules.
func (e *env) await(key, hash string) *verdict.Verdict {
	e.t.Helper()
	for range 400 {
		a := e.status(key, hash)
		if a.status != http.StatusOK {
			e.t.Fatalf("approval status = %d %s", a.status, a.raw)
		}
		env, err := verdict.ParseEnvelope(a.raw, hash)
		if err != nil {
			e.t.Fatalf("approval status fails the client's rules: %v", err)
		}
		if env.Verdict.Terminal() {
			return env.Verdict
		}
		time.Sleep(10 * time.Millisecond)
	}
	e.t.Fatalf("no terminal verdict for %s after 400 reads", hash)
	return nil
}

// wantError checks an error answer: the status, the one error body and its code.
func wantError(t *testing.T, a answer, status int, code string) {
	t.Helper()
	if a.status != status {
		t.Fatalf("status = %d, want %d; body %s", a.status, status, a.raw)
	}
	if a.header.Get("Content-Type") != "application/json" {
		t.Errorf("Content-Type = %q, want application/json", a.header.Get("Content-Type"))
	}
	if got := a.body["statusCode"]; got != float64(status) {
		t.Errorf("statusCode = %v, want %d", got, status)
	}
	if got := a.body["error"]; got != http.StatusText(status) {
		t.Errorf("error = %v, want %q", got, http.StatusText(status))
	}
	if got := a.body["code"]; got != code {
		t.Errorf("code = %v, want %q; body %s", got, code, a.raw)
	}
	if m, _ := a.body["message"].(string); m == "" {
		t.Errorf("message is empty")
	}
}
