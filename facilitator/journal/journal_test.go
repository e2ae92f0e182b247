package journal

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"

	"github.com/x402gate/x402gate/internal/testenv"
)

// journalOpen opens a new handle on one database; several handles stand for several
// instances.
type journalOpen func() (*DB, error)

// journalOpener gives each case a fresh, empty database.
type journalOpener func(t *testing.T) journalOpen

// mustOpen opens a handle that is closed when t ends.
func mustOpen(t *testing.T, open journalOpen) *DB {
	t.Helper()
	j, err := open()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = j.Close() })
	return j
}

// testSettlement returns a distinct, fully populated row for i, keyed as
// x402.PaymentKey keys it.
func testSettlement(i int, created time.Time) Settlement {
	var nonce [32]byte
	copy(nonce[:], fmt.Sprintf("nonce-%028d", i))
	network := "eip155:84532"
	asset := common.HexToAddress("0x036CbD53842c5426634e7929541eC2318f3dCF7e")
	payer := common.HexToAddress(fmt.Sprintf("0x%040x", 0xA11CE000+i))
	payTo := common.HexToAddress("0x209693Bc6afc0C5328bA36FaF03C514EF312287C")
	amount := big.NewInt(10_000)
	return Settlement{
		AuthorizationKey: strings.ToLower(fmt.Sprintf("%s:%s:%s:0x%x", network, asset.Hex(), payer.Hex(), nonce[:])),
		PaymentKey: strings.ToLower(fmt.Sprintf("%s:%s:%s:%s:%s:0x%x",
			network, asset.Hex(), payer.Hex(), payTo.Hex(), amount, nonce[:])),
		Network:     network,
		Asset:       asset,
		Payer:       payer,
		PayTo:       payTo,
		Amount:      amount,
		Nonce:       nonce,
		TxHash:      common.HexToHash(fmt.Sprintf("0x%064x", 0xbeef0000+i)),
		RawTx:       []byte{0x02, 0xf8, byte(i), 0x00, 0xff},
		SenderNonce: uint64(1<<40 + i),
		Sender:      common.HexToAddress(fmt.Sprintf("0x%040x", 0x5e4d0000+i)),
		State:       StatePrepared,
		Reason:      "",
		CreatedAt:   created.UTC().Truncate(time.Microsecond),
		UpdatedAt:   created.UTC().Truncate(time.Microsecond),
	}
}

var journalEpoch = time.Date(2026, 5, 1, 12, 0, 0, 123456000, time.UTC)

