package store

import (
	"context"
	"errors"
	"testing"
	"time"
)

var listCases = []storeCase{
	{"an agent's transactions page newest first, ties by id, and never show another agent's", func(t *testing.T, open storeOpen) {
		s, ctx := mustOpen(t, open), context.Background()
		a, b := mustAgent(t, s, "a"), mustAgent(t, s, "b")
		var want []string // newest first
		for i := 0; i < 7; i++ {
			// Two transactions share each creation time but the last, so ties are read by id.
			tx := testTransaction(a.ID, i, epoch.Add(time.Duration(i/2)*time.Second))
			if err := s.CreateTransaction(ctx, tx); err != nil {
				t.Fatal(err)
			}
			want = append(want, tx.RequestHash)
		}
		if err := s.CreateTransaction(ctx, testTransaction(b.ID, 99, epoch.Add(time.Hour))); err != nil {
			t.Fatal(err)
		}
		var got []string
		var after Cursor
		for page := 0; ; page++ {
			txs, err := s.AgentTransactions(ctx, a.ID, after, 3)
			if err != nil {
				t.Fatal(err)
			}
			if len(txs) == 0 {
				break
			}
			for i, tx := range txs {
				if tx.AgentID != a.ID {
					t.Fatalf("page %d holds agent %s's transaction", page, tx.AgentID)
				}
				if i > 0 && (tx.CreatedAt.After(txs[i-1].CreatedAt) || tx.CreatedAt.Equal(txs[i-1].CreatedAt) && tx.ID > txs[i-1].ID) {
					t.Fatalf("page %d is not newest first at %d", page, i)
				}
				got = append(got, tx.RequestHash)
			}
			last := txs[len(txs)-1]
			after = Cursor{CreatedAt: last.CreatedAt, ID: last.ID}
		}
		if len(got) != len(want) {
			t.Fatalf("%d transactions over the pages, want %d", len(got), len(want))
		}
		seen := map[string]bool{}
		for _, h := range got {
			if seen[h] {
				t.Fatalf("%s on two pages", h)
			}
			seen[h] = true
		}
		if got[0] != want[6] {
			t.Errorf("the first is %s, want the newest %s", got[0], want[6])
		}
	}},
	{"listing refuses a limit out of range and an unknown agent", func(t *testing.T, open storeOpen) {
		s, ctx := mustOpen(t, open), context.Background()
		a := mustAgent(t, s, "a")
		for _, n := range []int{0, -1, MaxPage + 1} {
			if _, err := s.AgentTransactions(ctx, a.ID, Cursor{}, n); !errors.Is(err, ErrInvalid) {
				t.Errorf("limit %d: %v, want ErrInvalid", n, err)
			}
		}
		if _, err := s.AgentTransactions(ctx, "no-such-agent", Cursor{}, 10); !errors.Is(err, ErrNotFound) {
			t.Errorf("unknown agent: %v, want ErrNotFound", err)
		}
		if txs, err := s.AgentTransactions(ctx, a.ID, Cursor{}, 10); err != nil || len(txs) != 0 {
			t.Errorf("an agent without transactions: %d, %v", len(txs), err)
		}
	}},
}
