package engine

import (
	"context"
	"math/big"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/x402gate/x402gate/verdict"
	"github.com/x402gate/x402gate/verdictserver/engine/actions"
	"github.com/x402gate/x402gate/verdictserver/engine/internal/intern"
	"github.com/x402gate/x402gate/verdictserver/engine/prices"
	"github.com/x402gate/x402gate/verdictserver/engine/sanctions"
)

// evaluation is one Evaluate call's state.
type evaluation struct {
	ctx       context.Context // bounds the reads of feeds and oracles
	feeds     *prices.Feeds
	oracles   map[int64]*sanctions.Oracle
	in        Input
	act       *Action
	decodeErr *DecodeError
	sanctions *sanctions.List
	ttl       time.Duration
	prices    *prices.Table
	now       time.Time

	box *verdictBox // the recycled box the verdict is built in (Judge), or nil
	// scratch is the memory of the decoded action (actions.Scratch), kept with the
	// evaluation for the next one.
	scratch *actions.Scratch

	sources       []sourceRec
	cached        []string // names of cached sources
	priced        bool     // notional was computed (usd nil: unpriced)
	pricedAmounts []pricedAmount
	hexed         [4]hexedSlice // what hexes wrote, to give it again
	nHexed        int
	rats          [4]ratText // what ratString wrote
	nRats         int
	usd           *big.Rat
	unpriced      string // what had no price
	refs          ReferencePrices

	degraded       []string // data that could not be had (feeds.go)
	oracleScreened bool
}

// sourceRec is one data source consulted (docs/policy.md#data-freshness): what
// dataFreshness.sources lists, and the members annotate adds for evidence.sources.
type sourceRec struct {
	name  string
	asOf  time.Time
	fresh bool
	extra []any // key, value, key, value …
	// stable: extra is one shared slice that is the same for every evaluation that consults
	// this source (a sanctions list's annotations), so the rendered maps can be cached.
	stable bool
}

// source records a data source consulted (docs/policy.md#data-freshness).
func (ev *evaluation) source(name string, asOf time.Time, fresh bool) {
	for i := range ev.sources {
		if ev.sources[i].name == name {
			return
		}
	}
	if !fresh {
		ev.cached = append(ev.cached, name)
	}
	if ev.sources == nil {
		ev.sources = make([]sourceRec, 0, 4)
	}
	ev.sources = append(ev.sources, sourceRec{name: name, asOf: asOf, fresh: fresh})
}

// The statuses of a source, boxed once.
var (
	statusFresh  any = string(verdict.FreshnessFresh)
	statusCached any = string(verdict.FreshnessCached)
)

// renderSources is evidence.sources and dataFreshness.sources: the same name, asOf and
// status in both, and the annotations in evidence only. A source rendered the same way
// every time (no annotations, or a list's shared ones) is rendered once and its maps are
// shared by every verdict that cites it: they are read-only, like every cached value.
func (ev *evaluation) renderSources() ([]any, []map[string]any) {
	evs := make([]any, len(ev.sources))
	dfs := make([]map[string]any, len(ev.sources))
	for i := range ev.sources {
		s := &ev.sources[i]
		if len(s.extra) == 0 || s.stable {
			r := renderedSource(s)
			evs[i], dfs[i] = r.ev, r.df
			continue
		}
		evs[i], dfs[i] = renderSource(s)
	}
	return evs, dfs
}

// renderSource is s's entries in evidence.sources and in dataFreshness.sources.
func renderSource(s *sourceRec) (evidence any, freshness map[string]any) {
	name := boxString(s.name)
	asOf := rfc3339(s.asOf).Box
	status := statusFresh
	if !s.fresh {
		status = statusCached
	}
	em := make(map[string]any, 3+len(s.extra)/2)
	em["name"], em["asOf"], em["status"] = name, asOf, status
	for j := 0; j+1 < len(s.extra); j += 2 {
		em[s.extra[j].(string)] = s.extra[j+1]
	}
	if len(s.extra) == 0 {
		return em, em // the same three members: one read-only map in both lists
	}
	return em, map[string]any{"name": name, "asOf": asOf, "status": status}
}

// sourceKey identifies a source's rendering: its name, asOf to the second (what RFC 3339
// shows), status, and its shared annotations by identity.
type sourceKey struct {
	name  string
	asOf  int64
	fresh bool
	extra *any
}

type sourceMaps struct {
	ev any
	df map[string]any
}

var sourceRenders intern.Memo[sourceKey, sourceMaps]

