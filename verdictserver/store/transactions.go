package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/ethereum/go-ethereum/common"
)

// maxHashLen bounds request hashes and trace ids.
const maxHashLen = 256

// CreateTransaction records t as PENDING, durably before it returns nil. It fills in
// what it assigns: an empty t.ID becomes a new UUID, t.Status PENDING, a zero t.CreatedAt
// now, t.UpdatedAt t.CreatedAt. It refuses (ErrInvalid) a record without a request hash,
// agent, escrow or positive chain id, a ProposedTx that is not a JSON object, a Metadata or
// ContextLogs that is neither nil nor a JSON object, a status other than PENDING, or a
// verdict. An unknown agent is ErrNotFound; a trace id the agent used before is
// ErrDuplicateTrace; a request hash or id that exists is ErrConflict.
func (s *Store) CreateTransaction(ctx context.Context, t *Transaction) error {
	if t == nil {
		return invalid("create transaction", "nil record")
	}
	op := "create transaction " + t.RequestHash
	switch {
	case t.Status != "" && t.Status != StatusPending:
		return invalid(op, "a new transaction is %s, not %q", StatusPending, t.Status)
	case t.Verdict != nil || t.PolicyVersion != nil:
		return invalid(op, "a new transaction has no verdict")
	}
	return s.create(ctx, op, t, StatusPending)
}

// CreateCompleted records t with its terminal verdict in one durable write, as
// CreateTransaction and then Complete would, without the PENDING record between them
// (docs/verdict-api.md#lifecycle): t.Status is StatusApproved or StatusRejected, t.Verdict
// a JSON object, t.PolicyVersion the version it was evaluated against (nil when the agent
// had none). It fills in and refuses what CreateTransaction does, except that the record is
// terminal (t.UpdatedAt is t.CreatedAt). The verdict is remembered for VerdictByHash.
func (s *Store) CreateCompleted(ctx context.Context, t *Transaction) error {
	if t == nil {
		return invalid("create completed transaction", "nil record")
	}
	op := "create completed transaction " + t.RequestHash
	if err := checkDecision(op, Decision{Status: t.Status, Verdict: t.Verdict, PolicyVersion: t.PolicyVersion}); err != nil {
		return err
	}
	if err := s.create(ctx, op, t, t.Status); err != nil {
		return err
	}
	s.verdicts.put(t.RequestHash, TransactionVerdict{AgentID: t.AgentID, Status: t.Status, Verdict: t.Verdict})
	return nil
}

// create writes t with status through the group commit, once its fields are checked.
func (s *Store) create(ctx context.Context, op string, t *Transaction, status string) error {
	switch {
	case t.RequestHash == "" || len(t.RequestHash) > maxHashLen || !storableText(t.RequestHash):
		return invalid("create transaction", "request hash must be 1 to %d bytes of text", maxHashLen)
	case t.AgentID == "":
		return invalid(op, "no agent")
	case t.ChainID <= 0:
		return invalid(op, "chain id must be positive")
	case t.Escrow == (common.Address{}):
		return invalid(op, "zero escrow address")
	case len(t.TraceID) > maxHashLen || !storableText(t.TraceID):
		return invalid(op, "trace id must be at most %d bytes of text", maxHashLen)
	case !storableText(t.ID) || !storableText(t.Prompt) || !storableText(t.Description):
		return invalid(op, "id, prompt and description must be valid UTF-8 without NUL")
	case !jsonObject(t.ProposedTx):
		return invalid(op, "proposedTx is not a JSON object")
	case t.Metadata != nil && !jsonObject(t.Metadata):
		return invalid(op, "metadata is not a JSON object")
	case t.ContextLogs != nil && !jsonObject(t.ContextLogs):
		return invalid(op, "contextLogs is not a JSON object")
	}
	rec := *t
	if rec.ID == "" {
		rec.ID = newUUID()
	}
	rec.Status = status
	if rec.CreatedAt.IsZero() {
		rec.CreatedAt = now()
	}
	rec.CreatedAt = rec.CreatedAt.UTC().Truncate(time.Microsecond)
	rec.UpdatedAt = rec.CreatedAt
	wrote, err := s.writes.do(ctx, s.stmts.insertTransaction, s.stmts.insertSQL,
		rec.ID, rec.RequestHash, rec.AgentID, hexAddress(rec.Escrow), rec.ChainID, rec.Prompt, rec.Description,
		string(rec.ProposedTx), nullJSON(rec.Metadata), nullJSON(rec.ContextLogs), rec.TraceID, rec.Status,
		micros(rec.CreatedAt), nullJSON(rec.Verdict), policyArg(rec.PolicyVersion))
	if err != nil {
		return s.fail(op, err)
	}
	if wrote {
		*t = rec
		return nil
	}
	// Nothing was written: say why. Rows are never removed, so what blocked the insert is
	// still there.
	if _, err := s.Agent(ctx, rec.AgentID); err != nil {
		return fmt.Errorf("verdict store %s: %w", op, err)
	}
	if rec.TraceID != "" {
		if _, err := s.TransactionByTrace(ctx, rec.AgentID, rec.TraceID); err == nil {
			return fmt.Errorf("verdict store %s: trace id %q: %w", op, rec.TraceID, ErrDuplicateTrace)
		} else if !errors.Is(err, ErrNotFound) {
			return fmt.Errorf("verdict store %s: %w", op, err)
		}
	}
	return fmt.Errorf("verdict store %s: id or request hash exists: %w", op, ErrConflict)
}

