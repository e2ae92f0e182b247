package journal

import (
	"context"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"math/big"
	"strings"
	"time"

	"github.com/ethereum/go-ethereum/common"

	"github.com/x402gate/x402gate/internal/sqldb"
)

// schema is the journal's tables, one migration per version, shared by both drivers.
// {{blob}} is the binary column type of the dialect. Times are unix microseconds (UTC),
// which both engines store and order the same way. The version table is named for the
// facilitator so that another component migrating the same PostgreSQL database cannot
// collide with it; the lock key is "x402gfac" in ASCII.
var schema = sqldb.Schema{
	Table:   "facilitator_schema_migrations",
	LockKey: 0x7834303267666163,
	Migrations: []sqldb.Migration{
		{Version: 1, Statements: []string{
			`CREATE TABLE settlements (
			authorization_key TEXT PRIMARY KEY,
			payment_key       TEXT NOT NULL,
			network           TEXT NOT NULL,
			asset             TEXT NOT NULL,
			payer             TEXT NOT NULL,
			pay_to            TEXT NOT NULL,
			amount            TEXT NOT NULL,
			nonce             TEXT NOT NULL,
			tx_hash           TEXT NOT NULL,
			raw_tx            {{blob}} NOT NULL,
			sender_nonce      BIGINT NOT NULL,
			state             TEXT NOT NULL CHECK (state IN ('prepared', 'broadcast', 'confirmed', 'failed')),
			reason            TEXT NOT NULL DEFAULT '',
			created_at        BIGINT NOT NULL,
			updated_at        BIGINT NOT NULL
		)`,
			`CREATE INDEX settlements_state_created ON settlements (state, created_at)`,
		}},
		// Version 2: fee-bumped replacements. The settlements row keeps the first attempt
		// (sequence 0) in tx_hash and raw_tx; every replacement signed later, same sender
		// nonce and calldata with higher fees, is one settlement_attempts row (sequence 1, 2,
		// ...), written before it is broadcast. settled_tx_hash names the attempt whose
		// receipt closed the row ('' until then, and for rows closed by older builds).
		{Version: 2, Statements: []string{
			`CREATE TABLE settlement_attempts (
			authorization_key TEXT NOT NULL REFERENCES settlements (authorization_key),
			seq               BIGINT NOT NULL CHECK (seq > 0),
			tx_hash           TEXT NOT NULL,
			raw_tx            {{blob}} NOT NULL,
			created_at        BIGINT NOT NULL,
			PRIMARY KEY (authorization_key, seq)
		)`,
			`ALTER TABLE settlements ADD COLUMN settled_tx_hash TEXT NOT NULL DEFAULT ''`,
		}},
		// Version 3: the signer pool. sender is the address of the signer lane that signed the
		// row's transactions ('' for rows of older builds: reconcile reads it from raw_tx).
		{Version: 3, Statements: []string{
			`ALTER TABLE settlements ADD COLUMN sender TEXT NOT NULL DEFAULT ''`,
		}},
	},
}

// DB is the settlement Journal on database/sql: SQLite (OpenSQLite) for one instance,
// PostgreSQL (OpenPostgres) shared by several. Its schema is migrated at Open. The unique
// authorization key makes Prepare the last guard against broadcasting one authorization
// twice, across every instance that shares the database. No error carries the database
// password.
type DB struct {
	db    *sqldb.DB
	group *groupCommit // SQLite's writes; nil on PostgreSQL
}

// OpenSQLite opens (creating it and its parent directory if needed) the SQLite journal at
// path, the embedded default of a single instance, and migrates its schema. A row Prepare
// has written survives a crash before the broadcast it guards (see sqldb.OpenSQLite).
func OpenSQLite(ctx context.Context, path string) (*DB, error) {
	db, err := sqldb.OpenSQLite(ctx, path)
	if err != nil {
		return nil, fmt.Errorf("journal: %w", err)
	}
	return open(ctx, db)
}

// OpenPostgres connects to the PostgreSQL database at dsn (a postgres:// URL or key=value
// string, as pgx parses it), the journal shared by several instances, and migrates its
// schema. Concurrent Opens of one database are safe: migrations run in one transaction
// under an advisory lock. No error carries the DSN or its password.
func OpenPostgres(ctx context.Context, dsn string) (*DB, error) {
	db, err := sqldb.OpenPostgres(ctx, dsn)
	if err != nil {
		return nil, fmt.Errorf("journal: %w", err)
	}
	return open(ctx, db)
}

