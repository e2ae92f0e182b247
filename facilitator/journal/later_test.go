package journal

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
)

func init() {
	journalCases = append(journalCases, struct {
		name string
		run  func(t *testing.T, open journalOpen)
	}{"UpdateLater's move is there once its outcome is told; only broadcast and confirmed are deferred", testUpdateLater})
}

// outcome is the then of an UpdateLater, and a wait for it.
func outcome(t *testing.T) (then func(error), wait func() error) {
	ch := make(chan error, 1)
	return func(err error) { ch <- err }, func() error {
		t.Helper()
		select {
		case err := <-ch:
			return err
		case <-time.After(time.Minute):
			t.Fatal("UpdateLater never told its outcome")
			return nil
		}
	}
}

func testUpdateLater(t *testing.T, open journalOpen) {
	j, ctx := mustOpen(t, open), context.Background()
	s := testSettlement(1, journalEpoch)
	if err := j.Prepare(ctx, s); err != nil {
		t.Fatal(err)
	}
	state := func() (State, string) {
		t.Helper()
		var settled string
		if err := j.db.QueryRowContext(ctx, `SELECT settled_tx_hash FROM settlements WHERE authorization_key = $1`, s.AuthorizationKey).Scan(&settled); err != nil {
			t.Fatal(err)
		}
		got, err := j.Get(ctx, s.AuthorizationKey)
		if err != nil {
			t.Fatal(err)
		}
		return got.State, settled
	}
	then, wait := outcome(t)
	j.UpdateLater(s.AuthorizationKey, StateBroadcast, "", nil, then)
	if err := wait(); err != nil {
		t.Fatalf("UpdateLater broadcast: %v", err)
	}
	if st, _ := state(); st != StateBroadcast {
		t.Fatalf("after UpdateLater broadcast told its outcome the row is %q", st)
	}
	hash := common.HexToHash("0x1234")
	j.UpdateLater(s.AuthorizationKey, StateConfirmed, "", &hash, then)
	if err := wait(); err != nil {
		t.Fatalf("UpdateLater confirmed: %v", err)
	}
	if st, settled := state(); st != StateConfirmed || settled != "0x"+common.Bytes2Hex(hash[:]) {
		t.Fatalf("after UpdateLater confirmed the row is %q settled by %q", st, settled)
	}
	for _, to := range []State{StateFailed, StatePrepared} {
		j.UpdateLater(s.AuthorizationKey, to, "x", nil, then)
		if err := wait(); err == nil {
			t.Errorf("UpdateLater to %q was taken: only broadcast and confirmed may be deferred", to)
		}
	}
	j.UpdateLater("no such key", StateConfirmed, "", &hash, then)
	if err := wait(); !errors.Is(err, ErrNotFound) {
		t.Errorf("UpdateLater of an unknown key: %v, want ErrNotFound", err)
	}
	if st, _ := state(); st != StateConfirmed {
		t.Errorf("the refused deferred moves changed the row to %q", st)
	}
}

// openSQLiteAt opens the SQLite journal at path, closed when t ends.
func openSQLiteAt(t *testing.T, path string) *DB {
	t.Helper()
	return mustOpen(t, func() (*DB, error) { return OpenSQLite(context.Background(), path) })
}

// TestSQLiteUpdateLaterDoesNotWaitForItsCommit: UpdateLater returns while no commit can
// run (the test holds the group's lead), and the write is committed no later than the
// next write queued after it, in the order they came.
func TestSQLiteUpdateLaterDoesNotWaitForItsCommit(t *testing.T) {
	j, ctx := openSQLiteAt(t, filepath.Join(t.TempDir(), "journal.db")), context.Background()
	a, b := testSettlement(1, journalEpoch), testSettlement(2, journalEpoch)
	if err := j.Prepare(ctx, a); err != nil {
		t.Fatal(err)
	}
	j.group.lead <- struct{}{} // no group commits until it is released
	hash := common.HexToHash("0xabcd")
	then, wait := outcome(t)
	j.UpdateLater(a.AuthorizationKey, StateConfirmed, "", &hash, then)
	if got, err := j.Get(ctx, a.AuthorizationKey); err != nil || got.State != StatePrepared {
		t.Fatalf("while no commit could run, the deferred row reads %q, %v; want prepared", got.State, err)
	}
	prepared := make(chan error, 1)
	go func() { prepared <- j.Prepare(ctx, b) }()
	<-j.group.lead
	if err := <-prepared; err != nil {
		t.Fatal(err)
	}
	if got, err := j.Get(ctx, a.AuthorizationKey); err != nil || got.State != StateConfirmed {
		t.Fatalf("once the write queued after it returned, the deferred row reads %q, %v; want confirmed", got.State, err)
	}
	if err := wait(); err != nil {
		t.Fatal(err)
	}
}

// TestSQLiteCloseCommitsDeferredWrites: a deferred write that no other write carried and
// whose own commit has not come yet is committed by Close.
func TestSQLiteCloseCommitsDeferredWrites(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.db")
	j, ctx := openSQLiteAt(t, path), context.Background()
	a := testSettlement(1, journalEpoch)
	if err := j.Prepare(ctx, a); err != nil {
		t.Fatal(err)
	}
	j.group.laterBound = time.Hour
	j.UpdateLater(a.AuthorizationKey, StateBroadcast, "", nil, nil)
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	again := openSQLiteAt(t, path)
	if got, err := again.Get(ctx, a.AuthorizationKey); err != nil || got.State != StateBroadcast {
		t.Fatalf("after Close and a reopen the deferred row reads %q, %v; want broadcast", got.State, err)
	}
}
