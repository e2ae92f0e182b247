package verdictserver

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"

	"github.com/x402gate/x402gate/internal/sqldb"
	"github.com/x402gate/x402gate/verdict"
	"github.com/x402gate/x402gate/verdictserver/policy"
	"github.com/x402gate/x402gate/verdictserver/store"
)

// strangerPolicy is allowPolicy with strangerPay as the one allowed payee instead of
// allowedPay.
var strangerPolicy = strings.Replace(allowPolicy, allowedPay.Hex(), strangerPay.Hex(), 1)

// replayEnv is a service on a SQLite file whose path dumpStore reads.
func replayEnv(t *testing.T) (*env, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "verdict.db")
	return newEnv(t, sqliteAt(path)(t), nil), path
}

// pay submits one payment of a to payTo and waits for its verdict; it returns the hash.
func (e *env) pay(a agent, payTo common.Address) string {
	e.t.Helper()
	r := e.submit(a.Key, submitBody(a.Wallet, payTo, ""))
	if r.status != 201 {
		e.t.Fatalf("submit = %d %s", r.status, r.raw)
	}
	h := r.body["requestHash"].(string)
	e.await(a.Key, h)
	return h
}

// dumpStore is every row of every table of the SQLite store at path, as text: two dumps
// are equal when nothing was written in between. A key's last use is left out: it is the
// authentication's, which the replay's caller passed (keyUsed), not the replay's.
func dumpStore(t testing.TB, path string) string {
	t.Helper()
	ctx := context.Background()
	db, err := sqldb.OpenSQLite(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.QueryContext(ctx, `SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name`)
	if err != nil {
		t.Fatal(err)
	}
	var tables []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		tables = append(tables, n)
	}
	rows.Close()
	var b strings.Builder
	for _, table := range tables {
		rows, err := db.QueryContext(ctx, `SELECT * FROM `+table+` ORDER BY 1`)
		if err != nil {
			t.Fatal(err)
		}
		cols, _ := rows.Columns()
		fmt.Fprintf(&b, "%s %v\n", table, cols)
		for rows.Next() {
			vals := make([]any, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			if err := rows.Scan(ptrs...); err != nil {
				t.Fatal(err)
			}
			for i, v := range vals {
				if bs, ok := v.([]byte); ok {
					v = string(bs)
				}
				if table == "api_keys" && cols[i] == "last_used_at" {
					v = "-"
				}
				fmt.Fprintf(&b, "%v\t", v)
			}
			b.WriteString("\n")
		}
		rows.Close()
	}
	return b.String()
}

// unwritten fails t when the store at path differs from the dump before, naming the first
// row that differs.
func unwritten(t testing.TB, path, before string) {
	t.Helper()
	after := dumpStore(t, path)
	if after == before {
		return
	}
	b, a := strings.Split(before, "\n"), strings.Split(after, "\n")
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			t.Fatalf("the replay wrote to the store: row %d was %.200q, is %.200q", i, b[i], a[i])
		}
	}
	t.Fatalf("the replay wrote to the store: %d rows before, %d after", len(b), len(a))
}

// TestReplayReportsWhatADraftChangesAndWritesNothing: under allowPolicy two payments to
// allowedPay were approved and one to strangerPay refused; a draft that allows only
// strangerPay newly refuses the two, with the recipient check's reason, and newly approves
// the third. The store is the same before and after, byte for byte.
func TestReplayReportsWhatADraftChangesAndWritesNothing(t *testing.T) {
	e, path := replayEnv(t)
	a := e.agent("replayed", common.HexToAddress("0xA11CE00000000000000000000000000000000010"), allowPolicy)
	h1, h2, h3 := e.pay(a, allowedPay), e.pay(a, strangerPay), e.pay(a, allowedPay)
	before := dumpStore(t, path)

	rep, err := e.srv.Operator().Replay(context.Background(), a.ID, []byte(strangerPolicy), 0)
	if err != nil {
		t.Fatal(err)
	}
	unwritten(t, path, before)
	if rep.Last != DefaultReplayLast || rep.Replayed != 3 || rep.Unchanged != 0 || rep.Skipped != 0 ||
		rep.ActivePolicyVersion != 1 || rep.DraftVersion != 2 || rep.Mode != "enforce" || rep.SpendWindows != "none" {
		t.Fatalf("report %+v, want 3 replayed and changed under draft version 2", rep)
	}
	if len(rep.NewlyRefused) != 2 || rep.NewlyRefused[0].RequestHash != h3 || rep.NewlyRefused[1].RequestHash != h1 {
		t.Fatalf("newly refused %+v, want %s then %s (newest first)", rep.NewlyRefused, h3, h1)
	}
	refused := rep.NewlyRefused[0]
	if refused.Stored.Outcome != "approved" || refused.Draft.Outcome != "rejected" ||
		refused.Draft.ReasonCode != string(verdict.ReasonRecipientNotAllowed) || refused.Draft.HumanReason == "" ||
		len(refused.Draft.Failed) != 1 || refused.Draft.Failed[0].CheckID != string(verdict.CheckRecipient) ||
		*refused.Draft.PolicyVersion != 2 || *refused.Stored.PolicyVersion != 1 {
		t.Errorf("newly refused %+v, want the recipient check's refusal under version 2", refused)
	}
	if len(rep.NewlyApproved) != 1 || rep.NewlyApproved[0].RequestHash != h2 ||
		rep.NewlyApproved[0].Stored.ReasonCode != string(verdict.ReasonRecipientNotAllowed) || rep.NewlyApproved[0].Draft.Outcome != "approved" {
		t.Errorf("newly approved %+v, want %s, stored refused by the recipient check", rep.NewlyApproved, h2)
	}

	same, err := e.srv.Operator().Replay(context.Background(), a.ID, []byte(allowPolicy), 2)
	if err != nil {
		t.Fatal(err)
	}
	if same.Last != 2 || same.Replayed != 2 || same.Unchanged != 2 || len(same.NewlyRefused)+len(same.NewlyApproved) != 0 ||
		same.From == nil || same.To == nil || same.From.After(*same.To) {
		t.Errorf("the active policy replayed on the last 2: %+v, want 2 unchanged", same)
	}
}

