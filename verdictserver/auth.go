package verdictserver

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base32"
	"encoding/base64"
	"errors"
	"net/http"
	"slices"
	"strings"

	"github.com/x402gate/x402gate/verdictserver/store"
)

// Key scopes (docs/verdict-api.md#authentication).
const (
	// ScopeCreateOwn lets a key submit transactions for its own agent, and read them:
	// the least privilege of the verdict path.
	ScopeCreateOwn = "verdicts:create:own"
	// ScopeReadOwn lets a key read its own agent's transactions and verdicts.
	ScopeReadOwn = "verdicts:read:own"
	// ScopeReleaseOwn lets a key report its agent's approved actions not executed, which
	// releases their spend reservations (docs/spend-windows.md#reporting). Releasing frees
	// room in a window, so it is not a default scope: an agent's own key can only commit.
	ScopeReleaseOwn = "verdicts:release:own"
	// ScopeAdminRead lets a key read the admin API (agents, keys, wallets, policies).
	ScopeAdminRead = "admin:read"
	// ScopeAdminWrite lets a key change what the admin API manages.
	ScopeAdminWrite = "admin:write"
)

// DefaultScopes are the scopes of a key created without any: submit and read its own.
var DefaultScopes = []string{ScopeCreateOwn, ScopeReadOwn}

// knownScopes are the scopes a key may carry.
var knownScopes = []string{ScopeCreateOwn, ScopeReadOwn, ScopeReleaseOwn, ScopeAdminRead, ScopeAdminWrite}

// Headers the API reads credentials from.
const (
	headerAPIKey   = "X-Api-Key"
	headerAdminKey = "X-Admin-Key"
)

// API keys look like vk_<12 base32>_<43 base64url>: a public part that names the key
// (its id is "k_" + the 12 characters) and 32 random bytes (docs/verdict-api.md#authentication).
const (
	keyPrefix    = "vk_"
	keyIDLen     = 12
	keySecretLen = 43 // base64url of 32 bytes, no padding
	keyLen       = len(keyPrefix) + keyIDLen + 1 + keySecretLen
)

var lowerBase32 = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// newAPIKey returns a fresh key id, the plaintext key and its SHA-256.
func newAPIKey() (keyID, plaintext string, hash [32]byte) {
	var id [8]byte
	var secret [32]byte
	_, _ = rand.Read(id[:]) // crypto/rand.Read never fails (Go 1.24+)
	_, _ = rand.Read(secret[:])
	pub := lowerBase32.EncodeToString(id[:])[:keyIDLen]
	plaintext = keyPrefix + pub + "_" + base64.RawURLEncoding.EncodeToString(secret[:])
	return "k_" + pub, plaintext, sha256.Sum256([]byte(plaintext))
}

// wellFormedKey reports whether s has the shape of one of our keys; anything else is
// refused without a store lookup.
func wellFormedKey(s string) bool {
	if len(s) != keyLen || !strings.HasPrefix(s, keyPrefix) || s[len(keyPrefix)+keyIDLen] != '_' {
		return false
	}
	for _, c := range s[len(keyPrefix) : len(keyPrefix)+keyIDLen] {
		if !(c >= 'a' && c <= 'z' || c >= '2' && c <= '7') {
			return false
		}
	}
	// Decoded into an array on the stack: the check allocates nothing.
	var secret [32]byte
	n, err := base64.RawURLEncoding.Decode(secret[:], []byte(s[len(keyPrefix)+keyIDLen+1:]))
	return err == nil && n == len(secret)
}

// principal is an authenticated caller.
type principal struct {
	admin   bool // the operator's admin key: every admin scope, no agent
	agentID string
	keyID   string
	scopes  []string
}

func (p *principal) has(scopes ...string) bool {
	if p.admin {
		return slices.ContainsFunc(scopes, func(s string) bool { return strings.HasPrefix(s, "admin:") })
	}
	return slices.ContainsFunc(scopes, func(s string) bool { return slices.Contains(p.scopes, s) })
}

// authenticate reads the agent key of r (docs/verdict-api.md#authentication). Its
// errors are API errors; none quotes the key. A bearer token beside the key is refused,
// so a caller never believes one credential counted when the other did.
func (s *Server) authenticate(ctx context.Context, r *http.Request) (*principal, *apiError) {
	vals := r.Header.Values(headerAPIKey)
	if len(vals) > 0 && r.Header.Get("Authorization") != "" {
		e := newAPIError(codeConflictingAuth, "send the api key in x-api-key only, without an Authorization header")
		return nil, &e
	}
	switch {
	case len(vals) == 0 || vals[0] == "":
		e := newAPIError(codeMissingKey, "an api key is required in the x-api-key header")
		return nil, &e
	case len(vals) > 1 || !wellFormedKey(vals[0]):
		e := newAPIError(codeInvalidKey, "the api key is not valid")
		return nil, &e
	}
	// The store looks the key up by its SHA-256: what the lookup's timing could reveal is
	// about a hash of 256 random bits, never about the key (docs/verdict-api.md#authentication).
	k, err := s.store.KeyByHash(ctx, sha256.Sum256([]byte(vals[0])))
	switch {
	case errors.Is(err, store.ErrNotFound):
		e := newAPIError(codeInvalidKey, "the api key is not valid")
		return nil, &e
	case err != nil:
		s.log.Error("key lookup", zapError(err))
		e := newAPIError(codeUnavailable, "the key store is unavailable")
		return nil, &e
	}
	s.keyUsed(k.ID)
	return &principal{agentID: k.AgentID, keyID: k.ID, scopes: k.Scopes}, nil
}

// authenticateAdmin accepts the operator's admin key (x-admin-key, compared as SHA-256
// in constant time) or an agent key that carries an admin scope.
func (s *Server) authenticateAdmin(ctx context.Context, r *http.Request) (*principal, *apiError) {
	vals := r.Header.Values(headerAdminKey)
	if len(vals) == 0 {
		return s.authenticate(ctx, r)
	}
	if r.Header.Get(headerAPIKey) != "" || r.Header.Get("Authorization") != "" {
		e := newAPIError(codeConflictingAuth, "send one credential: x-admin-key or x-api-key")
		return nil, &e
	}
	got := sha256.Sum256([]byte(vals[0]))
	ok := subtle.ConstantTimeCompare(got[:], s.adminKeyHash[:]) == 1
	if len(vals) != 1 || !ok || s.adminKeyHash == ([32]byte{}) {
		e := newAPIError(codeInvalidKey, "the admin key is not valid")
		return nil, &e
	}
	return &principal{admin: true}, nil
}
