package verdictserver

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/x402gate/x402gate/verdictserver/store"
)

// ErrSignIn is SignIn's and Recheck's refusal: the key is neither the admin key nor a valid
// agent key with an admin scope. It never says which.
var ErrSignIn = errors.New("the key is not the admin key nor a valid key with admin:read or admin:write")

// Caller is who signed in to the console (docs/console.md#sign-in): the operator's admin
// key, or an agent key with admin:read or admin:write. It holds no secret.
type Caller struct {
	// Admin is the operator's admin key.
	Admin bool
	// KeyID and AgentID name the agent key; empty for the admin key.
	KeyID, AgentID string
	// Write says whether the caller may change what the admin API manages: the admin key,
	// or a key with admin:write.
	Write bool
}

// Actor names the caller in the audit trail of what it changes.
func (c Caller) Actor() string {
	if c.Admin {
		return "console: admin key"
	}
	return "console: key " + c.KeyID
}

// SignIn checks key as the admin API checks its credentials: the admin key (compared as
// SHA-256 in constant time), or an agent key that is valid and carries admin:read or
// admin:write. Any other key is ErrSignIn; the key is in no error.
func (s *Server) SignIn(ctx context.Context, key string) (Caller, error) {
	got := sha256.Sum256([]byte(key))
	if s.adminKeyHash != ([32]byte{}) && subtle.ConstantTimeCompare(got[:], s.adminKeyHash[:]) == 1 {
		return Caller{Admin: true, Write: true}, nil
	}
	if !wellFormedKey(key) {
		return Caller{}, ErrSignIn
	}
	k, err := s.store.KeyByHash(ctx, got)
	if errors.Is(err, store.ErrNotFound) {
		return Caller{}, ErrSignIn
	}
	if err != nil {
		return Caller{}, fmt.Errorf("sign in: %w", err)
	}
	s.keyUsed(k.ID)
	return adminCaller(k)
}

// Recheck returns c as its key stands now: a key revoked since, or whose admin scopes are
// gone, is ErrSignIn. The admin key stays valid while the process runs.
func (s *Server) Recheck(ctx context.Context, c Caller) (Caller, error) {
	if c.Admin {
		return c, nil
	}
	k, err := s.store.Key(ctx, c.KeyID)
	if errors.Is(err, store.ErrNotFound) {
		return Caller{}, ErrSignIn
	}
	if err != nil {
		return Caller{}, fmt.Errorf("recheck: %w", err)
	}
	if k.RevokedAt != nil {
		return Caller{}, ErrSignIn
	}
	return adminCaller(k)
}

func adminCaller(k store.Key) (Caller, error) {
	p := &principal{agentID: k.AgentID, keyID: k.ID, scopes: k.Scopes}
	if !p.has(ScopeAdminRead, ScopeAdminWrite) {
		return Caller{}, ErrSignIn
	}
	return Caller{KeyID: k.ID, AgentID: k.AgentID, Write: p.has(ScopeAdminWrite)}, nil
}

// keyUses remembers when this instance last authenticated each agent key. The store keeps
// no last-use time (it would be a write per request), so the console shows the last use
// this instance saw (docs/console.md#agents).
type keyUses struct {
	mu sync.Mutex
	at map[string]time.Time
}

// keyUsed records that the key keyID authenticated now.
func (s *Server) keyUsed(keyID string) {
	now := s.now()
	s.uses.mu.Lock()
	if s.uses.at == nil {
		s.uses.at = map[string]time.Time{}
	}
	s.uses.at[keyID] = now
	s.uses.mu.Unlock()
}

// KeyLastUsed returns when this instance last authenticated the key keyID, and whether it
// did since it started.
func (s *Server) KeyLastUsed(keyID string) (time.Time, bool) {
	s.uses.mu.Lock()
	defer s.uses.mu.Unlock()
	t, ok := s.uses.at[keyID]
	return t, ok
}
