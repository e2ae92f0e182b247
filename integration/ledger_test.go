package integration_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/x402gate/x402gate/internal/testenv"
)

// ledgerCaddyfile gates the flaky upstream (its first answer per path is 503) on two
// routes, one where a payment id is optional and one where it is required, with the
// bundled facilitator of paymentIDCaddyfile.
var ledgerCaddyfile = paymentIDCaddyfile[:strings.Index(paymentIDCaddyfile, "http://")] + `http://:{$PORT} {
	bind 127.0.0.1
	handle /api/flaky/optional/* {
		x402 {
			pay_to {$X402_PAY_TO}
			network base-sepolia
			price 0.01 USDC
			payment_id optional
		}
		reverse_proxy {$UPSTREAM}
	}
	handle /api/flaky/required/* {
		x402 {
			pay_to {$X402_PAY_TO}
			network base-sepolia
			price 0.01 USDC
			payment_id required
		}
		reverse_proxy {$UPSTREAM}
	}
}
`

// withPaymentID is header, a v2 payment, with its payment-identifier id replaced: the id
// is not signed, so the same signed authorization travels under any id.
func withPaymentID(t *testing.T, header, id string) string {
	t.Helper()
	p := decodePaymentJSON(t, header)
	ext, _ := p["extensions"].(map[string]any)
	pid, _ := ext["payment-identifier"].(map[string]any)
	info, _ := pid["info"].(map[string]any)
	if info == nil {
		t.Fatalf("the client's payment carries no payment-identifier: %v", p["extensions"])
	}
	info["id"] = id
	return p.encode(t)
}

// TestCaddyLedgerIDsAndTokenOneAnswer is point 1 of "Why" in issue 20 through the built
// binary, with the real @x402/fetch and @x402/extensions client: after a paid request
// whose upstream failed (503 with a retry token), the same signed authorization under id
// X, under id Y with the retry token, and under X with the token, in sequence and at
// once, on an optional and on a required payment_id route, gets one good answer, and the
// upstream answers well once, for one transfer each.
func TestCaddyLedgerIDsAndTokenOneAnswer(t *testing.T) {
	chain, tok := testenv.StartChainWithToken(t)
	payTo := testenv.NewAccount(t).Address
	port := testenv.FreePort(t)
	up := startUpstream(t)
	testenv.StartCaddy(t, ledgerCaddyfile, testenv.CaddyOptions{
		Env: []string{
			"RPC_A=" + chain.RPCURL, "TOKEN_A=" + tok.Address.Hex(), "X402_PAY_TO=" + payTo.Hex(),
			"X402_FACILITATOR_KEY_FILE=" + writeKeyFile(t, chain.FacilitatorAccount()),
			"PORT=" + strconv.Itoa(port), "UPSTREAM=" + up.srv.URL,
		},
		WaitPorts: []int{port},
	})
	base := "http://127.0.0.1:" + strconv.Itoa(port)
	token := "X402_TOKEN=" + tok.Address.Hex()
	payer := chain.Accounts[1]
	bal := balances(t, tok, payer.Address, payTo)
	payments := 0
	for _, route := range []string{"optional", "required"} {
		for _, order := range []string{"in-sequence", "at-once"} {
			path := "/api/flaky/" + route + "/" + order
			url := base + path
			x := signOnly(t, payV2Script, payer, url, token, "X402_PAYMENT_ID=pay_ledger_"+route+"_"+order+"_X")
			y := withPaymentID(t, x, "pay_ledger_"+route+"_"+order+"_Y")
			first := mustDo(t, http.MethodGet, url, map[string]string{"PAYMENT-SIGNATURE": x})
			retry := first.Header.Get("X-PAYMENT-RETRY")
			if first.Status != http.StatusServiceUnavailable || retry == "" {
				t.Fatalf("%s: first: %d %s, want the upstream's 503 with a retry token", path, first.Status, first.Body)
			}
			payments++
			tries := []map[string]string{
				{"PAYMENT-SIGNATURE": y, "X-PAYMENT-RETRY": retry},
				{"PAYMENT-SIGNATURE": x},
				{"PAYMENT-SIGNATURE": x, "X-PAYMENT-RETRY": retry},
				{"PAYMENT-SIGNATURE": y},
			}
			statuses := make([]int, len(tries))
			if order == "in-sequence" {
				for i, h := range tries {
					statuses[i] = mustDo(t, http.MethodGet, url, h).Status
				}
			} else {
				var wg sync.WaitGroup
				for i, h := range tries {
					wg.Add(1)
					go func() {
						defer wg.Done()
						if r, err := do(t, http.MethodGet, url, "", h); err == nil {
							statuses[i] = r.Status
						}
					}()
				}
				wg.Wait()
			}
			good := 0
			for _, s := range statuses {
				if s == http.StatusOK {
					good++
				}
			}
			if good != 1 {
				t.Errorf("%s: answers %v to id Y with the token, id X, id X with the token and id Y: %d good, want 1", path, statuses, good)
			}
			if n := up.count(path); n != 2 {
				t.Errorf("%s: the upstream ran %d times (its first answer failed), want 2", path, n)
			}
		}
	}
	wantDelta(t, tok, payer.Address, bal[0], -price*int64(payments))
	wantDelta(t, tok, payTo, bal[1], price*int64(payments))
}

