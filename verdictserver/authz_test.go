package verdictserver

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ethereum/go-ethereum/common"

	"github.com/x402gate/x402gate/internal/sqldb"
	"github.com/x402gate/x402gate/verdictserver/store"
)

// authzEnv is a verdict service on a SQLite file the test can read behind the store's back,
// with one agent per single scope, a plain agent and its recorded transaction.
type authzEnv struct {
	*env
	dbPath string
	db     *sqldb.DB
	keys   map[string]agent // by scope; "default" has DefaultScopes
	owner  agent            // owns hash and trace
	hash   string
	trace  string
}

func newAuthzEnv(t *testing.T) *authzEnv {
	t.Helper()
	path := filepath.Join(t.TempDir(), "verdict.db")
	db, err := sqldb.OpenSQLite(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	a := &authzEnv{env: newEnv(t, st, nil), dbPath: path, db: db, keys: map[string]agent{}}
	wallets := []string{
		"0xA11CE00000000000000000000000000000000001", "0xB0B0000000000000000000000000000000000002",
		"0xC0C0000000000000000000000000000000000003", "0xD0D0000000000000000000000000000000000004",
		"0xE0E0000000000000000000000000000000000005", "0xE1E1000000000000000000000000000000000007",
	}
	a.owner = a.agent("owner", common.HexToAddress(wallets[0]), allowPolicy)
	a.keys["default"] = a.owner
	for i, sc := range knownScopes {
		a.keys[sc] = a.agent("scope-"+strings.ReplaceAll(sc, ":", "-"), common.HexToAddress(wallets[i+1]), allowPolicy, sc)
	}
	a.trace = "trace-authz-0001"
	r := a.submit(a.owner.Key, submitBody(a.owner.Wallet, allowedPay, a.trace))
	if r.status != http.StatusCreated {
		t.Fatalf("submit = %d %s", r.status, r.raw)
	}
	a.hash = r.body["requestHash"].(string)
	return a
}

// authzRoute is one authenticated route and the scopes that let a key through.
type authzRoute struct {
	name    string
	method  string
	url     func(a *authzEnv) string
	body    func(a *authzEnv) any
	allowed []string // scopes any one of which suffices
}

func authzRoutes() []authzRoute {
	read := []string{ScopeReadOwn, ScopeCreateOwn}
	adminRead := []string{ScopeAdminRead, ScopeAdminWrite}
	adminWrite := []string{ScopeAdminWrite}
	none := func(*authzEnv) any { return nil }
	api := func(p string) func(*authzEnv) string { return func(a *authzEnv) string { return a.api.URL + p } }
	admin := func(p string) func(*authzEnv) string {
		return func(a *authzEnv) string { return a.admin.URL + strings.ReplaceAll(p, "{agentId}", a.owner.ID) }
	}
	return []authzRoute{
		{"POST /transactions", http.MethodPost, api("/transactions"),
			func(a *authzEnv) any { return submitBody(common.Address{}, allowedPay, "") }, []string{ScopeCreateOwn}},
		{"GET /transactions?traceId", http.MethodGet,
			func(a *authzEnv) string { return a.api.URL + "/transactions?traceId=" + a.trace }, none, read},
		{"GET approval-status", http.MethodGet,
			func(a *authzEnv) string { return a.api.URL + "/transactions/" + a.hash + "/approval-status" }, none, read},
		{"GET /admin/agents", http.MethodGet, admin("/admin/agents"), none, adminRead},
		{"POST /admin/agents", http.MethodPost, admin("/admin/agents"),
			func(a *authzEnv) any { return map[string]any{"name": "made-" + strings.Repeat("x", 4)} }, adminWrite},
		{"GET keys", http.MethodGet, admin("/admin/agents/{agentId}/keys"), none, adminRead},
		{"POST keys", http.MethodPost, admin("/admin/agents/{agentId}/keys"),
			func(a *authzEnv) any { return map[string]any{} }, adminWrite},
		{"DELETE key", http.MethodDelete, admin("/admin/keys/k_aaaaaaaaaaaa"), none, adminWrite},
		{"GET wallets", http.MethodGet, admin("/admin/agents/{agentId}/wallets"), none, adminRead},
		{"POST wallets", http.MethodPost, admin("/admin/agents/{agentId}/wallets"),
			func(a *authzEnv) any {
				return map[string]any{"chainId": testChain, "address": "0xF0F0000000000000000000000000000000000006"}
			}, adminWrite},
		{"PUT policy", http.MethodPut, admin("/admin/agents/{agentId}/policy"),
			func(a *authzEnv) any { return allowPolicy }, adminWrite},
		{"GET policy", http.MethodGet, admin("/admin/agents/{agentId}/policy"), none, adminRead},
		{"GET policy versions", http.MethodGet, admin("/admin/agents/{agentId}/policy/versions"), none, adminRead},
		{"GET policy version", http.MethodGet, admin("/admin/agents/{agentId}/policy/versions/1"), none, adminRead},
		{"POST policy validate", http.MethodPost, admin("/admin/policy/validate"),
			func(a *authzEnv) any { return allowPolicy }, adminRead},
		{"GET windows", http.MethodGet, admin("/admin/agents/{agentId}/windows"), none, adminRead},
		{"POST admin execution", http.MethodPost,
			func(a *authzEnv) string { return a.admin.URL + "/admin/transactions/" + a.hash + "/execution" },
			func(a *authzEnv) any { return map[string]any{"executed": true} }, adminWrite},
	}
}

// TestScopesAreEnforced: every authenticated route, with a key of each single scope: a key
// without one of the route's scopes is 403 insufficient_scope, and nothing it asked for
// happened; a key with one gets past authorization (neither 401 nor insufficient_scope). The default key
// (verdicts:create:own, verdicts:read:own) on an admin route is 403 too
// (docs/verdict-api.md#authentication).
func TestScopesAreEnforced(t *testing.T) {
	a := newAuthzEnv(t)
	for _, rt := range authzRoutes() {
		for _, sc := range append(slices.Clone(knownScopes), "default") {
			k := a.keys[sc]
			want := slices.Contains(rt.allowed, sc)
			if sc == "default" {
				want = slices.ContainsFunc(DefaultScopes, func(s string) bool { return slices.Contains(rt.allowed, s) })
			}
			t.Run(rt.name+" with "+sc, func(t *testing.T) {
				body := rt.body(a)
				if m, ok := body.(map[string]any); ok && m["escrowAddress"] != nil {
					m["escrowAddress"] = k.Wallet.Hex() // its own wallet: only the scope decides
				}
				agents, _ := a.srv.Operator().Agents(t.Context())
				r := call(t, rt.method, rt.url(a), body, "x-api-key", k.Key)
				if !want {
					wantError(t, r, http.StatusForbidden, codeInsufficientScope)
					if after, _ := a.srv.Operator().Agents(t.Context()); len(after) != len(agents) {
						t.Errorf("a refused request changed the agents: %d, then %d", len(agents), len(after))
					}
					return
				}
				// past authorization; another agent's record is still not_owner (TestOneAgentCannotReadAnother)
				if r.status == http.StatusUnauthorized || r.body["code"] == codeInsufficientScope {
					t.Fatalf("a key with %s: %d %s, want past authorization", sc, r.status, r.raw)
				}
			})
		}
	}
}

// TestAdminKeyIsNoAgentKey: the operator's admin key opens the admin API only: in x-api-key
// it is not a key at all, and in x-admin-key the public API does not read it.
func TestAdminKeyIsNoAgentKey(t *testing.T) {
	a := newAuthzEnv(t)
	for _, rt := range authzRoutes()[:3] {
		t.Run(rt.name, func(t *testing.T) {
			wantError(t, call(t, rt.method, rt.url(a), rt.body(a), "x-api-key", a.adminKey), 401, codeInvalidKey)
			wantError(t, call(t, rt.method, rt.url(a), rt.body(a), "x-admin-key", a.adminKey), 401, codeMissingKey)
		})
	}
	for _, rt := range authzRoutes()[3:] {
		t.Run(rt.name+" with the admin key", func(t *testing.T) {
			r := call(t, rt.method, rt.url(a), rt.body(a), "x-admin-key", a.adminKey)
			if r.status == http.StatusUnauthorized || r.status == http.StatusForbidden {
				t.Fatalf("%d %s, want past authorization", r.status, r.raw)
			}
		})
	}
}

// TestTwoCredentialsAreRefused: a bearer token beside an agent key, on every agent route, is
// 400 conflicting_credentials, as is the admin key beside an agent key or a bearer token on
// every admin route; nothing is recorded.
func TestTwoCredentialsAreRefused(t *testing.T) {
	a := newAuthzEnv(t)
	const trace = "trace-two-credentials"
	for _, rt := range authzRoutes()[:3] {
		t.Run(rt.name, func(t *testing.T) {
			body := rt.body(a)
			if m, ok := body.(map[string]any); ok {
				m["escrowAddress"] = a.owner.Wallet.Hex()
				m["metadata"] = map[string]any{"traceId": trace}
			}
			for _, bearer := range []string{"Bearer abc.def.ghi", "Bearer " + a.owner.Key, "Basic dXNlcjpwYXNz"} {
				wantError(t, call(t, rt.method, rt.url(a), body, "x-api-key", a.owner.Key, "Authorization", bearer), 400, codeConflictingAuth)
			}
		})
	}
	if _, err := a.st.TransactionByTrace(t.Context(), a.owner.ID, trace); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("a refused submit: TransactionByTrace = %v, want not found", err)
	}
	for _, rt := range authzRoutes()[3:] {
		t.Run(rt.name, func(t *testing.T) {
			wantError(t, call(t, rt.method, rt.url(a), rt.body(a), "x-admin-key", a.adminKey, "Authorization", "Bearer abc"), 400, codeConflictingAuth)
			wantError(t, call(t, rt.method, rt.url(a), rt.body(a), "x-admin-key", a.adminKey, "x-api-key", a.keys[ScopeAdminWrite].Key), 400, codeConflictingAuth)
		})
	}
	t.Run("the same key twice is not a key", func(t *testing.T) {
		wantError(t, call(t, http.MethodGet, a.api.URL+"/transactions/"+a.hash+"/approval-status", nil, "x-api-key", a.owner.Key, "x-api-key", a.owner.Key), 401, codeInvalidKey)
	})
}

