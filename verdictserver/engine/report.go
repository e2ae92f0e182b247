package engine

import (
	"context"
	"math/big"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/ethereum/go-ethereum/common"

	"github.com/x402gate/x402gate/verdict"
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

	sources  []map[string]any
	cached   []string // names of cached sources
	priced   bool     // notional was computed (usd nil: unpriced)
	usd      *big.Rat
	unpriced string // what had no price
	refs     ReferencePrices

	hexCache map[common.Address]string

	degraded       []string // data that could not be had (feeds.go)
	oracleScreened bool
}

// source records a data source consulted (docs/policy.md#data-freshness).
func (ev *evaluation) source(name string, asOf time.Time, fresh bool) {
	for _, s := range ev.sources {
		if s["name"] == name {
			return
		}
	}
	st := string(verdict.FreshnessFresh)
	if !fresh {
		st = string(verdict.FreshnessCached)
		ev.cached = append(ev.cached, name)
	}
	ev.sources = append(ev.sources, map[string]any{"name": name, "asOf": asOf.UTC().Format(time.RFC3339), "status": st})
}

func (ev *evaluation) sanctionsFresh() bool {
	return !ev.sanctions.AsOf().Add(ev.ttl).Before(ev.now)
}

// verdict runs the checks and assembles the verdict (docs/policy.md#check-order).
func (ev *evaluation) verdict() *verdict.Verdict {
	v := &verdict.Verdict{
		SchemaVersion: 1,
		Timestamp:     ev.now,
		Checks:        make([]verdict.Check, len(checks)),
	}
	results := make(map[verdict.CheckID]result, len(checks))
	observations := map[string]any{}
	switch {
	case ev.in.Policy == nil || ev.in.Policy.Doc == nil:
		// docs/policy.md#default-deny: an agent without a policy is allowed nothing.
		for _, c := range checks {
			results[c.id] = notChecked("not evaluated: the agent has no policy")
		}
		results[verdict.CheckVenue] = failed(verdict.ReasonVenueNotAllowed, "the agent has no policy, so no venue is allowed", "", nil, nil)
	case ev.decodeErr != nil:
		// docs/policy.md#default-deny: venue and chain report what was readable.
		for _, c := range checks {
			results[c.id] = notChecked("not evaluated: the action could not be decoded")
		}
		if p, ok := ev.in.ProposedTx["protocol"].(string); ok && p != "" {
			results[verdict.CheckVenue] = ev.venueOf(p)
		}
		if c, ok := chainIDOf(ev.in.ProposedTx["chainId"]); ok {
			results[verdict.CheckChain] = ev.chainOf(c)
		}
	default:
		for _, c := range checks {
			results[c.id] = c.run(ev)
		}
	}
	if ev.act != nil {
		ev.notional() // usdNotional is reported whenever the action is priced
	}
	for i, c := range checks {
		r := results[c.id]
		chk := verdict.Check{CheckID: c.id, Status: r.status, HumanReason: r.reason}
		if r.status == verdict.CheckFailed {
			code := r.code
			chk.Code = &code
		}
		if r.field != "" {
			f := r.field
			chk.TriggeringPolicyField = &f
		}
		if r.ran {
			observations[string(c.id)] = map[string]any{"observed": r.obs, "expected": r.exp}
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
		v.HumanReason = "every check passed or did not apply under policy version " + strconv.FormatInt(ev.in.Policy.Version, 10)
		for _, id := range reasonOrder {
			if r := results[id]; r.status == verdict.CheckFailed {
				v.Outcome, v.ReasonCode, v.HumanReason = verdict.OutcomeRejected, r.code, r.reason
				if r.field != "" {
					f := r.field
					v.TriggeringPolicyField = &f
				}
				break
			}
		}
	}
	if ev.in.Policy != nil && ev.in.Policy.Doc != nil {
		pv := ev.in.Policy.Version
		v.PolicyVersion = &pv
	}

	var da map[string]any
	if ev.act != nil {
		da = ev.decodedAction(ev.act)
	} else {
		de := ev.decodeErr
		if de == nil {
			de = &DecodeError{Field: "proposedTx", Problem: "not decoded"}
		}
		da = undecoded(ev.in.ProposedTx, de)
	}
	evSources := make([]any, len(ev.sources))
	dfSources := make([]map[string]any, len(ev.sources))
	for i, s := range ev.sources {
		evSources[i] = s
		dfSources[i] = map[string]any{"name": s["name"], "asOf": s["asOf"], "status": s["status"]}
	}
	v.Evidence = verdict.Evidence{DecodedAction: da, Observations: observations, Sources: evSources}
	v.DataFreshness = verdict.DataFreshness{Overall: ev.overall(), Sources: dfSources}
	v.Trust = ev.trust()
	v.Redaction = redaction(ev.in.Metadata, ev.in.ContextLogs, nil)
	if ev.usd != nil {
		f, _ := ev.usd.Float64()
		v.USDNotional = &f
	}
	return v
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
func (ev *evaluation) trust() verdict.Trust {
	note := func(s string) *string { return &s }
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