// lostAnswer is one payment of TestTwoInstancesServeAnswersLostWithOne.
type lostAnswer struct {
	path    string
	auth    testenv.Authorization
	header  string
	answers []int  // every status the client got; 0: no answer (the instance died)
	retry   string // the X-PAYMENT-RETRY token of an answer
	refusal string // the error of the last refusal
	waited  time.Duration
}

// sendAs sends GET url with header and the Host host (behind one load balancer every
// instance sees the site's host, to which a payment's record is bound).
func sendAs(url, host string, header map[string]string) (httpResult, error) {
	ctx, cancel := context.WithTimeout(context.Background(), requestBound)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return httpResult{}, err
	}
	req.Host = host
	for k, v := range header {
		req.Header.Set(k, v)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return httpResult{}, err
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	return httpResult{Status: res.StatusCode, Header: res.Header, Body: body}, err
}

// resendBound is how long a client re-sends a payment whose instance died.
const resendBound = 30 * time.Second

// resend re-sends p's header to url as a client whose instance died does, until it is
// served or refused for good: a 402 duplicate_settlement or a 409 (the dead attempt's
// lease has not lapsed yet) and a 502 (pending; its retry token is kept) are tried again
// a second later, within resendBound.
func (p *lostAnswer) resend(url, host string) {
	start := time.Now()
	h := map[string]string{"X-PAYMENT": p.header}
	if p.retry != "" {
		h["X-PAYMENT-RETRY"] = p.retry
	}
	for time.Since(start) < resendBound {
		r, err := sendAs(url, host, h)
		status := r.Status
		if err != nil {
			status = 0
		}
		p.answers = append(p.answers, status)
		if tok := r.Header.Get("X-PAYMENT-RETRY"); tok != "" {
			h["X-PAYMENT-RETRY"] = tok
		}
		again := status == 0 || status == http.StatusConflict || status == http.StatusBadGateway ||
			status == http.StatusPaymentRequired && strings.Contains(string(r.Body), "duplicate_settlement")
		if !again {
			break
		}
		time.Sleep(time.Second)
	}
	p.waited = time.Since(start)
}

// TestTwoInstancesServeAnswersLostWithOne is point 8 of "Why" in issue 20 across two
// instances: two Caddy instances on one Redis (the payment ledger) and one PostgreSQL
// journal; instance B is killed with SIGKILL while 16 payments are in flight on it. Each
// client whose answer died re-sends the same v1 header (no payment id, no token) to
// instance A, behind the same site host. Every payment that moved got exactly one good
// answer, within 30 s of its re-send; none moved twice.
func TestTwoInstancesServeAnswersLostWithOne(t *testing.T) {
	f := newVerdictFleet(t, verdictSetup{shared: true})
	f.caddyfile = strings.Replace(f.caddyfile, "guardian_mode required", "guardian_mode required\n\t\t\tverdict_rate 1000 1000", 1)
	a := f.startFaulty(t, "", "X402_FACILITATOR_KEY_FILE="+writeKeyFile(t, f.chain.Accounts[2]))
	b := f.startFaulty(t, "", "X402_FACILITATOR_KEY_FILE="+writeKeyFile(t, f.chain.Accounts[3]))
	host := strings.TrimPrefix(b.api, "http://")
	bal := balances(t, f.tok, f.payer.Address, f.okPayTo)
	head := blockNumber(t, f.chain)

	payments := f.lostAnswers(t, 16, "lost")
	f.payUntilKilled(b, host, payments, 4, func(p *lostAnswer) { p.resend(a.api+p.path, host) })
	f.oneGoodAnswerEach(t, payments, head, bal)
}

