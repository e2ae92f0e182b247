package integration_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/ethereum/go-ethereum/common"

	"github.com/x402gate/x402gate/internal/sqldb"
	"github.com/x402gate/x402gate/internal/testenv"
	"github.com/x402gate/x402gate/verdictserver/store"
)

// verdictSetup is how one Caddy of the verdict tests stores its state: the embedded
// defaults (memory approvals, SQLite journal and verdict store), or the shared ones of a
// fleet (Redis approvals and rate limits, PostgreSQL journal and verdict store).
type verdictSetup struct {
	shared bool
	// pgConnections is the shared PostgreSQL's max_connections; default PostgreSQL's 100,
	// enough for two instances (each holds up to 40: its verdict store and its journal).
	pgConnections int
}

// verdictCaddyfile is the Caddyfile of the verdict tests: the bundled facilitator in
// GUARDIAN_MODE required asks this Caddy's own verdict app, whose API a site serves on
// VERDICT_PORT with verdict_api; /allowed/* pays PAY_TO_OK and /denied/* pays PAY_TO_DENIED; the
// facilitator API is served too. Secrets come from the environment only.
func verdictCaddyfile(s verdictSetup) string {
	approvals, journal, verdictStore, limits := "store memory", "journal sqlite", "store sqlite {$VERDICT_DB}", ""
	if s.shared {
		approvals, journal = "store redis {env.REDIS_URL}", "journal postgres {env.PG_DSN}"
		verdictStore, limits = "store postgres {env.PG_DSN}", "redis {env.REDIS_URL}"
	}
	return `{
` + globalOptions + `	x402 {
		facilitator {
			` + testChainFacilitator + `
			` + approvals + `
			` + journal + `
			guardian_mode required
			verdict_url http://127.0.0.1:{$VERDICT_PORT}
			verdict_key {env.VERDICT_KEY}
			verdict_poll 50ms 100 200ms
		}
	}
	verdict {
		` + verdictStore + `
		` + limits + `
		admin_key {env.VERDICT_ADMIN_KEY}
		price 84532 {$X402_TOKEN} 1 6 USDC
	}
}

http://:{$API_PORT} {
	bind 127.0.0.1
	log {
		output stderr
		format x402_redact json
	}
	x402 /allowed/* {
		price 0.01 USDC
		pay_to {$PAY_TO_OK}
		network base-sepolia
		mime_type application/json
	}
	x402 /denied/* {
		price 0.01 USDC
		pay_to {$PAY_TO_DENIED}
		network base-sepolia
		mime_type application/json
	}
	reverse_proxy {$UPSTREAM}
}

http://:{$VERDICT_PORT} {
	bind 127.0.0.1
	log {
		output stderr
		format x402_redact json
	}
	verdict_api
}

http://:{$FACILITATOR_PORT} {
	bind 127.0.0.1
	x402_facilitator {
		api_key {env.X402_FACILITATOR_API_KEY}
	}
}
`
}

// verdictFleet is a chain, an upstream and the operator's environment shared by one or
// more Caddy instances of the verdict tests.
type verdictFleet struct {
	chain           *testenv.Chain
	tok             *testenv.Token
	up              *upstream
	okPayTo, denied common.Address
	payer           testenv.Account
	dir             string
	setup           verdictSetup
	env             []string // what every instance and CLI call shares
	caddyfile       string
	key             string // the agent's API key, made by `caddy verdict key create`
	adminKey        string
	facKey          string
	redis           *testenv.RedisServer    // shared setup only
	pg              *testenv.PostgresServer // shared setup only
}