// TestOneAgentCannotReadAnother: another agent's key, whatever its scopes, reads neither the
// status of the owner's transaction (403 not_owner) nor finds it by trace id.
func TestOneAgentCannotReadAnother(t *testing.T) {
	a := newAuthzEnv(t)
	for _, sc := range []string{ScopeReadOwn, ScopeCreateOwn} {
		k := a.keys[sc]
		t.Run(sc, func(t *testing.T) {
			wantError(t, a.status(k.Key, a.hash), 403, codeNotOwner)
			r := call(t, http.MethodGet, a.api.URL+"/transactions?traceId="+a.trace, nil, "x-api-key", k.Key)
			if r.status != http.StatusOK || len(r.body["transactions"].([]any)) != 0 {
				t.Fatalf("another agent's trace id: %d %s, want 200 and no transactions", r.status, r.raw)
			}
		})
	}
	if r := a.status(a.owner.Key, a.hash); r.status != http.StatusOK {
		t.Fatalf("the owner reads its own status: %d %s", r.status, r.raw)
	}
}

// TestKeysAreStoredHashed reads the api_keys rows and the database files behind the store: each
// row holds the SHA-256 of its key, and no byte sequence of a key, nor of its 32-byte secret
// part, is anywhere on disk (docs/verdict-api.md#authentication).
func TestKeysAreStoredHashed(t *testing.T) {
	a := newAuthzEnv(t)
	made := call(t, http.MethodPost, a.admin.URL+"/admin/agents/"+a.owner.ID+"/keys", map[string]any{}, "x-admin-key", a.adminKey)
	if made.status != http.StatusCreated {
		t.Fatalf("create key: %d %s", made.status, made.raw)
	}
	plain := []string{made.body["key"].(string)}
	for _, k := range a.keys {
		plain = append(plain, k.Key)
	}
	rows, err := a.db.QueryContext(t.Context(), `SELECT id, agent_id, hash, scopes FROM api_keys`)
	if err != nil {
		t.Fatal(err)
	}
	stored := map[[32]byte]bool{}
	n := 0
	for rows.Next() {
		var id, agentID, scopes string
		var hash []byte
		if err := rows.Scan(&id, &agentID, &hash, &scopes); err != nil {
			t.Fatal(err)
		}
		n++
		if len(hash) != 32 {
			t.Errorf("key %s: stored hash has %d bytes, want a SHA-256", id, len(hash))
		}
		stored[[32]byte(hash)] = true
		for _, p := range plain {
			for _, col := range []string{id, agentID, string(hash), scopes} {
				if strings.Contains(col, p) || strings.Contains(col, p[len(keyPrefix)+keyIDLen+1:]) {
					t.Errorf("key %s: a column holds a key in the clear", id)
				}
			}
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	rows.Close()
	if n != len(plain) {
		t.Fatalf("%d key rows, want %d", n, len(plain))
	}
	for _, p := range plain {
		if !stored[sha256.Sum256([]byte(p))] {
			t.Errorf("no row holds the SHA-256 of key %s…", p[:len(keyPrefix)+keyIDLen])
		}
	}
	files, _ := filepath.Glob(a.dbPath + "*") // the database, its WAL and shared memory
	if len(files) == 0 {
		t.Fatal("no database files")
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range plain {
			if bytes.Contains(b, []byte(p[len(keyPrefix)+keyIDLen+1:])) {
				t.Errorf("%s holds a key's secret in the clear", filepath.Base(f))
			}
		}
	}
}

// TestWellFormedKeyAllocatesNothing: the shape check every authenticated request makes
// accepts a fresh key and refuses one whose secret is not base64url, without allocating.
func TestWellFormedKeyAllocatesNothing(t *testing.T) {
	_, key, _ := newAPIKey()
	bad := key[:len(key)-1] + "!"
	if !wellFormedKey(key) || wellFormedKey(bad) {
		t.Fatalf("wellFormedKey(fresh key) = %v, (secret with '!') = %v; want true, false", wellFormedKey(key), wellFormedKey(bad))
	}
	if n := testing.AllocsPerRun(100, func() { wellFormedKey(key) }); n != 0 {
		t.Errorf("wellFormedKey: %v allocations, want 0", n)
	}
}
