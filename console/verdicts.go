package console

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/x402gate/x402gate/verdict"
	"github.com/x402gate/x402gate/verdictserver/store"
)

// verdictsShown is the rows of one page of the Verdicts page; the next page starts after
// its last row (docs/console.md#verdicts).
const verdictsShown = 100

// filter is the Verdicts page's query: agent, outcome, reason code and a time range, and
// where the page starts.
type filter struct {
	Agent, Outcome, Reason, Since, Until, After string
	since, until                                time.Time
	after                                       store.Cursor
	Problems                                    map[string]string // field: problem
}

// timeForms are the accepted forms of since and until, in UTC: a date, or a date and time
// as a browser's datetime-local input sends it.
var timeForms = []string{"2006-01-02", "2006-01-02T15:04", "2006-01-02T15:04:05", time.RFC3339}

// statusOf is the store's status of each outcome the filter offers.
var statusOf = map[string]string{"approved": store.StatusApproved, "rejected": store.StatusRejected, "pending": store.StatusPending}

func parseFilter(r *http.Request) filter {
	q := r.URL.Query()
	f := filter{Agent: q.Get("agent"), Outcome: q.Get("outcome"), Reason: strings.TrimSpace(q.Get("reason")),
		Since: q.Get("since"), Until: q.Get("until"), After: q.Get("after"), Problems: map[string]string{}}
	if _, ok := statusOf[f.Outcome]; f.Outcome != "" && !ok {
		f.Problems["outcome"] = "must be approved, rejected or pending"
	}
	f.since = f.parseTime("since", f.Since)
	f.until = f.parseTime("until", f.Until)
	f.parseAfter()
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

// parseAfter reads the cursor of a next page: the creation time (unix microseconds) and id
// of the last row before it, as nextPage wrote them.
func (f *filter) parseAfter() {
	if f.After == "" {
		return
	}
	us, id, ok := strings.Cut(f.After, "_")
	micros, err := strconv.ParseInt(us, 10, 64)
	if !ok || err != nil || micros <= 0 || id == "" || !utf8.ValidString(id) {
		f.Problems["after"] = "is not a page of this list: start from the first page"
		return
	}
	f.after = store.Cursor{CreatedAt: time.UnixMicro(micros).UTC(), ID: id}
}

// search is the store's search of the filter.
func (f filter) search() store.Search {
	return store.Search{AgentID: f.Agent, Status: statusOf[f.Outcome], ReasonCode: f.Reason, Since: f.since, Until: f.until}
}

// page is the URL of a page of the filter's list: the first, or the one after the row
// last.
func (f filter) page(last *store.Transaction) string {
	q := url.Values{}
	for k, v := range map[string]string{"agent": f.Agent, "outcome": f.Outcome, "reason": f.Reason, "since": f.Since, "until": f.Until} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if last != nil {
		q.Set("after", fmt.Sprintf("%d_%s", last.CreatedAt.UnixMicro(), last.ID))
	}
	return Path + "/verdicts?" + q.Encode()
}

// row is one action on the Verdicts page.
type row struct {
	store.Transaction
	AgentName string
	V         *shownVerdict
}

// verdictsPage lists actions and their verdicts, newest first, filtered, one page at a
// time: the store searches the whole history with an index for each filter.
func (c *Console) verdictsPage(w http.ResponseWriter, r *http.Request, s *session) {
	f := parseFilter(r)
	agents, err := c.op.Agents(r.Context())
	if err != nil {
		c.failed(w, r, s, "listing agents", err)
		return
	}
	data := map[string]any{"Filter": f, "Agents": agents}
	if f.After != "" {
		data["First"] = f.page(nil)
	}
	if len(f.Problems) > 0 {
		c.render(w, r, s, http.StatusBadRequest, "verdicts", "Verdicts", data)
		return
	}
	txs, err := c.op.SearchTransactions(r.Context(), f.search(), f.after, verdictsShown+1)
	if err != nil {
		c.failed(w, r, s, "searching the verdicts", err)
		return
	}
	names := make(map[string]string, len(agents))
	for _, a := range agents {
		names[a.ID] = a.Name
	}
	rows := make([]row, 0, min(len(txs), verdictsShown))
	for _, t := range txs[:min(len(txs), verdictsShown)] {
		rows = append(rows, row{Transaction: t, AgentName: names[t.AgentID], V: parseVerdict(t.Verdict)})
	}
	if len(txs) > verdictsShown {
		data["Next"] = f.page(&txs[verdictsShown-1])
	}
	data["Rows"] = rows
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
