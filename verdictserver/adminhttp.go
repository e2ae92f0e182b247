package verdictserver

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/x402gate/x402gate/verdict"
	"github.com/x402gate/x402gate/verdictserver/policy"
	"github.com/x402gate/x402gate/verdictserver/store"
)

// adminRoutes are the admin API (docs/verdict-api.md#admin-api). Each calls one Operator
// function.
func (s *Server) adminRoutes() []route {
	read, write := []string{ScopeAdminRead, ScopeAdminWrite}, []string{ScopeAdminWrite}
	rt := func(method, path string, scopes []string, statuses []int, serve func(*Server, http.ResponseWriter, *http.Request, *principal)) route {
		return route{method: method, path: path, auth: authAdmin, scopes: scopes, limited: true, statuses: statuses, serve: serve}
	}
	return []route{
		rt(http.MethodGet, "/admin/agents", read, []int{200}, (*Server).adminListAgents),
		rt(http.MethodPost, "/admin/agents", write, []int{201, 409, 413, 415}, (*Server).adminCreateAgent),
		rt(http.MethodGet, "/admin/agents/{agentId}/keys", read, []int{200, 404}, (*Server).adminListKeys),
		rt(http.MethodPost, "/admin/agents/{agentId}/keys", write, []int{201, 404, 413, 415}, (*Server).adminCreateKey),
		rt(http.MethodDelete, "/admin/keys/{keyId}", write, []int{204, 404}, (*Server).adminRevokeKey),
		rt(http.MethodGet, "/admin/agents/{agentId}/wallets", read, []int{200, 404}, (*Server).adminListWallets),
		rt(http.MethodPost, "/admin/agents/{agentId}/wallets", write, []int{201, 404, 409, 413, 415}, (*Server).adminAddWallet),
		rt(http.MethodPut, "/admin/agents/{agentId}/policy", write, []int{201, 404, 413, 415}, (*Server).adminSetPolicy),
		rt(http.MethodGet, "/admin/agents/{agentId}/policy", read, []int{200, 404}, (*Server).adminActivePolicy),
		rt(http.MethodGet, "/admin/agents/{agentId}/policy/versions", read, []int{200, 404}, (*Server).adminPolicyVersions),
		rt(http.MethodGet, "/admin/agents/{agentId}/policy/versions/{version}", read, []int{200, 404}, (*Server).adminPolicyVersion),
		rt(http.MethodPost, "/admin/policy/validate", read, []int{200, 413, 415}, (*Server).adminValidatePolicy),
		rt(http.MethodPost, "/admin/agents/{agentId}/policy/replay", read, []int{200, 404, 413, 415}, (*Server).adminReplay),
		rt(http.MethodGet, "/admin/agents/{agentId}/transactions", read, []int{200, 400, 404}, (*Server).adminListTransactions),
		rt(http.MethodGet, "/admin/agents/{agentId}/windows", read, []int{200, 404}, (*Server).adminWindows),
		rt(http.MethodPost, "/admin/transactions/{requestHash}/execution", write, []int{200, 404, 409, 413, 415}, (*Server).adminExecution),
	}
}

type agentJSON struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	CreatedAt string `json:"createdAt"`
}

type keyJSON struct {
	ID        string   `json:"id"`
	AgentID   string   `json:"agentId"`
	Scopes    []string `json:"scopes"`
	CreatedAt string   `json:"createdAt"`
	RevokedAt *string  `json:"revokedAt"`
	// Key is the plaintext key, only in the answer that created it.
	Key string `json:"key,omitempty"`
}

type walletJSON struct {
	AgentID   string `json:"agentId"`
	ChainID   int64  `json:"chainId"`
	Address   string `json:"address"`
	CreatedAt string `json:"createdAt"`
}

type policyJSON struct {
	AgentID   string          `json:"agentId"`
	Version   int64           `json:"version"`
	CreatedAt string          `json:"createdAt"`
	Actor     string          `json:"actor"`
	Document  json.RawMessage `json:"document,omitempty"`
}

