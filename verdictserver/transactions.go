package verdictserver

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"go.uber.org/zap"

	"github.com/x402gate/x402gate/internal/faults"
	"github.com/x402gate/x402gate/verdictserver/store"
)

// record is the transaction record of a 201, and of each item of GET
// /transactions?traceId= (docs/verdict-api.md#transaction-record).
type record struct {
	ID            string `json:"id"`
	RequestHash   string `json:"requestHash"`
	Description   string `json:"description"`
	Status        string `json:"status"`
	EscrowAddress string `json:"escrowAddress"`
	ChainID       int64  `json:"chainId"`
	TraceID       string `json:"traceId,omitempty"`
	PolicyVersion *int64 `json:"policyVersion"`
	CreatedAt     string `json:"createdAt"`
	UpdatedAt     string `json:"updatedAt"`
}

func toRecord(t store.Transaction) record {
	return record{
		ID: t.ID, RequestHash: t.RequestHash, Description: t.Description, Status: t.Status,
		EscrowAddress: t.Escrow.Hex(), ChainID: t.ChainID, TraceID: t.TraceID, PolicyVersion: t.PolicyVersion,
		CreatedAt: t.CreatedAt.UTC().Format(time.RFC3339Nano), UpdatedAt: t.UpdatedAt.UTC().Format(time.RFC3339Nano),
	}
}

// serveSubmit answers POST /transactions (docs/verdict-api.md#post-transactions): the
// body is decoded strictly, the escrow must be the agent's wallet on the proposed chain,
// and the record is durable in the store before the 201; then it is queued for a worker.
func (s *Server) serveSubmit(w http.ResponseWriter, r *http.Request, p *principal) {
	body, ok := s.readBody(w, r)
	if !ok {
		return
	}
	req, err := decodeSubmit(body)
	if err != nil {
		writeFieldError(w, err)
		return
	}
	owner, err := s.store.WalletOwner(r.Context(), req.ChainID, req.Escrow)
	switch {
	case errors.Is(err, store.ErrNotFound) || err == nil && owner != p.agentID:
		e := newAPIError(codeWalletNotRegistered, "escrowAddress is not a wallet this agent registered for proposedTx.chainId")
		e.Field = "escrowAddress"
		writeError(w, e)
		return
	case err != nil:
		s.storeFailed(w, "wallet lookup", err)
		return
	}
	hash, err := requestHash(p.agentID, req)
	if err != nil {
		s.storeFailed(w, "request hash", err)
		return
	}
	t := store.Transaction{
		RequestHash: hash, AgentID: p.agentID, Escrow: req.Escrow, ChainID: req.ChainID,
		Prompt: req.Prompt, Description: describe(req.Prompt), TraceID: req.TraceID,
		CreatedAt: s.now(),
	}
	if t.ProposedTx, err = json.Marshal(req.ProposedTx); err == nil && req.Metadata != nil {
		t.Metadata, err = json.Marshal(req.Metadata)
	}
	if err == nil && req.ContextLogs != nil {
		t.ContextLogs, err = json.Marshal(req.ContextLogs)
	}
	if err != nil {
		s.storeFailed(w, "encode record", err)
		return
	}
	setRequestHash(w, hash)
	j, judged := s.judgeAtSubmit(r.Context(), &t)
	defer j.done()
	create := s.store.CreateTransaction
	if judged {
		create = s.store.CreateCompleted
	}
	switch err := create(r.Context(), &t); {
	case errors.Is(err, store.ErrDuplicateTrace):
		e := newAPIError(codeDuplicateTrace, "this agent already has a transaction with this metadata.traceId; find it with GET /transactions?traceId=")
		e.Field = "metadata.traceId"
		writeError(w, e)
		return
	case err != nil:
		s.storeFailed(w, "create transaction", err)
		return
	}
	faults.Point("verdict.after-create")
	if judged {
		s.completed(t.CreatedAt, j.note)
	} else {
		s.enqueue(job{hash: t.RequestHash, rec: &t})
	}
	writeJSON(w, http.StatusCreated, accepted(t))
}

// accepted is the 201's record: the record as the submit accepted it, PENDING without a
// policy version (docs/verdict-api.md#lifecycle), even when its verdict was stored with it;
// approval-status has the verdict.
func accepted(t store.Transaction) record {
	r := toRecord(t)
	r.Status, r.PolicyVersion = store.StatusPending, nil
	return r
}

