package policy

import (
	"strconv"
	"strings"
	"time"
)

// SpendWindows is the spendWindows section (docs/spend-windows.md#policy): rolling USD caps
// over what the agent's approvals move.
type SpendWindows struct {
	// ReservationTTLSeconds is how long an unreported approval's reservation counts; 0
	// means DefaultReservationTTL.
	ReservationTTLSeconds int64 `json:"reservationTtlSeconds,omitempty"`
	// Windows lists the caps; every one that applies to an action must have room for it.
	Windows []SpendWindow `json:"windows"`
}

// SpendWindow is one item of spendWindows.windows.
type SpendWindow struct {
	// Period is hour, day, week or month.
	Period string `json:"period"`
	// CapUSD is the most USD the window's approvals may move (>= 0).
	CapUSD float64 `json:"capUsd"`
	// Asset, when set, limits the window to actions that touch this token, as written.
	Asset string `json:"asset,omitempty"`
}

// DefaultReservationTTL is how long a reservation counts when the policy does not say
// (docs/spend-windows.md#reserve-then-commit).
const DefaultReservationTTL = 15 * time.Minute

// FieldSpendWindows is the dotted path of the windows, the spend_window check's
// triggeringPolicyField prefix.
const FieldSpendWindows = "spendWindows.windows"

// periods are the window lengths (docs/spend-windows.md#policy); a month is 30 days.
var periods = map[string]time.Duration{
	"hour":  time.Hour,
	"day":   24 * time.Hour,
	"week":  7 * 24 * time.Hour,
	"month": 30 * 24 * time.Hour,
}

// Span is the window's length; 0 for a period Parse refuses.
func (w SpendWindow) Span() time.Duration { return periods[w.Period] }

// Scope is the window's asset in lower-case hex, or "" for a window over every action.
func (w SpendWindow) Scope() string { return strings.ToLower(w.Asset) }

// Field is the dotted path of window i.
func Field(i int) string { return FieldSpendWindows + "." + strconv.Itoa(i) }

// ReservationTTL is how long an unreported reservation counts.
func (s *SpendWindows) ReservationTTL() time.Duration {
	if s.ReservationTTLSeconds <= 0 {
		return DefaultReservationTTL
	}
	return time.Duration(s.ReservationTTLSeconds) * time.Second
}

// windowProblems is docs/policy.md#validation for spendWindows beyond the schema: each
// asset a valid address, and each (period, asset) once.
func windowProblems(doc map[string]any) []Problem {
	sec, ok := section(doc, "spendWindows")
	if !ok {
		return nil
	}
	arr, _ := sec["windows"].([]any)
	var ps []Problem
	seen := map[string]int{}
	for i, item := range arr {
		w, _ := item.(map[string]any)
		period, _ := w["period"].(string)
		asset, _ := w["asset"].(string)
		if asset != "" {
			a, problem := address(asset)
			if problem != "" {
				ps = append(ps, Problem{Field: join(Field(i), "asset"), Problem: problem})
				continue
			}
			asset = strings.ToLower(a.Hex())
		}
		key := period + " " + asset
		if j, dup := seen[key]; dup {
			ps = append(ps, Problem{Field: Field(i), Problem: "repeats the period and asset of item " + strconv.Itoa(j)})
			continue
		}
		seen[key] = i
	}
	return ps
}
