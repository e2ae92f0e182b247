package journal

import "context"

// MaxRecent bounds the rows one Recent call returns.
const MaxRecent = 5000

// Recent returns up to limit (1 to MaxRecent) of the newest rows, newest first (ties in
// reverse authorization key order), for the operator's console (docs/console.md#payments).
// It only reads.
func (j *DB) Recent(ctx context.Context, limit int) ([]Settlement, error) {
	return j.list(ctx, "recent", `SELECT `+rowColumns+` FROM settlements
		ORDER BY created_at DESC, authorization_key DESC LIMIT $1`, min(max(limit, 1), MaxRecent))
}

// list returns the rows query selects (rowColumns); op names it in errors.
func (j *DB) list(ctx context.Context, op, query string, args ...any) ([]Settlement, error) {
	rows, err := j.db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, j.fail(op, err)
	}
	defer rows.Close()
	var out []Settlement
	for rows.Next() {
		s, err := scanSettlement(rows)
		if err != nil {
			return nil, j.fail(op, err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		return nil, j.fail(op, err)
	}
	return out, nil
}
