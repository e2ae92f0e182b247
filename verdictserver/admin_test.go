package verdictserver

import (
	"net/http"
	"testing"

	"github.com/ethereum/go-ethereum/common"
)

// TestAdminAPI drives the operator's path over HTTP with the admin key: create an agent,
// a key (its plaintext only in that answer), a wallet, two policy versions (a bad one
// refused with every field at fault), read the versions; then the new key submits and
// gets a verdict at the policy version in force.
func TestAdminAPI(t *testing.T) {
	e := newEnv(t, nil, nil)
	admin := func(method, path string, body any) answer {
		return call(t, method, e.admin.URL+path, body, "x-admin-key", e.adminKey)
	}
	ag := admin("POST", "/admin/agents", map[string]any{"name": "carol"})
	if ag.status != 201 {
		t.Fatalf("create agent = %d %s", ag.status, ag.raw)
	}
	id := ag.body["id"].(string)
	wantError(t, admin("POST", "/admin/agents", map[string]any{"name": "carol"}), 409, codeConflict)

	k := admin("POST", "/admin/agents/"+id+"/keys", map[string]any{"scopes": []string{ScopeCreateOwn}})
	key, _ := k.body["key"].(string)
	if k.status != 201 || !wellFormedKey(key) {
		t.Fatalf("create key = %d %s", k.status, k.raw)
	}
	list := admin("GET", "/admin/agents/"+id+"/keys", nil)
	if list.status != 200 || len(list.body["keys"].([]any)) != 1 || list.body["keys"].([]any)[0].(map[string]any)["key"] != nil {
		t.Errorf("list keys = %s; want one key without its secret", list.raw)
	}
	wantError(t, admin("POST", "/admin/agents/"+id+"/keys", map[string]any{"scopes": []string{"root"}}), 400, codeInvalidBody)
	wantError(t, admin("POST", "/admin/agents/nobody/keys", map[string]any{}), 404, codeNotFound)

	wallet := common.HexToAddress("0xCA401000000000000000000000000000000000C1")
	if w := admin("POST", "/admin/agents/"+id+"/wallets", map[string]any{"chainId": testChain, "address": wallet.Hex()}); w.status != 201 {
		t.Fatalf("add wallet = %d %s", w.status, w.raw)
	}
	bad := admin("POST", "/admin/agents/"+id+"/wallets", map[string]any{"chainId": testChain, "address": "0x1234"})
	wantError(t, bad, 400, codeInvalidBody)
	if bad.body["field"] != "address" {
		t.Errorf("bad wallet field = %v, want address", bad.body["field"])
	}

	invalid := admin("PUT", "/admin/agents/"+id+"/policy", `{"venues":{"allowed":"payment"},"limits":{"perTxUsd":-1},"colour":"blue"}`)
	wantError(t, invalid, 400, codeInvalidPolicy)
	fields := map[string]bool{}
	for _, p := range invalid.body["problems"].([]any) {
		fields[p.(map[string]any)["field"].(string)] = true
	}
	for _, f := range []string{"venues.allowed", "limits.perTxUsd", "colour"} {
		if !fields[f] {
			t.Errorf("problems %v do not name %s", invalid.body["problems"], f)
		}
	}
	if v := admin("POST", "/admin/policy/validate", allowPolicy); v.status != 200 || v.body["valid"] != true {
		t.Errorf("validate = %d %s", v.status, v.raw)
	}
	wantError(t, admin("GET", "/admin/agents/"+id+"/policy", nil), 404, codeNotFound)
	for want := int64(1); want <= 2; want++ {
		p := admin("PUT", "/admin/agents/"+id+"/policy", allowPolicy)
		if p.status != 201 || p.body["version"] != float64(want) || p.body["actor"] != "admin key" {
			t.Fatalf("set policy = %d %s, want version %d", p.status, p.raw, want)
		}
	}
	vs := admin("GET", "/admin/agents/"+id+"/policy/versions", nil)
	if vs.status != 200 || len(vs.body["versions"].([]any)) != 2 {
		t.Errorf("versions = %s", vs.raw)
	}
	if one := admin("GET", "/admin/agents/"+id+"/policy/versions/1", nil); one.status != 200 || one.body["document"] == nil {
		t.Errorf("version 1 = %d %s", one.status, one.raw)
	}
	wantError(t, admin("GET", "/admin/agents/"+id+"/policy/versions/3", nil), 404, codeNotFound)

	r := e.submit(key, submitBody(wallet, allowedPay, ""))
	if r.status != 201 {
		t.Fatalf("submit with the new key = %d %s", r.status, r.raw)
	}
	if v := e.await(key, r.body["requestHash"].(string)); !v.Approved() || *v.PolicyVersion != 2 {
		t.Errorf("verdict = %s at %v, want approved at version 2", v.Outcome, v.PolicyVersion)
	}

	if rv := admin("DELETE", "/admin/keys/"+k.body["id"].(string), nil); rv.status != http.StatusNoContent {
		t.Fatalf("revoke = %d %s", rv.status, rv.raw)
	}
	wantError(t, e.status(key, r.body["requestHash"].(string)), 401, codeInvalidKey)
}