// oneGoodAnswerEach checks the payments of a crash: none moved twice, and each that moved
// got exactly one good answer (within its client's re-sends); the balances moved by the
// payments that moved.
func (f *verdictFleet) oneGoodAnswerEach(t *testing.T, payments []*lostAnswer, head uint64, bal []*big.Int) {
	t.Helper()
	moved, served, rescued := 0, 0, 0
	last, refusals := map[int]int{}, map[string]int{} // the last answer of each payment, by status; refusals by reason
	for _, p := range payments {
		last[p.answers[len(p.answers)-1]]++
		if p.refusal != "" {
			refusals[p.refusal]++
		}
		events, txs := authorizationUses(t, f.chain, f.tok, p.auth, head)
		good := 0
		for _, s := range p.answers {
			if s == http.StatusOK {
				good++
			}
		}
		switch {
		case events > 1 || txs > 1:
			t.Errorf("%s: the authorization was used %d times on chain (%d transactions)", p.path, events, txs)
		case events == 1 && good != 1:
			t.Errorf("%s moved once: %d good answers (answers %v, re-sent for %v), want 1", p.path, good, p.answers, p.waited.Round(time.Second))
		case events == 0 && good != 0:
			t.Errorf("%s did not move but got %d good answers (answers %v)", p.path, good, p.answers)
		}
		moved += events
		served += good
		if good == 1 && p.answers[0] == 0 {
			rescued++
		}
	}
	t.Logf("%d payments: %d moved, %d served, %d of them after their instance died under them; last answers by status %v; refusals of a first send %v", len(payments), moved, served, rescued, last, refusals)
	wantDelta(t, f.tok, f.payer.Address, bal[0], -price*int64(moved))
	wantDelta(t, f.tok, f.okPayTo, bal[1], price*int64(moved))
}

// lostAnswers signs n v1 payments of f's payer, one per path /allowed/<name>-<i>.
func (f *verdictFleet) lostAnswers(t *testing.T, n int, name string) []*lostAnswer {
	t.Helper()
	payments := make([]*lostAnswer, n)
	for i := range payments {
		header, auth := goV1Header(t, f.tok, f.payer, f.okPayTo)
		payments[i] = &lostAnswer{path: fmt.Sprintf("/allowed/%s-%d", name, i), auth: auth, header: header}
	}
	return payments
}

// payUntilKilled sends every payment to in at once, behind the site host, and kills in
// with SIGKILL once it has broadcast broadcasts settlements (0: at once), or once every
// payment was answered: the others are at every step of theirs, or not begun. Each client whose answer died with in calls
// died, in its own goroutine; payUntilKilled returns when they all have.
func (f *verdictFleet) payUntilKilled(in *verdictInstance, host string, payments []*lostAnswer, broadcasts int, died func(p *lostAnswer)) {
	var wg sync.WaitGroup
	var answered atomic.Int32
	for _, p := range payments {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := sendAs(in.api+p.path, host, map[string]string{"X-PAYMENT": p.header})
			answered.Add(1)
			if err == nil {
				p.answers, p.retry = append(p.answers, r.Status), r.Header.Get("X-PAYMENT-RETRY")
				var body struct{ Error string }
				if r.Status != http.StatusOK && json.Unmarshal(r.Body, &body) == nil {
					p.refusal = body.Error
				}
				return
			}
			p.answers = append(p.answers, 0)
			if died != nil {
				died(p)
			}
		}()
	}
	for strings.Count(in.caddy.Logs(), "settlement broadcast") < broadcasts && int(answered.Load()) < len(payments) {
		time.Sleep(2 * time.Millisecond)
	}
	in.caddy.Kill()
	wg.Wait()
}