// renderedSource is renderSource(s) for a source without annotations or with stable ones,
// cached.
func renderedSource(s *sourceRec) sourceMaps {
	k := sourceKey{name: s.name, asOf: s.asOf.Unix(), fresh: s.fresh}
	if len(s.extra) > 0 {
		k.extra = &s.extra[0]
	}
	h := intern.FnvString(s.name) ^ intern.Mix(uint64(k.asOf))
	if !s.fresh {
		h = ^h
	}
	return sourceRenders.Get(k, h, func(sourceKey) sourceMaps {
		e, d := renderSource(s)
		return sourceMaps{ev: e, df: d}
	}).Val
}

func (ev *evaluation) sanctionsFresh() bool {
	return !ev.sanctions.AsOf().Add(ev.ttl).Before(ev.now)
}

// Observation is one check's entry in evidence.observations: what the check observed against
// what the policy expected, and for a failed check, where one makes sense, the correction
// that would pass it (docs/verdict-api.md#observations). Its JSON is that of the map
// {"expected", "observed", "suggestion"} (members in the order encoding/json writes a map's
// keys; suggestion only when there is one), in one allocation instead of a map's two and
// about 300 bytes.
type Observation struct {
	Expected   any    `json:"expected"`
	Observed   any    `json:"observed"`
	Suggestion string `json:"suggestion,omitempty"`
}

// AppendJSON appends o's JSON, what encoding/json writes for it (a verdict.JSONAppender, so
// that a verdict's JSON is written without reflection: verdict.Verdict.AppendJSON).
func (o *Observation) AppendJSON(b []byte) ([]byte, error) {
	if o == nil {
		return append(b, "null"...), nil
	}
	b, err := verdict.AppendJSONValue(append(b, `{"expected":`...), o.Expected)
	if err == nil {
		b, err = verdict.AppendJSONValue(append(b, `,"observed":`...), o.Observed)
	}
	if o.Suggestion != "" {
		b = verdict.AppendJSONString(append(b, `,"suggestion":`...), o.Suggestion)
	}
	return append(b, '}'), err
}

// verdictBox holds a verdict and what its pointers point to, allocated at once. A box
// that Judge recycles keeps its maps and observations for the next verdict.
type verdictBox struct {
	v             verdict.Verdict
	checks        [numChecks]verdict.Check
	policyVersion int64
	usd           float64
	trustNote     string

	observations map[string]any   // evidence.observations, when recycled
	obs          []Observation    // what observations points to
	action       map[string]any   // evidence.decodedAction, when recycled
	legs         []map[string]any // decodedAction.legs' maps, when recycled
	nLegs        int              // how many of legs this verdict uses
}

// maxRecycledLegs bounds the legs' maps a recycled box keeps.
const maxRecycledLegs = 8

// boxes recycles the verdicts of Judge.
var boxes = sync.Pool{New: func() any { return new(verdictBox) }}

// maxRecycledMembers bounds the maps a recycled box keeps (a multicall's decodedAction can
// be larger than the common case; such a map is dropped, not kept).
const maxRecycledMembers = 32

// recycle empties box, keeping its maps and observations array, and puts it back in boxes.
func (box *verdictBox) recycle() {
	next := verdictBox{}
	if m := box.observations; m != nil && len(m) <= maxRecycledMembers {
		clear(m)
		next.observations = m
	}
	if m := box.action; m != nil && len(m) <= maxRecycledMembers {
		clear(m)
		next.action = m
	}
	keepLegs := true
	for _, m := range box.legs {
		keepLegs = keepLegs && len(m) <= maxRecycledMembers // an oversized one: drop them all
	}
	if keepLegs {
		for _, m := range box.legs {
			clear(m)
		}
		next.legs = box.legs
	}
	if cap(box.obs) <= numChecks {
		clear(box.obs[:cap(box.obs)])
		next.obs = box.obs[:0]
	}
	*box = next
	boxes.Put(box)
}

