package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
)

// SetPolicy records doc (a JSON object, kept byte for byte) as the agent's newest policy
// and returns it: version max+1 (1 for the first), chosen and written in one transaction
// that holds the agent's row lock, so concurrent calls on any number of instances get
// distinct, consecutive versions. Versions are never changed or removed. actor (who set
// it) is required for the audit trail. An unknown agent is ErrNotFound. The document is
// not checked against the policy schema here; the caller parses it first.
func (s *Store) SetPolicy(ctx context.Context, agentID string, doc json.RawMessage, actor string) (PolicyVersion, error) {
	op := "set policy of " + agentID
	if !jsonObject(doc) {
		return PolicyVersion{}, invalid(op, "document is not a JSON object")
	}
	if actor == "" || len(actor) > maxNameLen || !storableText(actor) {
		return PolicyVersion{}, invalid(op, "actor must be 1 to %d bytes of text", maxNameLen)
	}
	p := PolicyVersion{AgentID: agentID, Document: append(json.RawMessage(nil), doc...), CreatedAt: now(), Actor: actor}
	err := s.inTx(ctx, op, func(tx *sql.Tx) error {
		var id string
		err := tx.QueryRowContext(ctx, `SELECT id FROM agents WHERE id = $1`+s.forUpdate(), agentID).Scan(&id)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("verdict store %s: agent: %w", op, ErrNotFound)
		}
		if err != nil {
			return s.fail(op, err)
		}
		if err := tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) + 1 FROM policy_versions WHERE agent_id = $1`,
			agentID).Scan(&p.Version); err != nil {
			return s.fail(op, err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO policy_versions (agent_id, version, document, created_at, actor)
			VALUES ($1, $2, $3, $4, $5)`, agentID, p.Version, string(doc), micros(p.CreatedAt), actor); err != nil {
			return s.fail(op, err)
		}
		return nil
	})
	if err != nil {
		return PolicyVersion{}, err
	}
	return p, nil
}

const policyColumns = `agent_id, version, document, created_at, actor`

// ActivePolicy returns the agent's newest policy version, or ErrNotFound when it has none.
func (s *Store) ActivePolicy(ctx context.Context, agentID string) (PolicyVersion, error) {
	p, err := scanPolicy(s.stmts.activePolicy.QueryRowContext(ctx, agentID))
	return p, s.lookup("active policy of "+agentID, err)
}

// ActivePolicyVersion returns the number of the agent's newest policy version, or ErrNotFound
// when it has none: ActivePolicy without the document, for a caller that keeps the versions it
// parsed (a version never changes).
func (s *Store) ActivePolicyVersion(ctx context.Context, agentID string) (int64, error) {
	var v int64
	err := s.stmts.activePolicyVersion.QueryRowContext(ctx, agentID).Scan(&v)
	return v, s.lookup("active policy version of "+agentID, err)
}

// Policy returns version of the agent's policy, or ErrNotFound.
func (s *Store) Policy(ctx context.Context, agentID string, version int64) (PolicyVersion, error) {
	return s.policyWhere(ctx, fmt.Sprintf("policy %d of %s", version, agentID), `agent_id = $1 AND version = $2`, agentID, version)
}

func (s *Store) policyWhere(ctx context.Context, op, where string, args ...any) (PolicyVersion, error) {
	p, err := scanPolicy(s.db.QueryRowContext(ctx, `SELECT `+policyColumns+` FROM policy_versions WHERE `+where, args...))
	if errors.Is(err, sql.ErrNoRows) {
		return PolicyVersion{}, fmt.Errorf("verdict store %s: %w", op, ErrNotFound)
	}
	if err != nil {
		return PolicyVersion{}, s.fail(op, err)
	}
	return p, nil
}

// PolicyVersions returns every version of the agent's policy, oldest (1) first.
func (s *Store) PolicyVersions(ctx context.Context, agentID string) ([]PolicyVersion, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT `+policyColumns+` FROM policy_versions WHERE agent_id = $1
		ORDER BY version`, agentID)
	if err != nil {
		return nil, s.fail("policy versions", err)
	}
	defer rows.Close()
	var out []PolicyVersion
	for rows.Next() {
		p, err := scanPolicy(rows)
		if err != nil {
			return nil, s.fail("policy versions", err)
		}
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, s.fail("policy versions", err)
	}
	return out, nil
}

func scanPolicy(row interface{ Scan(...any) error }) (PolicyVersion, error) {
	var (
		p       PolicyVersion
		doc     string
		created int64
	)
	if err := row.Scan(&p.AgentID, &p.Version, &doc, &created, &p.Actor); err != nil {
		return PolicyVersion{}, err
	}
	p.Document, p.CreatedAt = json.RawMessage(doc), fromMicros(created)
	return p, nil
}
