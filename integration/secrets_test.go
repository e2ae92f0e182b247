package integration_test

import (
	"bytes"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/x402gate/x402gate/internal/testenv"
)

// canary holds the known values the integration tests use for their secrets, so that every
// output can be scanned for them (docs/caddy.md#secrets). The signer key is anvil's
// development key 0 (testenv.DevKeys[0]); agent keys made by `caddy verdict key create`
// are registered when they are made.
var canary = struct {
	verdictKey, facilitatorKey, adminKey, passKey, passKeyOld, redisPassword, pgPassword string
}{
	verdictKey:     "vk_canary_verdict_key_5d1e8a3f9b2c7e40",
	facilitatorKey: "canary_facilitator_key_7c2a9e4b1f6d3058",
	adminKey:       "canary_admin_key_3e8b5c1a7f9d2406",
	passKey:        "canary_pass_key_b6e2f9a41c7d3850e9f1a2b3c4d5e6f7",
	passKeyOld:     "canary_pass_key_old_0a9b8c7d6e5f4a3b2c1d0e9f8a7b6c5d",
	redisPassword:  "canaryRedisPassword4f7a1c9e2b",
	pgPassword:     "canaryPgPassword8d3b6e0a5c2f",
}

// registerCanaries registers every canary with testenv, and makes every Redis and
// PostgreSQL server the tests start require its canary password.
func registerCanaries() {
	testenv.AddCanary("verdict agent key", canary.verdictKey)
	testenv.AddCanary("facilitator API key", canary.facilitatorKey)
	testenv.AddCanary("verdict admin key", canary.adminKey)
	testenv.AddCanary("pass key", canary.passKey)
	testenv.AddCanary("old pass key", canary.passKeyOld)
	testenv.AddCanary("Redis password", canary.redisPassword)
	testenv.AddCanary("PostgreSQL password", canary.pgPassword)
	testenv.AddCanary("signer private key", testenv.DevKeys[0])
	testenv.DefaultRedisPassword = canary.redisPassword
	testenv.DefaultPostgresPassword = canary.pgPassword
}

// scanAnswer hands an HTTP answer's header and body to the canary scan.
func scanAnswer(test string, h http.Header, body []byte) {
	var b bytes.Buffer
	_ = h.Write(&b)
	testenv.ScanCanaries(test+": http answer header", b.Bytes())
	testenv.ScanCanaries(test+": http answer body", body)
}

// scanStdout puts a pipe in front of the binary's standard output, where the testing
// package writes every test's output, copies everything through and scans it for the
// canaries; the returned function restores the output and waits for the copy to end.
func scanStdout() (stop func()) {
	r, w, err := os.Pipe()
	if err != nil {
		return func() {}
	}
	orig := os.Stdout
	os.Stdout = w
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		overlap := testenv.MaxCanaryLen()
		var tail []byte
		buf := make([]byte, 64<<10)
		for {
			n, err := r.Read(buf)
			if n > 0 {
				_, _ = orig.Write(buf[:n])
				chunk := append(tail, buf[:n]...)
				testenv.ScanCanaries("test output", chunk)
				if len(chunk) > overlap {
					chunk = chunk[len(chunk)-overlap:]
				}
				tail = append([]byte(nil), chunk...)
			}
			if err != nil {
				if err != io.EOF {
					_, _ = io.Copy(orig, r)
				}
				return
			}
		}
	}()
	return func() {
		os.Stdout = orig
		_ = w.Close()
		wg.Wait()
	}
}