func newVerdictFleet(t *testing.T, setup verdictSetup) *verdictFleet {
	t.Helper()
	chain, tok := testenv.StartChainWithToken(t)
	f := &verdictFleet{
		chain: chain, tok: tok, up: startUpstream(t), setup: setup, dir: t.TempDir(),
		okPayTo: testenv.NewAccount(t).Address, denied: testenv.NewAccount(t).Address,
		payer: chain.Accounts[1],
	}
	f.adminKey = canary.adminKey
	f.facKey = canary.facilitatorKey
	f.env = []string{
		"X402_RPC_URL=" + chain.RPCURL,
		"X402_TOKEN=" + tok.Address.Hex(),
		"X402_FACILITATOR_KEY_FILE=" + writeKeyFile(t, chain.FacilitatorAccount()),
		"X402_FACILITATOR_API_KEY=" + f.facKey,
		"PAY_TO_OK=" + f.okPayTo.Hex(),
		"PAY_TO_DENIED=" + f.denied.Hex(),
		"UPSTREAM=" + f.up.srv.URL,
		"VERDICT_DB=" + filepath.Join(f.dir, "verdict.db"),
		"VERDICT_ADMIN_KEY=" + f.adminKey,
	}
	if setup.shared {
		f.redis = testenv.StartRedisServer(t, testenv.RedisConfig{Password: testenv.DefaultRedisPassword})
		f.pg = testenv.StartPostgresServer(t, testenv.PostgresConfig{Password: testenv.DefaultPostgresPassword, MaxConnections: setup.pgConnections})
		f.env = append(f.env, "REDIS_URL="+f.redis.URL, "PG_DSN="+f.pg.DSN)
	}
	f.caddyfile = verdictCaddyfile(setup)
	if !setup.shared {
		// `caddy verdict` never creates a store: the first start of the verdict app does, and
		// so does store.Open here, as devchain does for the demo.
		initVerdictStore(t, filepath.Join(f.dir, "verdict.db"))
	}
	f.operate(t)
	return f
}