// TestAdminAuth: the admin API takes the admin key or an agent key with an admin scope;
// a wrong admin key is 401, an agent key without the scope 403, both credentials 400.
func TestAdminAuth(t *testing.T) {
	e := newEnv(t, nil, nil)
	plain := e.agent("plain", common.HexToAddress("0xA11CE00000000000000000000000000000000001"), "")
	reader := e.agent("reader", common.HexToAddress("0xB0B0000000000000000000000000000000000002"), "", ScopeAdminRead)
	get := func(h ...string) answer { return call(t, "GET", e.admin.URL+"/admin/agents", nil, h...) }
	wantError(t, get(), 401, codeMissingKey)
	wantError(t, get("x-admin-key", e.adminKey+"-"), 401, codeInvalidKey)
	wantError(t, get("x-api-key", plain.Key), 403, codeInsufficientScope)
	wantError(t, get("x-admin-key", e.adminKey, "x-api-key", plain.Key), 400, codeConflictingAuth)
	if r := get("x-api-key", reader.Key); r.status != 200 || len(r.body["agents"].([]any)) != 2 {
		t.Errorf("admin:read key = %d %s", r.status, r.raw)
	}
	wantError(t, call(t, "POST", e.admin.URL+"/admin/agents", map[string]any{"name": "x"}, "x-api-key", reader.Key), 403, codeInsufficientScope)
	// the public API is not the admin API (rawCall: the admin path is documented, but not
	// on this handler)
	wantError(t, rawCall(t, "GET", e.api.URL+"/admin/agents", nil, "x-admin-key", e.adminKey), 404, codeNotFound)

	noAdmin := newEnv(t, nil, func(c *Config, _ *Deps) { c.AdminKey = "" })
	wantError(t, call(t, "GET", noAdmin.admin.URL+"/admin/agents", nil, "x-admin-key", ""), 401, codeInvalidKey)
}

// TestAdminListsAnAgentsTransactions: GET /admin/agents/{id}/transactions pages an agent's
// transactions newest first with their verdicts (a refused one carries its reason), follows
// "next" to the end, refuses a bad limit or cursor, and answers 404 for an unknown agent.
func TestAdminListsAnAgentsTransactions(t *testing.T) {
	e := newEnv(t, nil, nil)
	admin := func(path string) answer {
		return call(t, "GET", e.admin.URL+path, nil, "x-admin-key", e.adminKey)
	}
	wallet := common.HexToAddress("0xCA401000000000000000000000000000000000C2")
	a := e.agent("dave", wallet, allowPolicy)
	denied := common.HexToAddress("0x90F79bf6EB2c4f870365E785982E1f101E93b906")
	var hashes []string
	for i := 0; i < 3; i++ {
		to := allowedPay
		if i == 2 {
			to = denied
		}
		r := e.submit(a.Key, submitBody(wallet, to, ""))
		if r.status != 201 {
			t.Fatalf("submit = %d %s", r.status, r.raw)
		}
		h := r.body["requestHash"].(string)
		e.await(a.Key, h)
		hashes = append(hashes, h)
	}
	first := admin("/admin/agents/" + a.ID + "/transactions?limit=2")
	if first.status != 200 {
		t.Fatalf("list = %d %s", first.status, first.raw)
	}
	items := first.body["transactions"].([]any)
	if len(items) != 2 || first.body["next"] == nil {
		t.Fatalf("first page = %s, want 2 items and a next cursor", first.raw)
	}
	newest := items[0].(map[string]any)
	v, _ := newest["verdict"].(map[string]any)
	if newest["requestHash"] != hashes[2] || v == nil || v["outcome"] != "rejected" || v["humanReason"] == "" || newest["proposedTx"] == nil {
		t.Errorf("the newest = %v, want the refused payment with its verdict and reason", newest)
	}
	second := admin("/admin/agents/" + a.ID + "/transactions?limit=2&before=" + first.body["next"].(string))
	if second.status != 200 || len(second.body["transactions"].([]any)) != 1 || second.body["next"] != nil {
		t.Fatalf("second page = %s, want the last item and no next", second.raw)
	}
	if got := second.body["transactions"].([]any)[0].(map[string]any)["requestHash"]; got != hashes[0] {
		t.Errorf("the last item is %v, want the oldest %s", got, hashes[0])
	}
	wantError(t, admin("/admin/agents/"+a.ID+"/transactions?limit=0"), 400, codeInvalidBody)
	wantError(t, admin("/admin/agents/"+a.ID+"/transactions?before=yesterday"), 400, codeInvalidBody)
	wantError(t, admin("/admin/agents/nobody/transactions"), 404, codeNotFound)
}