// TestSecretsStayOutOfEverything runs a Caddy with every secret set to its canary (signer
// key, verdict agent key, facilitator API key, verdict admin key, and the passwords in the
// Redis URL and the PostgreSQL DSN), drives it through paid, refused and unauthorized
// requests, then stops Redis and PostgreSQL under it and asks a config reload that cannot
// open them, so that every error path writes its log lines and answers. No log line, HTTP
// answer, reload error, admin /config/ or /metrics answer, or autosave.json holds a
// canary (docs/caddy.md#secrets).
func TestSecretsStayOutOfEverything(t *testing.T) {
	f := newVerdictFleet(t, verdictSetup{shared: true})
	in := f.start(t)
	var seen []string // what this test scanned, for the message
	check := func(where string, b []byte) {
		t.Helper()
		seen = append(seen, where)
		if hits := testenv.ScanCanaries(t.Name()+": "+where, b); len(hits) > 0 {
			t.Errorf("%s holds: %s", where, strings.Join(hits, ", "))
		}
	}

	// Paid and refused payments, with the verdict app deciding.
	if ok := payWith(t, payV1Script, f.payer, in.api+"/allowed/secret", "X402_TOKEN="+f.tok.Address.Hex()); ok.Status != http.StatusOK {
		t.Fatalf("paying an allowed payee: status %d: %s", ok.Status, ok.Body)
	}
	if no := payWith(t, payV1Script, f.payer, in.api+"/denied/secret", "X402_TOKEN="+f.tok.Address.Hex()); no.Status != http.StatusPaymentRequired {
		t.Fatalf("paying a denied payee: status %d: %s", no.Status, no.Body)
	}
	// Wrong and missing credentials on every API, and the right ones.
	for _, r := range []struct {
		url    string
		header map[string]string
		want   int
	}{
		{in.fac + "/supported", map[string]string{"x-facilitator-key": f.facKey + "x"}, http.StatusUnauthorized},
		{in.fac + "/supported", map[string]string{"x-facilitator-key": f.facKey}, http.StatusOK},
		{in.verdictAPI + "/admin/agents", map[string]string{"x-admin-key": f.adminKey + "x"}, http.StatusUnauthorized},
		{in.verdictAPI + "/admin/agents", map[string]string{"x-admin-key": f.adminKey}, http.StatusOK},
		{in.verdictAPI + "/admin/agents", map[string]string{"x-admin-key": f.adminKey, "x-api-key": f.key}, http.StatusBadRequest},
		{in.verdictAPI + "/transactions/0x01/approval-status", map[string]string{"x-api-key": f.key, "Authorization": "Bearer " + f.key}, http.StatusBadRequest},
		{in.verdictAPI + "/transactions/0x01/approval-status", map[string]string{"x-api-key": f.key}, http.StatusNotFound},
	} {
		if got := mustDo(t, http.MethodGet, r.url, r.header); got.Status != r.want {
			t.Errorf("GET %s: status %d, want %d", r.url, got.Status, r.want)
		}
	}
	check("admin /config/", mustDo(t, http.MethodGet, in.caddy.AdminURL+"/config/", nil).Body)
	check("admin /metrics", []byte(in.caddy.Metrics(t)))

	// Take the stores away: settles, verdict reads and a reload now fail, and say so.
	f.redis.Stop()
	f.pg.Stop()
	header := signOnly(t, payV2Script, f.payer, in.api+"/allowed/down", "X402_TOKEN="+f.tok.Address.Hex())
	if r := mustDo(t, http.MethodGet, in.api+"/allowed/down", map[string]string{"PAYMENT-SIGNATURE": header}); r.Status == http.StatusOK {
		t.Errorf("a payment with Redis and PostgreSQL down was served")
	}
	if r := mustDo(t, http.MethodGet, in.verdictAPI+"/admin/agents", map[string]string{"x-admin-key": f.adminKey}); r.Status == http.StatusOK {
		t.Errorf("an admin read with PostgreSQL down answered 200")
	}
	// A changed facilitator block is opened anew at provision (an unchanged one is reused),
	// so the reload has to dial Redis and PostgreSQL.
	reload := strings.Replace(f.caddyfile, "guardian_mode required", "guardian_mode required\n\t\t\tapproval_ttl 4m", 1)
	if err := in.caddy.Load(reload); err == nil {
		t.Errorf("a reload with Redis and PostgreSQL down was accepted")
	} else {
		check("the refused reload's error", []byte(err.Error()))
	}
	check("admin /config/ after the faults", mustDo(t, http.MethodGet, in.caddy.AdminURL+"/config/", nil).Body)
	check("admin /metrics after the faults", []byte(in.caddy.Metrics(t)))
	autosave := filepath.Join(filepath.Dir(filepath.Dir(in.caddy.DataDir)), "config", "caddy", "autosave.json")
	if b, err := os.ReadFile(autosave); err != nil {
		t.Errorf("autosave.json: %v", err)
	} else {
		check("autosave.json", b)
	}
	logs := in.caddy.Logs()
	check("caddy's log", []byte(logs))
	// The faults did reach the log: the scan above looked at real error lines.
	for _, want := range []string{`"level":"error"`, "redis", "postgres"} {
		if !strings.Contains(strings.ToLower(logs), strings.ToLower(want)) {
			t.Errorf("caddy's log has no %q line: the store faults were not exercised", want)
		}
	}
	t.Logf("scanned: %s", strings.Join(seen, "; "))
}

// TestCanaryHookFailsTheRun runs this test binary again with one test that prints a
// canary, and checks that TestMain fails that run and names the secret, so that a leak
// into the test output cannot pass unnoticed.
func TestCanaryHookFailsTheRun(t *testing.T) {
	if os.Getenv(canarySelfTest) != "" {
		t.Skip("inside the self test")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestCanaryLeakForSelfTest$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), canarySelfTest+"=1")
	out, err := cmd.CombinedOutput()
	// The child printed a canary: never show its output as it is.
	shown := strings.ReplaceAll(string(out), canary.passKey, "<canary>")
	if err == nil {
		t.Fatalf("a run that printed the pass key passed:\n%s", shown)
	}
	if !strings.Contains(shown, "secret canaries leaked") || !strings.Contains(shown, "test output: pass key") {
		t.Fatalf("the run failed without naming the leak (%v):\n%s", err, shown)
	}
}

const canarySelfTest = "X402_CANARY_SELF_TEST"

func TestCanaryLeakForSelfTest(t *testing.T) {
	if os.Getenv(canarySelfTest) == "" {
		t.Skip("runs only under TestCanaryHookFailsTheRun")
	}
	t.Logf("a leak: %s", canary.passKey)
}
