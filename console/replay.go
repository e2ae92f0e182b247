package console

import (
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/x402gate/x402gate/verdictserver"
	"github.com/x402gate/x402gate/verdictserver/policy"
	"github.com/x402gate/x402gate/verdictserver/store"
)

// replayForm is the Replay page (docs/console.md#replay): a draft policy and how many of
// the agent's newest stored actions to judge it on, and the report once it ran.
type replayForm struct {
	Agent       string
	Agents      []store.Agent
	Draft       string
	Last        string
	Max         int
	Problems    []policy.Problem // the draft's
	LastProblem string
	Busy        bool // another replay runs: the form is shown again, to send once it ended
	Report      *verdictserver.ReplayReport
}

// replayPage shows the form, its draft the agent's active policy.
func (c *Console) replayPage(w http.ResponseWriter, r *http.Request, s *session) {
	f := replayForm{Agent: r.URL.Query().Get("agent"), Last: strconv.Itoa(verdictserver.DefaultReplayLast)}
	if !c.replayAgents(w, r, s, &f) {
		return
	}
	if f.Agent != "" {
		pv, err := c.op.Policy(r.Context(), f.Agent, 0)
		switch {
		case err == nil:
			f.Draft = pretty(pv.Document)
		case !errors.Is(err, store.ErrNotFound):
			c.failed(w, r, s, "reading the active policy", err)
			return
		}
	}
	c.render(w, r, s, http.StatusOK, "replay", "Replay a draft policy", f)
}

// replayAgents fills the agents the form offers; on failure it has answered.
func (c *Console) replayAgents(w http.ResponseWriter, r *http.Request, s *session, f *replayForm) bool {
	agents, err := c.op.Agents(r.Context())
	if err != nil {
		c.failed(w, r, s, "listing agents", err)
		return false
	}
	f.Agents, f.Max = agents, verdictserver.MaxReplayLast
	return true
}

// runReplay judges the posted draft on the agent's last N stored actions and shows what
// it would newly refuse and newly approve, with reasons. It writes nothing, so a read-only
// session may run it, as the admin route lets admin:read.
func (c *Console) runReplay(w http.ResponseWriter, r *http.Request, s *session) {
	f := replayForm{Agent: r.PostForm.Get("agent"), Draft: r.PostForm.Get("draft"), Last: strings.TrimSpace(r.PostForm.Get("last"))}
	if !c.replayAgents(w, r, s, &f) {
		return
	}
	last, err := strconv.Atoi(f.Last)
	if err != nil || last < 1 || last > verdictserver.MaxReplayLast {
		f.LastProblem = "must be a whole number from 1 to " + strconv.Itoa(verdictserver.MaxReplayLast)
		c.render(w, r, s, http.StatusUnprocessableEntity, "replay", "Replay a draft policy", f)
		return
	}
	rep, err := c.op.Replay(r.Context(), f.Agent, []byte(f.Draft), last)
	var pe *policy.Errors
	switch {
	case errors.As(err, &pe):
		f.Problems = pe.Problems
		c.render(w, r, s, http.StatusUnprocessableEntity, "replay", "Replay a draft policy", f)
		return
	case errors.Is(err, verdictserver.ErrReplayBusy):
		// One replay at a time per service (docs/replay.md#one-at-a-time): as the admin
		// route's 429, with the draft kept in the form.
		f.Busy = true
		w.Header().Set("Retry-After", "1")
		c.render(w, r, s, http.StatusTooManyRequests, "replay", "Replay a draft policy", f)
		return
	case err != nil:
		c.failed(w, r, s, "replaying the draft", err)
		return
	}
	f.Report = &rep
	c.render(w, r, s, http.StatusOK, "replay", "Replay a draft policy", f)
}
