package verdictserver

import (
	"fmt"
	"net/http"
	"strconv"
)

// adminReplay answers POST /admin/agents/{agentId}/policy/replay?last=N
// (docs/replay.md#the-admin-route): the body is the draft policy document, the answer the
// ReplayReport. It writes nothing, so admin:read suffices, as for POST /admin/policy/validate.
func (s *Server) adminReplay(w http.ResponseWriter, r *http.Request, _ *principal) {
	last, ok := replayLast(w, r)
	if !ok {
		return
	}
	draft, ok := s.readBody(w, r)
	if !ok {
		return
	}
	rep, err := s.op.Replay(r.Context(), r.PathValue("agentId"), draft, last)
	if err != nil {
		s.operatorFailed(w, "replay", err)
		return
	}
	writeJSON(w, http.StatusOK, rep)
}

// replayLast reads the query's one parameter, last: absent is 0 (DefaultReplayLast), else
// an integer from 1 to MaxReplayLast. On failure it has answered 400 invalid_query.
func replayLast(w http.ResponseWriter, r *http.Request) (int, bool) {
	refuse := func(field, message string) (int, bool) {
		e := newAPIError(codeInvalidQuery, message)
		e.Field = field
		writeError(w, e)
		return 0, false
	}
	q := r.URL.Query()
	for k := range q {
		if k != "last" {
			return refuse(k, "unknown query parameter")
		}
	}
	vals := q["last"]
	if len(vals) == 0 {
		return 0, true
	}
	n, err := strconv.Atoi(vals[0])
	if len(vals) > 1 || err != nil || n < 1 || n > MaxReplayLast {
		return refuse("last", fmt.Sprintf("last is an integer from 1 to %d, given once", MaxReplayLast))
	}
	return n, true
}
