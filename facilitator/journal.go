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

	"github.com/x402gate/x402gate/internal/redact"
)

// SettlementState is the lifecycle of one journaled settlement.
type SettlementState string

// Settlement states. A row is written as StatePrepared, with the signed transaction and its
// hash, before anything is broadcast; the outcome is written after.
const (
	StatePrepared  SettlementState = "prepared"  // signed, not yet known to be sent
	StateBroadcast SettlementState = "broadcast" // sent; receipt not yet seen
	StateConfirmed SettlementState = "confirmed" // receipt with status 1 and a matching Transfer
	StateFailed    SettlementState = "failed"    // reverted, dropped, or refused before broadcast
)

// Settlement is one row of the settlement journal.
type Settlement struct {
	AuthorizationKey string // PaymentKey.AuthorizationKey(); unique in the journal
	PaymentKey       string // PaymentKey.String()
	Network          string
	Asset            common.Address
	Payer            common.Address
	PayTo            common.Address
	Amount           *big.Int
	Nonce            [32]byte
	TxHash           common.Hash
	RawTx            []byte // the signed transaction, so reconcile can finish it without signing anew
	SenderNonce      uint64 // the facilitator account's nonce the transaction uses
	State            SettlementState
	Reason           string // internal reason code when failed
	CreatedAt        time.Time
	UpdatedAt        time.Time
}

// Errors of a Journal.
var (
	// ErrDuplicateSettlement: the journal already holds a settlement for this authorization.
	ErrDuplicateSettlement = errors.New("settlement already journaled for this authorization")
	// ErrSettlementNotFound: no row for the authorization key.
	ErrSettlementNotFound = errors.New("settlement not found")
)

// Journal is the durable settlement journal: SQLite embedded, PostgreSQL shared. One schema,
// migrated at Open.
type Journal interface {
	// Prepare inserts s in StatePrepared. It returns ErrDuplicateSettlement when a row for
	// s.AuthorizationKey exists, whatever its state: one authorization is broadcast once.
	Prepare(ctx context.Context, s Settlement) error
	// Update moves the row of authorizationKey to state, recording reason.
	Update(ctx context.Context, authorizationKey string, state SettlementState, reason string) error
	// Get returns the row of authorizationKey, or ErrSettlementNotFound.
	Get(ctx context.Context, authorizationKey string) (Settlement, error)
	// Unfinished returns every row in StatePrepared or StateBroadcast, oldest first.
	Unfinished(ctx context.Context) ([]Settlement, error)
	// Close releases the database.
	Close() error
}

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

// Attempt is one signed transaction of a settlement: the first (Seq 0, the row's TxHash
// and RawTx) or a fee-bumped replacement (Seq 1, 2, ...) with the same sender nonce and
// calldata and higher fees. At most one attempt of a row can ever be mined.
type Attempt struct {
	Seq       int
	TxHash    common.Hash
	RawTx     []byte
	CreatedAt time.Time
	// Settled marks the attempt whose receipt closed the row (see UpdateSettled).
	Settled bool
}

// ErrAttemptConflict is returned by AddAttempt when the attempt's sequence number is taken
// (another reconciler bumped the row first) or the row is no longer unfinished. Nothing
// may be broadcast then.
var ErrAttemptConflict = errors.New("settlement attempt conflicts with the journal")