func open(ctx context.Context, db *sqldb.DB) (*DB, error) {
	if err := db.Migrate(ctx, schema); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("journal: %w", err)
	}
	j := &DB{db: db}
	if db.Dialect.Name == sqldb.SQLite.Name {
		j.group = &groupCommit{db: db, fail: j.fail, lead: make(chan struct{}, 1), laterBound: laterBound}
	}
	return j, nil
}

// fail wraps a database error with op, scrubbing the password from its text and keeping
// context cancellation visible to errors.Is.
func (j *DB) fail(op string, err error) error {
	return fmt.Errorf("%s journal %s: %w", j.db.Dialect.Name, op, j.db.Err(err))
}

const settlementColumns = `authorization_key, payment_key, network, asset, payer, pay_to, amount, nonce,
	tx_hash, raw_tx, sender_nonce, state, reason, created_at, updated_at`

// rowColumns are settlementColumns and the sender lane (version 3): what a row read
// selects and Prepare writes.
const rowColumns = settlementColumns + `, sender`

// Prepare inserts s in StatePrepared (whatever s.State says), before anything is
// broadcast. It returns ErrDuplicateSettlement when a row for s.AuthorizationKey exists,
// whatever its state: one authorization is broadcast once. A zero CreatedAt is now. It
// returns once the row is durable.
func (j *DB) Prepare(ctx context.Context, s Settlement) error {
	if err := checkSettlement(s); err != nil {
		return err
	}
	return j.write(ctx, false, func(ctx context.Context, q querier) error { return j.insert(ctx, q, s) })
}

// PrepareAll is Prepare of every row of rows, in one transaction: all of them are written,
// or none. When rows for some of the authorization keys exist, it writes nothing and
// returns a *DuplicatesError naming them (errors.Is ErrDuplicateSettlement). It returns
// once the rows are durable.
func (j *DB) PrepareAll(ctx context.Context, rows []Settlement) error {
	for _, s := range rows {
		if err := checkSettlement(s); err != nil {
			return err
		}
	}
	if len(rows) == 0 {
		return nil
	}
	return j.write(ctx, len(rows) > 1, func(ctx context.Context, q querier) error {
		var dup []int
		for i, s := range rows {
			err := j.insert(ctx, q, s)
			switch {
			case errors.Is(err, ErrDuplicateSettlement):
				dup = append(dup, i)
			case err != nil:
				return err
			}
		}
		if len(dup) > 0 {
			return &DuplicatesError{Index: dup}
		}
		return nil
	})
}

// DuplicatesError is PrepareAll's refusal: the rows at Index already exist. Nothing was
// written.
type DuplicatesError struct {
	Index []int
}

// Error says which rows are duplicated.
func (e *DuplicatesError) Error() string {
	return fmt.Sprintf("journal prepare: %d of the settlements are already journaled", len(e.Index))
}

// Is makes a DuplicatesError match ErrDuplicateSettlement.
func (e *DuplicatesError) Is(target error) bool { return target == ErrDuplicateSettlement }

func checkSettlement(s Settlement) error {
	if s.AuthorizationKey == "" {
		return errors.New("journal prepare: empty authorization key")
	}
	if s.Amount == nil || s.Amount.Sign() < 0 {
		return fmt.Errorf("journal prepare %s: amount missing or negative", s.AuthorizationKey)
	}
	if s.SenderNonce > math.MaxInt64 {
		return fmt.Errorf("journal prepare %s: sender nonce %d out of range", s.AuthorizationKey, s.SenderNonce)
	}
	return nil
}

// insert writes s as a new prepared row on q, or returns ErrDuplicateSettlement.
func (j *DB) insert(ctx context.Context, q querier, s Settlement) error {
	created := s.CreatedAt
	if created.IsZero() {
		created = time.Now()
	}
	raw := s.RawTx
	if raw == nil {
		raw = []byte{}
	}
	sender := ""
	if s.Sender != (common.Address{}) {
		sender = hexAddress(s.Sender)
	}
	res, err := q.ExecContext(ctx, `INSERT INTO settlements (`+rowColumns+`)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)
		ON CONFLICT (authorization_key) DO NOTHING`,
		s.AuthorizationKey, s.PaymentKey, s.Network,
		hexAddress(s.Asset), hexAddress(s.Payer), hexAddress(s.PayTo),
		s.Amount.String(), "0x"+hex.EncodeToString(s.Nonce[:]), strings.ToLower(s.TxHash.Hex()),
		raw, int64(s.SenderNonce), string(StatePrepared), s.Reason,
		created.UnixMicro(), created.UnixMicro(), sender)
	if err != nil {
		return j.fail("prepare "+s.AuthorizationKey, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return j.fail("prepare "+s.AuthorizationKey, err)
	}
	if n == 0 {
		return fmt.Errorf("journal prepare %s: %w", s.AuthorizationKey, ErrDuplicateSettlement)
	}
	return nil
}

// write runs op durably. On SQLite, op joins the next group commit (groupCommit). On
// PostgreSQL, which flushes concurrent commits together itself, op runs on the pool, in a
// transaction of its own when atomic (several statements that must land together).
func (j *DB) write(ctx context.Context, atomic bool, op writeOp) error {
	if j.group != nil {
		return j.group.do(ctx, op)
	}
	if !atomic {
		return op(ctx, j.db)
	}
	tx, err := j.db.BeginTx(ctx, nil)
	if err != nil {
		return j.fail("begin", err)
	}
	defer func() { _ = tx.Rollback() }()
	if err := op(ctx, tx); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return j.fail("commit", err)
	}
	return nil
}

