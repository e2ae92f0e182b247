package console

import (
	"maps"
	"math/big"
	"slices"
	"strings"

	"github.com/x402gate/x402gate/facilitator/journal"
)

// The revenue chart's geometry, in SVG user units.
const (
	chartW, chartH = 760, 260
	plotX0, plotX1 = 70, 750
	plotY0, plotY1 = 16, 220
	maxChartDays   = 31
	maxChartRoutes = 8 // more routes are summed as "other routes"
	otherRoutes    = "other routes"
)

// palette colours the routes, in the legend's order; the last is "other routes".
var palette = []string{"#1b6ca8", "#d9822b", "#2e8b57", "#b03a48", "#6a4c93", "#8c6d1f", "#0f7c80", "#c2185b", "#777777"}

// chart is the revenue chart: one stacked bar per day, one colour per route. The journal
// records no route, so a route is the payee and network a payment went to, which is one
// route when each paid route has its own pay_to (docs/console.md#payments).
type chart struct {
	W, H, X0, X1, Y0, Y1 int
	Max                  string // the top of the axis, in units
	Bars                 []bar
	Routes               []routeTotal
}

// bar is one day.
type bar struct {
	Day      string
	LabelX   int
	Segments []segment
}

// segment is one route's revenue on one day.
type segment struct {
	X, Y, W, H int
	Color      string
	Title      string
}

// routeTotal is one route in the legend.
type routeTotal struct {
	Name, Color, Total string
}

// revenueChart sums the settled amounts of rows per day (UTC, by when the settlement was
// journaled) and per route, over the newest maxChartDays days that have any; nil when
// nothing settled.
func revenueChart(rows []journal.Settlement) *chart {
	var settled []journal.Settlement
	raw := map[string]*big.Int{}
	for _, r := range rows {
		if r.State == journal.StateConfirmed && r.Amount != nil {
			settled = append(settled, r)
			add(raw, routeOf(r), r.Amount)
		}
	}
	if len(settled) == 0 {
		return nil
	}
	kept := byRevenue(raw)
	kept = kept[:min(len(kept), maxChartRoutes)]
	perDay := map[string]map[string]*big.Int{} // day → route → base units
	totals := map[string]*big.Int{}
	for _, r := range settled {
		day, route := r.CreatedAt.UTC().Format("2006-01-02"), routeOf(r)
		if !slices.Contains(kept, route) {
			route = otherRoutes
		}
		if perDay[day] == nil {
			perDay[day] = map[string]*big.Int{}
		}
		add(perDay[day], route, r.Amount)
		add(totals, route, r.Amount)
	}
	days := slices.Sorted(maps.Keys(perDay))
	days = days[max(0, len(days)-maxChartDays):]
	routes := byRevenue(totals)
	colour := map[string]string{}
	c := &chart{W: chartW, H: chartH, X0: plotX0, X1: plotX1, Y0: plotY0, Y1: plotY1}
	for i, rt := range routes {
		colour[rt] = palette[i]
		if rt == otherRoutes {
			colour[rt] = palette[len(palette)-1]
		}
		c.Routes = append(c.Routes, routeTotal{Name: rt, Color: colour[rt], Total: units(totals[rt])})
	}
	top := new(big.Int)
	for _, d := range days {
		sum := new(big.Int)
		for _, v := range perDay[d] {
			sum.Add(sum, v)
		}
		if sum.Cmp(top) > 0 {
			top = sum
		}
	}
	c.Max = units(top)
	c.bars(days, perDay, routes, colour, top)
	return c
}

// bars lays out one stacked bar per day, scaled so that the best day reaches the top.
func (c *chart) bars(days []string, perDay map[string]map[string]*big.Int, routes []string, colour map[string]string, top *big.Int) {
	slot := (plotX1 - plotX0) / len(days)
	width := max(slot*7/10, 2)
	for i, d := range days {
		x := plotX0 + i*slot + (slot-width)/2
		b := bar{Day: d[5:], LabelX: x + width/2}
		y := plotY1
		for _, rt := range routes {
			v := perDay[d][rt]
			if v == nil || v.Sign() == 0 {
				continue
			}
			h := scale(v, top, plotY1-plotY0)
			y -= h
			b.Segments = append(b.Segments, segment{X: x, Y: y, W: width, H: h, Color: colour[rt], Title: d + " · " + rt + ": " + units(v)})
		}
		c.Bars = append(c.Bars, b)
	}
}

// scale is v's share of top in span units, at least 1 so that a small amount shows.
func scale(v, top *big.Int, span int) int {
	n := new(big.Int).Mul(v, big.NewInt(int64(span)))
	return max(int(n.Div(n, top).Int64()), 1)
}

// byRevenue lists the routes of totals, the highest revenue first.
func byRevenue(totals map[string]*big.Int) []string {
	return slices.SortedFunc(maps.Keys(totals), func(a, b string) int {
		if c := totals[b].Cmp(totals[a]); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
}

// routeOf names a settlement's route: its payee on its network.
func routeOf(s journal.Settlement) string {
	return s.PayTo.Hex() + " on " + s.Network
}

func add(m map[string]*big.Int, k string, v *big.Int) {
	if m[k] == nil {
		m[k] = new(big.Int)
	}
	m[k].Add(m[k], v)
}
