package store

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/x402gate/x402gate/internal/sqldb"
)

var keyUseCases = []storeCase{
	{"a key's last use is kept for every instance and a restart, and never moves back", func(t *testing.T, open storeOpen) {
		s, ctx := mustOpen(t, open), context.Background()
		a := mustAgent(t, s, "used")
		k, err := s.CreateKey(ctx, a.ID, "k_used", hashOf("used-key"), []string{"verdicts:create:own"})
		if err != nil || k.LastUsedAt != nil {
			t.Fatalf("CreateKey = %+v, %v; want no last use", k, err)
		}
		used := epoch.Add(time.Hour)
		if err := s.KeyUsed(ctx, k.ID, used); err != nil {
			t.Fatal(err)
		}
		wantErr(t, "an earlier use from another instance", s.KeyUsed(ctx, k.ID, epoch), nil)
		wantErr(t, "an unknown key", s.KeyUsed(ctx, "k_nobody", used), ErrNotFound)
		other := mustOpen(t, open) // another instance
		if got, err := other.Key(ctx, k.ID); err != nil || got.LastUsedAt == nil || !got.LastUsedAt.Equal(used) {
			t.Fatalf("another instance's Key = %+v, %v; want last used %s", got, err, used)
		}
		_ = s.Close()
		s = mustOpen(t, open) // a restart
		keys, err := s.Keys(ctx, a.ID)
		if err != nil || len(keys) != 1 || keys[0].LastUsedAt == nil || !keys[0].LastUsedAt.Equal(used) {
			t.Fatalf("Keys after a restart = %+v, %v; want last used %s", keys, err, used)
		}
		if got, err := s.KeyByHash(ctx, hashOf("used-key")); err != nil || got.LastUsedAt == nil {
			t.Fatalf("KeyByHash = %+v, %v; want its last use", got, err)
		}
	}},
}

// searchFixture is a history of two agents with every status and two reason codes, one
// transaction a minute, oldest first.
type searchFixture struct {
	agents [2]string
	txs    []Transaction
	reason map[string]string // request hash: reason code ("" while pending)
}

func newSearchFixture(t *testing.T, s *Store, n int) searchFixture {
	t.Helper()
	ctx := context.Background()
	f := searchFixture{reason: map[string]string{}}
	for i := range f.agents {
		f.agents[i] = mustAgent(t, s, fmt.Sprintf("searched-%d", i)).ID
	}
	for i := 0; i < n; i++ {
		tx := testTransaction(f.agents[i%3%2], i, epoch.Add(time.Duration(i)*time.Minute))
		if err := s.CreateTransaction(ctx, tx); err != nil {
			t.Fatal(err)
		}
		status, doc := StatusApproved, approvedVerdict
		switch i % 5 {
		case 0:
			f.txs = append(f.txs, *tx)
			continue // pending
		case 1, 2:
			status, doc = StatusRejected, `{"outcome":"rejected","reasonCode":"recipient_not_allowed"}`
		}
		if err := s.Complete(ctx, tx.RequestHash, status, []byte(doc), ptr(1)); err != nil {
			t.Fatal(err)
		}
		tx.Status = status
		f.reason[tx.RequestHash] = map[string]string{StatusApproved: "allowed", StatusRejected: "recipient_not_allowed"}[status]
		f.txs = append(f.txs, *tx)
	}
	return f
}

// want is what q should find, newest first.
func (f searchFixture) want(q Search) []string {
	var out []string
	for i := len(f.txs) - 1; i >= 0; i-- {
		tx := f.txs[i]
		if (q.AgentID == "" || q.AgentID == tx.AgentID) && (q.Status == "" || q.Status == tx.Status) &&
			(q.ReasonCode == "" || q.ReasonCode == f.reason[tx.RequestHash]) &&
			(q.Since.IsZero() || !tx.CreatedAt.Before(q.Since)) && (q.Until.IsZero() || tx.CreatedAt.Before(q.Until)) {
			out = append(out, tx.RequestHash)
		}
	}
	return out
}

// searches are a search of every filter and of their combinations.
func (f searchFixture) searches() []Search {
	var out []Search
	for _, agent := range []string{"", f.agents[1]} {
		for _, status := range []string{"", StatusRejected, StatusPending} {
			for _, reason := range []string{"", "recipient_not_allowed"} {
				for _, since := range []time.Time{{}, epoch.Add(7 * time.Minute)} {
					out = append(out, Search{AgentID: agent, Status: status, ReasonCode: reason, Since: since})
					out = append(out, Search{AgentID: agent, Status: status, ReasonCode: reason, Since: since, Until: epoch.Add(31 * time.Minute)})
				}
			}
		}
	}
	return out
}

// searchAll pages through q, size at a time, and returns the request hashes found.
func searchAll(t *testing.T, s *Store, q Search, size int) []string {
	t.Helper()
	var got []string
	var after Cursor
	for {
		page, err := s.SearchTransactions(context.Background(), q, after, size)
		if err != nil {
			t.Fatalf("search %+v: %v", q, err)
		}
		for _, tx := range page {
			got = append(got, tx.RequestHash)
		}
		if len(page) < size {
			return got
		}
		after = Cursor{CreatedAt: page[len(page)-1].CreatedAt, ID: page[len(page)-1].ID}
	}
}

