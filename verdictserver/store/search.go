package store

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Search is what SearchTransactions looks for; the zero Search is every transaction. Each
// filter has an index (schema version 5), so a search reads the rows it returns and not the
// history before them.
type Search struct {
	// AgentID is the one agent whose transactions match; "" is every agent.
	AgentID string
	// Status is StatusPending, StatusApproved or StatusRejected; "" is any.
	Status string
	// ReasonCode is the verdict's reasonCode; "" is any. A pending transaction has none.
	ReasonCode string
	// Since and Until bound the creation time: at or after Since, before Until; zero is
	// no bound.
	Since, Until time.Time
}

// SearchTransactions returns up to limit (1 to MaxPage) transactions that match q, newest
// first (ties by id, descending), created before the cursor after; the zero Cursor starts
// at the newest. The next page starts after the last one returned.
func (s *Store) SearchTransactions(ctx context.Context, q Search, after Cursor, limit int) ([]Transaction, error) {
	const op = "search transactions"
	if limit < 1 || limit > MaxPage {
		return nil, invalid(op, "limit %d is not 1 to %d", limit, MaxPage)
	}
	if q.Status != "" && q.Status != StatusPending && q.Status != StatusApproved && q.Status != StatusRejected {
		return nil, invalid(op, "status %q", q.Status)
	}
	query, args := searchSQL(q, after, limit)
	return s.transactions(ctx, op, query, args...)
}

// searchSQL is the query of SearchTransactions: a condition for each filter given, and
// the cursor as a row value, which both engines read as one range of the index.
func searchSQL(q Search, after Cursor, limit int) (string, []any) {
	var where []string
	var args []any
	add := func(cond string, vs ...any) { // each ? of cond is the next of vs
		for _, v := range vs {
			args = append(args, v)
			cond = strings.Replace(cond, "?", "$"+strconv.Itoa(len(args)), 1)
		}
		where = append(where, cond)
	}
	for _, f := range []struct {
		cond, v string
	}{{"agent_id = ?", q.AgentID}, {"status = ?", q.Status}, {"reason_code = ?", q.ReasonCode}} {
		if f.v != "" {
			add(f.cond, f.v)
		}
	}
	if !q.Since.IsZero() {
		add("created_at >= ?", micros(q.Since))
	}
	if !q.Until.IsZero() {
		add("created_at < ?", micros(q.Until))
	}
	created, id := int64(math.MaxInt64), ""
	if !after.CreatedAt.IsZero() {
		created, id = micros(after.CreatedAt), after.ID
	}
	add("(created_at, id) < (?, ?)", created, id)
	args = append(args, limit)
	return fmt.Sprintf(`SELECT %s FROM transactions WHERE %s ORDER BY created_at DESC, id DESC LIMIT $%d`,
		transactionColumns, strings.Join(where, " AND "), len(args)), args
}