// TestReplaySpendWindows: five $0.01 payments were approved; a draft with a $0.025 daily
// cap, over every action or over the payments' asset only, replays them oldest first and
// refuses the last three with spend_window_exceeded; in audit mode it refuses none and
// records the window in wouldFail (docs/replay.md#spend-windows).
func TestReplaySpendWindows(t *testing.T) {
	e, path := replayEnv(t)
	a := e.agent("spender", common.HexToAddress("0xA11CE00000000000000000000000000000000011"), allowPolicy)
	var hashes []string
	for range 5 {
		hashes = append(hashes, e.pay(a, allowedPay))
	}
	before := dumpStore(t, path)
	capped := windowPolicy(`{"period": "day", "capUsd": 0.025}`)
	for _, draft := range []string{capped, windowPolicy(`{"period": "day", "capUsd": 0.025, "asset": "` + testAsset.Hex() + `"}`)} {
		rep, err := e.srv.Operator().Replay(context.Background(), a.ID, []byte(draft), 0)
		if err != nil {
			t.Fatal(err)
		}
		if rep.SpendWindows != "replayed" || rep.Replayed != 5 || rep.Unchanged != 2 || len(rep.NewlyRefused) != 3 {
			t.Fatalf("%s: report %+v, want the 3 newest refused by the window", draft, rep)
		}
		for i, c := range rep.NewlyRefused {
			if c.RequestHash != hashes[4-i] || c.Draft.ReasonCode != string(verdict.ReasonSpendWindowExceeded) ||
				len(c.Draft.Failed) != 1 || c.Draft.Failed[0].CheckID != string(verdict.CheckSpendWindow) ||
				*c.Draft.TriggeringPolicyField != "spendWindows.windows.0" {
				t.Errorf("newly refused %d: %+v, want %s refused by window 0", i, c, hashes[4-i])
			}
		}
	}
	audit := strings.Replace(capped, `"description"`, `"mode": "audit", "description"`, 1)
	rep, err := e.srv.Operator().Replay(context.Background(), a.ID, []byte(audit), 0)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Mode != "audit" || rep.Unchanged != 5 || len(rep.NewlyRefused) != 0 {
		t.Fatalf("audit report %+v, want nothing refused", rep)
	}
	unwritten(t, path, before)
}

// TestReplaySkipsWhatItCannotJudge: a pending record has no verdict to compare with, and a
// stored proposedTx with a duplicate key does not decode as the lifecycle reads it; both
// are counted as skipped, with why.
func TestReplaySkipsWhatItCannotJudge(t *testing.T) {
	path := filepath.Join(t.TempDir(), "verdict.db")
	// no sweeper tick during the test: the records stay pending
	e := newEnv(t, sqliteAt(path)(t), func(_ *Config, d *Deps) { d.SweepInterval = time.Hour })
	a := e.agent("skipper", common.HexToAddress("0xA11CE00000000000000000000000000000000012"), allowPolicy)
	e.pay(a, allowedPay)
	for i, tx := range []string{`{"protocol": "payment", "chainId": 84532}`, `{"protocol": "payment", "protocol": "evm"}`} {
		rec := store.Transaction{RequestHash: fmt.Sprintf("0x%064x", i+1), AgentID: a.ID, Escrow: a.Wallet, ChainID: testChain, ProposedTx: []byte(tx)}
		if err := e.st.CreateTransaction(context.Background(), &rec); err != nil {
			t.Fatal(err)
		}
	}
	// the second record as if it had been judged: only its proposedTx is at fault
	if err := e.st.Complete(context.Background(), fmt.Sprintf("0x%064x", 2), store.StatusRejected, []byte(`{"outcome": "rejected"}`), nil); err != nil {
		t.Fatal(err)
	}
	rep, err := e.srv.Operator().Replay(context.Background(), a.ID, []byte(allowPolicy), 0)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{ReplaySkipPending: 1, ReplaySkipUndecodable: 1}
	if rep.Replayed != 1 || rep.Unchanged != 1 || rep.Skipped != 2 || fmt.Sprint(rep.SkippedWhy) != fmt.Sprint(want) {
		t.Fatalf("report %+v, want 1 replayed and skipped %v", rep, want)
	}
}