// insertTransactionSQL writes a PENDING record (a NULL verdict) or a terminal one, with its
// verdict's reason code beside it, as completeTransactionSQL keeps it.
var insertTransactionSQL = `INSERT INTO transactions (` + transactionColumns + `, reason_code)
	SELECT $1, $2, a.id, $4, $5, $6, $7, $8, $9, $10, $11, $12, $14, $15, $13, $13, ` + reasonOf("$14") + `
	FROM agents a WHERE a.id = $3
	ON CONFLICT DO NOTHING`

const transactionColumns = `id, request_hash, agent_id, escrow, chain_id, prompt, description, proposed_tx,
	metadata, context_logs, trace_id, status, verdict, policy_version, created_at, updated_at`

// TransactionByHash returns the transaction with requestHash, or ErrNotFound.
func (s *Store) TransactionByHash(ctx context.Context, requestHash string) (Transaction, error) {
	t, err := scanTransaction(s.stmts.transactionByHash.QueryRowContext(ctx, requestHash))
	return t, s.lookup("transaction "+requestHash, err)
}

// TransactionVerdict is what an approval-status read needs of a transaction.
type TransactionVerdict struct {
	AgentID string
	Status  string          // StatusPending, StatusApproved or StatusRejected
	Verdict json.RawMessage // nil while pending
}

// VerdictByHash returns the owner, status and verdict of the transaction requestHash, or
// ErrNotFound: TransactionByHash without the request's documents. A terminal verdict never
// changes, so the Store remembers the ones it read (verdictCacheSize) and answers them
// again without the database; a PENDING record is read anew each time. The Verdict is
// shared: read only.
func (s *Store) VerdictByHash(ctx context.Context, requestHash string) (TransactionVerdict, error) {
	if v, ok := s.verdicts.get(requestHash); ok {
		return v, nil
	}
	var v TransactionVerdict
	// A NULL verdict scans as nil; a stored one is copied once, from the driver's buffer.
	err := s.stmts.verdictByHash.QueryRowContext(ctx, requestHash).Scan(&v.AgentID, &v.Status, (*[]byte)(&v.Verdict))
	if err != nil {
		return TransactionVerdict{}, s.lookup("verdict of "+requestHash, err)
	}
	if v.Status != StatusPending {
		s.verdicts.put(requestHash, v)
	}
	return v, nil
}

// lookup is the error of a one-row read: ErrNotFound for no row.
func (s *Store) lookup(op string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, sql.ErrNoRows):
		return fmt.Errorf("verdict store %s: %w", op, ErrNotFound)
	default:
		return s.fail(op, err)
	}
}

// TransactionByTrace returns the agent's transaction whose trace id is traceID, or
// ErrNotFound (always for an empty traceID).
func (s *Store) TransactionByTrace(ctx context.Context, agentID, traceID string) (Transaction, error) {
	op := fmt.Sprintf("transaction with trace id %q", traceID)
	if traceID == "" {
		return Transaction{}, fmt.Errorf("verdict store %s: %w", op, ErrNotFound)
	}
	return s.transactionWhere(ctx, op, `agent_id = $1 AND trace_id = $2`, agentID, traceID)
}

func (s *Store) transactionWhere(ctx context.Context, op, where string, args ...any) (Transaction, error) {
	t, err := scanTransaction(s.db.QueryRowContext(ctx, `SELECT `+transactionColumns+` FROM transactions WHERE `+where, args...))
	if errors.Is(err, sql.ErrNoRows) {
		return Transaction{}, fmt.Errorf("verdict store %s: %w", op, ErrNotFound)
	}
	if err != nil {
		return Transaction{}, s.fail(op, err)
	}
	return t, nil
}

// Complete records the terminal verdict of the PENDING transaction requestHash: status
// (StatusApproved or StatusRejected), the verdict (a JSON object) and the policy version
// it was evaluated against (nil when the agent had none). It moves a record only from
// PENDING, in one statement, so of concurrent Completes exactly one wins; a terminal
// record is immutable and any later Complete is ErrTerminal. An unknown hash is
// ErrNotFound.
func (s *Store) Complete(ctx context.Context, requestHash string, status string, verdictJSON json.RawMessage, policyVersion *int64) error {
	op := "complete " + requestHash
	if status != StatusApproved && status != StatusRejected {
		return invalid(op, "status %q is not terminal", status)
	}
	if !jsonObject(verdictJSON) {
		return invalid(op, "verdict is not a JSON object")
	}
	var pv any
	if policyVersion != nil {
		if *policyVersion <= 0 {
			return invalid(op, "policy version %d", *policyVersion)
		}
		pv = *policyVersion
	}
	updated := micros(now())
	wrote, err := s.writes.do(ctx, s.stmts.completeTransaction, s.stmts.completeSQL,
		status, string(verdictJSON), pv, updated, requestHash)
	if err != nil {
		return s.fail(op, err)
	}
	if wrote {
		return nil
	}
	t, err := s.TransactionByHash(ctx, requestHash)
	if err != nil {
		return fmt.Errorf("verdict store complete: %w", err)
	}
	return fmt.Errorf("verdict store %s: already %s: %w", op, t.Status, ErrTerminal)
}

