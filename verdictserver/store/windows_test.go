package store

import (
	"context"
	"errors"
	"math/big"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// capDecision approves while every window has room for amount, as the verdict service does.
func capDecision(amount int64) func([]WindowUse) (Decision, error) {
	return func(use []WindowUse) (Decision, error) {
		for _, u := range use {
			if u.Left() < amount {
				return Decision{Status: StatusRejected, Verdict: []byte(`{"outcome":"rejected"}`), PolicyVersion: ptr(1)}, nil
			}
		}
		return Decision{Status: StatusApproved, Verdict: []byte(approvedVerdict), PolicyVersion: ptr(1)}, nil
	}
}

// dayCap is the $150 per 24 h cap of the crash test.
var dayCap = []Window{{Span: 24 * time.Hour, CapMicroUSD: 150_000_000}}

// reservation is a $10 reservation at at for agentID, expiring an hour later.
func reservation(agentID string, at time.Time) Reservation {
	return Reservation{AgentID: agentID, MicroUSD: 10_000_000, At: at, Expires: at.Add(time.Hour), Windows: dayCap}
}

// pendingTransactions creates n PENDING transactions of agentID.
func pendingTransactions(t *testing.T, s *Store, agentID string, n int) []*Transaction {
	t.Helper()
	out := make([]*Transaction, n)
	for i := range out {
		out[i] = testTransaction(agentID, i, epoch)
		if err := s.CreateTransaction(context.Background(), out[i]); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// mustUse reads the agent's use of dayCap at at.
func mustUse(t *testing.T, s *Store, agentID string, at time.Time) WindowUse {
	t.Helper()
	use, err := s.WindowUses(context.Background(), agentID, dayCap, at)
	if err != nil {
		t.Fatal(err)
	}
	return use[0]
}

var windowCases = []storeCase{
	{"spend windows: 40 concurrent $10 reservations on 3 instances against a $150 cap approve exactly 15", func(t *testing.T, open storeOpen) {
		ctx := context.Background()
		handles := []*Store{mustOpen(t, open), mustOpen(t, open), mustOpen(t, open)}
		a := mustAgent(t, handles[0], "windows")
		txs := pendingTransactions(t, handles[0], a.ID, 40)
		var approved atomic.Int64
		var wg sync.WaitGroup
		for i, tx := range txs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				d, err := handles[i%len(handles)].CompleteReserving(ctx, tx.RequestHash, reservation(a.ID, epoch.Add(time.Duration(i)*time.Millisecond)), capDecision(10_000_000))
				if err != nil {
					t.Error(err)
					return
				}
				if d.Status == StatusApproved {
					approved.Add(1)
				}
			}()
		}
		wg.Wait()
		if got := approved.Load(); got != 15 {
			t.Fatalf("approved %d of 40 $10 reservations against a $150 cap, want 15", got)
		}
		if u := mustUse(t, handles[1], a.ID, epoch.Add(time.Second)); u.Reserved != 150_000_000 || u.Committed != 0 || u.Left() != 0 {
			t.Fatalf("window use %+v, want 150 USD reserved and nothing left", u)
		}
	}},
	{"spend windows: commit keeps, release frees, expiry frees, and the window rolls", func(t *testing.T, open storeOpen) {
		ctx := context.Background()
		s := mustOpen(t, open)
		a := mustAgent(t, s, "rolling")
		txs := pendingTransactions(t, s, a.ID, 3)
		for i, tx := range txs {
			if _, err := s.CompleteReserving(ctx, tx.RequestHash, reservation(a.ID, epoch.Add(time.Duration(i)*time.Minute)), capDecision(10_000_000)); err != nil {
				t.Fatal(err)
			}
		}
		if st, err := s.ReportExecution(ctx, a.ID, txs[0].RequestHash, true, epoch); err != nil || st != ReservationCommitted {
			t.Fatalf("commit: %s, %v", st, err)
		}
		if st, err := s.ReportExecution(ctx, a.ID, txs[1].RequestHash, false, epoch); err != nil || st != ReservationReleased {
			t.Fatalf("release: %s, %v", st, err)
		}
		at := epoch.Add(10 * time.Minute)
		if u := mustUse(t, s, a.ID, at); u.Committed != 10_000_000 || u.Reserved != 10_000_000 {
			t.Fatalf("after commit and release: %+v, want 10 USD committed and 10 reserved", u)
		}
		// the third reservation expires an hour after it was made; the commit stays
		if u := mustUse(t, s, a.ID, epoch.Add(2*time.Hour+time.Minute)); u.Committed != 10_000_000 || u.Reserved != 0 {
			t.Fatalf("after expiry: %+v, want only the committed 10 USD", u)
		}
		// 24 h after the commit's reservation, the window no longer covers it
		if u := mustUse(t, s, a.ID, epoch.Add(24*time.Hour)); u.Committed != 0 {
			t.Fatalf("a day later: %+v, want an empty window", u)
		}
	}},
	{"spend windows: a report is idempotent, cannot change a settled reservation, and is the owner's", func(t *testing.T, open storeOpen) {
		ctx := context.Background()
		s := mustOpen(t, open)
		a, b := mustAgent(t, s, "owner"), mustAgent(t, s, "other")
		tx := pendingTransactions(t, s, a.ID, 1)[0]
		if _, err := s.CompleteReserving(ctx, tx.RequestHash, reservation(a.ID, epoch), capDecision(10_000_000)); err != nil {
			t.Fatal(err)
		}
		_, err := s.ReportExecution(ctx, b.ID, tx.RequestHash, true, epoch)
		wantErr(t, "another agent's report", err, ErrReservationNotFound)
		for range 2 {
			_, err := s.ReportExecution(ctx, a.ID, tx.RequestHash, true, epoch)
			wantErr(t, "commit", err, nil)
		}
		_, err = s.ReportExecution(ctx, a.ID, tx.RequestHash, false, epoch)
		wantErr(t, "release after commit", err, ErrTerminal)
	}},
	{"spend windows: a commit follows a release, since the money moved after all", func(t *testing.T, open storeOpen) {
		ctx := context.Background()
		s := mustOpen(t, open)
		a := mustAgent(t, s, "late")
		tx := pendingTransactions(t, s, a.ID, 1)[0]
		if _, err := s.CompleteReserving(ctx, tx.RequestHash, reservation(a.ID, epoch), capDecision(10_000_000)); err != nil {
			t.Fatal(err)
		}
		for _, executed := range []bool{false, true} {
			if _, err := s.ReportExecution(ctx, a.ID, tx.RequestHash, executed, epoch); err != nil {
				t.Fatal(err)
			}
		}
		if u := mustUse(t, s, a.ID, epoch); u.Committed != 10_000_000 || u.Reserved != 0 {
			t.Fatalf("after a release and a commit: %+v, want 10 USD committed", u)
		}
	}},
	{"spend windows: an upto settle commits what moved, priced like its reservation, and a settle of 0 releases", func(t *testing.T, open storeOpen) {
		ctx := context.Background()
		s := mustOpen(t, open)
		a := mustAgent(t, s, "metered")
		r := reservation(a.ID, epoch)
		r.Scopes = []string{"84532:0xtoken"}
		txs := pendingTransactions(t, s, a.ID, 3)
		for _, tx := range txs {
			if _, err := s.CompleteReserving(ctx, tx.RequestHash, r, capDecision(10_000_000)); err != nil {
				t.Fatal(err)
			}
		}
		// $10 reserved for 3,000,000 base units; 1,110,001 moved: $3.70000333… rounds up.
		part := Moved{Amount: big.NewInt(1_110_001), Max: big.NewInt(3_000_000)}
		for range 2 {
			if st, err := s.ReportMoved(ctx, a.ID, txs[0].RequestHash, part, epoch); err != nil || st != ReservationCommitted {
				t.Fatalf("partial commit: %s, %v", st, err)
			}
		}
		if st, err := s.ReportMoved(ctx, a.ID, txs[1].RequestHash, Moved{Amount: big.NewInt(0), Max: big.NewInt(3_000_000)}, epoch); err != nil || st != ReservationReleased {
			t.Fatalf("a settle of 0: %s, %v", st, err)
		}
		_, err := s.ReportMoved(ctx, a.ID, txs[2].RequestHash, Moved{Amount: big.NewInt(3_000_001), Max: big.NewInt(3_000_000)}, epoch)
		wantErr(t, "more than the maximum", err, ErrInvalid)
		token := append([]Window{}, dayCap...)
		token[0].Scope = "84532:0xtoken"
		for _, w := range [][]Window{dayCap, token} {
			use, err := s.WindowUses(ctx, a.ID, w, epoch.Add(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			if u := use[0]; u.Committed != 3_700_004 || u.Reserved != 10_000_000 {
				t.Fatalf("window %q: %+v, want 3.700004 USD committed and only the third 10 USD reserved", w[0].Scope, u)
			}
		}
	}},
	{"spend windows: a terminal record is not completed again and a rejection reserves nothing", func(t *testing.T, open storeOpen) {
		ctx := context.Background()
		s := mustOpen(t, open)
		a := mustAgent(t, s, "terminal")
		tx := pendingTransactions(t, s, a.ID, 1)[0]
		reject := func([]WindowUse) (Decision, error) {
			return Decision{Status: StatusRejected, Verdict: []byte(`{"outcome":"rejected"}`)}, nil
		}
		if _, err := s.CompleteReserving(ctx, tx.RequestHash, reservation(a.ID, epoch), reject); err != nil {
			t.Fatal(err)
		}
		_, err := s.CompleteReserving(ctx, tx.RequestHash, reservation(a.ID, epoch), capDecision(1))
		wantErr(t, "second completion", err, ErrTerminal)
		if u := mustUse(t, s, a.ID, epoch); u.Reserved != 0 {
			t.Fatalf("a rejection reserved %+v", u)
		}
		_, err = s.ReportExecution(ctx, a.ID, tx.RequestHash, true, epoch)
		wantErr(t, "report of a rejection", err, ErrReservationNotFound)
		boom := errors.New("boom")
		_, err = s.CompleteReserving(ctx, "0xnone", reservation(a.ID, epoch), func([]WindowUse) (Decision, error) { return Decision{}, boom })
		wantErr(t, "unknown record", err, ErrNotFound)
	}},
}
