// Package store is the verdict service's durable state: agents, their API keys (hashed)
// and wallets, versioned policies, and every transaction with its verdict (the audit
// trail). It keeps them in SQLite (one instance, the embedded default) or PostgreSQL
// (several instances) through internal/sqldb, with one schema in numbered migrations.
//
// Every write is one transaction: a method that returns nil has made its change durable.
// Policy versions are immutable once written, and a transaction's verdict is immutable
// once terminal. No error carries a database password or a key hash.
package store

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/ethereum/go-ethereum/common"

	"github.com/x402gate/x402gate/internal/sqldb"
)

// Errors a caller tells apart; every error of a Store that means one of them wraps it.
var (
	// ErrNotFound: no such agent, key (or the key is revoked), wallet, policy or
	// transaction.
	ErrNotFound = errors.New("not found")
	// ErrConflict: the write collides with a row that exists (an agent name, a key id or
	// hash, a wallet another agent owns, a transaction id or request hash).
	ErrConflict = errors.New("conflict")
	// ErrDuplicateTrace: the agent already has a transaction with this non-empty trace id.
	ErrDuplicateTrace = errors.New("duplicate trace id")
	// ErrTerminal: the transaction's verdict is terminal and cannot change.
	ErrTerminal = errors.New("transaction is terminal")
	// ErrInvalid: an argument the store refuses before writing (empty, malformed, not a
	// JSON object, not valid UTF-8).
	ErrInvalid = errors.New("invalid argument")
)

// Transaction statuses: a record is created PENDING and moves once to APPROVED or
// REJECTED.
const (
	StatusPending  = "PENDING"
	StatusApproved = "APPROVED"
	StatusRejected = "REJECTED"
)

// Agent is one agent: the owner of keys, wallets, policies and transactions.
type Agent struct {
	ID        string // assigned by CreateAgent, a UUID
	Name      string // unique
	CreatedAt time.Time
}

// Key is an API key of an agent. The store holds only the SHA-256 of the key.
type Key struct {
	ID        string // public key id chosen by the caller, e.g. "k_" + 12 base32 characters; unique
	AgentID   string
	Scopes    []string
	CreatedAt time.Time
	RevokedAt *time.Time // nil while the key is valid
	// LastUsedAt is when the key last authenticated, as the instances wrote it: each at
	// most once per key per minute, so it may be up to that much behind (KeyUsed); nil
	// when it never did. A key KeyByHash remembers keeps the value it was read with.
	LastUsedAt *time.Time
}

// Wallet is an address an agent registered on one chain. An address belongs to at most
// one agent per chain.
type Wallet struct {
	AgentID   string
	ChainID   int64
	Address   common.Address
	CreatedAt time.Time
}

// PolicyVersion is one immutable version of an agent's policy.
type PolicyVersion struct {
	AgentID   string
	Version   int64 // 1, 2, ... per agent; only grows
	Document  json.RawMessage
	CreatedAt time.Time
	Actor     string // who set it, for the audit trail
}

// Transaction is one submitted transaction and, once evaluated, its verdict.
type Transaction struct {
	ID          string // a UUID; CreateTransaction assigns one when empty
	RequestHash string // unique
	AgentID     string
	Escrow      common.Address
	ChainID     int64
	Prompt      string
	Description string
	ProposedTx  json.RawMessage // a JSON object
	Metadata    json.RawMessage // a JSON object, or nil
	ContextLogs json.RawMessage // a JSON object, or nil
	TraceID     string          // metadata.traceId; unique per agent when not empty
	Status      string          // StatusPending, StatusApproved or StatusRejected
	Verdict     json.RawMessage // nil until terminal
	// PolicyVersion is the policy version the verdict was evaluated against; nil while
	// pending, and when the agent had no policy.
	PolicyVersion *int64
	CreatedAt     time.Time
	UpdatedAt     time.Time
}

// Store is the verdict service's store on one database. It is safe for concurrent use,
// and several Stores (instances) may share one PostgreSQL database.
type Store struct {
	db      *sqldb.DB
	stmts   statements
	writes  *committer
	keys    *keyCache
	wallets *immutableCache[walletKey, string]
	// verdicts holds terminal verdicts by request hash, for VerdictByHash.
	verdicts *immutableCache[string, TransactionVerdict]
}

// Connection pools (docs/reliability.md#resource-limits): every connection stays open
// once opened, up to the bound, so that a busy service never pays for a new one. SQLite
// runs in WAL mode, where readers never wait for the writer: its pool is the read pool,
// beside the one connection the group commit writes on at a time; 8 suffice for 2 cores.
// PostgreSQL keeps sqldb's bound.
const (
	sqliteConns   = 8
	postgresConns = sqldb.MaxOpenConns
)

// statements are the hot queries, prepared once per Store (and by database/sql once
// per connection).
type statements struct {
	insertTransaction, completeTransaction, transactionByHash, verdictByHash *sql.Stmt
	keyByHash, walletOwner, activePolicy, activePolicyVersion                *sql.Stmt
	// insertSQL and completeSQL are the group commit's statements in the store's dialect,
	// which a PostgreSQL batch sends as text (pgx prepares them once per connection).
	insertSQL, completeSQL string
}

