package store

import (
	"context"
	"crypto/subtle"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"

	"github.com/ethereum/go-ethereum/common"
)

// maxNameLen bounds agent names, key ids and scopes.
const maxNameLen = 128

// validName reports whether v is a usable agent name: 1 to 128 bytes of valid UTF-8, no
// control characters, no leading or trailing space.
func validName(v string) bool {
	if v == "" || len(v) > maxNameLen || !storableText(v) || strings.TrimSpace(v) != v {
		return false
	}
	return !strings.ContainsFunc(v, unicode.IsControl)
}

// validToken reports whether v is a usable key id or scope: 1 to 128 of A-Z a-z 0-9
// and "_-:.".
func validToken(v string) bool {
	if v == "" || len(v) > maxNameLen {
		return false
	}
	for _, r := range v {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', strings.ContainsRune("_-:.", r):
		default:
			return false
		}
	}
	return true
}

// CreateAgent creates an agent named name, with a new id. A name that is taken is
// ErrConflict.
func (s *Store) CreateAgent(ctx context.Context, name string) (Agent, error) {
	if !validName(name) {
		return Agent{}, invalid("create agent", "name must be 1 to %d printable characters without surrounding space", maxNameLen)
	}
	a := Agent{ID: newUUID(), Name: name, CreatedAt: now()}
	res, err := s.db.ExecContext(ctx, `INSERT INTO agents (id, name, created_at) VALUES ($1, $2, $3)
		ON CONFLICT DO NOTHING`, a.ID, a.Name, micros(a.CreatedAt))
	if err != nil {
		return Agent{}, s.fail("create agent", err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return Agent{}, s.fail("create agent", err)
	} else if n == 0 {
		return Agent{}, fmt.Errorf("verdict store create agent %q: name taken: %w", name, ErrConflict)
	}
	return a, nil
}

// Agent returns the agent with id, or ErrNotFound.
func (s *Store) Agent(ctx context.Context, id string) (Agent, error) {
	return s.agentWhere(ctx, "agent "+id, `id = $1`, id)
}

// AgentByName returns the agent named name, or ErrNotFound.
func (s *Store) AgentByName(ctx context.Context, name string) (Agent, error) {
	return s.agentWhere(ctx, fmt.Sprintf("agent named %q", name), `name = $1`, name)
}

func (s *Store) agentWhere(ctx context.Context, op, where string, arg any) (Agent, error) {
	var (
		a       Agent
		created int64
	)
	err := s.db.QueryRowContext(ctx, `SELECT id, name, created_at FROM agents WHERE `+where, arg).
		Scan(&a.ID, &a.Name, &created)
	if errors.Is(err, sql.ErrNoRows) {
		return Agent{}, fmt.Errorf("verdict store %s: %w", op, ErrNotFound)
	}
	if err != nil {
		return Agent{}, s.fail(op, err)
	}
	a.CreatedAt = fromMicros(created)
	return a, nil
}

// Agents returns every agent, by name.
func (s *Store) Agents(ctx context.Context) ([]Agent, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT id, name, created_at FROM agents ORDER BY name`)
	if err != nil {
		return nil, s.fail("agents", err)
	}
	defer rows.Close()
	var out []Agent
	for rows.Next() {
		var (
			a       Agent
			created int64
		)
		if err := rows.Scan(&a.ID, &a.Name, &created); err != nil {
			return nil, s.fail("agents", err)
		}
		a.CreatedAt = fromMicros(created)
		out = append(out, a)
	}
	if err := rows.Err(); err != nil {
		return nil, s.fail("agents", err)
	}
	return out, nil
}

// CreateKey records the key keyID of agent agentID by the SHA-256 hash of its secret,
// with scopes (at least one). An unknown agent is ErrNotFound; a key id or hash that
// exists is ErrConflict. Neither the hash nor the key reaches an error.
func (s *Store) CreateKey(ctx context.Context, agentID string, keyID string, hash [32]byte, scopes []string) (Key, error) {
	if !validToken(keyID) {
		return Key{}, invalid("create key", "key id must be 1 to %d of A-Z a-z 0-9 _-:.", maxNameLen)
	}
	op := "create key " + keyID
	if hash == ([32]byte{}) {
		return Key{}, invalid(op, "zero hash")
	}
	if len(scopes) == 0 {
		return Key{}, invalid(op, "no scope")
	}
	for _, sc := range scopes {
		if !validToken(sc) {
			return Key{}, invalid(op, "scope %q: want 1 to %d of A-Z a-z 0-9 _-:.", sc, maxNameLen)
		}
	}
	encoded, err := json.Marshal(scopes)
	if err != nil {
		return Key{}, fmt.Errorf("verdict store %s: %w", op, err)
	}
	k := Key{ID: keyID, AgentID: agentID, Scopes: append([]string(nil), scopes...), CreatedAt: now()}
	res, err := s.db.ExecContext(ctx, `INSERT INTO api_keys (id, agent_id, hash, scopes, created_at)
		SELECT $1, a.id, $3, $4, $5 FROM agents a WHERE a.id = $2
		ON CONFLICT DO NOTHING`, k.ID, agentID, hash[:], string(encoded), micros(k.CreatedAt))
	if err != nil {
		return Key{}, s.fail(op, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return Key{}, s.fail(op, err)
	} else if n == 0 {
		if _, err := s.Agent(ctx, agentID); err != nil {
			return Key{}, fmt.Errorf("verdict store %s: %w", op, err)
		}
		return Key{}, fmt.Errorf("verdict store %s: key id or hash exists: %w", op, ErrConflict)
	}
	return k, nil
}

const keyColumns = `id, agent_id, hash, scopes, created_at, revoked_at, last_used_at`

// KeyByHash returns the valid key whose secret hashes to hash. An unknown or revoked key
// is ErrNotFound. The stored hash is compared in constant time. A key found is remembered
// for KeyCacheTTL; RevokeKey on this Store forgets it at once.
func (s *Store) KeyByHash(ctx context.Context, hash [32]byte) (Key, error) {
	if k, ok := s.keys.get(hash); ok {
		return k, nil
	}
	gen := s.keys.generation()
	k, stored, err := s.scanKey(s.stmts.keyByHash.QueryRowContext(ctx, hash[:]))
	if errors.Is(err, sql.ErrNoRows) {
		return Key{}, fmt.Errorf("verdict store key by hash: %w", ErrNotFound)
	}
	if err != nil {
		return Key{}, s.fail("key by hash", err)
	}
	if subtle.ConstantTimeCompare(stored, hash[:]) != 1 {
		return Key{}, fmt.Errorf("verdict store key by hash: %w", ErrNotFound)
	}
	s.keys.put(hash, k, gen)
	return k, nil
}

// Key returns the key keyID, revoked or not, or ErrNotFound.
func (s *Store) Key(ctx context.Context, keyID string) (Key, error) {
	k, _, err := s.scanKey(s.db.QueryRowContext(ctx, `SELECT `+keyColumns+` FROM api_keys WHERE id = $1`, keyID))
	if errors.Is(err, sql.ErrNoRows) {
		return Key{}, fmt.Errorf("verdict store key %s: %w", keyID, ErrNotFound)
	}
	if err != nil {
		return Key{}, s.fail("key "+keyID, err)
	}
	return k, nil
}

// RevokeKey revokes the key keyID; KeyByHash of this Store no longer finds it once
// RevokeKey returns, that of other Stores at most KeyCacheTTL later. Revoking a revoked key
// changes nothing and succeeds. An unknown key is ErrNotFound.
func (s *Store) RevokeKey(ctx context.Context, keyID string) error {
	op := "revoke key " + keyID
	// Forgotten after the write, whatever its outcome: a lookup that read the key before
	// the revocation committed cannot remember it past this point.
	defer s.keys.revoke(keyID)
	if _, err := s.db.ExecContext(ctx, `UPDATE api_keys SET revoked_at = $1 WHERE id = $2 AND revoked_at IS NULL`,
		micros(now()), keyID); err != nil {
		return s.fail(op, err)
	}
	if _, err := s.Key(ctx, keyID); err != nil {
		return fmt.Errorf("verdict store revoke: %w", err)
	}
	return nil
}

// Keys returns every key of the agent, revoked ones too, oldest first. An unknown agent
// has none.
func (s *Store) Keys(ctx context.Context, agentID string) ([]Key, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT `+keyColumns+` FROM api_keys WHERE agent_id = $1
		ORDER BY created_at, id`, agentID)
	if err != nil {
		return nil, s.fail("keys", err)
	}
	defer rows.Close()
	var out []Key
	for rows.Next() {
		k, _, err := s.scanKey(rows)
		if err != nil {
			return nil, s.fail("keys", err)
		}
		out = append(out, k)
	}
	if err := rows.Err(); err != nil {
		return nil, s.fail("keys", err)
	}
	return out, nil
}

