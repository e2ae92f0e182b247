package integration_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/crypto"

	"github.com/x402gate/x402gate/facilitator/journal"
	"github.com/x402gate/x402gate/internal/testenv"
	"github.com/x402gate/x402gate/x402"
)

// crashBound bounds the waits of the crash tests (a crash point reached, a journal row
// decided by reconcile). It only turns a hang into a failure.
const crashBound = 90 * time.Second

// crashFleet is a verdict fleet (gate, facilitator in GUARDIAN_MODE required and verdict
// app in one Caddy) whose SQLite journal lives at a fixed path, so that a restarted
// process reads the journal of the one that crashed.
func crashFleet(t *testing.T, setup verdictSetup) *verdictFleet {
	t.Helper()
	f := newVerdictFleet(t, setup)
	if !setup.shared {
		if strings.Count(f.caddyfile, "journal sqlite\n") != 1 {
			t.Fatal("the verdict Caddyfile no longer has one `journal sqlite` line")
		}
		f.caddyfile = strings.Replace(f.caddyfile, "journal sqlite\n", "journal sqlite {$JOURNAL_DB}\n", 1)
		f.env = append(f.env, "JOURNAL_DB="+filepath.Join(f.dir, "journal.db"))
	}
	return f
}

// startFaulty starts an instance of f from the x402faults build, with faults armed
// ("point=kill"), or none; env entries override the fleet's.
func (f *verdictFleet) startFaulty(t *testing.T, faults string, env ...string) *verdictInstance {
	t.Helper()
	return f.launch(t, testenv.CaddyOptions{Faults: faults, FaultBinary: true}, env...)
}

// openJournal opens the fleet's journal, as an operator's query would.
func (f *verdictFleet) openJournal(t *testing.T) *journal.DB {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var j *journal.DB
	var err error
	if f.setup.shared {
		j, err = journal.OpenPostgres(ctx, envOf(f.env, "PG_DSN"))
	} else {
		j, err = journal.OpenSQLite(ctx, envOf(f.env, "JOURNAL_DB"))
	}
	if err != nil {
		t.Fatalf("open the journal: %v", err)
	}
	t.Cleanup(func() { _ = j.Close() })
	return j
}

func envOf(env []string, name string) string {
	for _, e := range env {
		if v, ok := strings.CutPrefix(e, name+"="); ok {
			return v
		}
	}
	return ""
}

// authorizationKey is the journal key of a on the fleet's chain.
func (f *verdictFleet) authorizationKey(a testenv.Authorization) string {
	return x402.PaymentKey{Network: "eip155:84532", Asset: f.tok.Address, Payer: a.From, PayTo: a.To, Amount: a.Value, Nonce: a.Nonce}.AuthorizationKey()
}