func (s *Store) prepare(ctx context.Context) error {
	s.stmts.insertSQL = dialectSQL(s.db.Dialect.Name, insertTransactionSQL)
	s.stmts.completeSQL = dialectSQL(s.db.Dialect.Name, completeTransactionSQL)
	for _, p := range []struct {
		stmt **sql.Stmt
		q    string
	}{
		{&s.stmts.insertTransaction, insertTransactionSQL},
		{&s.stmts.completeTransaction, completeTransactionSQL},
		{&s.stmts.transactionByHash, `SELECT ` + transactionColumns + ` FROM transactions WHERE request_hash = $1`},
		{&s.stmts.verdictByHash, `SELECT agent_id, status, verdict FROM transactions WHERE request_hash = $1`},
		{&s.stmts.keyByHash, `SELECT ` + keyColumns + ` FROM api_keys WHERE hash = $1 AND revoked_at IS NULL`},
		{&s.stmts.walletOwner, walletSelectSQL},
		{&s.stmts.activePolicy, `SELECT ` + policyColumns + ` FROM policy_versions WHERE agent_id = $1 ORDER BY version DESC LIMIT 1`},
		{&s.stmts.activePolicyVersion, `SELECT version FROM policy_versions WHERE agent_id = $1 ORDER BY version DESC LIMIT 1`},
	} {
		st, err := s.db.PrepareContext(ctx, dialectSQL(s.db.Dialect.Name, p.q))
		if err != nil {
			return s.fail("prepare", err)
		}
		*p.stmt = st
	}
	return nil
}

// Open migrates db to this build's schema and returns a Store on it. The Store owns db:
// Close closes it, and so does a failed Open. Concurrent Opens of one database are safe.
func Open(ctx context.Context, db *sqldb.DB) (*Store, error) {
	if db == nil {
		return nil, errors.New("verdict store: nil database")
	}
	if err := db.Migrate(ctx, dialectSchema(db.Dialect.Name)); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("verdict store: %w", err)
	}
	conns := postgresConns
	if db.Dialect.Name == sqldb.SQLite.Name {
		conns = sqliteConns
	}
	db.SetMaxOpenConns(conns)
	db.SetMaxIdleConns(conns)
	s := &Store{db: db, keys: newKeyCache(),
		wallets:  newImmutableCache[walletKey, string](walletCacheSize),
		verdicts: newImmutableCache[string, TransactionVerdict](verdictCacheSize)}
	if err := s.prepare(ctx); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("verdict store: %w", err)
	}
	s.writes = newCommitter(db.DB, db.Dialect.Name == sqldb.Postgres.Name)
	return s, nil
}

// Close closes the database, once the writes under way have committed; later writes fail.
func (s *Store) Close() error {
	s.writes.stop()
	if err := s.db.Close(); err != nil {
		return s.fail("close", err)
	}
	return nil
}

// Ping checks the database answers, for a health check.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.db.PingContext(ctx); err != nil {
		return s.fail("ping", err)
	}
	return nil
}

// fail wraps a database error with op, scrubbing the password from its text and keeping
// context cancellation visible to errors.Is.
func (s *Store) fail(op string, err error) error {
	return fmt.Errorf("%s verdict store %s: %w", s.db.Dialect.Name, op, s.db.Err(err))
}

// invalid is an ErrInvalid naming what was refused.
func invalid(op, format string, args ...any) error {
	return fmt.Errorf("verdict store %s: %s: %w", op, fmt.Sprintf(format, args...), ErrInvalid)
}

// inTx runs f in one transaction and commits it; any error rolls it back.
func (s *Store) inTx(ctx context.Context, op string, f func(tx *sql.Tx) error) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return s.fail(op, err)
	}
	defer func() { _ = tx.Rollback() }()
	if err := f(tx); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return s.fail(op, err)
	}
	return nil
}

// forUpdate is the row-lock suffix of a SELECT that serialises writers of one agent
// across instances: PostgreSQL's FOR NO KEY UPDATE (which, unlike FOR UPDATE, does not
// block inserts that reference the agent). SQLite needs none, as its transactions begin
// IMMEDIATE, holding the database's write lock.
func (s *Store) forUpdate() string {
	if s.db.Dialect.Name == sqldb.Postgres.Name {
		return " FOR NO KEY UPDATE"
	}
	return ""
}

// newUUID returns a random (version 4) UUID.
func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// micros is t as stored: unix microseconds. Both engines store and order it the same way.
func micros(t time.Time) int64 { return t.UnixMicro() }

// fromMicros is a stored time, in UTC.
func fromMicros(us int64) time.Time { return time.UnixMicro(us).UTC() }

// now is the current time at the stored resolution.
func now() time.Time { return time.Now().UTC().Truncate(time.Microsecond) }

// storableText reports whether v can be stored in a text column of both engines:
// PostgreSQL refuses invalid UTF-8 and NUL.
func storableText(v string) bool {
	return utf8.ValidString(v) && !strings.ContainsRune(v, 0)
}

// jsonObject checks that doc is one JSON object in storable text.
func jsonObject(doc json.RawMessage) bool {
	t := strings.TrimSpace(string(doc))
	return strings.HasPrefix(t, "{") && json.Valid(doc) && storableText(t)
}

// nullJSON is doc as a nullable column value.
func nullJSON(doc json.RawMessage) any {
	if doc == nil {
		return nil
	}
	return string(doc)
}

// rawJSON is a nullable column read back; NULL is nil.
func rawJSON(v sql.NullString) json.RawMessage {
	if !v.Valid {
		return nil
	}
	return json.RawMessage(v.String)
}

// hexAddress is an address as stored: 0x and lower-case hex.
func hexAddress(a common.Address) string { return strings.ToLower(a.Hex()) }

// parseAddress reads a stored address.
func parseAddress(column, v string) (common.Address, error) {
	if !common.IsHexAddress(v) {
		return common.Address{}, fmt.Errorf("bad %s address in the verdict store", column)
	}
	return common.HexToAddress(v), nil
}