// journalCases is the behaviour both SQL engines share (docs/facilitator.md#settlement-journal:
// journaled before broadcast; reconcile, never broadcast again).
var journalCases = []struct {
	name string
	run  func(t *testing.T, open journalOpen)
}{
	{"a prepared settlement reads back field for field", func(t *testing.T, open journalOpen) {
		j, ctx := mustOpen(t, open), context.Background()
		want := testSettlement(1, journalEpoch)
		want.Amount, _ = new(big.Int).SetString("123456789012345678901234567890", 10) // beyond int64
		want.Network = "eip155:8453"
		if err := j.Prepare(ctx, want); err != nil {
			t.Fatal(err)
		}
		got, err := j.Get(ctx, want.AuthorizationKey)
		if err != nil {
			t.Fatal(err)
		}
		if got.Amount.Cmp(want.Amount) != 0 {
			t.Errorf("amount = %s, want %s", got.Amount, want.Amount)
		}
		got.Amount, want.Amount = nil, nil
		if !reflect.DeepEqual(got, want) {
			t.Errorf("round trip:\n got %+v\nwant %+v", got, want)
		}
	}},
	{"an unknown authorization is not found", func(t *testing.T, open journalOpen) {
		j := mustOpen(t, open)
		if _, err := j.Get(context.Background(), "eip155:84532:0xnope"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("err = %v, want ErrNotFound", err)
		}
	}},
	{"one authorization is journaled once, even after its settlement failed", func(t *testing.T, open journalOpen) {
		j, ctx := mustOpen(t, open), context.Background()
		first := testSettlement(2, journalEpoch)
		if err := j.Prepare(ctx, first); err != nil {
			t.Fatal(err)
		}
		again := first
		again.TxHash = common.HexToHash("0x1234")
		again.PayTo = common.HexToAddress("0x00000000000000000000000000000000000000aa")
		if err := j.Prepare(ctx, again); !errors.Is(err, ErrDuplicateSettlement) {
			t.Fatalf("second prepare err = %v, want ErrDuplicateSettlement", err)
		}
		if err := j.Update(ctx, first.AuthorizationKey, StateFailed, "reverted"); err != nil {
			t.Fatal(err)
		}
		if err := j.Prepare(ctx, again); !errors.Is(err, ErrDuplicateSettlement) {
			t.Fatalf("prepare after failure err = %v, want ErrDuplicateSettlement", err)
		}
		got, err := j.Get(ctx, first.AuthorizationKey)
		if err != nil {
			t.Fatal(err)
		}
		if got.TxHash != first.TxHash || got.State != StateFailed {
			t.Fatalf("row = %s %s, want the first transaction, failed", got.TxHash, got.State)
		}
	}},
	{"20 concurrent prepares of one authorization on 3 handles: exactly one succeeds", func(t *testing.T, open journalOpen) {
		handles := []*DB{mustOpen(t, open), mustOpen(t, open), mustOpen(t, open)}
		s := testSettlement(3, journalEpoch)
		wins := testenv.Race(t, 20, ErrDuplicateSettlement, func(i int) error {
			attempt := s
			attempt.TxHash = common.HexToHash(fmt.Sprintf("0x%x", i+1))
			return handles[i%3].Prepare(context.Background(), attempt)
		})
		if wins != 1 {
			t.Fatalf("%d prepares succeeded, want 1", wins)
		}
	}},
	{"updates follow the settlement lifecycle", func(t *testing.T, open journalOpen) {
		j, ctx := mustOpen(t, open), context.Background()
		steps := []struct {
			key    int
			to     State
			reason string
			want   error
		}{
			{10, StateBroadcast, "", nil},
			{10, StateBroadcast, "rebroadcast", nil},
			{10, StateConfirmed, "", nil},
			{10, StateConfirmed, "", nil}, // a second reconciler records the same outcome
			{10, StateFailed, "late", ErrInvalidTransition},
			{10, StateBroadcast, "", ErrInvalidTransition},
			{10, StatePrepared, "", ErrInvalidTransition},
			{11, StateFailed, "dropped", nil},
			{11, StateBroadcast, "", ErrInvalidTransition},
			{11, StateConfirmed, "receipt found late", nil},
			{12, StateConfirmed, "", nil}, // receipt seen before the broadcast was recorded
			{13, State("mined"), "", ErrInvalidTransition},
			{99, StateBroadcast, "", ErrNotFound},
		}
		for _, i := range []int{10, 11, 12, 13} {
			if err := j.Prepare(ctx, testSettlement(i, journalEpoch)); err != nil {
				t.Fatal(err)
			}
		}
		for n, st := range steps {
			key := testSettlement(st.key, journalEpoch).AuthorizationKey
			err := j.Update(ctx, key, st.to, st.reason)
			if !errors.Is(err, st.want) || (st.want == nil && err != nil) {
				t.Fatalf("step %d: update %d to %s: err = %v, want %v", n, st.key, st.to, err, st.want)
			}
			if err != nil || st.want != nil {
				continue
			}
			got, err := j.Get(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			if got.State != st.to || got.Reason != st.reason {
				t.Fatalf("step %d: row is %s %q, want %s %q", n, got.State, got.Reason, st.to, st.reason)
			}
		}
	}},
	{"unfinished lists prepared and broadcast settlements only, oldest first", func(t *testing.T, open journalOpen) {
		j, ctx := mustOpen(t, open), context.Background()
		rows := []struct {
			key   int
			age   time.Duration
			state State
		}{
			{20, 3 * time.Minute, StatePrepared},
			{21, 5 * time.Minute, StateBroadcast},
			{22, 9 * time.Minute, StateConfirmed},
			{23, 1 * time.Minute, StateBroadcast},
			{24, 7 * time.Minute, StateFailed},
			{25, 4 * time.Minute, StatePrepared},
		}
		for _, r := range rows {
			if err := j.Prepare(ctx, testSettlement(r.key, journalEpoch.Add(-r.age))); err != nil {
				t.Fatal(err)
			}
			if r.state != StatePrepared {
				if err := j.Update(ctx, testSettlement(r.key, journalEpoch).AuthorizationKey, r.state, ""); err != nil {
					t.Fatal(err)
				}
			}
		}
		got, err := j.Unfinished(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var keys []string
		for _, s := range got {
			keys = append(keys, s.AuthorizationKey)
		}
		var want []string
		for _, i := range []int{21, 25, 20, 23} {
			want = append(want, testSettlement(i, journalEpoch).AuthorizationKey)
		}
		if !reflect.DeepEqual(keys, want) {
			t.Fatalf("unfinished =\n%s\nwant\n%s", strings.Join(keys, "\n"), strings.Join(want, "\n"))
		}
		if got[0].State != StateBroadcast || len(got[0].RawTx) == 0 {
			t.Fatalf("unfinished rows lack what reconcile needs: %+v", got[0])
		}
	}},
	{"reopening migrates idempotently and keeps every row", func(t *testing.T, open journalOpen) {
		ctx := context.Background()
		j := mustOpen(t, open)
		s := testSettlement(30, journalEpoch)
		if err := j.Prepare(ctx, s); err != nil {
			t.Fatal(err)
		}
		_ = j.Close()
		for i := 0; i < 2; i++ {
			j = mustOpen(t, open)
			if _, err := j.Get(ctx, s.AuthorizationKey); err != nil {
				t.Fatalf("reopen %d: %v", i, err)
			}
		}
		var n, versions int
		if err := j.db.QueryRowContext(ctx, `SELECT COUNT(*), COUNT(DISTINCT version) FROM `+schema.Table).Scan(&n, &versions); err != nil {
			t.Fatal(err)
		}
		if n != len(schema.Migrations) || versions != n {
			t.Fatalf("%d migration rows (%d versions), want %d", n, versions, len(schema.Migrations))
		}
	}},
	{"concurrent opens of a new database all migrate it", func(t *testing.T, open journalOpen) {
		var wg sync.WaitGroup
		handles := make([]*DB, 4)
		errs := make([]error, 4)
		for i := range handles {
			wg.Add(1)
			go func(i int) { defer wg.Done(); handles[i], errs[i] = open() }(i)
		}
		wg.Wait()
		for i, j := range handles {
			if errs[i] != nil {
				t.Fatalf("open %d: %v", i, errs[i])
			}
			t.Cleanup(func() { _ = j.Close() })
		}
		if err := handles[0].Prepare(context.Background(), testSettlement(40, journalEpoch)); err != nil {
			t.Fatal(err)
		}
		if _, err := handles[3].Get(context.Background(), testSettlement(40, journalEpoch).AuthorizationKey); err != nil {
			t.Fatal(err)
		}
	}},
	{"a database migrated by a newer build is refused", func(t *testing.T, open journalOpen) {
		j := mustOpen(t, open)
		if _, err := j.db.Exec(`INSERT INTO ` + schema.Table + ` (version, applied_at) VALUES (9999, 0)`); err != nil {
			t.Fatal(err)
		}
		_ = j.Close()
		if j, err := open(); err == nil || !strings.Contains(err.Error(), "newer") {
			if j != nil {
				_ = j.Close()
			}
			t.Fatalf("open err = %v, want a newer-schema refusal", err)
		}
	}},
	{"PrepareAll writes every row or none", func(t *testing.T, open journalOpen) {
		j, ctx := mustOpen(t, open), context.Background()
		a, b, c := testSettlement(70, journalEpoch), testSettlement(71, journalEpoch), testSettlement(72, journalEpoch)
		if err := j.Prepare(ctx, a); err != nil {
			t.Fatal(err)
		}
		again := a
		again.TxHash = common.HexToHash("0x77")
		err := j.PrepareAll(ctx, []Settlement{b, again, c})
		var dup *DuplicatesError
		if !errors.Is(err, ErrDuplicateSettlement) || !errors.As(err, &dup) || !reflect.DeepEqual(dup.Index, []int{1}) {
			t.Fatalf("PrepareAll with a journaled key: err = %v, want DuplicatesError{[1]}", err)
		}
		for _, s := range []Settlement{b, c} {
			if _, err := j.Get(ctx, s.AuthorizationKey); !errors.Is(err, ErrNotFound) {
				t.Fatalf("row %s written by a refused PrepareAll: %v", s.AuthorizationKey, err)
			}
		}
		if got, err := j.Get(ctx, a.AuthorizationKey); err != nil || got.TxHash != a.TxHash {
			t.Fatalf("the journaled row = %+v, %v; want it untouched", got, err)
		}
		if err := j.PrepareAll(ctx, []Settlement{b, c}); err != nil {
			t.Fatal(err)
		}
		for _, s := range []Settlement{b, c} {
			if got, err := j.Get(ctx, s.AuthorizationKey); err != nil || got.State != StatePrepared || got.SenderNonce != s.SenderNonce {
				t.Fatalf("row = %+v, %v; want prepared", got, err)
			}
		}
	}},
	{"concurrent writes each get their own answer", func(t *testing.T, open journalOpen) {
		j, ctx := mustOpen(t, open), context.Background()
		taken := testSettlement(80, journalEpoch)
		if err := j.Prepare(ctx, taken); err != nil {
			t.Fatal(err)
		}
		if err := j.Update(ctx, taken.AuthorizationKey, StateConfirmed, ""); err != nil {
			t.Fatal(err)
		}
		// Writes that succeed, and writes refused for their own reason, all at once: in a
		// group commit, the refused ones must leave nothing and change nothing for the others.
		const n = 48
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				switch i % 4 {
				case 0, 1:
					errs[i] = j.Prepare(ctx, testSettlement(100+i, journalEpoch))
				case 2:
					dup := taken
					dup.TxHash = common.HexToHash(fmt.Sprintf("0x%x", i))
					errs[i] = j.PrepareAll(ctx, []Settlement{testSettlement(100+i, journalEpoch), dup})
				case 3:
					errs[i] = j.Update(ctx, taken.AuthorizationKey, StateFailed, "late")
				}
			}()
		}
		wg.Wait()
		for i, err := range errs {
			switch i % 4 {
			case 0, 1:
				if err != nil {
					t.Errorf("prepare %d: %v", i, err)
				} else if _, err := j.Get(ctx, testSettlement(100+i, journalEpoch).AuthorizationKey); err != nil {
					t.Errorf("row %d after its prepare returned: %v", i, err)
				}
			case 2:
				if !errors.Is(err, ErrDuplicateSettlement) {
					t.Errorf("PrepareAll %d: err = %v, want ErrDuplicateSettlement", i, err)
				} else if _, err := j.Get(ctx, testSettlement(100+i, journalEpoch).AuthorizationKey); !errors.Is(err, ErrNotFound) {
					t.Errorf("row %d of a refused PrepareAll: %v, want not found", i, err)
				}
			case 3:
				if !errors.Is(err, ErrInvalidTransition) {
					t.Errorf("update %d: err = %v, want ErrInvalidTransition", i, err)
				}
			}
		}
		if got, err := j.Get(ctx, taken.AuthorizationKey); err != nil || got.State != StateConfirmed || got.TxHash != taken.TxHash {
			t.Errorf("the confirmed row = %+v, %v; want it unchanged", got, err)
		}
	}},
	{"a settlement without an amount is refused", func(t *testing.T, open journalOpen) {
		j := mustOpen(t, open)
		s := testSettlement(50, journalEpoch)
		s.Amount = nil
		if err := j.Prepare(context.Background(), s); err == nil {
			t.Fatal("prepared a settlement without an amount")
		}
		if _, err := j.Get(context.Background(), s.AuthorizationKey); !errors.Is(err, ErrNotFound) {
			t.Fatalf("refused row was written: %v", err)
		}
	}},
}

