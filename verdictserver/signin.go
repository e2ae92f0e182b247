package verdictserver

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"

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

// KeyUseInterval is how often, at most, an instance writes a key's last use to the store
// (docs/console.md#agents): authentication pays no write per request, and the stored time
// is at most this much behind the key's last use.
const KeyUseInterval = time.Minute

// keyUseTimeout bounds one write of a key's last use.
const keyUseTimeout = 10 * time.Second

// keyUses is when this instance last wrote each agent key's use to the store (or began to),
// and the writes under way.
type keyUses struct {
	mu      sync.Mutex
	written map[string]time.Time
	closed  bool // Close waits for the writes under way; later ones are written at once
	wg      sync.WaitGroup
}

// keyUsed records that the key keyID authenticated now: a write to the store when this
// instance wrote none for the key in KeyUseInterval, made after the request's answer, not
// before it. A write that fails is tried again by the key's next use.
func (s *Server) keyUsed(keyID string) {
	now := s.now()
	u := &s.uses
	u.mu.Lock()
	last, seen := u.written[keyID]
	due := !seen || now.Sub(last) >= KeyUseInterval || now.Before(last)
	if due {
		if u.written == nil {
			u.written = map[string]time.Time{}
		}
		u.written[keyID] = now
	}
	closed := u.closed
	if due && !closed {
		u.wg.Add(1)
	}
	u.mu.Unlock()
	switch {
	case !due:
	case closed:
		s.writeKeyUse(keyID, now)
	default:
		go func() {
			defer u.wg.Done()
			s.writeKeyUse(keyID, now)
		}()
	}
}

// writeKeyUse writes that keyID authenticated at at; on failure it forgets the write, so
// that the key's next use tries again.
func (s *Server) writeKeyUse(keyID string, at time.Time) {
	ctx, cancel := context.WithTimeout(context.Background(), keyUseTimeout)
	defer cancel()
	err := s.store.KeyUsed(ctx, keyID, at)
	if err == nil {
		return
	}
	s.log.Warn("recording a key's last use", zap.String("keyId", keyID), zapError(err))
	s.uses.mu.Lock()
	if s.uses.written[keyID].Equal(at) {
		delete(s.uses.written, keyID)
	}
	s.uses.mu.Unlock()
}

// closeKeyUses waits for the writes of key uses under way; later uses are written before
// their answer, as the server no longer runs anything in the background.
func (s *Server) closeKeyUses() {
	s.uses.mu.Lock()
	s.uses.closed = true
	s.uses.mu.Unlock()
	s.uses.wg.Wait()
}
