package verdictserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/x402gate/x402gate/verdictserver/policy"
	"github.com/x402gate/x402gate/verdictserver/store"
)

// Operator holds the operator's functions on a store: agents, keys, wallets and
// policies (docs/verdict-api.md#admin-api). The admin API and the `caddy verdict`
// commands both call these, so each rule lives once.
type Operator struct {
	store *store.Store
	srv   *Server // nil from NewOperator: no engine to Replay with
}

// NewOperator returns the operator functions on st.
func NewOperator(st *store.Store) *Operator { return &Operator{store: st} }

// ErrInvalidInput is wrapped by every *InputError.
var ErrInvalidInput = errors.New("invalid input")

// InputError is operator input refused before anything was written; Field names it.
type InputError struct {
	Field   string
	Problem string
}

// Error names the field and its problem.
func (e *InputError) Error() string { return "invalid " + e.Field + ": " + e.Problem }

// Unwrap returns ErrInvalidInput.
func (e *InputError) Unwrap() error { return ErrInvalidInput }

// CreateAgent creates an agent named name. A taken name is store.ErrConflict.
func (o *Operator) CreateAgent(ctx context.Context, name string) (store.Agent, error) {
	if strings.TrimSpace(name) == "" {
		return store.Agent{}, &InputError{Field: "name", Problem: "is required"}
	}
	return o.store.CreateAgent(ctx, name)
}

// Agents lists every agent.
func (o *Operator) Agents(ctx context.Context) ([]store.Agent, error) { return o.store.Agents(ctx) }

// CreateKey creates an API key for agentID with scopes (DefaultScopes when empty) and
// returns it with its plaintext, which exists only in this answer: the store keeps its
// SHA-256 (docs/verdict-api.md#authentication).
func (o *Operator) CreateKey(ctx context.Context, agentID string, scopes []string) (store.Key, string, error) {
	if len(scopes) == 0 {
		scopes = DefaultScopes
	}
	for i, sc := range scopes {
		if !slices.Contains(knownScopes, sc) {
			return store.Key{}, "", &InputError{Field: fmt.Sprintf("scopes[%d]", i), Problem: "must be one of " + strings.Join(knownScopes, ", ")}
		}
	}
	if _, err := o.store.Agent(ctx, agentID); err != nil {
		return store.Key{}, "", err
	}
	id, plaintext, hash := newAPIKey()
	k, err := o.store.CreateKey(ctx, agentID, id, hash, slices.Compact(slices.Sorted(slices.Values(scopes))))
	if err != nil {
		return store.Key{}, "", err
	}
	return k, plaintext, nil
}

// Keys lists an agent's keys, revoked ones too; never a secret.
func (o *Operator) Keys(ctx context.Context, agentID string) ([]store.Key, error) {
	if _, err := o.store.Agent(ctx, agentID); err != nil {
		return nil, err
	}
	return o.store.Keys(ctx, agentID)
}

// RevokeKey revokes a key by its id; it is refused (401) from then on.
func (o *Operator) RevokeKey(ctx context.Context, keyID string) error {
	return o.store.RevokeKey(ctx, keyID)
}

// AddWallet registers address as agentID's wallet on chainID. An address another agent
// holds on that chain is store.ErrConflict.
func (o *Operator) AddWallet(ctx context.Context, agentID string, chainID int64, address string) (store.Wallet, error) {
	if chainID <= 0 {
		return store.Wallet{}, &InputError{Field: "chainId", Problem: "must be a positive integer"}
	}
	a, err := readAddress(map[string]any{"address": address}, "address")
	if err != nil {
		var fe *fieldError
		errors.As(err, &fe)
		return store.Wallet{}, &InputError{Field: "address", Problem: fe.message}
	}
	return o.store.AddWallet(ctx, agentID, chainID, a)
}

// Wallets lists an agent's wallets.
func (o *Operator) Wallets(ctx context.Context, agentID string) ([]store.Wallet, error) {
	if _, err := o.store.Agent(ctx, agentID); err != nil {
		return nil, err
	}
	return o.store.Wallets(ctx, agentID)
}

// Transactions lists up to limit of an agent's transactions, newest first, created before
// the cursor after (the zero Cursor: the newest), with their verdicts.
func (o *Operator) Transactions(ctx context.Context, agentID string, after store.Cursor, limit int) ([]store.Transaction, error) {
	if limit < 1 || limit > store.MaxPage {
		return nil, &InputError{Field: "limit", Problem: fmt.Sprintf("must be 1 to %d", store.MaxPage)}
	}
	return o.store.AgentTransactions(ctx, agentID, after, limit)
}

// Transaction returns one transaction by its request hash, with its verdict.
func (o *Operator) Transaction(ctx context.Context, requestHash string) (store.Transaction, error) {
	return o.store.TransactionByHash(ctx, requestHash)
}

// ValidatePolicy checks a policy document against the schema and the semantic rules
// (policy.Parse, which also refuses duplicate keys); the error is a *policy.Errors that names every field at fault.
func (o *Operator) ValidatePolicy(doc []byte) error {
	_, err := policy.Parse(doc)
	return err
}

// SetPolicy validates doc and stores it as agentID's new policy version, the next integer
// (docs/verdict-api.md#policies). actor names who set it, for the audit trail. A document
// that does not validate is a *policy.Errors and nothing is stored.
func (o *Operator) SetPolicy(ctx context.Context, agentID string, doc []byte, actor string) (store.PolicyVersion, error) {
	if _, err := policy.Parse(doc); err != nil {
		return store.PolicyVersion{}, err
	}
	if strings.TrimSpace(actor) == "" {
		actor = "operator"
	}
	var compact json.RawMessage
	if b, err := compactJSON(doc); err == nil {
		compact = b
	} else {
		return store.PolicyVersion{}, &InputError{Field: "policy", Problem: "is not json"}
	}
	return o.store.SetPolicy(ctx, agentID, compact, actor)
}

// PolicyVersions lists every version of an agent's policy, oldest first.
func (o *Operator) PolicyVersions(ctx context.Context, agentID string) ([]store.PolicyVersion, error) {
	if _, err := o.store.Agent(ctx, agentID); err != nil {
		return nil, err
	}
	return o.store.PolicyVersions(ctx, agentID)
}

// Policy returns one version of an agent's policy; version 0 means the active one.
func (o *Operator) Policy(ctx context.Context, agentID string, version int64) (store.PolicyVersion, error) {
	if version == 0 {
		return o.store.ActivePolicy(ctx, agentID)
	}
	return o.store.Policy(ctx, agentID, version)
}

func compactJSON(doc []byte) (json.RawMessage, error) {
	var b bytes.Buffer
	if err := json.Compact(&b, doc); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}