func ts(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

func toAgent(a store.Agent) agentJSON {
	return agentJSON{ID: a.ID, Name: a.Name, CreatedAt: ts(a.CreatedAt)}
}

func toKey(k store.Key) keyJSON {
	j := keyJSON{ID: k.ID, AgentID: k.AgentID, Scopes: k.Scopes, CreatedAt: ts(k.CreatedAt)}
	if j.Scopes == nil {
		j.Scopes = []string{}
	}
	if k.RevokedAt != nil {
		r := ts(*k.RevokedAt)
		j.RevokedAt = &r
	}
	return j
}

func toWallet(w store.Wallet) walletJSON {
	return walletJSON{AgentID: w.AgentID, ChainID: w.ChainID, Address: w.Address.Hex(), CreatedAt: ts(w.CreatedAt)}
}

func toPolicy(p store.PolicyVersion, withDoc bool) policyJSON {
	j := policyJSON{AgentID: p.AgentID, Version: p.Version, CreatedAt: ts(p.CreatedAt), Actor: p.Actor}
	if withDoc {
		j.Document = p.Document
	}
	return j
}

func mapSlice[T, U any](in []T, f func(T) U) []U {
	out := make([]U, 0, len(in))
	for _, x := range in {
		out = append(out, f(x))
	}
	return out
}

// adminObject reads a strict JSON object body with only the allowed members.
func (s *Server) adminObject(w http.ResponseWriter, r *http.Request, allowed ...string) (map[string]any, bool) {
	body, ok := s.readBody(w, r)
	if !ok {
		return nil, false
	}
	tree, err := verdict.ParseJSON(body)
	if err != nil {
		writeFieldError(w, &fieldError{code: codeMalformedJSON, message: "body is not valid json: " + err.Error()})
		return nil, false
	}
	obj, ok := tree.(map[string]any)
	if !ok {
		writeFieldError(w, badField("", "body must be a json object"))
		return nil, false
	}
	for k := range obj {
		known := false
		for _, a := range allowed {
			known = known || k == a
		}
		if !known {
			writeFieldError(w, &fieldError{code: codeUnknownField, field: k, message: "unknown field"})
			return nil, false
		}
	}
	return obj, true
}

// operatorFailed answers an Operator error with its status (docs/verdict-api.md#errors).
func (s *Server) operatorFailed(w http.ResponseWriter, op string, err error) {
	var ie *InputError
	var pe *policy.Errors
	switch {
	case errors.As(err, &ie):
		e := newAPIError(codeInvalidBody, ie.Problem)
		e.Field = ie.Field
		writeError(w, e)
	case errors.As(err, &pe):
		e := newAPIError(codeInvalidPolicy, "the policy document is not valid; see problems")
		for _, p := range pe.Problems {
			e.Problems = append(e.Problems, problem{Field: p.Field, Problem: p.Problem})
		}
		writeError(w, e)
	case errors.Is(err, store.ErrNotFound):
		writeCode(w, codeNotFound, "not found")
	case errors.Is(err, store.ErrConflict):
		writeCode(w, codeConflict, "it exists already, or belongs to another agent")
	case errors.Is(err, store.ErrInvalid):
		writeCode(w, codeInvalidBody, "refused by the store: "+err.Error())
	default:
		s.storeFailed(w, op, err)
	}
}

func actor(p *principal) string {
	if p.admin {
		return "admin key"
	}
	return "key " + p.keyID
}

func (s *Server) adminListAgents(w http.ResponseWriter, r *http.Request, _ *principal) {
	as, err := s.op.Agents(r.Context())
	if err != nil {
		s.operatorFailed(w, "list agents", err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"agents": mapSlice(as, toAgent)})
}

func (s *Server) adminCreateAgent(w http.ResponseWriter, r *http.Request, _ *principal) {
	obj, ok := s.adminObject(w, r, "name")
	if !ok {
		return
	}
	name, _ := obj["name"].(string)
	a, err := s.op.CreateAgent(r.Context(), name)
	if err != nil {
		s.operatorFailed(w, "create agent", err)
		return
	}
	writeJSON(w, http.StatusCreated, toAgent(a))
}

func (s *Server) adminListKeys(w http.ResponseWriter, r *http.Request, _ *principal) {
	ks, err := s.op.Keys(r.Context(), r.PathValue("agentId"))
	if err != nil {
		s.operatorFailed(w, "list keys", err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"keys": mapSlice(ks, toKey)})
}

func (s *Server) adminCreateKey(w http.ResponseWriter, r *http.Request, _ *principal) {
	obj, ok := s.adminObject(w, r, "scopes")
	if !ok {
		return
	}
	var scopes []string
	if raw, ok := obj["scopes"]; ok {
		list, ok := raw.([]any)
		if !ok {
			writeFieldError(w, badField("scopes", "must be an array of scope names"))
			return
		}
		for i, x := range list {
			sc, ok := x.(string)
			if !ok {
				writeFieldError(w, badField("scopes["+strconv.Itoa(i)+"]", "must be a string"))
				return
			}
			scopes = append(scopes, sc)
		}
		if len(scopes) == 0 {
			writeFieldError(w, badField("scopes", "must name at least one scope; omit it for the defaults"))
			return
		}
	}
	k, plaintext, err := s.op.CreateKey(r.Context(), r.PathValue("agentId"), scopes)
	if err != nil {
		s.operatorFailed(w, "create key", err)
		return
	}
	j := toKey(k)
	j.Key = plaintext
	writeJSON(w, http.StatusCreated, j)
}

func (s *Server) adminRevokeKey(w http.ResponseWriter, r *http.Request, _ *principal) {
	if err := s.op.RevokeKey(r.Context(), r.PathValue("keyId")); err != nil {
		s.operatorFailed(w, "revoke key", err)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) adminListWallets(w http.ResponseWriter, r *http.Request, _ *principal) {
	ws, err := s.op.Wallets(r.Context(), r.PathValue("agentId"))
	if err != nil {
		s.operatorFailed(w, "list wallets", err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"wallets": mapSlice(ws, toWallet)})
}

func (s *Server) adminAddWallet(w http.ResponseWriter, r *http.Request, _ *principal) {
	obj, ok := s.adminObject(w, r, "chainId", "address")
	if !ok {
		return
	}
	id, err := readChainID(obj)
	if err != nil {
		writeFieldError(w, badField("chainId", "is required and must be a positive integer"))
		return
	}
	addr, _ := obj["address"].(string)
	wl, err := s.op.AddWallet(r.Context(), r.PathValue("agentId"), id, addr)
	if err != nil {
		s.operatorFailed(w, "add wallet", err)
		return
	}
	writeJSON(w, http.StatusCreated, toWallet(wl))
}

func (s *Server) adminSetPolicy(w http.ResponseWriter, r *http.Request, p *principal) {
	body, ok := s.readBody(w, r)
	if !ok {
		return
	}
	pv, err := s.op.SetPolicy(r.Context(), r.PathValue("agentId"), body, actor(p))
	if err != nil {
		s.operatorFailed(w, "set policy", err)
		return
	}
	writeJSON(w, http.StatusCreated, toPolicy(pv, true))
}

func (s *Server) adminActivePolicy(w http.ResponseWriter, r *http.Request, _ *principal) {
	pv, err := s.op.Policy(r.Context(), r.PathValue("agentId"), 0)
	if err != nil {
		s.operatorFailed(w, "active policy", err)
		return
	}
	writeJSON(w, http.StatusOK, toPolicy(pv, true))
}

func (s *Server) adminPolicyVersions(w http.ResponseWriter, r *http.Request, _ *principal) {
	vs, err := s.op.PolicyVersions(r.Context(), r.PathValue("agentId"))
	if err != nil {
		s.operatorFailed(w, "policy versions", err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"versions": mapSlice(vs, func(p store.PolicyVersion) policyJSON { return toPolicy(p, false) })})
}

func (s *Server) adminPolicyVersion(w http.ResponseWriter, r *http.Request, _ *principal) {
	v, err := strconv.ParseInt(r.PathValue("version"), 10, 64)
	if err != nil || v <= 0 {
		writeCode(w, codeNotFound, "no such policy version")
		return
	}
	pv, err := s.op.Policy(r.Context(), r.PathValue("agentId"), v)
	if err != nil {
		s.operatorFailed(w, "policy version", err)
		return
	}
	writeJSON(w, http.StatusOK, toPolicy(pv, true))
}

func (s *Server) adminValidatePolicy(w http.ResponseWriter, r *http.Request, _ *principal) {
	body, ok := s.readBody(w, r)
	if !ok {
		return
	}
	if err := s.op.ValidatePolicy(body); err != nil {
		s.operatorFailed(w, "validate policy", err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"valid": true})
}

// DefaultTransactionPage is how many transactions GET /admin/agents/{agentId}/transactions
// answers without a limit.
const DefaultTransactionPage = 50

// adminTransaction is one item of an agent's transaction list: the transaction record, what
// the agent proposed and said, and its verdict (null while pending).
type adminTransaction struct {
	record
	Prompt     string          `json:"prompt"`
	ProposedTx json.RawMessage `json:"proposedTx"`
	Verdict    json.RawMessage `json:"verdict"`
}

func toAdminTransaction(t store.Transaction) adminTransaction {
	v := t.Verdict
	if v == nil {
		v = json.RawMessage("null")
	}
	return adminTransaction{record: toRecord(t), Prompt: t.Prompt, ProposedTx: t.ProposedTx, Verdict: v}
}

// adminListTransactions answers GET /admin/agents/{agentId}/transactions?limit=&before=
// (docs/verdict-api.md#admin-api): a page of the agent's transactions, newest first, and
// "next", the cursor of the following page (null on the last).
func (s *Server) adminListTransactions(w http.ResponseWriter, r *http.Request, _ *principal) {
	q := r.URL.Query()
	limit := DefaultTransactionPage
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > store.MaxPage {
			writeFieldError(w, badField("limit", fmt.Sprintf("must be an integer from 1 to %d", store.MaxPage)))
			return
		}
		limit = n
	}
	after, err := parseCursor(q.Get("before"))
	if err != nil {
		writeFieldError(w, badField("before", "is not a cursor this list answered"))
		return
	}
	txs, err := s.op.Transactions(r.Context(), r.PathValue("agentId"), after, limit)
	if err != nil {
		s.operatorFailed(w, "list transactions", err)
		return
	}
	var next *string
	if len(txs) == limit {
		c := formatCursor(txs[len(txs)-1])
		next = &c
	}
	writeJSON(w, http.StatusOK, map[string]any{"transactions": mapSlice(txs, toAdminTransaction), "next": next})
}

// formatCursor is the cursor after t: its creation time in unix microseconds and its id.
func formatCursor(t store.Transaction) string {
	return strconv.FormatInt(t.CreatedAt.UnixMicro(), 10) + "_" + t.ID
}

// parseCursor reads formatCursor's form; "" is the zero Cursor.
func parseCursor(s string) (store.Cursor, error) {
	if s == "" {
		return store.Cursor{}, nil
	}
	us, id, ok := strings.Cut(s, "_")
	n, err := strconv.ParseInt(us, 10, 64)
	if !ok || err != nil || n <= 0 || id == "" || len(id) > 64 {
		return store.Cursor{}, errors.New("malformed cursor")
	}
	return store.Cursor{CreatedAt: time.UnixMicro(n).UTC(), ID: id}, nil
}
