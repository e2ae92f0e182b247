package integration_test

import (
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/x402gate/x402gate/internal/testenv"
)

// redactCaddyfile has two sites whose access logs are a plain `log` with no format line:
// API_PORT logs to the file ACCESS_LOG and serves a paid route, a free route that answers
// with the secret response headers, and the verdict API; PLAIN_PORT is a bare `log` (to
// stderr) in front of a paid route and a free one.
const redactCaddyfile = `{
	admin {$CADDY_ADMIN}
	auto_https off
	x402 {
		facilitator {
			` + testChainFacilitator + `
		}
	}
	verdict {
		store sqlite {$VERDICT_DB}
		admin_key {env.VERDICT_ADMIN_KEY}
	}
}

http://:{$API_PORT} {
	bind 127.0.0.1
	log {
		output file {$ACCESS_LOG}
	}
	x402 /paid/* {
		price 0.01 USDC
		pay_to {$PAY_TO}
		network base-sepolia
	}
	handle_path /verdict/* {
		verdict_api
	}
	header /free/* X-Payment-Retry {env.RESP_RETRY}
	header /free/* X-402-Pass {env.RESP_PASS}
	header /free/* Set-Cookie "x402_pass={env.RESP_PASS}; Path=/"
	respond "free"
}

http://:{$PLAIN_PORT} {
	bind 127.0.0.1
	log
	x402 /paid/* {
		price 0.01 USDC
		pay_to {$PAY_TO}
		network base-sepolia
	}
	respond "free"
}
`

// redactCanaries are the secret request headers of docs/caddy.md#secrets, each with a
// canary value of its own, and the pass cookie.
var redactCanaries = map[string]string{
	"X-Api-Key":              "canary-redact-api-key-0001",
	"X-Admin-Key":            "canary-redact-admin-key-0002",
	"X-Facilitator-Key":      "canary-redact-facilitator-key-0003",
	"X-PAYMENT-RETRY":        "canary-redact-retry-token-0004",
	"X-402-PASS":             "canary-redact-pass-token-0005",
	"SIGN-IN-WITH-X":         "canary-redact-sign-in-0006",
	"X-PAYMENT":              "canary-redact-v1-payment-0007",
	"PAYMENT-SIGNATURE":      "canary-redact-v2-payment-0008",
	"X-VERIFICATION-PAYMENT": "canary-redact-fee-payment-0009",
	"Cookie":                 "x402_pass=canary-redact-pass-cookie-0010",
}

// Response headers the free route answers with.
const (
	redactRespRetry = "canary-redact-resp-retry-0011"
	redactRespPass  = "canary-redact-resp-pass-0012"
)

// TestAccessLogRedactsByDefault: issue 20 "Why" 5. With a plain log directive and no
// format line, requests that carry every secret header, to a paid route, a free route and
// the verdict API, leave none of the values in the access log (a file, and stderr for a
// bare `log`), nor the secret response headers of the free route. The log still has the
// three requests and a harmless header, so the test cannot pass on an empty log.
func TestAccessLogRedactsByDefault(t *testing.T) {
	for name, v := range redactCanaries {
		testenv.AddCanary("redact "+name, v)
	}
	testenv.AddCanary("redact response retry", redactRespRetry)
	testenv.AddCanary("redact response pass", redactRespPass)
	chain, tok := testenv.StartChainWithToken(t)
	dir := t.TempDir()
	accessLog := filepath.Join(dir, "access.log")
	apiPort, plainPort := testenv.FreePort(t), testenv.FreePort(t)
	caddy := testenv.StartCaddy(t, redactCaddyfile, testenv.CaddyOptions{
		Env: []string{
			"X402_RPC_URL=" + chain.RPCURL,
			"X402_TOKEN=" + tok.Address.Hex(),
			"X402_FACILITATOR_KEY_FILE=" + writeKeyFile(t, chain.FacilitatorAccount()),
			"PAY_TO=" + testenv.NewAccount(t).Address.Hex(),
			"VERDICT_DB=" + filepath.Join(dir, "verdict.db"),
			"VERDICT_ADMIN_KEY=redact-test-admin-key-0123456789",
			"ACCESS_LOG=" + accessLog,
			"RESP_RETRY=" + redactRespRetry,
			"RESP_PASS=" + redactRespPass,
			"API_PORT=" + strconv.Itoa(apiPort),
			"PLAIN_PORT=" + strconv.Itoa(plainPort),
		},
		WaitPorts: []int{apiPort, plainPort},
	})
	api, plain := "http://127.0.0.1:"+strconv.Itoa(apiPort), "http://127.0.0.1:"+strconv.Itoa(plainPort)

	for _, tc := range []struct {
		url  string
		want int
	}{
		{api + "/paid/report", http.StatusBadRequest}, // the payment headers are not payments
		{api + "/free/page", http.StatusOK},
		{api + "/verdict/transactions/0xab/approval-status", http.StatusUnauthorized},
		{plain + "/paid/report", http.StatusBadRequest},
		{plain + "/free/page", http.StatusOK},
	} {
		res := redactRequest(t, tc.url)
		if res.StatusCode != tc.want {
			t.Fatalf("GET %s = %d, want %d", tc.url, res.StatusCode, tc.want)
		}
		if tc.url == api+"/free/page" && res.Header.Get("X-Payment-Retry") != redactRespRetry {
			t.Fatalf("GET %s: the free route did not answer with the secret response headers", tc.url)
		}
	}

	fileLog := waitLog(t, "the access log file", func() string {
		b, _ := os.ReadFile(accessLog)
		return string(b)
	}, "/paid/report", "/free/page", "/verdict/transactions/")
	stderrLog := waitLog(t, "caddy's stderr", caddy.Logs, `"host":"127.0.0.1:`+strconv.Itoa(plainPort)+`","uri":"/paid/report"`,
		`"host":"127.0.0.1:`+strconv.Itoa(plainPort)+`","uri":"/free/page"`)
	for where, text := range map[string]string{"the access log file": fileLog, "caddy's stderr": stderrLog} {
		if !strings.Contains(text, "redact-visible-control") {
			t.Errorf("%s has no X-Visible header: are request headers logged at all?", where)
		}
		if hits := testenv.ScanCanaries(t.Name()+": "+where, []byte(text)); len(hits) > 0 {
			t.Errorf("%s holds secret header values: %v", where, hits)
		}
	}
}

// redactRequest sends GET url with every header of redactCanaries and a harmless one.
func redactRequest(t *testing.T, url string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range redactCanaries {
		req.Header.Set(k, v)
	}
	req.Header.Set("X-Visible", "redact-visible-control")
	res, err := (&http.Client{Timeout: requestBound}).Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	res.Body.Close()
	return res
}

// waitLog reads a log until it holds every one of wants (the access log is written after
// the answer), within a bound; it fails the test with what it read otherwise.
func waitLog(t *testing.T, what string, read func() string, wants ...string) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		text := read()
		missing := ""
		for _, w := range wants {
			if !strings.Contains(text, w) {
				missing = w
			}
		}
		if missing == "" {
			return text
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s has no entry with %q", what, missing)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