// TestCrashWithPaymentsInFlight is point 8 of "Why" in issue 20 for a single instance:
// with store memory the payment ledger lives with the journal. The instance is killed
// with SIGKILL with 48 payments in flight, at several moments (before its first
// broadcast, midway, after most), on SQLite and on PostgreSQL, and started again on the
// same journal. Each client whose answer died, or who got a retry token, re-sends its
// header (with the token) to the new process. Every payment that moved got exactly one
// good answer, and none moved twice.
func TestCrashWithPaymentsInFlight(t *testing.T) {
	eachCrashStore(t, func(t *testing.T, name string, f *verdictFleet) {
		// One instance, its approvals in memory: the ledger is the journal's.
		f.caddyfile = strings.Replace(f.caddyfile, "store redis {env.REDIS_URL}\n\t\t\tjournal", "store memory\n\t\t\tjournal", 1)
		if strings.Contains(f.caddyfile, "store redis {env.REDIS_URL}\n\t\t\tjournal") {
			t.Fatal("the verdict Caddyfile no longer has its approvals line before the journal's")
		}
		f.caddyfile = strings.Replace(f.caddyfile, "guardian_mode required", "guardian_mode required\n\t\t\tverdict_rate 1000 1000", 1)
		for _, at := range []int{0, 24, 44} {
			t.Run(fmt.Sprintf("killed after %d broadcasts", at), func(t *testing.T) {
				in := f.startFaulty(t, "")
				host := strings.TrimPrefix(in.api, "http://")
				bal := balances(t, f.tok, f.payer.Address, f.okPayTo)
				head := blockNumber(t, f.chain)
				payments := f.lostAnswers(t, 48, fmt.Sprintf("crash-%s-%d", name, at))
				f.payUntilKilled(in, host, payments, at, nil)
				again := f.startFaulty(t, "")
				var wg sync.WaitGroup
				for _, p := range payments {
					if p.answers[0] != 0 && p.retry == "" {
						continue
					}
					wg.Add(1)
					go func() {
						defer wg.Done()
						p.resend(again.api+p.path, host)
					}()
				}
				wg.Wait()
				f.oneGoodAnswerEach(t, payments, head, bal)
				again.caddy.Stop()
			})
		}
	})
}

// TestCrashKeepsPendingRetryTokens is the last point of "Why" 8 in issue 20: the retry
// tokens of 502 settlement_pending answers did not survive a restart on the default
// store memory. Now the ledger lives with the journal: a single instance answers four
// payments 502 with a retry token (their receipts are late), is killed with SIGKILL, and
// started again; once the transactions are mined each token redeems its payment once.
func TestCrashKeepsPendingRetryTokens(t *testing.T) {
	f := crashFleet(t, verdictSetup{})
	f.caddyfile = strings.Replace(f.caddyfile, "guardian_mode required", "guardian_mode required\n\t\t\treceipt_timeout 2s", 1)
	in := f.startFaulty(t, "")
	host := strings.TrimPrefix(in.api, "http://")
	head := blockNumber(t, f.chain)
	payments := f.lostAnswers(t, 4, "pending")
	f.chain.SetAutomine(t, false)
	for _, p := range payments {
		r, err := sendAs(in.api+p.path, host, map[string]string{"X-PAYMENT": p.header})
		if err != nil || r.Status != http.StatusBadGateway || r.Header.Get("X-PAYMENT-RETRY") == "" {
			f.chain.SetAutomine(t, true)
			t.Fatalf("%s: a settle whose receipt is late: %d %s, %v; want 502 with a retry token", p.path, r.Status, r.Body, err)
		}
		p.retry = r.Header.Get("X-PAYMENT-RETRY")
	}
	in.caddy.Kill()
	f.chain.SetAutomine(t, true)
	f.chain.Mine(t)
	again := f.startFaulty(t, "")
	for _, p := range payments {
		r, err := sendAs(again.api+p.path, host, map[string]string{"X-PAYMENT": p.header, "X-PAYMENT-RETRY": p.retry})
		if err != nil || r.Status != http.StatusOK {
			t.Errorf("%s: its retry token after the restart: %d %s, %v; want 200", p.path, r.Status, r.Body, err)
		}
		if r, _ := sendAs(again.api+p.path, host, map[string]string{"X-PAYMENT": p.header, "X-PAYMENT-RETRY": p.retry}); r.Status == http.StatusOK {
			t.Errorf("%s: the token served a second answer", p.path)
		}
		if events, _ := authorizationUses(t, f.chain, f.tok, p.auth, head); events != 1 || f.up.count(p.path) != 1 {
			t.Errorf("%s: %d uses on chain, %d upstream calls; want 1 and 1", p.path, events, f.up.count(p.path))
		}
	}
}