// journalRow polls the journal until the row of key is decided (confirmed or failed) or
// absent after a restart's reconcile, within crashBound.
func journalRow(t *testing.T, j *journal.DB, key string) (journal.Settlement, bool) {
	t.Helper()
	deadline := time.Now().Add(crashBound)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		row, err := j.Get(ctx, key)
		cancel()
		switch {
		case errors.Is(err, journal.ErrNotFound):
			return row, false
		case err == nil && (row.State == journal.StateConfirmed || row.State == journal.StateFailed):
			return row, true
		case time.Now().After(deadline):
			t.Fatalf("the journal row of %s is still %q (err %v) after the restart", key, row.State, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// authorizationUses counts the token's AuthorizationUsed(payer, nonce) events from block
// from on, and the mined transactions of the facilitator's signer whose calldata carries
// the nonce: each is at most 1 when no authorization was broadcast twice.
func authorizationUses(t *testing.T, chain *testenv.Chain, tok *testenv.Token, a testenv.Authorization, from uint64) (events, txs int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	topic := crypto.Keccak256Hash([]byte("AuthorizationUsed(address,bytes32)"))
	logs, err := chain.Client.FilterLogs(ctx, ethereum.FilterQuery{
		FromBlock: new(big.Int).SetUint64(from),
		Addresses: []common.Address{tok.Address},
		Topics:    [][]common.Hash{{topic}, {common.BytesToHash(a.From.Bytes())}, {common.Hash(a.Nonce)}},
	})
	if err != nil {
		t.Fatalf("filter AuthorizationUsed logs: %v", err)
	}
	latest, err := chain.Client.BlockNumber(ctx)
	if err != nil {
		t.Fatal(err)
	}
	signer := chain.FacilitatorAccount().Address
	for n := from + 1; n <= latest; n++ {
		b, err := chain.Client.BlockByNumber(ctx, new(big.Int).SetUint64(n))
		if err != nil {
			t.Fatalf("block %d: %v", n, err)
		}
		for _, tx := range b.Transactions() {
			if tx.To() != nil && *tx.To() == tok.Address && bytes.Contains(tx.Data(), a.Nonce[:]) {
				if sender, err := chainSender(tx); err == nil && sender == signer {
					txs++
				}
			}
		}
	}
	return len(logs), txs
}

// settlePoints are the crash points of a settle, in the order a settle passes them
// (docs/reliability.md#crash-safety).
var settlePoints = []string{
	"settle.after-approval", "settle.after-journal", "settle.after-broadcast",
	"settle.after-receipt", "settle.before-answer",
}

// TestCrashDuringSettle kills Caddy with SIGKILL at each step of a paid request's settle
// (a crash point of the x402faults build), restarts it on the same journal, and checks
// what docs/reliability.md#crash-safety promises: reconcile leaves the payment either
// confirmed, with its transaction in the journal and exactly one transfer on chain, or not
// settled at all with no transfer; the authorization is used at most once on chain and
// broadcast in at most one transaction; the same payment presented again after the
// restart is never charged twice. With the embedded SQLite journal, and with PostgreSQL
// (and Redis approvals) as a fleet runs.
func TestCrashDuringSettle(t *testing.T) {
	eachCrashStore(t, func(t *testing.T, name string, f *verdictFleet) {
		j := f.openJournal(t)
		for _, point := range settlePoints {
			t.Run(point, func(t *testing.T) {
				crashSettleAt(t, f, j, point)
			})
		}
	})
}

func crashSettleAt(t *testing.T, f *verdictFleet, j *journal.DB, point string) {
	path := "/allowed/" + point
	bal := balances(t, f.tok, f.payer.Address, f.okPayTo)
	from := blockNumber(t, f.chain) // the head: mined before this payment, so it holds none of its logs
	in := f.startFaulty(t, point+"=kill")
	header, auth := goV1Header(t, f.tok, f.payer, f.okPayTo) // signed now: it is valid for 60 s
	pay := map[string]string{"X-PAYMENT": header}
	if r, err := do(t, http.MethodGet, in.api+path, "", pay); err == nil {
		t.Fatalf("the paid request was answered (%d: %s) though Caddy was to crash at %s", r.Status, r.Body, point)
	}
	if !in.caddy.WaitExit(crashBound) {
		t.Fatalf("Caddy did not die at %s", point)
	}
	if !strings.Contains(in.caddy.Logs(), "x402faults: reached "+point) {
		t.Fatalf("Caddy died before reaching %s", point)
	}
	if c := f.up.count(path); c != 0 {
		t.Fatalf("the upstream ran %d times for a request whose settle crashed", c)
	}

	again := f.startFaulty(t, "")
	defer again.caddy.Stop()
	row, journaled := journalRow(t, j, f.authorizationKey(auth))
	moved := transfersAfter(t, f, from)
	switch {
	case journaled && row.State == journal.StateConfirmed:
		// completed: the journal names the one transaction that moved the money
		if len(moved) != 1 || moved[0].TxHash != row.TxHash {
			t.Fatalf("the journal says confirmed by %s; the chain has %d transfers %v", row.TxHash.Hex(), len(moved), moved)
		}
		checkOnChain(t, f.chain, f.tok, row.TxHash.Hex(), f.payer.Address, f.okPayTo)
	case len(moved) != 0:
		t.Fatalf("%d transfers on chain, but the journal row is %q (journaled %v)", len(moved), row.State, journaled)
	case point != "settle.after-approval":
		t.Fatalf("the crash at %s left the journal row %q (journaled %v), want confirmed", point, row.State, journaled)
	}

	// The same payment presented again after the restart is never charged twice: it is
	// either settled now (it was not before) or refused with 402.
	r := mustDo(t, http.MethodGet, again.api+path, pay)
	switch r.Status {
	case http.StatusOK, http.StatusPaymentRequired:
	default:
		t.Errorf("the same payment again: status %d: %s", r.Status, r.Body)
	}
	settled := 0
	if row, _ := journalRow(t, j, f.authorizationKey(auth)); row.State == journal.StateConfirmed {
		settled = 1
	}
	moved = transfersAfter(t, f, from)
	events, txs := authorizationUses(t, f.chain, f.tok, auth, from)
	if len(moved) != settled || events != settled || txs != settled {
		t.Errorf("the authorization was used %d times on chain (%d transfers, %d signer transactions), want %d (the journal's count)", events, len(moved), txs, settled)
	}
	if r.Status == http.StatusOK && (settled != 1 || f.up.count(path) != 1) {
		t.Errorf("served with %d settlements and %d upstream calls, want 1 and 1", settled, f.up.count(path))
	}
	wantDelta(t, f.tok, f.payer.Address, bal[0], -price*int64(settled))
	wantDelta(t, f.tok, f.okPayTo, bal[1], price*int64(settled))
	t.Logf("crash at %s: journal %q, the same payment again: %d", point, row.State, r.Status)
	f.noSecretsIn(t, in.caddy.Logs()+again.caddy.Logs())
}

// transfersAfter returns the payer's transfers to okPayTo mined after block head.
func transfersAfter(t *testing.T, f *verdictFleet, head uint64) []types.Log {
	t.Helper()
	var out []types.Log
	for _, l := range transfers(t, f.chain, f.tok, f.payer.Address, f.okPayTo, head) {
		if l.BlockNumber > head {
			out = append(out, l)
		}
	}
	return out
}

// chainSender recovers a transaction's sender.
func chainSender(tx *types.Transaction) (common.Address, error) {
	return types.Sender(types.LatestSignerForChainID(tx.ChainId()), tx)
}

// submitVerdict posts a payment of price to payTo for the fleet's agent, with traceId, and
// returns the status and the record's requestHash. err is the transport's: a Caddy that
// died before answering.
func (f *verdictFleet) submitVerdict(in *verdictInstance, payTo common.Address, traceID string) (int, string, error) {
	body := fmt.Sprintf(`{"escrowAddress":%q,"prompt":"pay","proposedTx":{"protocol":"payment","rail":"x402","chainId":84532,"payTo":%q,"asset":%q,"amount":"%d"},"metadata":{"traceId":%q}}`,
		f.payer.Address.Hex(), payTo.Hex(), f.tok.Address.Hex(), price, traceID)
	r, err := doVerdictAPI(http.MethodPost, in.verdictAPI+"/transactions", f.key, body)
	if err != nil {
		return 0, "", err
	}
	var rec struct {
		RequestHash string `json:"requestHash"`
	}
	_ = json.Unmarshal(r.Body, &rec)
	return r.Status, rec.RequestHash, nil
}

func doVerdictAPI(method, url, key, body string) (httpResult, error) {
	ctx, cancel := context.WithTimeout(context.Background(), requestBound)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		return httpResult{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("x-api-key", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return httpResult{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return httpResult{Status: resp.StatusCode, Header: resp.Header, Body: b}, err
}

// verdictOf reads the stored verdict of hash: nil while it is pending.
func (f *verdictFleet) verdictOf(t *testing.T, in *verdictInstance, hash string) json.RawMessage {
	t.Helper()
	r, err := doVerdictAPI(http.MethodGet, in.verdictAPI+"/transactions/"+hash+"/approval-status", f.key, "")
	if err != nil || r.Status != http.StatusOK {
		t.Fatalf("approval-status of %s: %d %v: %s", hash, r.Status, err, r.Body)
	}
	var st struct {
		Verdict json.RawMessage `json:"verdict"`
	}
	if err := json.Unmarshal(r.Body, &st); err != nil {
		t.Fatalf("approval-status of %s: %v", hash, err)
	}
	if string(st.Verdict) == "null" {
		return nil
	}
	return st.Verdict
}

// awaitVerdict polls hash's approval status until it is terminal, within crashBound.
func (f *verdictFleet) awaitVerdict(t *testing.T, in *verdictInstance, hash string) json.RawMessage {
	t.Helper()
	deadline := time.Now().Add(crashBound)
	for {
		if v := f.verdictOf(t, in, hash); v != nil {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("no verdict for %s after the restart", hash)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// awaitPoint waits until in's Caddy wrote that it reached point.
func awaitPoint(t *testing.T, in *verdictInstance, point string) {
	t.Helper()
	deadline := time.Now().Add(crashBound)
	for !strings.Contains(in.caddy.Logs(), "x402faults: reached "+point) {
		if time.Now().After(deadline) || in.caddy.Exited() {
			t.Fatalf("Caddy did not reach %s", point)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestCrashDuringVerdicts SIGKILLs the verdict service (the verdict app of the x402faults
// build) between a 201 and the worker, during an evaluation, and after a record is stored
// but before its 201, then restarts it on the same store, with SQLite and with PostgreSQL.
// After the restart every accepted transaction gets its verdict (the one whose 201 was lost
// is found by its traceId), and a verdict that was terminal before a crash is the same
// bytes after it (docs/reliability.md#crash-safety). The first two crashes are under a
// policy with a spend window, whose records the workers judge; the last under one without,
// whose records are judged at the submit and stored with their verdict
// (docs/verdict-api.md#lifecycle).
func TestCrashDuringVerdicts(t *testing.T) {
	eachCrashStore(t, func(t *testing.T, name string, f *verdictFleet) {
		f.setBuyerPolicy(t, `,"spendWindows":{"windows":[{"period":"day","capUsd":1000}]}`)
		submit := func(in *verdictInstance, payTo common.Address, trace string) string {
			t.Helper()
			status, hash, err := f.submitVerdict(in, payTo, trace)
			if err != nil || status != http.StatusCreated || hash == "" {
				t.Fatalf("POST /transactions %s: %d %v", trace, status, err)
			}
			return hash
		}

		// Between the 201 and the worker: the record is accepted, then the process dies.
		a := f.startFaulty(t, "verdict.before-worker=block")
		waiting := submit(a, f.okPayTo, "crash-before-worker")
		awaitPoint(t, a, "verdict.before-worker")
		if v := f.verdictOf(t, a, waiting); v != nil {
			t.Fatalf("the record blocked before its worker has a verdict: %s", v)
		}
		a.caddy.Kill()

		// During an evaluation: the same record, swept at start, blocks in the engine;
		// a record submitted meanwhile is judged by another worker and is terminal
		// before the crash.
		b := f.startFaulty(t, "verdict.evaluate=block")
		awaitPoint(t, b, "verdict.evaluate")
		judged := submit(b, f.denied, "crash-judged-before")
		before := f.awaitVerdict(t, b, judged)
		if v := f.verdictOf(t, b, waiting); v != nil {
			t.Fatalf("the record blocked in its evaluation has a verdict: %s", v)
		}
		b.caddy.Kill()

		// After the store, before the 201: the client never learns it was accepted.
		f.setBuyerPolicy(t, "")
		c := f.startFaulty(t, "verdict.after-create=kill")
		if status, _, err := f.submitVerdict(c, f.okPayTo, "crash-before-201"); err == nil {
			t.Fatalf("POST /transactions was answered %d though Caddy was to crash before the 201", status)
		}
		if !c.caddy.WaitExit(crashBound) {
			t.Fatal("Caddy did not die after storing the record")
		}

		d := f.startFaulty(t, "")
		if v := f.awaitVerdict(t, d, waiting); !strings.Contains(string(v), `"outcome":"approved"`) {
			t.Errorf("verdict of the record crashed before its worker and in its evaluation: %s, want approved (the policy allows okPayTo)", v)
		}
		if after := f.verdictOf(t, d, judged); !bytes.Equal(after, before) {
			t.Errorf("a terminal verdict changed across the crash:\nbefore %s\nafter  %s", before, after)
		}
		if !strings.Contains(string(before), `"outcome":"rejected"`) {
			t.Errorf("verdict of a payment to a payee the policy does not allow: %s, want rejected", before)
		}
		// The submit whose 201 was lost: found by its traceId, then judged.
		r, err := doVerdictAPI(http.MethodGet, d.verdictAPI+"/transactions?traceId=crash-before-201", f.key, "")
		var list struct {
			Transactions []struct {
				RequestHash string `json:"requestHash"`
			} `json:"transactions"`
		}
		if err != nil || r.Status != http.StatusOK || json.Unmarshal(r.Body, &list) != nil || len(list.Transactions) != 1 {
			t.Fatalf("GET /transactions?traceId= of the submit whose 201 was lost: %d %v: %s", r.Status, err, r.Body)
		}
		if v := f.awaitVerdict(t, d, list.Transactions[0].RequestHash); !strings.Contains(string(v), `"outcome":"approved"`) {
			t.Errorf("verdict of the submit whose 201 was lost: %s", v)
		}
		// Submitting it again is refused as a duplicate trace: nothing is judged twice.
		if status, _, err := f.submitVerdict(d, f.okPayTo, "crash-before-201"); err != nil || status != http.StatusConflict {
			t.Errorf("the same submit again: %d %v, want 409 duplicate trace", status, err)
		}
		f.noSecretsIn(t, a.caddy.Logs()+b.caddy.Logs()+c.caddy.Logs()+d.caddy.Logs())
	})
}

// eachCrashStore runs f in a subtest on a crash fleet with the embedded stores ("sqlite")
// and on one with the shared ones ("postgres").
func eachCrashStore(t *testing.T, f func(t *testing.T, name string, fleet *verdictFleet)) {
	for _, setup := range []verdictSetup{{}, {shared: true}} {
		name := "sqlite"
		if setup.shared {
			name = "postgres"
		}
		t.Run(name, func(t *testing.T) { f(t, name, crashFleet(t, setup)) })
	}
}
