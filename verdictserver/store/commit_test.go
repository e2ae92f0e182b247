package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

var commitCases = []storeCase{
	{"64 concurrent submits share commits, and each gets its own answer (created, duplicate trace, conflict, unknown agent)", func(t *testing.T, open storeOpen) {
		s, ctx := mustOpen(t, open), context.Background()
		a, b := mustAgent(t, s, "a"), mustAgent(t, s, "b")
		taken := testTransaction(a.ID, 1000, epoch)
		if err := s.CreateTransaction(ctx, taken); err != nil {
			t.Fatal(err)
		}
		const n = 64
		want := make([]error, n)
		txs := make([]*Transaction, n)
		for i := range n {
			tx := testTransaction(a.ID, i, epoch)
			switch i % 4 {
			case 1: // pairs of one trace id: the even one of each pair or the odd one wins
				tx.TraceID = fmt.Sprintf("shared-%d", i/4)
			case 2:
				tx.AgentID, tx.TraceID = b.ID, fmt.Sprintf("shared-%d", i/4) // b's own trace ids
			case 3:
				if i%8 == 3 {
					tx.RequestHash, want[i] = taken.RequestHash, ErrConflict
				} else {
					tx.AgentID, want[i] = "no-such-agent", ErrNotFound
				}
			}
			txs[i] = tx
		}
		// case 0 of each group of 4 reuses the trace id of case 1: one of the two wins
		for i := 0; i+1 < n; i += 4 {
			txs[i].TraceID = txs[i+1].TraceID
		}
		got := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() { got[i] = s.CreateTransaction(ctx, txs[i]) })
		}
		wg.Wait()
		for i := 0; i < n; i += 4 {
			first, second := got[i], got[i+1]
			if (first == nil) == (second == nil) {
				t.Errorf("records %d and %d share a trace id: got %v and %v, want exactly one created", i, i+1, first, second)
			}
			for _, err := range []error{first, second} {
				if err != nil && !errors.Is(err, ErrDuplicateTrace) {
					t.Errorf("the loser of trace %s: %v, want ErrDuplicateTrace", txs[i].TraceID, err)
				}
			}
		}
		for i := range n {
			if i%4 < 2 {
				continue
			}
			wantErr(t, fmt.Sprintf("record %d", i), got[i], want[i])
		}
		// every 201 is durable: a new handle reads each created record back
		other := mustOpen(t, open)
		for i, tx := range txs {
			_, err := other.TransactionByHash(ctx, tx.RequestHash)
			switch {
			case got[i] == nil && err != nil:
				t.Errorf("created record %d is not in the database: %v", i, err)
			case got[i] != nil && !errors.Is(got[i], ErrConflict) && !errors.Is(err, ErrNotFound):
				t.Errorf("refused record %d (%v) was written: %v", i, got[i], err)
			}
		}
	}},
	{"concurrent Completes of one record: exactly one wins, the others are ErrTerminal", func(t *testing.T, open storeOpen) {
		s, ctx := mustOpen(t, open), context.Background()
		a := mustAgent(t, s, "a")
		tx := testTransaction(a.ID, 1, epoch)
		if err := s.CreateTransaction(ctx, tx); err != nil {
			t.Fatal(err)
		}
		var (
			wg       sync.WaitGroup
			mu       sync.Mutex
			won, off int
		)
		for range 16 {
			wg.Go(func() {
				err := s.Complete(ctx, tx.RequestHash, StatusApproved, json.RawMessage(approvedVerdict), ptr(1))
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					won++
				case errors.Is(err, ErrTerminal):
					off++
				default:
					t.Errorf("complete: %v", err)
				}
			})
		}
		wg.Wait()
		if won != 1 || off != 15 {
			t.Errorf("%d completes won and %d were terminal, want 1 and 15", won, off)
		}
	}},
	{"a write after Close fails and writes nothing", func(t *testing.T, open storeOpen) {
		s, ctx := mustOpen(t, open), context.Background()
		a := mustAgent(t, s, "a")
		_ = s.Close()
		if err := s.CreateTransaction(ctx, testTransaction(a.ID, 1, epoch)); err == nil {
			t.Fatal("a submit on a closed store succeeded")
		}
		_, err := mustOpen(t, open).TransactionByHash(ctx, testTransaction(a.ID, 1, epoch).RequestHash)
		wantErr(t, "the refused record", err, ErrNotFound)
	}},
	{"a write that fails inside a batch fails alone: the others of its batch commit", func(t *testing.T, open storeOpen) {
		s, ctx := mustOpen(t, open), context.Background()
		a := mustAgent(t, s, "a")
		// A committer whose loop starts once every write waits, so that all of them form
		// one batch: the bad statement is a real database error, not a fake.
		c := idleCommitter(s.db.DB, s.writes.pipeline)
		defer c.stop()
		const n = 8
		errs := make([]error, n)
		wrote := make([]bool, n)
		var wg sync.WaitGroup
		for i := range n {
			tx := testTransaction(a.ID, i, epoch)
			wg.Go(func() {
				if i == 3 {
					wrote[i], errs[i] = c.do(ctx, nil, `INSERT INTO no_such_table VALUES (1)`)
					return
				}
				wrote[i], errs[i] = c.do(ctx, s.stmts.insertTransaction, s.stmts.insertSQL,
					newUUID(), tx.RequestHash, tx.AgentID, hexAddress(tx.Escrow), tx.ChainID, tx.Prompt, tx.Description,
					string(tx.ProposedTx), nil, nil, "", StatusPending, micros(epoch), nil, nil)
			})
		}
		for len(c.writes) < n {
			time.Sleep(time.Millisecond) // waits for the writers to queue, not for a duration
		}
		c.start(1)
		wg.Wait()
		for i := range n {
			if i == 3 {
				if errs[i] == nil {
					t.Errorf("the bad statement succeeded")
				}
				continue
			}
			if errs[i] != nil || !wrote[i] {
				t.Errorf("write %d: wrote %v, %v; want written", i, wrote[i], errs[i])
			}
			if _, err := s.TransactionByHash(ctx, testTransaction(a.ID, i, epoch).RequestHash); err != nil {
				t.Errorf("write %d is not in the database: %v", i, err)
			}
		}
	}},
	{"on PostgreSQL a batch that waits for a row lock does not hold up the writes after it", func(t *testing.T, open storeOpen) {
		s, ctx := mustOpen(t, open), context.Background()
		if !s.writes.pipeline {
			return // SQLite has one writer at a time: a batch waits for the one before it
		}
		a := mustAgent(t, s, "a")
		locked := testTransaction(a.ID, 1, epoch)
		if err := s.CreateTransaction(ctx, locked); err != nil {
			t.Fatal(err)
		}
		// Another session locks the record, so the batch that completes it waits.
		lock, err := s.db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := lock.ExecContext(ctx, `SELECT 1 FROM transactions WHERE request_hash = $1 FOR UPDATE`, locked.RequestHash); err != nil {
			t.Fatal(err)
		}
		completed := make(chan error, 1)
		go func() {
			completed <- s.Complete(ctx, locked.RequestHash, StatusApproved, json.RawMessage(approvedVerdict), ptr(1))
		}()
		for len(s.writes.writes) > 0 || s.db.Stats().InUse < 2 {
			time.Sleep(time.Millisecond) // waits for a loop to take the Complete, not for a duration
		}
		// A bound for a hang, not a timing: one batch at a time would wait for the lock.
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		err = s.CreateTransaction(wctx, testTransaction(a.ID, 2, epoch))
		_ = lock.Rollback()
		if err != nil {
			t.Errorf("a submit behind a batch that waits for a lock: %v", err)
		}
		if err := <-completed; err != nil {
			t.Errorf("the Complete that waited: %v", err)
		}
	}},
}