func hexAddress(a common.Address) string { return strings.ToLower(a.Hex()) }

// Update moves the row of authorizationKey to state, recording reason. It returns
// ErrNotFound for an unknown key and ErrInvalidTransition for a move the
// lifecycle forbids (see ErrInvalidTransition).
func (j *DB) Update(ctx context.Context, authorizationKey string, state State, reason string) error {
	return j.update(ctx, authorizationKey, state, reason, nil)
}

// UpdateSettled is Update that also records txHash as the attempt that settled the row.
func (j *DB) UpdateSettled(ctx context.Context, authorizationKey string, state State, reason string, txHash common.Hash) error {
	return j.update(ctx, authorizationKey, state, reason, &txHash)
}

// UpdateLater is Update (settled nil) or UpdateSettled, without waiting for the write to
// be durable: on SQLite it joins the next group commit, the next write's fsync, or is
// committed on its own within a few milliseconds when no write comes; then gets its
// outcome. On PostgreSQL it runs as Update does, before UpdateLater returns. For the
// moves a crash may lose because Reconcile makes them again from the chain: to
// StateBroadcast, and to StateConfirmed (docs/facilitator.md#settlement-journal).
func (j *DB) UpdateLater(authorizationKey string, state State, reason string, settled *common.Hash, then func(error)) {
	op, err := j.updateOp(authorizationKey, state, reason, settled)
	switch {
	case err != nil:
	case state != StateBroadcast && state != StateConfirmed:
		err = fmt.Errorf("journal update %s to %q: only a move to %q or %q may be deferred", authorizationKey, state, StateBroadcast, StateConfirmed)
	case j.group != nil:
		j.group.later(op, then)
		return
	default:
		ctx, cancel := context.WithTimeout(context.Background(), groupCommitBound)
		defer cancel()
		err = j.write(ctx, false, op)
	}
	if then != nil {
		then(err)
	}
}

func (j *DB) update(ctx context.Context, authorizationKey string, state State, reason string, settled *common.Hash) error {
	op, err := j.updateOp(authorizationKey, state, reason, settled)
	if err != nil {
		return err
	}
	return j.write(ctx, false, op)
}

// updateOp is the write that moves the row of authorizationKey to state.
func (j *DB) updateOp(authorizationKey string, state State, reason string, settled *common.Hash) (writeOp, error) {
	sources, ok := transitions[state]
	if !ok {
		return nil, fmt.Errorf("journal update %s to %q: %w", authorizationKey, state, ErrInvalidTransition)
	}
	in := make([]string, len(sources))
	for i, src := range sources {
		in[i] = "'" + string(src) + "'" // our own constants, never input
	}
	set, args := ``, []any{string(state), reason, time.Now().UnixMicro(), authorizationKey}
	if settled != nil {
		set, args = `, settled_tx_hash = $5`, append(args, strings.ToLower(settled.Hex()))
	}
	return func(ctx context.Context, q querier) error {
		return j.updateOn(ctx, q, authorizationKey, state, set, in, args)
	}, nil
}

func (j *DB) updateOn(ctx context.Context, q querier, authorizationKey string, state State, set string, in []string, args []any) error {
	res, err := q.ExecContext(ctx, `UPDATE settlements SET state = $1, reason = $2, updated_at = $3`+set+`
		WHERE authorization_key = $4 AND state IN (`+strings.Join(in, ", ")+`)`, args...)
	if err != nil {
		return j.fail("update "+authorizationKey, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return j.fail("update "+authorizationKey, err)
	}
	if n > 0 {
		return nil
	}
	var from string
	err = q.QueryRowContext(ctx, `SELECT state FROM settlements WHERE authorization_key = $1`, authorizationKey).Scan(&from)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("journal update %s: %w", authorizationKey, ErrNotFound)
	}
	if err != nil {
		return j.fail("update "+authorizationKey, err)
	}
	return fmt.Errorf("journal update %s from %s to %s: %w", authorizationKey, from, state, ErrInvalidTransition)
}