// scanKey reads one row of keyColumns, and the stored hash.
func (s *Store) scanKey(row interface{ Scan(...any) error }) (Key, []byte, error) {
	var (
		k       Key
		hash    []byte
		scopes  string
		created int64
		revoked sql.NullInt64
		used    sql.NullInt64
	)
	if err := row.Scan(&k.ID, &k.AgentID, &hash, &scopes, &created, &revoked, &used); err != nil {
		return Key{}, nil, err
	}
	if err := json.Unmarshal([]byte(scopes), &k.Scopes); err != nil {
		return Key{}, nil, fmt.Errorf("key %s: bad scopes in the verdict store", k.ID)
	}
	k.CreatedAt = fromMicros(created)
	k.RevokedAt, k.LastUsedAt = nullTime(revoked), nullTime(used)
	return k, hash, nil
}

// nullTime is a nullable stored time; NULL is nil.
func nullTime(v sql.NullInt64) *time.Time {
	if !v.Valid {
		return nil
	}
	t := fromMicros(v.Int64)
	return &t
}

// KeyUsed records that the key keyID authenticated at at: its LastUsedAt becomes at unless
// it is later already, so that instances writing out of order never move it back. An
// unknown key is ErrNotFound. The caller writes it rarely (docs/console.md#agents: at most
// once per key per minute per instance).
func (s *Store) KeyUsed(ctx context.Context, keyID string, at time.Time) error {
	op := "key used " + keyID
	wrote, err := s.writes.do(ctx, nil, `UPDATE api_keys SET last_used_at = $1
		WHERE id = $2 AND (last_used_at IS NULL OR last_used_at < $1)`, micros(at), keyID)
	if err != nil {
		return s.fail(op, err)
	}
	if !wrote {
		if _, err := s.Key(ctx, keyID); err != nil {
			return fmt.Errorf("verdict store %s: %w", op, err)
		}
	}
	return nil
}