func runJournalSuite(t *testing.T, opener journalOpener) {
	for _, tc := range journalCases {
		t.Run(tc.name, func(t *testing.T) { tc.run(t, opener(t)) })
	}
}

func TestSQLiteJournal(t *testing.T) {
	runJournalSuite(t, func(t *testing.T) journalOpen {
		path := filepath.Join(t.TempDir(), "nested", "dir", "journal?#.db")
		return func() (*DB, error) { return OpenSQLite(context.Background(), path) }
	})
}

func TestPostgresJournal(t *testing.T) {
	srv := testenv.StartPostgresServer(t, testenv.PostgresConfig{})
	n := 0
	runJournalSuite(t, func(t *testing.T) journalOpen {
		n++
		dsn := srv.CreateDatabase(t, fmt.Sprintf("journal_case_%d", n))
		return func() (*DB, error) { return OpenPostgres(context.Background(), dsn) }
	})
}

func TestPostgresJournalKeepsPasswordOutOfErrors(t *testing.T) {
	const password = "pg-s3cret-4e1b77"
	ctx := context.Background()
	srv := testenv.StartPostgresServer(t, testenv.PostgresConfig{Password: password})
	noSecret := func(t *testing.T, err error, secrets ...string) {
		t.Helper()
		if err == nil {
			t.Fatal("open succeeded, want an error")
		}
		for _, s := range secrets {
			if strings.Contains(err.Error(), s) {
				t.Fatalf("error text carries a password: %q", err)
			}
		}
	}
	const wrong = "wrong-pw-0c93aa"
	cases := []struct {
		name string
		dsn  string
	}{
		{"a wrong password", strings.Replace(srv.DSN, password, wrong, 1)},
		{"an unreachable host", "postgres://postgres:" + wrong + "@127.0.0.1:1/postgres?sslmode=disable&connect_timeout=5"},
		{"a malformed url", "postgres://postgres:" + wrong + "@127.0.0.1:notaport/postgres"},
		{"a malformed key=value dsn", "host=127.0.0.1 password=" + wrong + " port=bad"},
	}
	for _, tc := range cases {
		t.Run(tc.name+" fails without echoing the password", func(t *testing.T) {
			_, err := OpenPostgres(ctx, tc.dsn)
			noSecret(t, err, wrong, password)
		})
	}

	j, err := OpenPostgres(ctx, srv.DSN)
	if err != nil {
		t.Fatalf("open with the right password: %v", err)
	}
	defer j.Close()
	srv.Stop()
	t.Run("with postgres down, prepare fails without echoing the password", func(t *testing.T) {
		err := j.Prepare(ctx, testSettlement(60, journalEpoch))
		noSecret(t, err, password)
	})
}