// Get returns the row of authorizationKey, or ErrNotFound.
func (j *DB) Get(ctx context.Context, authorizationKey string) (Settlement, error) {
	row := j.db.QueryRowContext(ctx, `SELECT `+rowColumns+` FROM settlements WHERE authorization_key = $1`, authorizationKey)
	s, err := scanSettlement(row)
	if errors.Is(err, sql.ErrNoRows) {
		return Settlement{}, fmt.Errorf("journal get %s: %w", authorizationKey, ErrNotFound)
	}
	if err != nil {
		return Settlement{}, j.fail("get "+authorizationKey, err)
	}
	return s, nil
}

// Unfinished returns every row in StatePrepared or StateBroadcast, oldest first (ties in
// authorization key order), for reconciliation.
func (j *DB) Unfinished(ctx context.Context) ([]Settlement, error) {
	return j.list(ctx, "unfinished", `SELECT `+rowColumns+` FROM settlements
		WHERE state IN ('prepared', 'broadcast') ORDER BY created_at, authorization_key`)
}

// Close commits the deferred writes (UpdateLater) and closes the database.
func (j *DB) Close() error {
	if j.group != nil {
		j.group.flush()
	}
	if err := j.db.Close(); err != nil {
		return j.fail("close", err)
	}
	return nil
}

// scanSettlement reads one row of rowColumns, checking every encoded field.
func scanSettlement(row interface{ Scan(...any) error }) (Settlement, error) {
	var (
		s                                          Settlement
		asset, payer, payTo, amount, nonce, txHash string
		sender                                     string
		state                                      string
		senderNonce, createdMicros, updatedMicros  int64
	)
	if err := row.Scan(&s.AuthorizationKey, &s.PaymentKey, &s.Network, &asset, &payer, &payTo, &amount, &nonce,
		&txHash, &s.RawTx, &senderNonce, &state, &s.Reason, &createdMicros, &updatedMicros, &sender); err != nil {
		return Settlement{}, err
	}
	var err error
	if sender != "" {
		if s.Sender, err = parseAddress("sender", sender); err != nil {
			return Settlement{}, err
		}
	}
	if s.Asset, err = parseAddress("asset", asset); err != nil {
		return Settlement{}, err
	}
	if s.Payer, err = parseAddress("payer", payer); err != nil {
		return Settlement{}, err
	}
	if s.PayTo, err = parseAddress("pay_to", payTo); err != nil {
		return Settlement{}, err
	}
	var ok bool
	if s.Amount, ok = new(big.Int).SetString(amount, 10); !ok || s.Amount.Sign() < 0 {
		return Settlement{}, fmt.Errorf("row %s: bad amount", s.AuthorizationKey)
	}
	if b, err := parseHex(nonce, 32); err != nil {
		return Settlement{}, fmt.Errorf("row %s: bad nonce: %w", s.AuthorizationKey, err)
	} else {
		copy(s.Nonce[:], b)
	}
	if b, err := parseHex(txHash, common.HashLength); err != nil {
		return Settlement{}, fmt.Errorf("row %s: bad tx_hash: %w", s.AuthorizationKey, err)
	} else {
		s.TxHash = common.BytesToHash(b)
	}
	if senderNonce < 0 {
		return Settlement{}, fmt.Errorf("row %s: negative sender nonce", s.AuthorizationKey)
	}
	s.SenderNonce = uint64(senderNonce)
	s.State = State(state)
	s.CreatedAt = time.UnixMicro(createdMicros).UTC()
	s.UpdatedAt = time.UnixMicro(updatedMicros).UTC()
	if s.RawTx == nil {
		s.RawTx = []byte{}
	}
	return s, nil
}

func parseAddress(column, v string) (common.Address, error) {
	if !common.IsHexAddress(v) {
		return common.Address{}, fmt.Errorf("bad %s address in journal", column)
	}
	return common.HexToAddress(v), nil
}

func parseHex(v string, size int) ([]byte, error) {
	b, err := hex.DecodeString(strings.TrimPrefix(v, "0x"))
	if err != nil {
		return nil, err
	}
	if len(b) != size {
		return nil, fmt.Errorf("%d bytes, want %d", len(b), size)
	}
	return b, nil
}

var _ Journal = (*DB)(nil)
