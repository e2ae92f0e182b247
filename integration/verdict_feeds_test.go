package integration_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/big"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"

	"github.com/x402gate/x402gate/internal/testenv"
)

// feedsCaddyfile is a verdict app, served by verdict_api on VERDICT_PORT, that prices FEED_TOKEN from our Chainlink-style feed and
// screens with our sanctions oracle, both read through the RPC in RPC_URL, beside a sanctions
// list file that it checks every second.
func feedsCaddyfile(refresh string) string {
	return `{
	admin {$CADDY_ADMIN}
	auto_https off
	verdict {
		store sqlite {$VERDICT_DB}
		sanctions {$SANCTIONS_FILE} 24h refresh ` + refresh + `
		rpc 84532 {env.RPC_URL}
		price_feed 84532 {$FEED_TOKEN} {$FEED} 1h
		sanctions_oracle 84532 {$ORACLE}
	}
}

http://:{$VERDICT_PORT} {
	bind 127.0.0.1
	verdict_api
}
`
}

// feedsEnv is a chain with our token, a feed and an oracle, a sanctions list file, and a
// verdict store whose agent "trader" owns the escrow wallet and may pay anyone up to 5 USD.
type feedsEnv struct {
	chain    *testenv.Chain
	tok      *testenv.Token
	feed     *testenv.PriceFeed
	oracle   *testenv.SanctionsOracle
	list     string
	dir      string
	env      []string
	key      string
	escrow   common.Address
	flagged  common.Address // on the oracle
	listed   common.Address // in the list file, after the refresh
	verdicts string
	caddy    *testenv.Caddy
	file     string // the Caddyfile
}