func BenchmarkJournalPrepareSQLite(b *testing.B) {
	j, err := OpenSQLite(context.Background(), filepath.Join(b.TempDir(), "journal.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer j.Close()
	ctx := context.Background()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		s := testSettlement(i, journalEpoch)
		if err := j.Prepare(ctx, s); err != nil {
			b.Fatal(err)
		}
	}
}

// TestJournalAttemptsMigrateOldRows: a database written by the version-1 schema (no
// attempts) is migrated at Open; its rows keep working (one attempt each, closable, and
// replacements can be added), on both engines. AddAttempt refuses a taken sequence number
// and a closed row.
func TestJournalAttemptsMigrateOldRows(t *testing.T) {
	openers := map[string]func(t *testing.T) func() (*DB, error){
		"sqlite": func(t *testing.T) func() (*DB, error) {
			path := filepath.Join(t.TempDir(), "journal.db")
			return func() (*DB, error) { return OpenSQLite(context.Background(), path) }
		},
		"postgres": func(t *testing.T) func() (*DB, error) {
			dsn := testenv.StartPostgres(t)
			return func() (*DB, error) { return OpenPostgres(context.Background(), dsn) }
		},
	}
	for _, kind := range []string{"sqlite", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			ctx := context.Background()
			open := openers[kind](t)
			old, err := open()
			if err != nil {
				t.Fatal(err)
			}
			// Stand in for the version-1 build: drop what versions 2 and 3 added.
			for _, stmt := range []string{
				`DROP TABLE settlement_attempts`,
				`ALTER TABLE settlements DROP COLUMN settled_tx_hash`,
				`ALTER TABLE settlements DROP COLUMN sender`,
				`DELETE FROM ` + schema.Table + ` WHERE version >= 2`,
			} {
				if _, err := old.db.ExecContext(ctx, stmt); err != nil {
					t.Fatalf("%s: %v", stmt, err)
				}
			}
			rows := []Settlement{testSettlement(1, journalEpoch), testSettlement(2, journalEpoch)}
			for _, s := range rows {
				if _, err := old.db.ExecContext(ctx, `INSERT INTO settlements (`+settlementColumns+`)
					VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, 'broadcast', '', $12, $12)`,
					s.AuthorizationKey, s.PaymentKey, s.Network, hexAddress(s.Asset), hexAddress(s.Payer),
					hexAddress(s.PayTo), s.Amount.String(), fmt.Sprintf("0x%x", s.Nonce), strings.ToLower(s.TxHash.Hex()),
					s.RawTx, int64(s.SenderNonce), s.CreatedAt.UnixMicro()); err != nil {
					t.Fatalf("insert version-1 row: %v", err)
				}
			}
			_ = old.Close()

			j, err := open()
			if err != nil {
				t.Fatalf("open migrates: %v", err)
			}
			t.Cleanup(func() { _ = j.Close() })
			unfinished, err := j.Unfinished(ctx)
			if err != nil || len(unfinished) != 2 {
				t.Fatalf("Unfinished = %d rows, %v; want the 2 old rows", len(unfinished), err)
			}
			as, err := j.Attempts(ctx, rows[0].AuthorizationKey)
			if err != nil || len(as) != 1 || as[0].Seq != 0 || as[0].TxHash != rows[0].TxHash ||
				!bytes.Equal(as[0].RawTx, rows[0].RawTx) || as[0].Settled || !as[0].CreatedAt.Equal(rows[0].CreatedAt) {
				t.Fatalf("Attempts of an old row = %+v, %v; want its own transaction only", as, err)
			}
			bumped := Attempt{Seq: 1, TxHash: common.HexToHash("0xb1"), RawTx: []byte{0x02, 0x01}, CreatedAt: journalEpoch.Add(time.Minute)}
			if err := j.AddAttempt(ctx, rows[0].AuthorizationKey, bumped); err != nil {
				t.Fatalf("AddAttempt: %v", err)
			}
			if err := j.AddAttempt(ctx, rows[0].AuthorizationKey, Attempt{Seq: 1, TxHash: common.HexToHash("0xb2"), RawTx: []byte{1}}); !errors.Is(err, ErrAttemptConflict) {
				t.Errorf("AddAttempt with a taken sequence = %v, want ErrAttemptConflict", err)
			}
			if err := j.AddAttempt(ctx, "no such key", Attempt{Seq: 1, TxHash: common.HexToHash("0xb3"), RawTx: []byte{1}}); !errors.Is(err, ErrNotFound) {
				t.Errorf("AddAttempt to an unknown row = %v, want ErrNotFound", err)
			}
			if err := j.UpdateSettled(ctx, rows[0].AuthorizationKey, StateConfirmed, "", bumped.TxHash); err != nil {
				t.Fatalf("UpdateSettled: %v", err)
			}
			as, err = j.Attempts(ctx, rows[0].AuthorizationKey)
			if err != nil || len(as) != 2 || as[0].Settled || !as[1].Settled || as[1].TxHash != bumped.TxHash ||
				!as[1].CreatedAt.Equal(bumped.CreatedAt) {
				t.Fatalf("Attempts = %+v, %v; want the replacement second and settled", as, err)
			}
			if err := j.AddAttempt(ctx, rows[0].AuthorizationKey, Attempt{Seq: 2, TxHash: common.HexToHash("0xb4"), RawTx: []byte{1}}); !errors.Is(err, ErrAttemptConflict) {
				t.Errorf("AddAttempt to a confirmed row = %v, want ErrAttemptConflict", err)
			}
			// The old way of closing still works and records no attempt.
			if err := j.Update(ctx, rows[1].AuthorizationKey, StateFailed, "dropped"); err != nil {
				t.Fatalf("Update: %v", err)
			}
			if got, err := j.Get(ctx, rows[1].AuthorizationKey); err != nil || got.State != StateFailed || got.TxHash != rows[1].TxHash {
				t.Errorf("Get = %+v, %v", got, err)
			}
			var settled sql.NullString
			if err := j.db.QueryRowContext(ctx, `SELECT settled_tx_hash FROM settlements WHERE authorization_key = $1`,
				rows[1].AuthorizationKey).Scan(&settled); err != nil || settled.String != "" {
				t.Errorf("settled_tx_hash of a row closed by Update = %q, %v; want empty", settled.String, err)
			}
		})
	}
}