var keyCacheCases = []storeCase{
	{"a terminal verdict is answered from memory, a PENDING one is read from the database each time", func(t *testing.T, open storeOpen) {
		s, ctx := mustOpen(t, open), context.Background()
		a := mustAgent(t, s, "a")
		done, pending := testTransaction(a.ID, 1, epoch), testTransaction(a.ID, 2, epoch)
		for _, tx := range []*Transaction{done, pending} {
			if err := s.CreateTransaction(ctx, tx); err != nil {
				t.Fatal(err)
			}
		}
		if v, err := s.VerdictByHash(ctx, done.RequestHash); err != nil || v.Status != StatusPending {
			t.Fatalf("before Complete: %+v, %v", v, err)
		}
		// completed by another instance: this one learns it from the database
		if err := mustOpen(t, open).Complete(ctx, done.RequestHash, StatusApproved, json.RawMessage(approvedVerdict), ptr(1)); err != nil {
			t.Fatal(err)
		}
		if v, err := s.VerdictByHash(ctx, done.RequestHash); err != nil || v.Status != StatusApproved {
			t.Fatalf("after Complete: %+v, %v", v, err)
		}
		_ = s.Close() // from now on, only what the Store remembers answers
		v, err := s.VerdictByHash(ctx, done.RequestHash)
		if err != nil || v.Status != StatusApproved || v.AgentID != a.ID || string(v.Verdict) != approvedVerdict {
			t.Errorf("the terminal verdict, read before: %+v, %v; want it from memory", v, err)
		}
		if _, err := s.VerdictByHash(ctx, pending.RequestHash); err == nil {
			t.Errorf("the PENDING record answered without the database")
		}
	}},
	{"a key revoked through this handle is refused at once; through another, once the cache's TTL has passed", func(t *testing.T, open storeOpen) {
		s, ctx := mustOpen(t, open), context.Background()
		a := mustAgent(t, s, "a")
		clock := epoch
		s.keys.now = func() time.Time { return clock }
		for i, k := range []string{"k_here", "k_there"} {
			if _, err := s.CreateKey(ctx, a.ID, k, hashOf(k), []string{"verdicts:read:own"}); err != nil {
				t.Fatal(err)
			}
			if _, err := s.KeyByHash(ctx, hashOf(k)); err != nil { // now remembered
				t.Fatalf("key %d: %v", i, err)
			}
		}
		if err := s.RevokeKey(ctx, "k_here"); err != nil {
			t.Fatal(err)
		}
		_, err := s.KeyByHash(ctx, hashOf("k_here"))
		wantErr(t, "the key revoked here", err, ErrNotFound)

		other := mustOpen(t, open)
		if err := other.RevokeKey(ctx, "k_there"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.KeyByHash(ctx, hashOf("k_there")); err != nil {
			t.Fatalf("within the TTL the remembered key still reads valid here: %v", err)
		}
		clock = clock.Add(KeyCacheTTL)
		_, err = s.KeyByHash(ctx, hashOf("k_there"))
		wantErr(t, "the key revoked elsewhere, a TTL later", err, ErrNotFound)
	}},
	{"a lookup that read a key before its revocation does not remember it", func(t *testing.T, open storeOpen) {
		s, ctx := mustOpen(t, open), context.Background()
		a := mustAgent(t, s, "a")
		k, err := s.CreateKey(ctx, a.ID, "k_race", hashOf("k_race"), []string{"verdicts:read:own"})
		if err != nil {
			t.Fatal(err)
		}
		gen := s.keys.generation() // the lookup starts and reads the valid key...
		if err := s.RevokeKey(ctx, k.ID); err != nil {
			t.Fatal(err)
		}
		s.keys.put(hashOf("k_race"), k, gen) // ...and would remember it after the revocation
		_, err = s.KeyByHash(ctx, hashOf("k_race"))
		wantErr(t, "the revoked key", err, ErrNotFound)
	}},
}
