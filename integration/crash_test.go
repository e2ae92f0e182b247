package integration_test

import (
	"bytes"
	"context"
	"errors"
	"math/big"
	"net/http"
	"path/filepath"
	"strconv"
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
// ("point=kill"), or none.
func (f *verdictFleet) startFaulty(t *testing.T, faults string) *verdictInstance {
	t.Helper()
	apiPort, verdictPort, facPort := testenv.FreePort(t), testenv.FreePort(t), testenv.FreePort(t)
	c := testenv.StartCaddy(t, f.caddyfile, testenv.CaddyOptions{
		Env: append(append([]string{}, f.env...), "VERDICT_KEY="+f.key,
			"API_PORT="+strconv.Itoa(apiPort), "VERDICT_PORT="+strconv.Itoa(verdictPort), "FACILITATOR_PORT="+strconv.Itoa(facPort)),
		WaitPorts:   []int{apiPort, verdictPort, facPort},
		Faults:      faults,
		FaultBinary: true,
	})
	return &verdictInstance{caddy: c, api: "http://127.0.0.1:" + strconv.Itoa(apiPort),
		verdictAPI: "http://127.0.0.1:" + strconv.Itoa(verdictPort), fac: "http://127.0.0.1:" + strconv.Itoa(facPort)}
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
	for _, setup := range []verdictSetup{{}, {shared: true}} {
		name := "sqlite"
		if setup.shared {
			name = "postgres"
		}
		t.Run(name, func(t *testing.T) {
			f := crashFleet(t, setup)
			j := f.openJournal(t)
			for _, point := range settlePoints {
				t.Run(point, func(t *testing.T) {
					crashSettleAt(t, f, j, point)
				})
			}
		})
	}
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
