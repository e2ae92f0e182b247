package paygate

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/x402gate/x402gate/verdictserver"
)

// ourSeries is every series our collectors export, the gate's and the verdict service's
// (registerMetrics, verdictserver.Server.Collectors), by name, with its labels (a histogram's
// _bucket with le, _sum and _count), and every metric's own name.
func ourSeries(t *testing.T) (map[string][]string, []string) {
	t.Helper()
	fq := regexp.MustCompile(`^Desc\{fqName: "([^"]+)", .*variableLabels: \{([^}]*)\}\}$`)
	out := map[string][]string{}
	var names []string
	for _, c := range append(slices.Clone(collectors), new(verdictserver.Server).Collectors()...) {
		ch := make(chan *prometheus.Desc, 4)
		go func() { c.Describe(ch); close(ch) }()
		for d := range ch {
			m := fq.FindStringSubmatch(d.String())
			if m == nil {
				t.Fatalf("cannot read the collector's description %s", d)
			}
			names = append(names, m[1])
			var labels []string
			if m[2] != "" {
				labels = strings.Split(m[2], ",")
			}
			switch c.(type) {
			case prometheus.Histogram, *prometheus.HistogramVec:
				out[m[1]+"_bucket"] = append(slices.Clone(labels), "le")
				out[m[1]+"_sum"], out[m[1]+"_count"] = labels, labels
			default:
				out[m[1]] = labels
			}
		}
	}
	return out, names
}

// queryRefs is what a PromQL expression (or a Grafana label_values query) names: its
// metrics, the labels it matches on each, and the labels it groups by.
type queryRefs struct {
	metrics  []string
	matchers map[string][]string // metric -> labels of its matchers
	grouping []string
}

var (
	labelValues = regexp.MustCompile(`^label_values\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)\s*,\s*([a-zA-Z_]\w*)\s*\)$`)
	quoted      = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)
	selector    = regexp.MustCompile(`([a-zA-Z_:][a-zA-Z0-9_:]*)?\s*\{([^}]*)\}`)
	matcher     = regexp.MustCompile(`([a-zA-Z_]\w*)\s*(?:=~|!~|!=|=)`)
	rangeSel    = regexp.MustCompile(`\[[^\]]*\]`)
	grouping    = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)`)
	identifier  = regexp.MustCompile(`\$?\b[a-zA-Z_:][a-zA-Z0-9_:]*`)
	keywords    = []string{"and", "or", "unless", "offset", "bool"}
)

// parseQuery reads the references of one query.
func parseQuery(q string) queryRefs {
	r := queryRefs{matchers: map[string][]string{}}
	if m := labelValues.FindStringSubmatch(strings.TrimSpace(q)); m != nil {
		r.metrics, r.grouping = []string{m[1]}, []string{m[2]}
		return r
	}
	q = quoted.ReplaceAllString(q, `""`)
	for _, m := range selector.FindAllStringSubmatch(q, -1) {
		for _, l := range matcher.FindAllStringSubmatch(m[2], -1) {
			r.matchers[m[1]] = append(r.matchers[m[1]], l[1])
		}
	}
	q = rangeSel.ReplaceAllString(selector.ReplaceAllString(q, "$1"), "")
	for _, m := range grouping.FindAllStringSubmatch(q, -1) {
		for _, l := range strings.Split(m[1], ",") {
			if l = strings.TrimSpace(l); l != "" {
				r.grouping = append(r.grouping, l)
			}
		}
	}
	q = grouping.ReplaceAllString(q, "")
	for _, loc := range identifier.FindAllStringIndex(q, -1) {
		id, rest := q[loc[0]:loc[1]], strings.TrimSpace(q[loc[1]:])
		if strings.HasPrefix(id, "$") || strings.HasPrefix(rest, "(") || slices.Contains(keywords, id) {
			continue // a Grafana variable, a function or aggregation, a keyword
		}
		r.metrics = append(r.metrics, id)
	}
	return r
}

// dashboardQueries is every query of the dashboard's panels and template variables, by
// where it is.
func dashboardQueries(t *testing.T, path string) map[string]string {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string
			Type    string
			Targets []struct{ Expr string }
		}
		Templating struct {
			List []struct {
				Name, Type, Definition string
			}
		}
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatal(err)
	}
	qs := map[string]string{}
	for _, p := range d.Panels {
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for i, tg := range p.Targets {
			qs[p.Title+" #"+string(rune('A'+i))] = tg.Expr
		}
	}
	for _, v := range d.Templating.List {
		if v.Type == "query" {
			qs["variable "+v.Name] = v.Definition
		}
	}
	return qs
}

// TestDashboardQueriesOurMetrics: every query of the Grafana dashboard
// (docs/grafana/x402gate.json, docs/grafana.md) names at least one metric, and each metric
// it names is a series our collectors export, matched and grouped only by labels it has;
// every metric we export is on the dashboard.
func TestDashboardQueriesOurMetrics(t *testing.T) {
	series, names := ourSeries(t)
	used := map[string]bool{}
	qs := dashboardQueries(t, "../../docs/grafana/x402gate.json")
	if len(qs) == 0 {
		t.Fatal("the dashboard has no query")
	}
	for where, q := range qs {
		r := parseQuery(q)
		if len(r.metrics) == 0 {
			t.Errorf("%s: %q names no metric", where, q)
		}
		var labels []string
		for _, m := range r.metrics {
			ls, ok := series[m]
			if !ok {
				t.Errorf("%s: %q queries %s, which our code does not export", where, q, m)
			}
			used[strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(m, "_bucket"), "_sum"), "_count")] = true
			labels = append(labels, ls...)
			for _, l := range r.matchers[m] {
				if !slices.Contains(ls, l) {
					t.Errorf("%s: %q matches %s on label %q, which it does not have (%v)", where, q, m, l, ls)
				}
			}
		}
		for _, l := range r.grouping {
			if !slices.Contains(labels, l) {
				t.Errorf("%s: %q groups by %q, which none of its metrics has", where, q, l)
			}
		}
	}
	for _, name := range names {
		if !used[name] {
			t.Errorf("the dashboard shows no panel of %s", name)
		}
	}
}