// verdict runs the checks and assembles the verdict (docs/policy.md#check-order) in box.
func (ev *evaluation) verdict(box *verdictBox) *verdict.Verdict {
	v := &box.v
	v.SchemaVersion, v.Timestamp, v.Checks = 1, ev.now, box.checks[:]
	var results [numChecks]result
	switch {
	case ev.in.Policy == nil || ev.in.Policy.Doc == nil:
		// docs/policy.md#default-deny: an agent without a policy is allowed nothing.
		for i := range checks {
			results[i] = notChecked("not evaluated: the agent has no policy")
		}
		p, _ := ev.in.ProposedTx["protocol"].(string)
		results[checkIndex[verdict.CheckVenue]] = failed(verdict.ReasonVenueNotAllowed, "the agent has no policy, so no venue is allowed", "", p, []string{}).
			suggest("the agent has no policy: its operator must set one")
	case ev.decodeErr != nil:
		// docs/policy.md#default-deny: venue and chain report what was readable.
		for i := range checks {
			results[i] = notChecked("not evaluated: the action could not be decoded")
		}
		if p, ok := ev.in.ProposedTx["protocol"].(string); ok && p != "" {
			results[checkIndex[verdict.CheckVenue]] = ev.venueOf(p)
		}
		if c, ok := actions.ChainID(ev.in.ProposedTx["chainId"]); ok {
			results[checkIndex[verdict.CheckChain]] = ev.chainOf(c)
		}
	default:
		for i, c := range checks {
			results[i] = c.run(ev)
		}
	}
	if ev.in.Policy != nil && ev.in.Policy.Doc != nil {
		v.WouldFail = letThrough(ev.in.Policy.Doc.Mode, &results)
	}
	if ev.act != nil {
		ev.notional() // usdNotional is reported whenever the action is priced
	}
	ran := 0
	for i := range results {
		if results[i].ran {
			ran++
		}
	}
	// One allocation for every check's observation, and never grown below: observations
	// points into it. A recycled box has room for every check.
	observations, obs := box.observations, box.obs[:0]
	if observations == nil {
		observations, obs = make(map[string]any, ran), make([]Observation, 0, ran)
		box.observations = observations
	} else if cap(obs) < numChecks {
		obs = make([]Observation, 0, numChecks)
	}
	box.obs = obs
	for i, c := range checks {
		r := &results[i]
		chk := verdict.Check{CheckID: c.id, Status: r.status, HumanReason: r.reason}
		if r.status == verdict.CheckFailed {
			chk.Code = reasonCodePtr(r.code)
		}
		if r.field != "" {
			chk.TriggeringPolicyField = fieldPtr(r.field)
		}
		if r.ran {
			obs = append(obs, Observation{Expected: r.exp, Observed: r.obs, Suggestion: r.fix})
			observations[string(c.id)] = &obs[len(obs)-1]
		}
		v.Checks[i] = chk
	}

	switch {
	case ev.in.Policy == nil || ev.in.Policy.Doc == nil:
		v.Outcome, v.ReasonCode = verdict.OutcomeRejected, verdict.ReasonVenueNotAllowed
		v.HumanReason = "the agent has no policy: nothing is allowed"
	case ev.decodeErr != nil:
		v.Outcome, v.ReasonCode = verdict.OutcomeRejected, verdict.ReasonDecodeFailure
		v.HumanReason = "the action could not be decoded: " + ev.decodeErr.Error()
	default:
		v.Outcome, v.ReasonCode = verdict.OutcomeApproved, verdict.ReasonAllowed
		v.HumanReason = approvedReason(ev.in.Policy.Doc.Mode, ev.in.Policy.Version, v.WouldFail)
		for _, i := range reasonIndexes {
			if r := &results[i]; r.status == verdict.CheckFailed {
				v.Outcome, v.ReasonCode, v.HumanReason = verdict.OutcomeRejected, r.code, r.reason
				if r.field != "" {
					v.TriggeringPolicyField = fieldPtr(r.field)
				}
				break
			}
		}
	}
	v.Mode = verdict.ModeEnforce
	if ev.in.Policy != nil && ev.in.Policy.Doc != nil {
		box.policyVersion = ev.in.Policy.Version
		v.PolicyVersion = &box.policyVersion
		if ev.in.Policy.Doc.Mode != "" {
			v.Mode = ev.in.Policy.Doc.Mode
		}
	}

	var da map[string]any
	if ev.act != nil {
		da = ev.renderActionInto(box.action, ev.act, 0)
		box.action = da
	} else {
		de := ev.decodeErr
		if de == nil {
			de = &DecodeError{Field: "proposedTx", Problem: "not decoded"}
		}
		da = undecoded(ev.in.ProposedTx, de)
	}
	evSources, dfSources := ev.renderSources()
	v.Evidence = verdict.Evidence{DecodedAction: da, Observations: observations, Sources: evSources}
	v.DataFreshness = verdict.DataFreshness{Overall: ev.overall(), Sources: dfSources}
	v.Trust = ev.trust(&box.trustNote)
	v.Redaction = redaction(ev.in.Metadata, ev.in.ContextLogs, nil)
	if ev.usd != nil {
		box.usd = ratFloat64(ev.usd)
		v.USDNotional = &box.usd
	}
	return v
}