// completeTransactionSQL keeps the verdict's reason code beside it, for SearchTransactions.
var completeTransactionSQL = `UPDATE transactions SET status = $1, verdict = $2, policy_version = $3, updated_at = $4,
	reason_code = ` + reasonOf("$2") + ` WHERE request_hash = $5 AND status = 'PENDING'`

// affected is whether an Exec wrote a row; its error is the driver's, for the caller to
// wrap.
func affected(res sql.Result, err error) (bool, error) {
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, err
	}
	return n > 0, nil
}

// Pending returns up to limit PENDING transactions (every one when limit <= 0), oldest
// first (ties by id), for the sweep that evaluates what a stopped process left.
func (s *Store) Pending(ctx context.Context, limit int) ([]Transaction, error) {
	q, args := `SELECT `+transactionColumns+` FROM transactions WHERE status = 'PENDING' ORDER BY created_at, id`, []any{}
	if limit > 0 {
		q, args = q+` LIMIT $1`, append(args, limit)
	}
	return s.transactions(ctx, "pending", q, args...)
}

// transactions runs a query of transactionColumns and scans its rows.
func (s *Store) transactions(ctx context.Context, op, q string, args ...any) ([]Transaction, error) {
	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, s.fail(op, err)
	}
	defer rows.Close()
	var out []Transaction
	for rows.Next() {
		t, err := scanTransaction(rows)
		if err != nil {
			return nil, s.fail(op, err)
		}
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, s.fail(op, err)
	}
	return out, nil
}

// MaxPage bounds the transactions one AgentTransactions call returns.
const MaxPage = 500

// Cursor is where a page of AgentTransactions ends: the creation time and id of its last
// transaction. The zero Cursor is before nothing: the first page.
type Cursor struct {
	CreatedAt time.Time
	ID        string
}

// AgentTransactions returns up to limit (1 to MaxPage) of the agent's transactions, newest
// first (ties by id, descending), created before the cursor after; the zero Cursor starts
// at the newest. An agent with none gives an empty list; an unknown agent is ErrNotFound.
func (s *Store) AgentTransactions(ctx context.Context, agentID string, after Cursor, limit int) ([]Transaction, error) {
	op := "transactions of agent " + agentID
	if limit < 1 || limit > MaxPage {
		return nil, invalid(op, "limit %d is not 1 to %d", limit, MaxPage)
	}
	if _, err := s.Agent(ctx, agentID); err != nil {
		return nil, fmt.Errorf("verdict store %s: %w", op, err)
	}
	created, id := int64(math.MaxInt64), ""
	if !after.CreatedAt.IsZero() {
		created, id = micros(after.CreatedAt), after.ID
	}
	return s.transactions(ctx, op, `SELECT `+transactionColumns+` FROM transactions
		WHERE agent_id = $1 AND (created_at < $2 OR (created_at = $2 AND id < $3))
		ORDER BY created_at DESC, id DESC LIMIT $4`, agentID, created, id, limit)
}

// CountPending returns how many transactions are PENDING.
func (s *Store) CountPending(ctx context.Context) (int64, error) {
	var n int64
	if err := s.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM transactions WHERE status = 'PENDING'`).Scan(&n); err != nil {
		return 0, s.fail("count pending", err)
	}
	return n, nil
}

func scanTransaction(row interface{ Scan(...any) error }) (Transaction, error) {
	var (
		t                          Transaction
		escrow, proposed           string
		metadata, logs, verdictDoc sql.NullString
		policyVersion              sql.NullInt64
		created, updated           int64
	)
	if err := row.Scan(&t.ID, &t.RequestHash, &t.AgentID, &escrow, &t.ChainID, &t.Prompt, &t.Description, &proposed,
		&metadata, &logs, &t.TraceID, &t.Status, &verdictDoc, &policyVersion, &created, &updated); err != nil {
		return Transaction{}, err
	}
	a, err := parseAddress("escrow", escrow)
	if err != nil {
		return Transaction{}, err
	}
	t.Escrow = a
	t.ProposedTx = json.RawMessage(proposed)
	t.Metadata, t.ContextLogs, t.Verdict = rawJSON(metadata), rawJSON(logs), rawJSON(verdictDoc)
	if policyVersion.Valid {
		v := policyVersion.Int64
		t.PolicyVersion = &v
	}
	t.CreatedAt, t.UpdatedAt = fromMicros(created), fromMicros(updated)
	return t, nil
}
