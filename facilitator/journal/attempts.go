package journal

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ethereum/go-ethereum/common"
)

// AddAttempt records replacement a of the unfinished row of authorizationKey, before it
// is broadcast (see Journal).
func (j *DB) AddAttempt(ctx context.Context, authorizationKey string, a Attempt) error {
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
	return j.write(ctx, false, func(ctx context.Context, q querier) error {
		return j.addAttempt(ctx, q, authorizationKey, a, created)
	})
}

func (j *DB) addAttempt(ctx context.Context, q querier, authorizationKey string, a Attempt, created time.Time) error {
	res, err := q.ExecContext(ctx, `INSERT INTO settlement_attempts (authorization_key, seq, tx_hash, raw_tx, created_at)
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
	var one int
	err = q.QueryRowContext(ctx, `SELECT 1 FROM settlements WHERE authorization_key = $1`, authorizationKey).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("journal add attempt %s: %w", authorizationKey, ErrNotFound)
	}
	if err != nil {
		return j.fail("add attempt "+authorizationKey, err)
	}
	return fmt.Errorf("journal add attempt %s #%d: %w", authorizationKey, a.Seq, ErrAttemptConflict)
}

// Attempts returns every attempt of the row of authorizationKey, the first (Seq 0, the
// row's own transaction) first, or ErrNotFound.
func (j *DB) Attempts(ctx context.Context, authorizationKey string) ([]Attempt, error) {
	var (
		txHash, settled string
		raw             []byte
		created         int64
	)
	err := j.db.QueryRowContext(ctx, `SELECT tx_hash, raw_tx, created_at, settled_tx_hash FROM settlements
		WHERE authorization_key = $1`, authorizationKey).Scan(&txHash, &raw, &created, &settled)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("journal attempts %s: %w", authorizationKey, ErrNotFound)
	}
	if err != nil {
		return nil, j.fail("attempts "+authorizationKey, err)
	}
	first, err := attemptOf(0, txHash, raw, created, settled)
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
		a, err := attemptOf(int(seq), txHash, raw, created, settled)
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

func attemptOf(seq int, txHash string, raw []byte, created int64, settled string) (Attempt, error) {
	b, err := parseHex(txHash, common.HashLength)
	if err != nil {
		return Attempt{}, fmt.Errorf("attempt %d: bad tx_hash: %w", seq, err)
	}
	if raw == nil {
		raw = []byte{}
	}
	return Attempt{Seq: seq, TxHash: common.BytesToHash(b), RawTx: raw,
		CreatedAt: time.UnixMicro(created).UTC(), Settled: settled != "" && settled == txHash}, nil
}