// AddWallet registers addr on chainID as a wallet of the agent. An address belongs to at
// most one agent per chain: one another agent owns is ErrConflict; adding the agent's own
// wallet again returns it unchanged. An unknown agent is ErrNotFound.
func (s *Store) AddWallet(ctx context.Context, agentID string, chainID int64, addr common.Address) (Wallet, error) {
	op := fmt.Sprintf("add wallet %d:%s", chainID, hexAddress(addr))
	if chainID <= 0 {
		return Wallet{}, invalid(op, "chain id must be positive")
	}
	if addr == (common.Address{}) {
		return Wallet{}, invalid(op, "zero address")
	}
	w := Wallet{AgentID: agentID, ChainID: chainID, Address: addr, CreatedAt: now()}
	res, err := s.db.ExecContext(ctx, `INSERT INTO wallets (chain_id, address, agent_id, created_at)
		SELECT $1, $2, a.id, $4 FROM agents a WHERE a.id = $3
		ON CONFLICT DO NOTHING`, chainID, hexAddress(addr), agentID, micros(w.CreatedAt))
	if err != nil {
		return Wallet{}, s.fail(op, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return Wallet{}, s.fail(op, err)
	} else if n > 0 {
		return w, nil
	}
	if _, err := s.Agent(ctx, agentID); err != nil {
		return Wallet{}, fmt.Errorf("verdict store %s: %w", op, err)
	}
	existing, err := s.wallet(ctx, chainID, addr)
	if err != nil {
		return Wallet{}, fmt.Errorf("verdict store %s: %w", op, err)
	}
	if existing.AgentID != agentID {
		return Wallet{}, fmt.Errorf("verdict store %s: owned by another agent: %w", op, ErrConflict)
	}
	return existing, nil
}

// WalletOwner returns the id of the agent that registered addr on chainID, or
// ErrNotFound. An owner found is remembered: a wallet never changes hands.
func (s *Store) WalletOwner(ctx context.Context, chainID int64, addr common.Address) (string, error) {
	ck := walletKey{chainID: chainID, addr: addr}
	if owner, ok := s.wallets.get(ck); ok {
		return owner, nil
	}
	w, err := s.wallet(ctx, chainID, addr)
	if err != nil {
		return "", fmt.Errorf("verdict store wallet owner: %w", err)
	}
	s.wallets.put(ck, w.AgentID)
	return w.AgentID, nil
}

const walletSelectSQL = `SELECT chain_id, address, agent_id, created_at FROM wallets WHERE chain_id = $1 AND address = $2`

func (s *Store) wallet(ctx context.Context, chainID int64, addr common.Address) (Wallet, error) {
	w, err := s.scanWallet(s.stmts.walletOwner.QueryRowContext(ctx, chainID, hexAddress(addr)))
	if errors.Is(err, sql.ErrNoRows) {
		return Wallet{}, fmt.Errorf("wallet %d:%s: %w", chainID, hexAddress(addr), ErrNotFound)
	}
	if err != nil {
		return Wallet{}, s.fail(fmt.Sprintf("wallet %d:%s", chainID, hexAddress(addr)), err)
	}
	return w, nil
}

// Wallets returns the agent's wallets, by chain then address.
func (s *Store) Wallets(ctx context.Context, agentID string) ([]Wallet, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT chain_id, address, agent_id, created_at FROM wallets
		WHERE agent_id = $1 ORDER BY chain_id, address`, agentID)
	if err != nil {
		return nil, s.fail("wallets", err)
	}
	defer rows.Close()
	var out []Wallet
	for rows.Next() {
		w, err := s.scanWallet(rows)
		if err != nil {
			return nil, s.fail("wallets", err)
		}
		out = append(out, w)
	}
	if err := rows.Err(); err != nil {
		return nil, s.fail("wallets", err)
	}
	return out, nil
}

func (s *Store) scanWallet(row interface{ Scan(...any) error }) (Wallet, error) {
	var (
		w       Wallet
		addr    string
		created int64
	)
	if err := row.Scan(&w.ChainID, &addr, &w.AgentID, &created); err != nil {
		return Wallet{}, err
	}
	a, err := parseAddress("wallet", addr)
	if err != nil {
		return Wallet{}, err
	}
	w.Address, w.CreatedAt = a, fromMicros(created)
	return w, nil
}