var searchCases = []storeCase{
	{"a search finds every match in the whole history, newest first, page by page", func(t *testing.T, open storeOpen) {
		s := mustOpen(t, open)
		f := newSearchFixture(t, s, 40)
		for _, q := range f.searches() {
			want := f.want(q)
			if got := searchAll(t, s, q, 3); !slices.Equal(got, want) {
				t.Errorf("search %+v found\n%v\nwant\n%v", q, got, want)
			}
		}
		if got := searchAll(t, s, Search{ReasonCode: "allowed"}, MaxPage); len(got) != 16 {
			t.Errorf("%d approved by 'allowed', want 16", len(got))
		}
		_, err := s.SearchTransactions(context.Background(), Search{}, Cursor{}, MaxPage+1)
		wantErr(t, "a page above MaxPage", err, ErrInvalid)
		_, err = s.SearchTransactions(context.Background(), Search{Status: "approved"}, Cursor{}, 1)
		wantErr(t, "a status in lower case", err, ErrInvalid)
	}},
	{"verdicts stored before the reason code had a column are found by it once migrated", func(t *testing.T, open storeOpen) {
		s, ctx := mustOpen(t, open), context.Background()
		f := newSearchFixture(t, s, 10)
		// Back to schema version 4: no reason column, none of its indexes.
		for _, q := range []string{
			`DROP INDEX transactions_created`, `DROP INDEX transactions_status`, `DROP INDEX transactions_agent_status`,
			`DROP INDEX transactions_reason`, `DROP INDEX transactions_agent_reason`,
			`ALTER TABLE transactions DROP COLUMN reason_code`, `DELETE FROM ` + schema.Table + ` WHERE version = 5`,
		} {
			if _, err := s.db.ExecContext(ctx, q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
		_ = s.Close()
		s = mustOpen(t, open)
		q := Search{ReasonCode: "recipient_not_allowed"}
		if got, want := searchAll(t, s, q, MaxPage), f.want(q); len(want) == 0 || !slices.Equal(got, want) {
			t.Fatalf("after the migration, %+v found %v, want %v", q, got, want)
		}
	}},
	{"every search reads an index in its order: no table scan, no sort", func(t *testing.T, open storeOpen) {
		// Without statistics (and autovacuum's ANALYZE), both planners weigh an equality
		// as selective, as a filter is on a long history: the plans are those of one.
		s, ctx := mustOpen(t, open), context.Background()
		if s.db.Dialect.Name == sqldb.Postgres.Name {
			if _, err := s.db.ExecContext(ctx, `ALTER TABLE transactions SET (autovacuum_enabled = false)`); err != nil {
				t.Fatal(err)
			}
		}
		f := newSearchFixture(t, s, 200)
		for _, q := range f.searches() {
			for _, after := range []Cursor{{}, {CreatedAt: epoch.Add(20 * time.Minute), ID: "x"}} {
				plan := explain(t, s, q, after)
				if bad := badPlan(s.db.Dialect.Name, q, plan); bad != "" {
					t.Errorf("search %+v after %v: the plan has %q:\n%s", q, after, bad, plan)
				}
			}
		}
	}},
}

// explain is the database's plan of a search.
func explain(t *testing.T, s *Store, q Search, after Cursor) string {
	t.Helper()
	ctx := context.Background()
	query, args := searchSQL(q, after, 100)
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	prefix := "EXPLAIN QUERY PLAN "
	if s.db.Dialect.Name == sqldb.Postgres.Name {
		// A table this small is read faster whole, or sorted: the plan asked for is the
		// one of a large history, which only a fitting index gives without them.
		for _, off := range []string{"enable_seqscan", "enable_bitmapscan", "enable_sort"} {
			if _, err := tx.ExecContext(ctx, `SET LOCAL `+off+` = off`); err != nil {
				t.Fatal(err)
			}
		}
		prefix = "EXPLAIN "
	}
	rows, err := tx.QueryContext(ctx, prefix+query, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	var lines []string
	for rows.Next() {
		vals := make([]any, len(cols))
		for i := range vals {
			vals[i] = new(any)
		}
		if err := rows.Scan(vals...); err != nil {
			t.Fatal(err)
		}
		lines = append(lines, fmt.Sprint(*(vals[len(vals)-1].(*any))))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return strings.Join(lines, "\n")
}

// badPlan is what makes a plan of q read more than it returns: a table scan, a sort, or an
// index that holds none of q's filters (agent, status, reason) when it has some and its time
// is open on a side (a closed range may rightly be read by time alone). The partial index
// of pending transactions holds the status PENDING.
func badPlan(dialect string, q Search, plan string) string {
	bad, cond := []string{"USE TEMP B-TREE", "SCAN transactions"}, plan
	if dialect == sqldb.Postgres.Name {
		bad, cond = []string{"Seq Scan", "Sort", "Bitmap"}, ""
		for _, line := range strings.Split(plan, "\n") {
			if strings.Contains(line, "Index Cond:") || strings.Contains(line, "transactions_pending") {
				cond += line
			}
		}
	}
	for _, b := range bad {
		if strings.Contains(plan, b) {
			return b
		}
	}
	cond = strings.ReplaceAll(strings.ReplaceAll(cond, " ", ""), "transactions_pending", "status=")
	filters, held := 0, 0
	for col, v := range map[string]string{"agent_id": q.AgentID, "status": q.Status, "reason_code": q.ReasonCode} {
		if v != "" {
			filters++
			if strings.Contains(cond, col+"=") {
				held++
			}
		}
	}
	if filters > 0 && held == 0 && (q.Since.IsZero() || q.Until.IsZero()) {
		return "an index that holds none of its filters"
	}
	return ""
}