func (f *feedsEnv) cli(t *testing.T, args ...string) string {
	t.Helper()
	path := filepath.Join(f.dir, "Caddyfile")
	if err := os.WriteFile(path, []byte(f.file), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(testenv.CaddyBinary(t), append(append([]string{"verdict"}, args...), "--config", path, "--adapter", "caddyfile")...)
	cmd.Env = append(os.Environ(), append(f.env, "CADDY_ADMIN=127.0.0.1:0", "VERDICT_PORT=1",
		"XDG_DATA_HOME="+filepath.Join(f.dir, "data"), "XDG_CONFIG_HOME="+filepath.Join(f.dir, "config"))...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("caddy verdict %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String()
}

// writeList replaces the sanctions list file atomically, as docs/policy.md asks.
func (f *feedsEnv) writeList(t *testing.T, date string, addrs ...common.Address) {
	t.Helper()
	body := "# generatedAt: " + date + "\n"
	for _, a := range addrs {
		body += a.Hex() + "\n"
	}
	tmp := f.list + ".new"
	if err := os.WriteFile(tmp, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, f.list); err != nil {
		t.Fatal(err)
	}
}

// judge submits a payment of amount base units of asset to payTo and waits for its verdict.
func (f *feedsEnv) judge(t *testing.T, asset, payTo common.Address, amount string) map[string]any {
	t.Helper()
	body := fmt.Sprintf(`{"escrowAddress":%q,"prompt":"pay","proposedTx":{"protocol":"payment","rail":"x402","chainId":84532,"payTo":%q,"asset":%q,"amount":%q}}`,
		f.escrow.Hex(), payTo.Hex(), asset.Hex(), amount)
	req, _ := http.NewRequest(http.MethodPost, f.verdicts+"/transactions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("x-api-key", f.key)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var rec struct {
		RequestHash string `json:"requestHash"`
	}
	err = json.NewDecoder(res.Body).Decode(&rec)
	res.Body.Close()
	if err != nil || res.StatusCode != http.StatusCreated {
		t.Fatalf("POST /transactions: %d %v", res.StatusCode, err)
	}
	deadline := time.Now().Add(30 * time.Second) // turns a hang into a failure
	for time.Now().Before(deadline) {
		req, _ := http.NewRequest(http.MethodGet, f.verdicts+"/transactions/"+rec.RequestHash+"/approval-status", nil)
		req.Header.Set("x-api-key", f.key)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var st struct {
			Verdict map[string]any `json:"verdict"`
		}
		err = json.NewDecoder(res.Body).Decode(&st)
		res.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if st.Verdict != nil {
			return st.Verdict
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("no verdict within 30s")
	return nil
}

// sourceStatus returns the dataFreshness status of the source whose name starts with prefix.
func sourceStatus(v map[string]any, prefix string) string {
	df, _ := v["dataFreshness"].(map[string]any)
	srcs, _ := df["sources"].([]any)
	for _, s := range srcs {
		m, _ := s.(map[string]any)
		if n, _ := m["name"].(string); strings.HasPrefix(n, prefix) {
			st, _ := m["status"].(string)
			asOf, _ := m["asOf"].(string)
			return asOf + " " + st
		}
	}
	return ""
}

func checkStatus(v map[string]any, id string) string {
	cs, _ := v["checks"].([]any)
	for _, c := range cs {
		m, _ := c.(map[string]any)
		if m["checkId"] == id {
			s, _ := m["status"].(string)
			if code, ok := m["code"].(string); ok {
				s += " " + code
			}
			return s
		}
	}
	return ""
}

// newFeedsEnv starts anvil with our token, feed (2 USD a token, fresh) and oracle, writes
// an empty sanctions list, registers the agent with the caddy verdict commands and starts
// Caddy with the list checked every refresh.
func newFeedsEnv(t *testing.T, refresh string) *feedsEnv {
	t.Helper()
	chain, tok := testenv.StartChainWithToken(t)
	f := &feedsEnv{chain: chain, tok: tok, dir: t.TempDir(), escrow: chain.Accounts[1].Address, file: feedsCaddyfile(refresh),
		flagged: common.HexToAddress("0xf1a9000000000000000000000000000000000002"),
		listed:  common.HexToAddress("0x5a1e0000000000000000000000000000000000b1")}
	f.feed = chain.DeployPriceFeed(t, 8, "USDT / USD")
	f.feed.SetRound(t, big.NewInt(2e8), time.Now()) // 2 USD a token
	f.oracle = chain.DeploySanctionsOracle(t)
	f.oracle.Add(t, f.flagged)
	f.list = filepath.Join(f.dir, "sanctions.txt")
	f.writeList(t, time.Now().UTC().Format(time.RFC3339))
	f.env = []string{
		"VERDICT_DB=" + filepath.Join(f.dir, "verdict.db"),
		"SANCTIONS_FILE=" + f.list,
		"RPC_URL=" + chain.RPCURL,
		"FEED_TOKEN=" + tok.Address.Hex(),
		"FEED=" + f.feed.Address.Hex(),
		"ORACLE=" + f.oracle.Address.Hex(),
	}
	initVerdictStore(t, filepath.Join(f.dir, "verdict.db"))
	f.cli(t, "agent", "add", "trader")
	f.key = strings.TrimSpace(f.cli(t, "key", "create", "--agent", "trader"))
	f.cli(t, "wallet", "add", "--agent", "trader", "--chain", "84532", f.escrow.Hex())
	pol := filepath.Join(f.dir, "policy.json")
	if err := os.WriteFile(pol, []byte(`{"venues":{"allowed":["payment"]},"chains":{"allowed":[84532]},"limits":{"perTxUsd":5}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	f.cli(t, "policy", "set", "--agent", "trader", pol)

	port := testenv.FreePort(t)
	f.env = append(f.env, "VERDICT_PORT="+strconv.Itoa(port))
	f.caddy = testenv.StartCaddy(t, f.file, testenv.CaddyOptions{Env: f.env, WaitPorts: []int{port}})
	f.verdicts = "http://127.0.0.1:" + strconv.Itoa(port)
	return f
}

// TestVerdictAppReadsFeedsAndOracleOnChain runs the verdict app in the built Caddy against
// anvil with our contracts (docs/policy.md#price-feeds, docs/policy.md#sanctions-oracle,
// docs/policy.md#refreshing-the-list): a token only the feed prices is capped in USD; a stale
// round gives data_unavailable; the oracle's address is rejected; an address added to the
// list file is rejected after the scheduled refresh, without a reload; and the RPC URL, given
// by placeholder, never shows in the log.
func TestVerdictAppReadsFeedsAndOracleOnChain(t *testing.T) {
	f := newFeedsEnv(t, "1s")
	chain, tok := f.chain, f.tok
	c := f.caddy
	payee := chain.Accounts[2].Address
	feedSource := "price-feed:84532:"

	v := f.judge(t, tok.Address, payee, "2000000") // 2 tokens, 4 USD
	if v["outcome"] != "approved" || v["usdNotional"] != 4.0 || !strings.HasSuffix(sourceStatus(v, feedSource), " fresh") {
		t.Fatalf("2 tokens at 2 USD under a 5 USD cap: %v %v, usdNotional %v, feed %q", v["outcome"], v["humanReason"], v["usdNotional"], sourceStatus(v, feedSource))
	}
	if v := f.judge(t, tok.Address, payee, "3000000"); v["reasonCode"] != "per_tx_cap_exceeded" {
		t.Errorf("3 tokens at 2 USD over a 5 USD cap: %v %v", v["reasonCode"], v["humanReason"])
	}
	if v := f.judge(t, tok.Address, f.flagged, "1"); v["reasonCode"] != "sanctioned_address" || !strings.HasSuffix(sourceStatus(v, "sanctions-oracle:84532:"), " fresh") {
		t.Errorf("paying the oracle's address: %v %v", v["reasonCode"], v["humanReason"])
	}

	// The list file gains an address: the scheduled refresh picks it up, no reload needed.
	if v := f.judge(t, tok.Address, f.listed, "1"); v["outcome"] != "approved" {
		t.Fatalf("before the list names it: %v %v", v["reasonCode"], v["humanReason"])
	}
	f.writeList(t, time.Now().UTC().Format(time.RFC3339), f.listed)
	deadline := time.Now().Add(30 * time.Second)
	for {
		v := f.judge(t, tok.Address, f.listed, "1")
		if v["reasonCode"] == "sanctioned_address" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the refreshed list was not used within 30s: %v", v["reasonCode"])
		}
		time.Sleep(200 * time.Millisecond)
	}

	// The feed's round grows older than its max age: nothing is priced, the verdict says so.
	// (The cache keeps a read for 15 s; the new round is seen once it expires.)
	f.feed.SetRound(t, big.NewInt(2e8), time.Now().Add(-2*time.Hour))
	deadline = time.Now().Add(60 * time.Second)
	for {
		v := f.judge(t, tok.Address, payee, "1000000")
		if v["reasonCode"] == "data_unavailable" {
			if checkStatus(v, "per_tx_cap") != "failed data_unavailable" || !strings.HasSuffix(sourceStatus(v, feedSource), " cached") {
				t.Errorf("stale feed: per_tx_cap %q, feed %q", checkStatus(v, "per_tx_cap"), sourceStatus(v, feedSource))
			}
			if tr, _ := v["trust"].(map[string]any); tr["level"] != "medium" {
				t.Errorf("stale feed: trust %v", tr)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the stale round was not seen within 60s: %v %v", v["reasonCode"], v["humanReason"])
		}
		time.Sleep(time.Second)
	}
	if strings.Contains(c.Logs(), chain.RPCURL) {
		t.Error("Caddy's log holds the RPC URL")
	}
}

// TestVerdictAppReloadRereadsTheList: with the schedule an hour away, a Caddy reload that
// keeps the verdict app's config (and so its service and store) reads the sanctions list file
// again (docs/caddy.md#the-verdict-app).
func TestVerdictAppReloadRereadsTheList(t *testing.T) {
	f := newFeedsEnv(t, "1h")
	if v := f.judge(t, f.tok.Address, f.listed, "1"); v["outcome"] != "approved" {
		t.Fatalf("before the list names it: %v %v", v["reasonCode"], v["humanReason"])
	}
	f.writeList(t, "2026-11-20T00:00:00Z", f.listed)
	if v := f.judge(t, f.tok.Address, f.listed, "1"); v["outcome"] != "approved" {
		t.Fatalf("the list was read again before the reload or the schedule: %v", v["reasonCode"])
	}
	// Caddy ignores a load of the same config (caddy reload --force forces one): change
	// something beside the verdict app, which keeps its service.
	f.caddy.Reload(t, strings.Replace(f.file, "auto_https off", "auto_https off\n\tlog {\n\t\tlevel INFO\n\t}", 1))
	v := f.judge(t, f.tok.Address, f.listed, "1")
	if v["reasonCode"] != "sanctioned_address" {
		t.Fatalf("after the reload: %v %v", v["reasonCode"], v["humanReason"])
	}
	if got := sourceStatus(v, "sanctions:sanctions.txt"); !strings.HasPrefix(got, "2026-11-20T00:00:00Z ") {
		t.Errorf("the list's date in the verdict: %q", got)
	}
}