// A verdict's codes and triggeringPolicyFields point to values shared by every verdict that
// names the same one: they are read-only, like everything a verdict points to.
var (
	codeValues  intern.Memo[verdict.ReasonCode, verdict.ReasonCode]
	fieldValues intern.Memo[string, string]
)

func reasonCodePtr(c verdict.ReasonCode) *verdict.ReasonCode {
	return &codeValues.Get(c, intern.FnvString(string(c)), func(c verdict.ReasonCode) verdict.ReasonCode { return c }).Val
}

func fieldPtr(f string) *string {
	return &fieldValues.Get(f, intern.FnvString(f), func(f string) string { return f }).Val
}

// approvedReason is the humanReason of an approval under policy version v in mode m, with
// the checks the mode let through (docs/policy.md#modes); an enforce mode's is cached.
func approvedReason(m verdict.Mode, v int64, wouldFail []verdict.Check) string {
	switch {
	case m == verdict.ModeWarn && len(wouldFail) > 0:
		return WarnedReason(v, wouldFail)
	case m.Lenient():
		return "approved in " + string(m) + " mode under policy version " + strconv.FormatInt(v, 10)
	}
	return reasonText(reasonKey{kind: rVersioned, n: v}, func(k reasonKey) string {
		return "every check passed or did not apply under policy version " + strconv.FormatInt(k.n, 10)
	}).Val
}

// overall is docs/policy.md#data-freshness.
func (ev *evaluation) overall() verdict.Freshness {
	switch {
	case len(ev.cached) == 0:
		return verdict.FreshnessFresh
	case len(ev.cached) == len(ev.sources):
		return verdict.FreshnessCached
	default:
		return verdict.FreshnessMixed
	}
}

// trust is docs/policy.md#trust.
// The note is written to *buf, which the verdict points to.
func (ev *evaluation) trust(buf *string) verdict.Trust {
	note := func(s string) *string { *buf = s; return buf }
	switch {
	case ev.act == nil:
		return verdict.Trust{Level: verdict.TrustLow, Notes: note("the action was not decoded")}
	case ev.sanctions == nil && !ev.oracleScreened:
		return verdict.Trust{Level: verdict.TrustMedium, Notes: note("no sanctions list is loaded")}
	case len(ev.degraded) > 0:
		return verdict.Trust{Level: verdict.TrustMedium, Notes: note(strings.Join(ev.degraded, "; "))}
	case len(ev.cached) > 0:
		return verdict.Trust{Level: verdict.TrustMedium, Notes: note("cached data: " + strings.Join(ev.cached, ", "))}
	}
	return verdict.Trust{Level: verdict.TrustHigh}
}

// maxRedacted bounds redaction.fields.
const maxRedacted = 100

// sensitiveWords make a member's name sensitive (docs/policy.md#redaction).
var sensitiveWords = []string{"key", "secret", "token", "password", "authorization"}

// Sensitive reports whether a metadata or contextLogs member named name is always withheld:
// its name contains key, secret, token, password or authorization, in any case.
func Sensitive(name string) bool {
	l := strings.ToLower(name)
	for _, w := range sensitiveWords {
		if strings.Contains(l, w) {
			return true
		}
	}
	return false
}

// redaction lists what the verdict withholds of metadata and contextLogs
// (docs/policy.md#redaction): the top-level members no check used (used holds dotted
// paths), and every sensitive member at any depth.
func redaction(metadata, contextLogs map[string]any, used map[string]bool) verdict.Redaction {
	var fields []string
	var walk func(path string, v any, depth int)
	walk = func(path string, v any, depth int) {
		if depth > 32 {
			return
		}
		switch x := v.(type) {
		case map[string]any:
			for k, c := range x {
				p := path + "." + k
				if Sensitive(k) {
					fields = append(fields, p)
					continue
				}
				walk(p, c, depth+1)
			}
		case []any:
			for i, c := range x {
				walk(path+"."+strconv.Itoa(i), c, depth+1)
			}
		}
	}
	for _, top := range []struct {
		name string
		m    map[string]any
	}{{"metadata", metadata}, {"contextLogs", contextLogs}} {
		for k, c := range top.m {
			p := top.name + "." + k
			if Sensitive(k) {
				fields = append(fields, p)
				continue
			}
			if !used[p] {
				fields = append(fields, p)
			}
			walk(p, c, 1)
		}
	}
	sort.Strings(fields)
	if len(fields) > maxRedacted {
		fields = fields[:maxRedacted]
	}
	if fields == nil {
		fields = []string{}
	}
	return verdict.Redaction{Redacted: len(fields) > 0, Fields: fields}
}