// AttemptJournal is a Journal that also records fee-bumped replacements of a settlement's
// transaction. SQLJournal implements it. The engine bumps fees only when its Journal is an
// AttemptJournal; with another Journal a stuck transaction is only sent again as it is.
type AttemptJournal interface {
	Journal
	// AddAttempt records replacement a (a.Seq = the previous attempt's Seq + 1) of the
	// unfinished row of authorizationKey, before a is broadcast. It returns
	// ErrAttemptConflict when a.Seq is taken or the row is closed, ErrSettlementNotFound
	// for an unknown key.
	AddAttempt(ctx context.Context, authorizationKey string, a Attempt) error
	// Attempts returns every attempt of the row, the first (Seq 0) first.
	Attempts(ctx context.Context, authorizationKey string) ([]Attempt, error)
	// UpdateSettled is Update that also records txHash, the attempt whose receipt decided
	// the row.
	UpdateSettled(ctx context.Context, authorizationKey string, state SettlementState, reason string, txHash common.Hash) error
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
	// Version 2: fee-bumped replacements. The settlements row keeps the first attempt
	// (sequence 0) in tx_hash and raw_tx; every replacement signed later, same sender
	// nonce and calldata with higher fees, is one settlement_attempts row (sequence 1, 2,
	// ...), written before it is broadcast. settled_tx_hash names the attempt whose
	// receipt closed the row ('' until then, and for rows closed by older builds).
	{2, []string{
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
	msg := redact.Secrets(err.Error(), j.secret)
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
	return j.update(ctx, authorizationKey, state, reason, nil)
}

// UpdateSettled is Update that also records txHash as the attempt that settled the row.
func (j *SQLJournal) UpdateSettled(ctx context.Context, authorizationKey string, state SettlementState, reason string, txHash common.Hash) error {
	return j.update(ctx, authorizationKey, state, reason, &txHash)
}

func (j *SQLJournal) update(ctx context.Context, authorizationKey string, state SettlementState, reason string, settled *common.Hash) error {
	sources, ok := journalSources[state]
	if !ok {
		return fmt.Errorf("journal update %s to %q: %w", authorizationKey, state, ErrInvalidTransition)
	}
	in := make([]string, len(sources))
	for i, src := range sources {
		in[i] = "'" + string(src) + "'" // our own constants, never input
	}
	set, args := ``, []any{string(state), reason, time.Now().UnixMicro(), authorizationKey}
	if settled != nil {
		set, args = `, settled_tx_hash = $5`, append(args, strings.ToLower(settled.Hex()))
	}
	res, err := j.db.ExecContext(ctx, `UPDATE settlements SET state = $1, reason = $2, updated_at = $3`+set+`
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
	err = j.db.QueryRowContext(ctx, `SELECT state FROM settlements WHERE authorization_key = $1`, authorizationKey).Scan(&from)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("journal update %s: %w", authorizationKey, ErrSettlementNotFound)
	}
	if err != nil {
		return j.fail("update "+authorizationKey, err)
	}
	return fmt.Errorf("journal update %s from %s to %s: %w", authorizationKey, from, state, ErrInvalidTransition)
}

// AddAttempt records replacement a of the unfinished row of authorizationKey, before it
// is broadcast (see AttemptJournal).
func (j *SQLJournal) AddAttempt(ctx context.Context, authorizationKey string, a Attempt) error {
	if a.Seq <= 0 {
		return fmt.Errorf("journal add attempt %s: sequence %d, want > 0", authorizationKey, a.Seq)
	}
	if len(a.RawTx) == 0 {
		return fmt.Errorf("journal add attempt %s: empty raw transaction", authorizationKey)
	}
	created := a.CreatedAt
	if created.IsZero() {
		created = time.Now()
	}
	res, err := j.db.ExecContext(ctx, `INSERT INTO settlement_attempts (authorization_key, seq, tx_hash, raw_tx, created_at)
		SELECT s.authorization_key, $2, $3, $4, $5 FROM settlements s
		WHERE s.authorization_key = $1 AND s.state IN ('prepared', 'broadcast')
		ON CONFLICT (authorization_key, seq) DO NOTHING`,
		authorizationKey, int64(a.Seq), strings.ToLower(a.TxHash.Hex()), a.RawTx, created.UnixMicro())
	if err != nil {
		return j.fail("add attempt "+authorizationKey, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return j.fail("add attempt "+authorizationKey, err)
	}
	if n > 0 {
		return nil
	}
	if _, err := j.Get(ctx, authorizationKey); err != nil {
		return fmt.Errorf("journal add attempt: %w", err)
	}
	return fmt.Errorf("journal add attempt %s #%d: %w", authorizationKey, a.Seq, ErrAttemptConflict)
}

// Attempts returns every attempt of the row of authorizationKey, the first (Seq 0, the
// row's own transaction) first, or ErrSettlementNotFound.
func (j *SQLJournal) Attempts(ctx context.Context, authorizationKey string) ([]Attempt, error) {
	var (
		txHash, settled string
		raw             []byte
		created         int64
	)
	err := j.db.QueryRowContext(ctx, `SELECT tx_hash, raw_tx, created_at, settled_tx_hash FROM settlements
		WHERE authorization_key = $1`, authorizationKey).Scan(&txHash, &raw, &created, &settled)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("journal attempts %s: %w", authorizationKey, ErrSettlementNotFound)
	}
	if err != nil {
		return nil, j.fail("attempts "+authorizationKey, err)
	}
	first, err := journalAttempt(0, txHash, raw, created, settled)
	if err != nil {
		return nil, fmt.Errorf("journal attempts %s: %w", authorizationKey, err)
	}
	out := []Attempt{first}
	rows, err := j.db.QueryContext(ctx, `SELECT seq, tx_hash, raw_tx, created_at FROM settlement_attempts
		WHERE authorization_key = $1 ORDER BY seq`, authorizationKey)
	if err != nil {
		return nil, j.fail("attempts "+authorizationKey, err)
	}
	defer rows.Close()
	for rows.Next() {
		var seq int64
		if err := rows.Scan(&seq, &txHash, &raw, &created); err != nil {
			return nil, j.fail("attempts "+authorizationKey, err)
		}
		a, err := journalAttempt(int(seq), txHash, raw, created, settled)
		if err != nil {
			return nil, fmt.Errorf("journal attempts %s: %w", authorizationKey, err)
		}
		out = append(out, a)
	}
	if err := rows.Err(); err != nil {
		return nil, j.fail("attempts "+authorizationKey, err)
	}
	return out, nil
}

func journalAttempt(seq int, txHash string, raw []byte, created int64, settled string) (Attempt, error) {
	b, err := journalParseHex(txHash, common.HashLength)
	if err != nil {
		return Attempt{}, fmt.Errorf("attempt %d: bad tx_hash: %w", seq, err)
	}
	if raw == nil {
		raw = []byte{}
	}
	return Attempt{Seq: seq, TxHash: common.BytesToHash(b), RawTx: raw,
		CreatedAt: time.UnixMicro(created).UTC(), Settled: settled != "" && settled == txHash}, nil
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

var _ AttemptJournal = (*SQLJournal)(nil)