// judgeAtSubmit judges the record t before it is stored, so that it is written with its
// terminal verdict in the submit's own commit (docs/verdict-api.md#lifecycle). It reports
// false, leaving t as it was, for what the workers judge instead: an agent whose policy
// sets spend windows (an approval reserves in a transaction of its own, under the agent's
// lock), and any record whose input cannot be prepared or whose verdict is not a terminal,
// consistent one (the worker retries it and logs why), and any submit that finds Workers
// submits already being judged, so that judging at submit runs no more evaluations at once
// than the workers do. When it reports true, t holds the verdict, its status and its policy
// version; the caller calls j.done once t is stored.
func (s *Server) judgeAtSubmit(ctx context.Context, t *store.Transaction) (j judgement, judged bool) {
	select {
	case s.judging <- struct{}{}:
		defer func() { <-s.judging }()
	default:
		return judgement{}, false
	}
	defer func() {
		if v := recover(); v != nil { // the record goes to the workers, whose evaluation recovers too
			s.log.Error("submit: the evaluation panicked; left to the workers", zap.String("requestHash", t.RequestHash), zap.Any("panic", v))
			j.done()
			j, judged = judgement{}, false
		}
	}()
	in, err := s.input(ctx, *t)
	if err != nil || windowed(in) {
		return judgement{}, false
	}
	j, ok := s.judge(ctx, t.RequestHash, in)
	if !ok || j.err != nil {
		j.done()
		return judgement{}, false
	}
	t.Status, t.Verdict, t.PolicyVersion = j.status, j.raw, j.policyVersion
	return j, true
}

// serveStatus answers GET /transactions/{requestHash}/approval-status
// (docs/verdict-api.md#get-approval-status): {"verdict": null} while PENDING, the stored
// verdict once terminal. Another agent's transaction is 403, an unknown one 404.
func (s *Server) serveStatus(w http.ResponseWriter, r *http.Request, p *principal) {
	hash := r.PathValue("requestHash")
	if hash == "" || len(hash) > 256 || !printableASCII(hash) {
		writeCode(w, codeNotFound, "no transaction with this requestHash")
		return
	}
	setRequestHash(w, hash)
	v, err := s.store.VerdictByHash(r.Context(), hash)
	switch {
	case errors.Is(err, store.ErrNotFound):
		writeCode(w, codeNotFound, "no transaction with this requestHash")
		return
	case err != nil:
		s.storeFailed(w, "read transaction", err)
		return
	case v.AgentID != p.agentID:
		writeCode(w, codeNotOwner, "this transaction belongs to another agent")
		return
	}
	if v.Status == store.StatusPending || len(v.Verdict) == 0 {
		writeRaw(w, http.StatusOK, pendingVerdict)
		return
	}
	// The stored verdict is the JSON object Complete checked: it is sent as it is,
	// without decoding and encoding it again.
	writeRaw(w, http.StatusOK, verdictPrefix, v.Verdict, verdictSuffix)
}

// The approval-status answers around the stored verdict.
var (
	verdictPrefix  = []byte(`{"verdict":`)
	verdictSuffix  = []byte("}\n")
	pendingVerdict = []byte("{\"verdict\":null}\n")
)

// serveByTrace answers GET /transactions?traceId= (docs/verdict-api.md#get-transactions-by-trace-id):
// 200 {"transactions": [record]} with the caller's own record of that trace id, or
// {"transactions": []} when it has none. verdictclient's Reconcile reads an empty list as
// "not created"; a 404 would mean "this service cannot tell".
func (s *Server) serveByTrace(w http.ResponseWriter, r *http.Request, p *principal) {
	q := r.URL.Query()
	for k := range q {
		if k != "traceId" {
			e := newAPIError(codeInvalidQuery, "unknown query parameter")
			e.Field = k
			writeError(w, e)
			return
		}
	}
	vals := q["traceId"]
	if len(vals) != 1 || vals[0] == "" || len(vals[0]) > maxTraceIDLen || !printableASCII(vals[0]) {
		e := newAPIError(codeInvalidQuery, "traceId is required once, 1 to 128 visible ascii characters")
		e.Field = "traceId"
		writeError(w, e)
		return
	}
	t, err := s.store.TransactionByTrace(r.Context(), p.agentID, vals[0])
	switch {
	case errors.Is(err, store.ErrNotFound):
		writeJSON(w, http.StatusOK, map[string]any{"transactions": []record{}})
		return
	case err != nil:
		s.storeFailed(w, "read transaction by trace", err)
		return
	}
	setRequestHash(w, t.RequestHash)
	writeJSON(w, http.StatusOK, map[string]any{"transactions": []record{toRecord(t)}})
}

// storeFailed answers a failure of the store or of our own encoding: 503 when the store
// cannot be reached, 500 otherwise. The cause is logged, never sent.
func (s *Server) storeFailed(w http.ResponseWriter, op string, err error) {
	s.log.Error(op, zapError(err))
	if errors.Is(err, store.ErrInvalid) || errors.Is(err, store.ErrConflict) {
		writeCode(w, codeInternal, "internal error")
		return
	}
	writeCode(w, codeUnavailable, "the store is unavailable; retry later")
}
