package store

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"

	"github.com/x402gate/x402gate/internal/testenv"
)

var epoch = time.Date(2026, 5, 1, 12, 0, 0, 123456000, time.UTC)

// testTransaction returns a distinct, fully populated new record i of agentID.
func testTransaction(agentID string, i int, created time.Time) *Transaction {
	return &Transaction{
		RequestHash: fmt.Sprintf("0x%064x", 0xfeed0000+i),
		AgentID:     agentID,
		Escrow:      addr(i),
		ChainID:     84532,
		Prompt:      fmt.Sprintf("pay the weather API, call %d", i),
		Description: "pay the weather API",
		ProposedTx:  json.RawMessage(fmt.Sprintf(`{"protocol":"payment","chainId":84532,"amount":"%d"}`, 10_000+i)),
		Metadata:    json.RawMessage(fmt.Sprintf(`{"traceId":"trace-%d","agent":"demo"}`, i)),
		ContextLogs: json.RawMessage(`{"steps":["fetch","pay"]}`),
		TraceID:     fmt.Sprintf("trace-%d", i),
		CreatedAt:   created,
	}
}

const approvedVerdict = `{"outcome":"approved","reasonCode":"allowed","policyVersion":1}`

var transactionCases = []storeCase{
	{"a new transaction is PENDING and reads back field for field by hash and by trace", func(t *testing.T, open storeOpen) {
		s, ctx := mustOpen(t, open), context.Background()
		a := mustAgent(t, s, "a")
		tx := testTransaction(a.ID, 1, time.Time{})
		tx.Prompt = "pay 0.01 USDC — ünïcode"
		if err := s.CreateTransaction(ctx, tx); err != nil {
			t.Fatal(err)
		}
		if !uuidPattern.MatchString(tx.ID) || tx.Status != StatusPending || tx.CreatedAt.IsZero() || !tx.UpdatedAt.Equal(tx.CreatedAt) {
			t.Fatalf("assigned fields: id %q status %q created %v updated %v", tx.ID, tx.Status, tx.CreatedAt, tx.UpdatedAt)
		}
		byHash, err := s.TransactionByHash(ctx, tx.RequestHash)
		if err != nil || !reflect.DeepEqual(byHash, *tx) {
			t.Fatalf("TransactionByHash:\n got %+v, %v\nwant %+v", byHash, err, *tx)
		}
		byTrace, err := s.TransactionByTrace(ctx, a.ID, "trace-1")
		if err != nil || !reflect.DeepEqual(byTrace, *tx) {
			t.Fatalf("TransactionByTrace:\n got %+v, %v\nwant %+v", byTrace, err, *tx)
		}
		if byHash.Verdict != nil || byHash.PolicyVersion != nil {
			t.Fatalf("a pending record has a verdict: %s %v", byHash.Verdict, byHash.PolicyVersion)
		}
	}},
	{"absent metadata and context logs stay absent, and a chosen id is kept", func(t *testing.T, open storeOpen) {
		s, ctx := mustOpen(t, open), context.Background()
		a := mustAgent(t, s, "a")
		tx := testTransaction(a.ID, 2, epoch)
		tx.ID, tx.Metadata, tx.ContextLogs, tx.TraceID = "0b5d2f0e-1c2a-4d6e-9f00-aabbccddeeff", nil, nil, ""
		if err := s.CreateTransaction(ctx, tx); err != nil {
			t.Fatal(err)
		}
		got, err := s.TransactionByHash(ctx, tx.RequestHash)
		if err != nil || got.Metadata != nil || got.ContextLogs != nil || got.ID != tx.ID || !got.CreatedAt.Equal(epoch) {
			t.Fatalf("TransactionByHash = %+v, %v", got, err)
		}
		_, err = s.TransactionByTrace(ctx, a.ID, "")
		wantErr(t, "TransactionByTrace with an empty trace id", err, ErrNotFound)
	}},
	{"a trace id is unique per agent; request hashes and ids are unique", func(t *testing.T, open storeOpen) {
		s, ctx := mustOpen(t, open), context.Background()
		a, b := mustAgent(t, s, "a"), mustAgent(t, s, "b")
		first := testTransaction(a.ID, 1, epoch)
		if err := s.CreateTransaction(ctx, first); err != nil {
			t.Fatal(err)
		}
		cases := []struct {
			name string
			edit func(tx *Transaction)
			want error
		}{
			{"the same agent reuses a trace id", func(tx *Transaction) { tx.TraceID = "trace-1" }, ErrDuplicateTrace},
			{"another agent uses the same trace id", func(tx *Transaction) { tx.AgentID, tx.TraceID = b.ID, "trace-1" }, nil},
			{"two records without a trace id", func(tx *Transaction) { tx.TraceID = "" }, nil},
			{"a third record without a trace id", func(tx *Transaction) { tx.TraceID = "" }, nil},
			{"a request hash that exists", func(tx *Transaction) { tx.RequestHash = first.RequestHash }, ErrConflict},
			{"an id that exists", func(tx *Transaction) { tx.ID = first.ID }, ErrConflict},
			{"an unknown agent", func(tx *Transaction) { tx.AgentID = "no-such-agent" }, ErrNotFound},
		}
		for i, tc := range cases {
			tx := testTransaction(a.ID, 100+i, epoch)
			tc.edit(tx)
			err := s.CreateTransaction(ctx, tx)
			wantErr(t, tc.name, err, tc.want)
			if tc.want != nil {
				if _, err := s.TransactionByHash(ctx, tx.RequestHash); tx.RequestHash != first.RequestHash && err == nil {
					t.Fatalf("%s: the refused record was written", tc.name)
				}
			}
		}
		got, err := s.TransactionByTrace(ctx, a.ID, "trace-1")
		if err != nil || got.RequestHash != first.RequestHash || got.Prompt != first.Prompt {
			t.Fatalf("agent a's trace-1 = %+v, %v; want the first record", got, err)
		}
		if got, err := s.TransactionByTrace(ctx, b.ID, "trace-1"); err != nil || got.AgentID != b.ID {
			t.Fatalf("agent b's trace-1 = %+v, %v", got, err)
		}
		_, err = s.TransactionByTrace(ctx, b.ID, "trace-2")
		wantErr(t, "a trace id of another agent", err, ErrNotFound)
	}},
	{"a malformed record is refused and nothing is written", func(t *testing.T, open storeOpen) {
		s, ctx := mustOpen(t, open), context.Background()
		a := mustAgent(t, s, "a")
		cases := []struct {
			name string
			edit func(tx *Transaction)
		}{
			{"no request hash", func(tx *Transaction) { tx.RequestHash = "" }},
			{"no agent", func(tx *Transaction) { tx.AgentID = "" }},
			{"chain id 0", func(tx *Transaction) { tx.ChainID = 0 }},
			{"a zero escrow", func(tx *Transaction) { tx.Escrow = common.Address{} }},
			{"proposedTx absent", func(tx *Transaction) { tx.ProposedTx = nil }},
			{"proposedTx an array", func(tx *Transaction) { tx.ProposedTx = json.RawMessage(`[1]`) }},
			{"metadata not JSON", func(tx *Transaction) { tx.Metadata = json.RawMessage(`{"a"`) }},
			{"contextLogs a string", func(tx *Transaction) { tx.ContextLogs = json.RawMessage(`"logs"`) }},
			{"a prompt with NUL", func(tx *Transaction) { tx.Prompt = "pay\x00" }},
			{"a description not UTF-8", func(tx *Transaction) { tx.Description = "\xc3\x28" }},
			{"a trace id not UTF-8", func(tx *Transaction) { tx.TraceID = "\xff" }},
			{"already approved", func(tx *Transaction) { tx.Status = StatusApproved }},
			{"a verdict before evaluation", func(tx *Transaction) { tx.Verdict = json.RawMessage(approvedVerdict) }},
			{"a policy version before evaluation", func(tx *Transaction) { tx.PolicyVersion = ptr(1) }},
		}
		for i, tc := range cases {
			tx := testTransaction(a.ID, i, epoch)
			tc.edit(tx)
			wantErr(t, tc.name, s.CreateTransaction(ctx, tx), ErrInvalid)
		}
		wantErr(t, "a nil record", s.CreateTransaction(ctx, nil), ErrInvalid)
		if n, err := s.CountPending(ctx); err != nil || n != 0 {
			t.Fatalf("%d records written, %v; want none", n, err)
		}
	}},
	{"20 concurrent submits of one trace id on 3 handles: exactly one is recorded", func(t *testing.T, open storeOpen) {
		handles := []*Store{mustOpen(t, open), mustOpen(t, open), mustOpen(t, open)}
		a := mustAgent(t, handles[0], "a")
		wins := testenv.Race(t, 20, ErrDuplicateTrace, func(i int) error {
			tx := testTransaction(a.ID, i, epoch)
			tx.TraceID = "one-trace"
			return handles[i%3].CreateTransaction(context.Background(), tx)
		})
		if wins != 1 {
			t.Fatalf("%d submits recorded, want 1", wins)
		}
		if n, err := handles[2].CountPending(context.Background()); err != nil || n != 1 {
			t.Fatalf("%d records, %v; want 1", n, err)
		}
	}},
	{"CreateCompleted writes a terminal record in one write: read back, searched by its reason, immutable", func(t *testing.T, open storeOpen) {
		s, ctx := mustOpen(t, open), context.Background()
		a := mustAgent(t, s, "a")
		rejected := `{"outcome":"rejected","reasonCode":"recipient_not_allowed","policyVersion":2}`
		tx := testTransaction(a.ID, 1, epoch)
		tx.Status, tx.Verdict, tx.PolicyVersion = StatusRejected, json.RawMessage(rejected), ptr(2)
		if err := s.CreateCompleted(ctx, tx); err != nil {
			t.Fatal(err)
		}
		fresh := mustOpen(t, open) // another instance: nothing remembered
		got, err := fresh.TransactionByHash(ctx, tx.RequestHash)
		if err != nil || !reflect.DeepEqual(got, *tx) || !got.UpdatedAt.Equal(epoch) {
			t.Fatalf("TransactionByHash:\n got %+v, %v\nwant %+v", got, err, *tx)
		}
		for _, st := range []*Store{s, fresh} {
			v, err := st.VerdictByHash(ctx, tx.RequestHash)
			if err != nil || v.Status != StatusRejected || string(v.Verdict) != rejected || v.AgentID != a.ID {
				t.Fatalf("VerdictByHash = %+v, %v", v, err)
			}
		}
		found, err := fresh.SearchTransactions(ctx, Search{ReasonCode: "recipient_not_allowed"}, Cursor{}, 10)
		if err != nil || len(found) != 1 || found[0].RequestHash != tx.RequestHash {
			t.Fatalf("search by the verdict's reason code: %d found, %v", len(found), err)
		}
		if n, err := fresh.CountPending(ctx); err != nil || n != 0 {
			t.Fatalf("%d pending, %v; want none", n, err)
		}
		wantErr(t, "a Complete of the record", s.Complete(ctx, tx.RequestHash, StatusApproved, json.RawMessage(approvedVerdict), ptr(2)), ErrTerminal)
		again := testTransaction(a.ID, 2, epoch)
		again.TraceID = tx.TraceID
		again.Status, again.Verdict = StatusApproved, json.RawMessage(approvedVerdict)
		wantErr(t, "its trace id again", s.CreateCompleted(ctx, again), ErrDuplicateTrace)
		cases := []struct {
			name string
			edit func(*Transaction)
		}{
			{"status PENDING", func(tx *Transaction) { tx.Status = StatusPending }},
			{"no status", func(tx *Transaction) { tx.Status = "" }},
			{"no verdict", func(tx *Transaction) { tx.Verdict = nil }},
			{"a verdict that is not an object", func(tx *Transaction) { tx.Verdict = json.RawMessage(`[1]`) }},
			{"policy version 0", func(tx *Transaction) { tx.PolicyVersion = ptr(0) }},
			{"proposedTx absent", func(tx *Transaction) { tx.ProposedTx = nil }},
		}
		for i, tc := range cases {
			tx := testTransaction(a.ID, 10+i, epoch)
			tx.Status, tx.Verdict = StatusApproved, json.RawMessage(approvedVerdict)
			tc.edit(tx)
			wantErr(t, tc.name, s.CreateCompleted(ctx, tx), ErrInvalid)
		}
		wantErr(t, "a nil record", s.CreateCompleted(ctx, nil), ErrInvalid)
	}},
	{"Complete moves a record from PENDING once; a terminal verdict is immutable", func(t *testing.T, open storeOpen) {
		s, ctx := mustOpen(t, open), context.Background()
		a := mustAgent(t, s, "a")
		tx := testTransaction(a.ID, 1, epoch)
		if err := s.CreateTransaction(ctx, tx); err != nil {
			t.Fatal(err)
		}
		if err := s.Complete(ctx, tx.RequestHash, StatusApproved, json.RawMessage(approvedVerdict), ptr(3)); err != nil {
			t.Fatal(err)
		}
		steps := []struct {
			name    string
			status  string
			verdict string
			version *int64
			want    error
		}{
			{"a second Complete with another verdict", StatusRejected, `{"outcome":"rejected","reasonCode":"recipient_not_allowed"}`, ptr(4), ErrTerminal},
			{"the same verdict again", StatusApproved, approvedVerdict, ptr(3), ErrTerminal},
		}
		for _, st := range steps {
			wantErr(t, st.name, s.Complete(ctx, tx.RequestHash, st.status, json.RawMessage(st.verdict), st.version), st.want)
		}
		got, err := s.TransactionByHash(ctx, tx.RequestHash)
		if err != nil {
			t.Fatal(err)
		}
		if got.Status != StatusApproved || string(got.Verdict) != approvedVerdict || got.PolicyVersion == nil || *got.PolicyVersion != 3 {
			t.Fatalf("record = %s %s %v; want the first verdict", got.Status, got.Verdict, got.PolicyVersion)
		}
		if got.UpdatedAt.Before(got.CreatedAt) || !got.CreatedAt.Equal(epoch) {
			t.Fatalf("times: created %v updated %v", got.CreatedAt, got.UpdatedAt)
		}
		if got.Prompt != tx.Prompt || string(got.ProposedTx) != string(tx.ProposedTx) {
			t.Fatalf("Complete changed the request: %+v", got)
		}
	}},
	{"Complete without a policy, of unknown records, and with a malformed verdict", func(t *testing.T, open storeOpen) {
		s, ctx := mustOpen(t, open), context.Background()
		a := mustAgent(t, s, "a")
		tx := testTransaction(a.ID, 1, epoch)
		if err := s.CreateTransaction(ctx, tx); err != nil {
			t.Fatal(err)
		}
		rejected := `{"outcome":"rejected","reasonCode":"venue_not_allowed","policyVersion":null}`
		cases := []struct {
			name    string
			hash    string
			status  string
			verdict string
			version *int64
			want    error
		}{
			{"status PENDING", tx.RequestHash, StatusPending, rejected, nil, ErrInvalid},
			{"an unknown status", tx.RequestHash, "DONE", rejected, nil, ErrInvalid},
			{"a verdict that is not an object", tx.RequestHash, StatusRejected, `null`, nil, ErrInvalid},
			{"policy version 0", tx.RequestHash, StatusRejected, rejected, ptr(0), ErrInvalid},
			{"an unknown hash", "0xnope", StatusRejected, rejected, nil, ErrNotFound},
			{"a rejection without a policy", tx.RequestHash, StatusRejected, rejected, nil, nil},
		}
		for _, tc := range cases {
			wantErr(t, tc.name, s.Complete(ctx, tc.hash, tc.status, json.RawMessage(tc.verdict), tc.version), tc.want)
		}
		got, err := s.TransactionByHash(ctx, tx.RequestHash)
		if err != nil || got.Status != StatusRejected || string(got.Verdict) != rejected || got.PolicyVersion != nil {
			t.Fatalf("record = %+v, %v; want rejected without a policy version", got, err)
		}
	}},
	{"20 concurrent Completes with different verdicts on 3 handles: exactly one is kept", func(t *testing.T, open storeOpen) {
		handles := []*Store{mustOpen(t, open), mustOpen(t, open), mustOpen(t, open)}
		a := mustAgent(t, handles[0], "a")
		tx := testTransaction(a.ID, 1, epoch)
		if err := handles[0].CreateTransaction(context.Background(), tx); err != nil {
			t.Fatal(err)
		}
		verdictOf := func(i int) string { return fmt.Sprintf(`{"outcome":"rejected","call":%d}`, i) }
		winner := -1
		wins := testenv.Race(t, 20, ErrTerminal, func(i int) error {
			status := StatusRejected
			if i%2 == 0 {
				status = StatusApproved
			}
			err := handles[i%3].Complete(context.Background(), tx.RequestHash, status, json.RawMessage(verdictOf(i)), ptr(int64(i+1)))
			if err == nil {
				winner = i
			}
			return err
		})
		if wins != 1 {
			t.Fatalf("%d Completes won, want 1", wins)
		}
		got, err := handles[1].TransactionByHash(context.Background(), tx.RequestHash)
		if err != nil || string(got.Verdict) != verdictOf(winner) || got.PolicyVersion == nil || *got.PolicyVersion != int64(winner+1) {
			t.Fatalf("record = %s %v, %v; want the winner's (call %d)", got.Verdict, got.PolicyVersion, err, winner)
		}
		if (winner%2 == 0) != (got.Status == StatusApproved) {
			t.Fatalf("status %s does not match the winner's (call %d)", got.Status, winner)
		}
	}},
	{"Pending lists PENDING records oldest first, up to a limit", func(t *testing.T, open storeOpen) {
		s, ctx := mustOpen(t, open), context.Background()
		a, b := mustAgent(t, s, "a"), mustAgent(t, s, "b")
		rows := []struct {
			i     int
			agent string
			age   time.Duration
			done  bool
		}{
			{1, a.ID, 3 * time.Minute, false},
			{2, b.ID, 5 * time.Minute, false},
			{3, a.ID, 9 * time.Minute, true},
			{4, b.ID, 1 * time.Minute, false},
			{5, a.ID, 7 * time.Minute, true},
			{6, a.ID, 4 * time.Minute, false},
		}
		for _, r := range rows {
			tx := testTransaction(r.agent, r.i, epoch.Add(-r.age))
			if err := s.CreateTransaction(ctx, tx); err != nil {
				t.Fatal(err)
			}
			if r.done {
				if err := s.Complete(ctx, tx.RequestHash, StatusApproved, json.RawMessage(approvedVerdict), ptr(1)); err != nil {
					t.Fatal(err)
				}
			}
		}
		hashes := func(txs []Transaction) string {
			var out []string
			for _, tx := range txs {
				if tx.Status != StatusPending {
					t.Fatalf("Pending returned a %s record", tx.Status)
				}
				out = append(out, tx.RequestHash)
			}
			return strings.Join(out, ",")
		}
		want := func(is ...int) string {
			var out []string
			for _, i := range is {
				out = append(out, testTransaction("", i, epoch).RequestHash)
			}
			return strings.Join(out, ",")
		}
		all, err := s.Pending(ctx, 0)
		if err != nil || hashes(all) != want(2, 6, 1, 4) {
			t.Fatalf("Pending(0) = %s, %v; want %s", hashes(all), err, want(2, 6, 1, 4))
		}
		two, err := s.Pending(ctx, 2)
		if err != nil || hashes(two) != want(2, 6) {
			t.Fatalf("Pending(2) = %s, %v; want %s", hashes(two), err, want(2, 6))
		}
		if n, err := s.CountPending(ctx); err != nil || n != 4 {
			t.Fatalf("CountPending = %d, %v; want 4", n, err)
		}
		if all[0].Metadata == nil || all[0].ProposedTx == nil || all[0].AgentID != b.ID {
			t.Fatalf("a pending record lacks what evaluation needs: %+v", all[0])
		}
	}},
}
