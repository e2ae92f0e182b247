package facilitator

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
)

// ErrInvalidTransition is returned by Update for a move the settlement lifecycle does not
// allow: nothing returns to StatePrepared, nothing leaves StateConfirmed, and a failed
// settlement can only turn out confirmed (a receipt found late). Repeating the current
// state is allowed, so two reconcilers may record the same outcome.
var ErrInvalidTransition = errors.New("settlement state transition not allowed")

// journalSources lists, for each target state, the states Update may move from.
var journalSources = map[SettlementState][]SettlementState{
	StateBroadcast: {StatePrepared, StateBroadcast},
	StateConfirmed: {StatePrepared, StateBroadcast, StateFailed, StateConfirmed},
	StateFailed:    {StatePrepared, StateBroadcast, StateFailed},
}

// journalMigrationsTable records applied schema versions. It is named for this package so
// that another component migrating the same PostgreSQL database cannot collide with it.
const journalMigrationsTable = "facilitator_schema_migrations"

// journalMigrations is the schema, one entry per version, shared by both drivers. {{blob}}
// is the binary column type of the dialect. Times are unix microseconds (UTC), which both
// engines store and order the same way.
var journalMigrations = []struct {
	version int64
	stmts   []string
}{
	{1, []string{
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
}

// sqlDialect is what differs between the two engines.
type sqlDialect struct {
	name     string
	blobType string
	// lock serialises migrations across processes inside tx; nil when BEGIN already does.
	lock func(ctx context.Context, tx *sql.Tx) error
}

// SQLJournal is the settlement Journal on database/sql: SQLite (OpenSQLiteJournal) for one
// instance, PostgreSQL (OpenPostgresJournal) shared by several. Its schema is migrated at
// Open. The unique authorization key makes Prepare the last guard against broadcasting
// one authorization twice, across every instance that shares the database. No error
// carries the database password.
type SQLJournal struct {
	db      *sql.DB
	dialect sqlDialect
	secret  string
}

func newSQLJournal(ctx context.Context, db *sql.DB, d sqlDialect, secret string) (*SQLJournal, error) {
	j := &SQLJournal{db: db, dialect: d, secret: secret}
	if err := db.PingContext(ctx); err != nil {
		_ = db.Close()
		return nil, j.fail("open", err)
	}
	if err := j.migrate(ctx); err != nil {
		_ = db.Close()
		return nil, err
	}
	return j, nil
}

// fail wraps a database error with op, scrubbing the password from its text and keeping
// context cancellation visible to errors.Is.
func (j *SQLJournal) fail(op string, err error) error {
	msg := redactSecret(err.Error(), j.secret)
	for _, ctxErr := range []error{context.Canceled, context.DeadlineExceeded} {
		if errors.Is(err, ctxErr) {
			return fmt.Errorf("%s journal %s: %s: %w", j.dialect.name, op, msg, ctxErr)
		}
	}
	return fmt.Errorf("%s journal %s: %s", j.dialect.name, op, msg)
}

// migrate applies the missing schema versions in one transaction, under the dialect's
// lock, so concurrent Opens of one database apply each version once. It refuses a
// database migrated by a newer build.
func (j *SQLJournal) migrate(ctx context.Context) error {
	tx, err := j.db.BeginTx(ctx, nil)
	if err != nil {
		return j.fail("migrate", err)
	}
	defer func() { _ = tx.Rollback() }()
	if j.dialect.lock != nil {
		if err := j.dialect.lock(ctx, tx); err != nil {
			return j.fail("migrate lock", err)
		}
	}
	if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS `+journalMigrationsTable+` (
		version    BIGINT PRIMARY KEY,
		applied_at BIGINT NOT NULL
	)`); err != nil {
		return j.fail("migrate", err)
	}
	var current int64
	if err := tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM `+journalMigrationsTable).Scan(&current); err != nil {
		return j.fail("migrate", err)
	}
	latest := journalMigrations[len(journalMigrations)-1].version
	if current > latest {
		return fmt.Errorf("%s journal migrate: schema version %d is newer than this build's %d", j.dialect.name, current, latest)
	}
	for _, m := range journalMigrations {
		if m.version <= current {
			continue
		}
		for _, stmt := range m.stmts {
			if _, err := tx.ExecContext(ctx, strings.ReplaceAll(stmt, "{{blob}}", j.dialect.blobType)); err != nil {
				return j.fail(fmt.Sprintf("migrate to version %d", m.version), err)
			}
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO `+journalMigrationsTable+` (version, applied_at) VALUES ($1, $2)`,
			m.version, time.Now().UnixMicro()); err != nil {
			return j.fail("migrate", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return j.fail("migrate", err)
	}
	return nil
}

const settlementColumns = `authorization_key, payment_key, network, asset, payer, pay_to, amount, nonce,
	tx_hash, raw_tx, sender_nonce, state, reason, created_at, updated_at`

// Prepare inserts s in StatePrepared (whatever s.State says), before anything is
// broadcast. It returns ErrDuplicateSettlement when a row for s.AuthorizationKey exists,
// whatever its state: one authorization is broadcast once. A zero CreatedAt is now.
func (j *SQLJournal) Prepare(ctx context.Context, s Settlement) error {
	if s.AuthorizationKey == "" {
		return errors.New("journal prepare: empty authorization key")
	}
	if s.Amount == nil || s.Amount.Sign() < 0 {
		return fmt.Errorf("journal prepare %s: amount missing or negative", s.AuthorizationKey)
	}
	if s.SenderNonce > math.MaxInt64 {
		return fmt.Errorf("journal prepare %s: sender nonce %d out of range", s.AuthorizationKey, s.SenderNonce)
	}
	created := s.CreatedAt
	if created.IsZero() {
		created = time.Now()
	}
	raw := s.RawTx
	if raw == nil {
		raw = []byte{}
	}
	res, err := j.db.ExecContext(ctx, `INSERT INTO settlements (`+settlementColumns+`)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)
		ON CONFLICT (authorization_key) DO NOTHING`,
		s.AuthorizationKey, s.PaymentKey, s.Network,
		journalAddress(s.Asset), journalAddress(s.Payer), journalAddress(s.PayTo),
		s.Amount.String(), "0x"+hex.EncodeToString(s.Nonce[:]), strings.ToLower(s.TxHash.Hex()),
		raw, int64(s.SenderNonce), string(StatePrepared), s.Reason,
		created.UnixMicro(), created.UnixMicro())
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

func journalAddress(a common.Address) string { return strings.ToLower(a.Hex()) }

// Update moves the row of authorizationKey to state, recording reason. It returns
// ErrSettlementNotFound for an unknown key and ErrInvalidTransition for a move the
// lifecycle forbids (see ErrInvalidTransition).
func (j *SQLJournal) Update(ctx context.Context, authorizationKey string, state SettlementState, reason string) error {
	sources, ok := journalSources[state]
	if !ok {
		return fmt.Errorf("journal update %s to %q: %w", authorizationKey, state, ErrInvalidTransition)
	}
	in := make([]string, len(sources))
	for i, src := range sources {
		in[i] = "'" + string(src) + "'" // our own constants, never input
	}
	res, err := j.db.ExecContext(ctx, `UPDATE settlements SET state = $1, reason = $2, updated_at = $3
		WHERE authorization_key = $4 AND state IN (`+strings.Join(in, ", ")+`)`,
		string(state), reason, time.Now().UnixMicro(), authorizationKey)
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
	err = j.db.QueryRowContext(ctx, `SELECT state FROM settlements WHERE authorization_key = $1`, authorizationKey).Scan(&from)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("journal update %s: %w", authorizationKey, ErrSettlementNotFound)
	}
	if err != nil {
		return j.fail("update "+authorizationKey, err)
	}
	return fmt.Errorf("journal update %s from %s to %s: %w", authorizationKey, from, state, ErrInvalidTransition)
}

// Get returns the row of authorizationKey, or ErrSettlementNotFound.
func (j *SQLJournal) Get(ctx context.Context, authorizationKey string) (Settlement, error) {
	row := j.db.QueryRowContext(ctx, `SELECT `+settlementColumns+` FROM settlements WHERE authorization_key = $1`, authorizationKey)
	s, err := scanSettlement(row)
	if errors.Is(err, sql.ErrNoRows) {
		return Settlement{}, fmt.Errorf("journal get %s: %w", authorizationKey, ErrSettlementNotFound)
	}
	if err != nil {
		return Settlement{}, j.fail("get "+authorizationKey, err)
	}
	return s, nil
}

// Unfinished returns every row in StatePrepared or StateBroadcast, oldest first (ties in
// authorization key order), for reconciliation.
func (j *SQLJournal) Unfinished(ctx context.Context) ([]Settlement, error) {
	rows, err := j.db.QueryContext(ctx, `SELECT `+settlementColumns+` FROM settlements
		WHERE state IN ('prepared', 'broadcast') ORDER BY created_at, authorization_key`)
	if err != nil {
		return nil, j.fail("unfinished", err)
	}
	defer rows.Close()
	var out []Settlement
	for rows.Next() {
		s, err := scanSettlement(rows)
		if err != nil {
			return nil, j.fail("unfinished", err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		return nil, j.fail("unfinished", err)
	}
	return out, nil
}

// Close closes the database.
func (j *SQLJournal) Close() error {
	if err := j.db.Close(); err != nil {
		return j.fail("close", err)
	}
	return nil
}

// scanSettlement reads one row of settlementColumns, checking every encoded field.
func scanSettlement(row interface{ Scan(...any) error }) (Settlement, error) {
	var (
		s                                          Settlement
		asset, payer, payTo, amount, nonce, txHash string
		state                                      string
		senderNonce, createdMicros, updatedMicros  int64
	)
	if err := row.Scan(&s.AuthorizationKey, &s.PaymentKey, &s.Network, &asset, &payer, &payTo, &amount, &nonce,
		&txHash, &s.RawTx, &senderNonce, &state, &s.Reason, &createdMicros, &updatedMicros); err != nil {
		return Settlement{}, err
	}
	var err error
	if s.Asset, err = journalParseAddress("asset", asset); err != nil {
		return Settlement{}, err
	}
	if s.Payer, err = journalParseAddress("payer", payer); err != nil {
		return Settlement{}, err
	}
	if s.PayTo, err = journalParseAddress("pay_to", payTo); err != nil {
		return Settlement{}, err
	}
	var ok bool
	if s.Amount, ok = new(big.Int).SetString(amount, 10); !ok || s.Amount.Sign() < 0 {
		return Settlement{}, fmt.Errorf("row %s: bad amount", s.AuthorizationKey)
	}
	if b, err := journalParseHex(nonce, 32); err != nil {
		return Settlement{}, fmt.Errorf("row %s: bad nonce: %w", s.AuthorizationKey, err)
	} else {
		copy(s.Nonce[:], b)
	}
	if b, err := journalParseHex(txHash, common.HashLength); err != nil {
		return Settlement{}, fmt.Errorf("row %s: bad tx_hash: %w", s.AuthorizationKey, err)
	} else {
		s.TxHash = common.BytesToHash(b)
	}
	if senderNonce < 0 {
		return Settlement{}, fmt.Errorf("row %s: negative sender nonce", s.AuthorizationKey)
	}
	s.SenderNonce = uint64(senderNonce)
	s.State = SettlementState(state)
	s.CreatedAt = time.UnixMicro(createdMicros).UTC()
	s.UpdatedAt = time.UnixMicro(updatedMicros).UTC()
	if s.RawTx == nil {
		s.RawTx = []byte{}
	}
	return s, nil
}

func journalParseAddress(column, v string) (common.Address, error) {
	if !common.IsHexAddress(v) {
		return common.Address{}, fmt.Errorf("bad %s address in journal", column)
	}
	return common.HexToAddress(v), nil
}

func journalParseHex(v string, size int) ([]byte, error) {
	b, err := hex.DecodeString(strings.TrimPrefix(v, "0x"))
	if err != nil {
		return nil, err
	}
	if len(b) != size {
		return nil, fmt.Errorf("%d bytes, want %d", len(b), size)
	}
	return b, nil
}

var _ Journal = (*SQLJournal)(nil)