// durableChildEnv names the database a child process of TestSQLiteGroupCommitIsDurable
// writes to.
const durableChildEnv = "X402GATE_JOURNAL_DURABLE_CHILD"

// TestSQLiteGroupCommitIsDurable: with writes grouped into shared transactions, a Prepare
// that has returned is on disk all the same. A child process prepares rows from 16
// goroutines without end and prints each one whose Prepare returned; the test kills it
// (SIGKILL, no Close) after 64 of them and reopens the database: every row the child
// printed is there. The connections run synchronous=FULL, so a committed row also
// survives a power loss (docs/facilitator.md#settlement-journal).
func TestSQLiteGroupCommitIsDurable(t *testing.T) {
	if path := os.Getenv(durableChildEnv); path != "" {
		durableChild(path)
		return
	}
	path := filepath.Join(t.TempDir(), "journal.db")
	cmd := exec.Command(os.Args[0], "-test.run=^TestSQLiteGroupCommitIsDurable$", "-test.count=1")
	cmd.Env = append(os.Environ(), durableChildEnv+"="+path)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var acked []int
	sc := bufio.NewScanner(out)
	for len(acked) < 64 && sc.Scan() {
		var i int
		if _, err := fmt.Sscanf(sc.Text(), "prepared %d", &i); err == nil {
			acked = append(acked, i)
		}
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if len(acked) < 64 {
		t.Fatalf("the child acknowledged %d prepares before it stopped, want 64", len(acked))
	}
	j, err := OpenSQLite(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	for _, i := range acked {
		want := testSettlement(i, journalEpoch)
		if got, err := j.Get(context.Background(), want.AuthorizationKey); err != nil || got.TxHash != want.TxHash {
			t.Errorf("row %d, acknowledged before the kill: tx %s, %v", i, got.TxHash, err)
		}
	}
	var sync int
	if err := j.db.QueryRowContext(context.Background(), `PRAGMA synchronous`).Scan(&sync); err != nil || sync != 2 {
		t.Errorf("PRAGMA synchronous = %d, %v; want 2 (FULL)", sync, err)
	}
}

// durableChild is the child of TestSQLiteGroupCommitIsDurable: it prepares rows until it
// is killed, printing each one once its Prepare returned.
func durableChild(path string) {
	j, err := OpenSQLite(context.Background(), path)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	var mu sync.Mutex
	var next atomic.Int64
	for range 16 {
		go func() {
			for {
				i := int(next.Add(1))
				if err := j.Prepare(context.Background(), testSettlement(i, journalEpoch)); err != nil {
					fmt.Fprintln(os.Stderr, err)
					os.Exit(2)
				}
				mu.Lock()
				fmt.Printf("prepared %d\n", i)
				mu.Unlock()
			}
		}()
	}
	select {}
}