// initVerdictStore creates an empty verdict store at path.
func initVerdictStore(t *testing.T, path string) {
	t.Helper()
	ctx := context.Background()
	db, err := sqldb.OpenSQLite(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
}

// cli runs `caddy verdict <args>` against the fleet's Caddyfile, as an operator would, and
// returns its standard output.
func (f *verdictFleet) cli(t *testing.T, args ...string) string {
	t.Helper()
	path := filepath.Join(f.dir, "Caddyfile")
	if err := os.WriteFile(path, []byte(f.caddyfile), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(testenv.CaddyBinary(t), append(append([]string{"verdict"}, args...), "--config", path, "--adapter", "caddyfile")...)
	// The Caddyfile's ports do not matter to the CLI, which only opens the store.
	cmd.Env = append(os.Environ(), append(f.env, "CADDY_ADMIN=127.0.0.1:0", "VERDICT_PORT=3", "API_PORT=1", "FACILITATOR_PORT=2",
		"XDG_DATA_HOME="+filepath.Join(f.dir, "data"), "XDG_CONFIG_HOME="+filepath.Join(f.dir, "config"), "VERDICT_KEY=")...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("caddy verdict %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String()
}

// operate registers the demo agent, its key, the payer's wallet and a policy that lets it
// pay okPayTo only, with the caddy verdict commands.
func (f *verdictFleet) operate(t *testing.T) {
	t.Helper()
	out := f.cli(t, "agent", "add", "buyer")
	if !strings.Contains(out, "buyer") {
		t.Fatalf("agent add printed %q", out)
	}
	f.key = strings.TrimSpace(f.cli(t, "key", "create", "--agent", "buyer"))
	testenv.AddCanary("verdict agent key", f.key)
	if !strings.HasPrefix(f.key, "vk_") || strings.ContainsAny(f.key, " \n\t") {
		t.Fatalf("key create printed %q, want the key alone", f.key)
	}
	f.cli(t, "wallet", "add", "--agent", "buyer", "--chain", "84532", f.payer.Address.Hex())
	if out := f.setBuyerPolicy(t, ""); !strings.Contains(out, "version 1") {
		t.Fatalf("policy set printed %q, want version 1", out)
	}
	if out := f.cli(t, "policy", "versions", "--agent", "buyer"); !strings.HasPrefix(out, "1\t") {
		t.Fatalf("policy versions printed %q", out)
	}
}

// setBuyerPolicy validates and sets, with the caddy verdict commands, a new version of the
// buyer's policy: it lets the payer pay okPayTo only, with more members when more is not
// empty (",\"member\":..."). It returns what `policy set` printed.
func (f *verdictFleet) setBuyerPolicy(t *testing.T, more string) string {
	t.Helper()
	pol := filepath.Join(f.dir, "policy.json")
	doc := fmt.Sprintf(`{"description":"pays okPayTo only","venues":{"allowed":["payment"]},"chains":{"allowed":[84532]},`+
		`"assets":{"universe":{"84532":[%q]}},"recipients":{"allowed":[%q]},"limits":{"perTxUsd":1}%s}`, f.tok.Address.Hex(), f.okPayTo.Hex(), more)
	if err := os.WriteFile(pol, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	if out := f.cli(t, "policy", "validate", pol); !strings.Contains(out, "valid") {
		t.Fatalf("policy validate printed %q", out)
	}
	return f.cli(t, "policy", "set", "--agent", "buyer", pol)
}

// demoAgent registers, with the caddy verdict commands, an agent "demo" that owns the payers'
// wallets on 84532 and whose policy lets them pay payTo in token, and returns a file holding
// its key.
func (f *verdictFleet) demoAgent(t *testing.T, token, payTo common.Address, payers ...common.Address) string {
	t.Helper()
	f.cli(t, "agent", "add", "demo")
	key := strings.TrimSpace(f.cli(t, "key", "create", "--agent", "demo"))
	testenv.AddCanary("verdict agent key (demo)", key)
	for _, p := range payers {
		f.cli(t, "wallet", "add", "--agent", "demo", "--chain", "84532", p.Hex())
	}
	pol := filepath.Join(f.dir, "policy.json")
	doc := fmt.Sprintf(`{"venues":{"allowed":["payment"]},"chains":{"allowed":[84532]},"assets":{"universe":{"84532":[%q]}},"recipients":{"allowed":[%q]}}`,
		token.Hex(), payTo.Hex())
	if err := os.WriteFile(pol, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	f.cli(t, "policy", "set", "--agent", "demo", pol)
	keyFile := filepath.Join(f.dir, "verdict.key")
	if err := os.WriteFile(keyFile, []byte(key+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return keyFile
}

// verdictInstance is one running Caddy of the fleet.
type verdictInstance struct {
	caddy                *testenv.Caddy
	api, verdictAPI, fac string
}

// start starts an instance of f; env entries override the fleet's.
func (f *verdictFleet) start(t *testing.T, env ...string) *verdictInstance {
	t.Helper()
	return f.launch(t, testenv.CaddyOptions{}, env...)
}

// launch starts an instance of f with opts, on free ports; env entries override the fleet's.
func (f *verdictFleet) launch(t *testing.T, opts testenv.CaddyOptions, env ...string) *verdictInstance {
	t.Helper()
	apiPort, verdictPort, facPort := testenv.FreePort(t), testenv.FreePort(t), testenv.FreePort(t)
	opts.Env = append(append(append([]string{}, f.env...), "VERDICT_KEY="+f.key,
		"API_PORT="+strconv.Itoa(apiPort), "VERDICT_PORT="+strconv.Itoa(verdictPort), "FACILITATOR_PORT="+strconv.Itoa(facPort)), env...)
	opts.WaitPorts = []int{apiPort, verdictPort, facPort}
	c := testenv.StartCaddy(t, f.caddyfile, opts)
	return &verdictInstance{caddy: c, api: "http://127.0.0.1:" + strconv.Itoa(apiPort),
		verdictAPI: "http://127.0.0.1:" + strconv.Itoa(verdictPort), fac: "http://127.0.0.1:" + strconv.Itoa(facPort)}
}

// noSecretsIn fails the test when a log holds one of the fleet's keys.
func (f *verdictFleet) noSecretsIn(t *testing.T, logs string) {
	t.Helper()
	for name, s := range map[string]string{"agent key": f.key, "admin key": f.adminKey, "facilitator API key": f.facKey} {
		if strings.Contains(logs, s) {
			t.Errorf("Caddy's log holds the %s", name)
		}
	}
}

// TestVerdictAppJudgesPayments runs the whole system in one built Caddy: the gate in
// GUARDIAN_MODE required asks the real verdict app, whose agent, key, wallet and policy an
// operator set with `caddy verdict`. x402-fetch pays a payee the policy allows and gets the
// content, and the transfer is on chain; for a payee the policy does not allow, the payer
// gets a 402 that says recipient_not_allowed, and nothing moves
// (docs/caddy.md#the-verdict-app, docs/verdict-api.md).
func TestVerdictAppJudgesPayments(t *testing.T) {
	f := newVerdictFleet(t, verdictSetup{})
	in := f.start(t)
	bal := balances(t, f.tok, f.payer.Address, f.okPayTo, f.denied)

	ok := payWith(t, payV1Script, f.payer, in.api+"/allowed/report", "X402_TOKEN="+f.tok.Address.Hex())
	if ok.Status != http.StatusOK {
		t.Fatalf("paying an allowed payee: status %d: %s", ok.Status, ok.Body)
	}
	if f.up.count("/allowed/report") != 1 {
		t.Fatalf("the upstream saw /allowed/report %d times, want 1", f.up.count("/allowed/report"))
	}
	wantDelta(t, f.tok, f.okPayTo, bal[1], price)

	denied := payWith(t, payV1Script, f.payer, in.api+"/denied/report", "X402_TOKEN="+f.tok.Address.Hex())
	if denied.Status != http.StatusPaymentRequired || !strings.Contains(denied.Body, "recipient_not_allowed") {
		t.Fatalf("paying a payee the policy does not allow: status %d, want 402 carrying recipient_not_allowed: %s", denied.Status, denied.Body)
	}
	if f.up.count("/denied/report") != 0 {
		t.Fatal("the upstream was reached without an approved payment")
	}
	wantDelta(t, f.tok, f.denied, bal[2], 0)
	wantDelta(t, f.tok, f.payer.Address, bal[0], -price)

	// The verdict API in its site: health, and the agent's records.
	if r := mustDo(t, http.MethodGet, in.verdictAPI+"/health", nil); r.Status != http.StatusOK {
		t.Errorf("verdict /health: status %d: %s", r.Status, r.Body)
	}
	if r := mustDo(t, http.MethodPost, in.verdictAPI+"/transactions", nil); r.Status != http.StatusUnauthorized {
		t.Errorf("POST /transactions without a key: status %d, want 401", r.Status)
	}
	// A reload keeps the service (and its store) up. The API's site reloads as any Caddy
	// site: its listener stays bound and idle kept-alive connections are closed, so each
	// check opens a connection of its own (docs/caddy.md#the-verdict-app).
	client := &http.Client{Timeout: requestBound, Transport: &http.Transport{DisableKeepAlives: true}}
	health := func(when string) {
		t.Helper()
		resp, err := client.Get(in.verdictAPI + "/health")
		if err != nil {
			t.Fatalf("%s: /health: %v", when, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: /health status %d", when, resp.StatusCode)
		}
	}
	health("before the reload")
	in.caddy.Reload(t, strings.Replace(f.caddyfile, "auto_https off", "auto_https off\n\tgrace_period 1s", 1))
	health("after the reload")
	// the reloaded config's metrics registry has the verdict service's counters, values kept
	if v, n := metricSum(in.caddy.Metrics(t), "caddy_verdict_verdicts_total", `mode="enforce"`); n != 2 || v != 2 {
		t.Errorf("after the reload, caddy_verdict_verdicts_total = %v over %d series, want the approval and the refusal", v, n)
	}
	f.noSecretsIn(t, in.caddy.Logs())
}

// TestThreeInstancesShareApprovalsAndSettleOnce runs three Caddy processes on one Redis
// and one PostgreSQL (approvals, journal, verdict store, rate limits): an approval recorded
// by /verify on instance A is consumed by /settle on instance B, and one payment header
// sent to all three at once is settled once and reaches the upstream once
// (docs/caddy.md#several-instances).
func TestThreeInstancesShareApprovalsAndSettleOnce(t *testing.T) {
	f := newVerdictFleet(t, verdictSetup{shared: true})
	ins := []*verdictInstance{f.start(t), f.start(t), f.start(t)}

	t.Run("an approval recorded on A is consumed on B", func(t *testing.T) {
		header := signOnly(t, payV2Script, f.payer, ins[0].api+"/allowed/one", "X402_TOKEN="+f.tok.Address.Hex())
		body := facilitatorBody(t, header)
		hdr := map[string]string{"x-facilitator-key": f.facKey, "Content-Type": "application/json"}
		bal := balances(t, f.tok, f.okPayTo)
		v := doJSON(t, ins[0].fac+"/verify", hdr, body)
		if v["isValid"] != true || v["guardianStatus"] != "approved" {
			t.Fatalf("/verify on A: %v", v)
		}
		s := doJSON(t, ins[1].fac+"/settle", hdr, body)
		if s["success"] != true {
			t.Fatalf("/settle on B after /verify on A: %v", s)
		}
		wantDelta(t, f.tok, f.okPayTo, bal[0], price)
		// The approval is gone: settling it again on C is refused, and nothing moves.
		again := doJSON(t, ins[2].fac+"/settle", hdr, body)
		if again["success"] == true {
			t.Fatalf("a second /settle on C succeeded: %v", again)
		}
		wantDelta(t, f.tok, f.okPayTo, bal[0], price)
	})

	t.Run("one header sent to all three at once settles once", func(t *testing.T) {
		const path = "/allowed/race"
		header := signOnly(t, payV2Script, f.payer, ins[0].api+path, "X402_TOKEN="+f.tok.Address.Hex())
		bal := balances(t, f.tok, f.payer.Address, f.okPayTo)
		from := blockNumber(t, f.chain)
		const perInstance = 4
		results := make([]httpResult, 3*perInstance)
		var start, wg sync.WaitGroup
		start.Add(1)
		for i := range results {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				start.Wait()
				r, err := do(t, http.MethodGet, ins[i%3].api+path, "", map[string]string{"PAYMENT-SIGNATURE": header})
				if err != nil {
					t.Errorf("request %d: %v", i, err)
				}
				results[i] = r
			}(i)
		}
		start.Done()
		wg.Wait()
		served := 0
		for i, r := range results {
			switch r.Status {
			case http.StatusOK:
				served++
			case http.StatusPaymentRequired, http.StatusConflict:
			default:
				t.Errorf("request %d: status %d: %s", i, r.Status, r.Body)
			}
		}
		if served != 1 {
			t.Errorf("%d answers served the content, want exactly 1", served)
		}
		if got := len(transfers(t, f.chain, f.tok, f.payer.Address, f.okPayTo, from+1)); got != 1 {
			t.Errorf("%d transfers on chain, want 1", got)
		}
		wantDelta(t, f.tok, f.payer.Address, bal[0], -price)
		wantDelta(t, f.tok, f.okPayTo, bal[1], price)
		if c := f.up.count(path); c != 1 {
			t.Errorf("the upstream saw %s %d times, want 1", path, c)
		}
	})
	for _, in := range ins {
		f.noSecretsIn(t, in.caddy.Logs())
	}
}

// facilitatorBody is the /verify and /settle body of a v2 PAYMENT-SIGNATURE header.
func facilitatorBody(t *testing.T, header string) []byte {
	t.Helper()
	payload := decodePaymentJSON(t, header)
	body, err := json.Marshal(map[string]any{"x402Version": 2, "paymentPayload": map[string]any(payload), "paymentRequirements": payload["accepted"]})
	if err != nil {
		t.Fatal(err)
	}
	return body
}

// doJSON posts body to url and decodes the JSON answer.
func doJSON(t *testing.T, url string, header map[string]string, body []byte) map[string]any {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	client := &http.Client{Timeout: requestBound}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	scanAnswer(t.Name(), resp.Header, raw)
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("POST %s: status %d, body is not JSON: %v", url, resp.StatusCode, err)
	}
	return out
}
