package console

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/x402gate/x402gate/verdict"
	"github.com/x402gate/x402gate/verdictserver/store"
)

// verdictsShown bounds the rows of the Verdicts page; the page looks at the newest
// store.MaxPage actions of each agent that the filter names (docs/console.md#verdicts).
const verdictsShown = 100

// filter is the Verdicts page's query: agent, outcome, reason code and a time range.
type filter struct {
	Agent, Outcome, Reason, Since, Until string
	since, until                         time.Time
	Problems                             map[string]string // field: problem
}

// timeForms are the accepted forms of since and until, in UTC: a date, or a date and time
// as a browser's datetime-local input sends it.
var timeForms = []string{"2006-01-02", "2006-01-02T15:04", "2006-01-02T15:04:05", time.RFC3339}

func parseFilter(r *http.Request) filter {
	q := r.URL.Query()
	f := filter{Agent: q.Get("agent"), Outcome: q.Get("outcome"), Reason: strings.TrimSpace(q.Get("reason")),
		Since: q.Get("since"), Until: q.Get("until"), Problems: map[string]string{}}
	if f.Outcome != "" && !slices.Contains([]string{"approved", "rejected", "pending"}, f.Outcome) {
		f.Problems["outcome"] = "must be approved, rejected or pending"
	}
	f.since = f.parseTime("since", f.Since)
	f.until = f.parseTime("until", f.Until)
	return f
}

func (f *filter) parseTime(field, v string) time.Time {
	if v == "" {
		return time.Time{}
	}
	for _, form := range timeForms {
		if t, err := time.ParseInLocation(form, v, time.UTC); err == nil {
			return t
		}
	}
	f.Problems[field] = "must be a date (2026-01-31) or a date and time (2026-01-31T15:04), UTC"
	return time.Time{}
}

// match reports whether t passes the filter.
func (f filter) match(t store.Transaction, v *shownVerdict) bool {
	outcome, reason := "pending", "pending"
	if v != nil {
		outcome, reason = v.Outcome, v.ReasonCode
	}
	return (f.Outcome == "" || f.Outcome == outcome) && (f.Reason == "" || f.Reason == reason) &&
		(f.since.IsZero() || !t.CreatedAt.Before(f.since))
}

// row is one action on the Verdicts page.
type row struct {
	store.Transaction
	AgentName string
	V         *shownVerdict
}

// verdictsPage lists actions and their verdicts, newest first, filtered.
func (c *Console) verdictsPage(w http.ResponseWriter, r *http.Request, s *session) {
	f := parseFilter(r)
	agents, err := c.op.Agents(r.Context())
	if err != nil {
		c.failed(w, r, s, "listing agents", err)
		return
	}
	data := map[string]any{"Filter": f, "Agents": agents}
	if len(f.Problems) > 0 {
		c.render(w, r, s, http.StatusBadRequest, "verdicts", "Verdicts", data)
		return
	}
	var rows []row
	for _, a := range agents {
		if f.Agent != "" && a.ID != f.Agent {
			continue
		}
		txs, err := c.op.Transactions(r.Context(), a.ID, store.Cursor{CreatedAt: f.until}, store.MaxPage)
		if err != nil {
			c.failed(w, r, s, "listing the verdicts of "+a.ID, err)
			return
		}
		for _, t := range txs {
			v := parseVerdict(t.Verdict)
			if f.match(t, v) {
				rows = append(rows, row{Transaction: t, AgentName: a.Name, V: v})
			}
		}
	}
	slices.SortFunc(rows, func(a, b row) int {
		return cmp.Or(b.CreatedAt.Compare(a.CreatedAt), strings.Compare(b.ID, a.ID))
	})
	data["More"] = len(rows) > verdictsShown
	data["Rows"] = rows[:min(len(rows), verdictsShown)]
	c.render(w, r, s, http.StatusOK, "verdicts", "Verdicts", data)
}

// shownVerdict is a stored verdict as the console shows it: the members of
// docs/verdict.md#verdict, with evidence and signature kept as JSON to print.
type shownVerdict struct {
	Outcome               string          `json:"outcome"`
	ReasonCode            string          `json:"reasonCode"`
	HumanReason           string          `json:"humanReason"`
	TriggeringPolicyField *string         `json:"triggeringPolicyField"`
	Checks                []verdict.Check `json:"checks"`
	WouldFail             []verdict.Check `json:"wouldFail"`
	PolicyVersion         *int64          `json:"policyVersion"`
	Mode                  string          `json:"mode"`
	USDNotional           *float64        `json:"usdNotional"`
	Timestamp             string          `json:"timestamp"`
	LatencyMs             int64           `json:"latencyMs"`
	Signature             json.RawMessage `json:"signature"`
	Evidence              struct {
		DecodedAction json.RawMessage        `json:"decodedAction"`
		Observations  map[string]observation `json:"observations"`
		Sources       json.RawMessage        `json:"sources"`
	} `json:"evidence"`
}

// observation is one check's evidence.observations member.
type observation struct {
	Expected   json.RawMessage `json:"expected"`
	Observed   json.RawMessage `json:"observed"`
	Suggestion string          `json:"suggestion"`
}

// parseVerdict reads a stored verdict; nil while there is none.
func parseVerdict(raw json.RawMessage) *shownVerdict {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	var v shownVerdict
	if err := json.Unmarshal(raw, &v); err != nil {
		return &shownVerdict{Outcome: "unreadable", HumanReason: "the stored verdict could not be read: " + err.Error()}
	}
	if v.Mode == "" {
		v.Mode = string(verdict.ModeEnforce)
	}
	return &v
}

// checkView is one check with its observation.
type checkView struct {
	verdict.Check
	Obs *observation
}

// Rows are the verdict's checks, each with its observation.
func (v *shownVerdict) Rows() []checkView {
	out := make([]checkView, len(v.Checks))
	for i, ch := range v.Checks {
		out[i] = checkView{Check: ch}
		if o, ok := v.Evidence.Observations[string(ch.CheckID)]; ok {
			out[i].Obs = &o
		}
	}
	return out
}

// verdictPage shows one action and its verdict: checks, evidence, observations,
// suggestions, policy version, mode and signature.
func (c *Console) verdictPage(w http.ResponseWriter, r *http.Request, s *session) {
	t, err := c.op.Transaction(r.Context(), r.PathValue("requestHash"))
	if err != nil {
		c.failed(w, r, s, "reading the verdict", err)
		return
	}
	data := map[string]any{"T": t, "V": parseVerdict(t.Verdict), "Proposed": pretty(t.ProposedTx),
		"Metadata": pretty(t.Metadata), "ContextLogs": pretty(t.ContextLogs)}
	c.render(w, r, s, http.StatusOK, "verdict", "Verdict "+shortHash(t.RequestHash), data)
}

// pretty indents JSON for people; "" for none.
func pretty(raw json.RawMessage) string {
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	var b bytes.Buffer
	if err := json.Indent(&b, raw, "", "  "); err != nil {
		return string(raw)
	}
	return b.String()
}

// shortHash is a hash's first and last characters.
func shortHash(h string) string {
	if len(h) <= 14 {
		return h
	}
	return h[:8] + "…" + h[len(h)-4:]
}

// notFound reports whether err is the store's or the journal's not found.
func notFound(err error) bool { return errors.Is(err, store.ErrNotFound) }