// TestReplayRefusesBadInput: a draft that does not validate names its fields, last beyond
// MaxReplayLast is refused, an unknown agent is not found, and an Operator without a
// Server's engine cannot replay.
func TestReplayRefusesBadInput(t *testing.T) {
	e := newEnv(t, nil, nil)
	a := e.agent("input", common.HexToAddress("0xA11CE00000000000000000000000000000000013"), allowPolicy)
	ctx := context.Background()
	op := e.srv.Operator()
	var pe *policy.Errors
	if _, err := op.Replay(ctx, a.ID, []byte(`{"chains": {"allowed": ["one"]}}`), 0); !errors.As(err, &pe) || len(pe.Problems) == 0 {
		t.Errorf("invalid draft: %v, want *policy.Errors", err)
	}
	for _, last := range []int{-1, MaxReplayLast + 1} {
		var ie *InputError
		if _, err := op.Replay(ctx, a.ID, []byte(allowPolicy), last); !errors.As(err, &ie) || ie.Field != "last" {
			t.Errorf("last %d: %v, want an InputError on last", last, err)
		}
	}
	if _, err := op.Replay(ctx, "nobody", []byte(allowPolicy), 0); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("unknown agent: %v, want store.ErrNotFound", err)
	}
	if _, err := NewOperator(e.st).Replay(ctx, a.ID, []byte(allowPolicy), 0); !errors.Is(err, ErrNoEngine) {
		t.Errorf("NewOperator's Replay: %v, want ErrNoEngine", err)
	}
}

// TestReplayAdminRoute: POST /admin/agents/{agentId}/policy/replay answers the report
// (held to docs/openapi.json) to the admin key and to an agent key with admin:read, since
// it writes nothing; an agent key without an admin scope is 403; a bad last, an invalid
// draft and an unknown agent have their errors; a replay while another runs is 429 with
// Retry-After; the store is unchanged.
func TestReplayAdminRoute(t *testing.T) {
	e, path := replayEnv(t)
	a := e.agent("routed", common.HexToAddress("0xA11CE00000000000000000000000000000000014"), allowPolicy)
	h := e.pay(a, allowedPay)
	reader := e.agent("reader", common.HexToAddress("0xA11CE00000000000000000000000000000000015"), "", ScopeAdminRead)
	before := dumpStore(t, path)
	url := e.admin.URL + "/admin/agents/" + a.ID + "/policy/replay"
	for _, cred := range [][]string{{"x-admin-key", e.adminKey}, {"x-api-key", reader.Key}} {
		r := call(t, "POST", url+"?last=10", strangerPolicy, cred...)
		if r.status != 200 {
			t.Fatalf("%s: replay = %d %s", cred[0], r.status, r.raw)
		}
		refused, _ := r.body["newlyRefused"].([]any)
		if r.body["replayed"] != 1.0 || r.body["last"] != 10.0 || len(refused) != 1 || refused[0].(map[string]any)["requestHash"] != h {
			t.Errorf("%s: report %s, want %s newly refused", cred[0], r.raw, h)
		}
	}
	wantError(t, call(t, "POST", url, strangerPolicy, "x-api-key", a.Key), 403, codeInsufficientScope)
	for _, q := range []string{"?last=0", "?last=10001", "?last=ten", "?last=1&last=2", "?limit=5"} {
		wantError(t, call(t, "POST", url+q, strangerPolicy, "x-admin-key", e.adminKey), 400, codeInvalidQuery)
	}
	wantError(t, call(t, "POST", url, `{"chains": {"allowed": ["one"]}}`, "x-admin-key", e.adminKey), 400, codeInvalidPolicy)
	wantError(t, call(t, "POST", e.admin.URL+"/admin/agents/nobody/policy/replay", allowPolicy, "x-admin-key", e.adminKey), 404, codeNotFound)
	e.srv.Operator().replaying.Store(true) // as if another replay ran
	busy := call(t, "POST", url, strangerPolicy, "x-admin-key", e.adminKey)
	wantError(t, busy, 429, codeRateLimited)
	if busy.header.Get("Retry-After") != "1" {
		t.Errorf("a replay while another runs: Retry-After %q, want 1", busy.header.Get("Retry-After"))
	}
	if _, err := e.srv.Operator().Replay(context.Background(), a.ID, []byte(allowPolicy), 0); !errors.Is(err, ErrReplayBusy) {
		t.Errorf("Replay while another runs: %v, want ErrReplayBusy", err)
	}
	e.srv.Operator().replaying.Store(false)
	if r := call(t, "POST", url, strangerPolicy, "x-admin-key", e.adminKey); r.status != 200 {
		t.Errorf("a replay once the other ended = %d %s", r.status, r.raw)
	}
	unwritten(t, path, before)
}
