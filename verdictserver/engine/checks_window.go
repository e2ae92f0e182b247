package engine

import (
	"errors"
	"strconv"

	"github.com/x402gate/x402gate/verdict"
	"github.com/x402gate/x402gate/verdictserver/policy"
)

// WindowUse is one spend window that applies to an action, as the store found it before
// the action (docs/spend-windows.md#the-check). Amounts are millionths of a USD.
type WindowUse struct {
	Index     int // the window's index in spendWindows.windows
	Window    policy.SpendWindow
	Committed int64 // reported executed
	Reserved  int64 // approved, not reported, not expired
}

// CapMicroUSD is the window's cap in millionths of a USD, rounded down (a cap never
// admits more than its author wrote).
func (u WindowUse) CapMicroUSD() int64 { return MicroUSDFloor(u.Window.CapUSD) }

// Left is what the window still admits, never negative.
func (u WindowUse) Left() int64 { return max(u.CapMicroUSD()-u.Committed-u.Reserved, 0) }

// maxMicroUSD bounds a converted amount: above it (about 9.2e12 USD) int64 millionths
// overflow, and the amount is treated as this bound, which no cap (≤ 1e12 USD) admits.
const maxMicroUSD = 1 << 62

// MicroUSDCeil is usd in millionths of a USD, rounded up (a notional never counts for
// less than it is).
func MicroUSDCeil(usd float64) int64 { return microUSD(usd, true) }

// MicroUSDFloor is usd in millionths of a USD, rounded down.
func MicroUSDFloor(usd float64) int64 { return microUSD(usd, false) }

func microUSD(usd float64, up bool) int64 {
	switch {
	case !(usd >= 0): // NaN or negative
		return 0
	case usd*1e6 >= maxMicroUSD:
		return maxMicroUSD
	}
	m := int64(usd * 1e6)
	if up && float64(m) < usd*1e6 {
		m++
	}
	return m
}

// SpendWindow is the spend_window check (docs/spend-windows.md#the-check) of an action
// that every other check approved: failed with data_unavailable when notional is nil
// (unpriced), failed with spend_window_exceeded on the first window with less room than
// the notional, else passed. The observation lists every window's state before the action.
func SpendWindow(uses []WindowUse, notional *int64) (verdict.Check, Observation) {
	o := &windowsObserved{Windows: make([]windowState, len(uses))}
	caps := make(windowCaps, len(uses))
	for i, u := range uses {
		o.Windows[i] = windowState{Asset: u.Window.Asset, LeftUSD: usdFloat(u.Left()), Period: u.Window.Period,
			ReservedUSD: usdFloat(u.Reserved), UsedUSD: usdFloat(u.Committed)}
		caps[i] = windowCap{Asset: u.Window.Asset, CapUSD: u.Window.CapUSD, Period: u.Window.Period}
	}
	obs := Observation{Expected: caps, Observed: o}
	if notional == nil {
		return windowCheck(verdict.CheckFailed, verdict.ReasonDataUnavailable,
			"the action has no USD price, and spend windows are set", policy.FieldSpendWindows), obs
	}
	n := usdFloat(*notional)
	o.NotionalUSD = &n
	for _, u := range uses {
		if u.Left() < *notional {
			return windowCheck(verdict.CheckFailed, verdict.ReasonSpendWindowExceeded,
				"notional "+microString(*notional)+" USD exceeds what the "+windowName(u.Window)+" window has left, "+microString(u.Left())+" USD of "+microString(u.CapMicroUSD()),
				policy.Field(u.Index)), obs
		}
	}
	return windowCheck(verdict.CheckPassed, "", "notional "+microString(*notional)+" USD fits in every spend window and is reserved", policy.FieldSpendWindows), obs
}

// The spend_window observation (docs/spend-windows.md#the-check) as structs whose JSON is
// that of the maps they stand for ({"notionalUsd", "windows": [{"asset", "leftUsd",
// "period", "reservedUsd", "usedUsd"}]} observed, [{"asset", "capUsd", "period"}] expected;
// members in the order encoding/json writes a map's keys), without a map's allocations and
// sorting (TestSpendWindowCheck holds the JSON to the maps').
type (
	windowsObserved struct {
		NotionalUSD *float64      `json:"notionalUsd,omitempty"` // nil when the action is unpriced
		Windows     []windowState `json:"windows"`
	}
	windowState struct {
		Asset       string  `json:"asset"`
		LeftUSD     float64 `json:"leftUsd"`
		Period      string  `json:"period"`
		ReservedUSD float64 `json:"reservedUsd"`
		UsedUSD     float64 `json:"usedUsd"`
	}
	windowCap struct {
		Asset  string  `json:"asset"`
		CapUSD float64 `json:"capUsd"`
		Period string  `json:"period"`
	}
	windowCaps []windowCap
)

// AppendJSON appends o's JSON, what encoding/json writes for it (a verdict.JSONAppender).
func (o *windowsObserved) AppendJSON(b []byte) ([]byte, error) {
	if o == nil {
		return append(b, "null"...), nil
	}
	b = append(b, '{')
	if o.NotionalUSD != nil {
		var err error
		if b, err = verdict.AppendJSONFloat(append(b, `"notionalUsd":`...), *o.NotionalUSD); err != nil {
			return b, err
		}
		b = append(b, ',')
	}
	b, err := verdict.AppendJSONArray(append(b, `"windows":`...), o.Windows, appendWindowState)
	return append(b, '}'), err
}

func appendWindowState(b []byte, w windowState) ([]byte, error) {
	b = verdict.AppendJSONString(append(b, `{"asset":`...), w.Asset)
	b, left := verdict.AppendJSONFloat(append(b, `,"leftUsd":`...), w.LeftUSD)
	b = verdict.AppendJSONString(append(b, `,"period":`...), w.Period)
	b, reserved := verdict.AppendJSONFloat(append(b, `,"reservedUsd":`...), w.ReservedUSD)
	b, used := verdict.AppendJSONFloat(append(b, `,"usedUsd":`...), w.UsedUSD)
	return append(b, '}'), errors.Join(left, reserved, used)
}

// AppendJSON appends c's JSON, what encoding/json writes for it (a verdict.JSONAppender).
func (c windowCaps) AppendJSON(b []byte) ([]byte, error) {
	return verdict.AppendJSONArray(b, c, appendWindowCap)
}

func appendWindowCap(b []byte, w windowCap) ([]byte, error) {
	b = verdict.AppendJSONString(append(b, `{"asset":`...), w.Asset)
	b, err := verdict.AppendJSONFloat(append(b, `,"capUsd":`...), w.CapUSD)
	return append(verdict.AppendJSONString(append(b, `,"period":`...), w.Period), '}'), err
}

// SpendWindowNotChecked is the spend_window check of an action another check rejected.
func SpendWindowNotChecked() verdict.Check {
	return windowCheck(verdict.CheckNotChecked, "", "not evaluated: another check rejected the action", "")
}

func windowCheck(status verdict.CheckStatus, code verdict.ReasonCode, reason, field string) verdict.Check {
	c := verdict.Check{CheckID: verdict.CheckSpendWindow, Status: status, HumanReason: reason}
	if code != "" {
		c.Code = &code
	}
	if field != "" {
		c.TriggeringPolicyField = &field
	}
	return c
}

// windowName names a window for a person: "day" or "day USDC-token".
func windowName(w policy.SpendWindow) string {
	if w.Asset == "" {
		return w.Period
	}
	return w.Period + " " + w.Asset
}

// usdFloat is millionths of a USD in USD, for an observation.
func usdFloat(m int64) float64 { return float64(m) / 1e6 }

// microString is millionths of a USD as a decimal string with six places.
func microString(m int64) string {
	s := strconv.FormatInt(m/1e6, 10) + "."
	frac := strconv.FormatInt(m%1e6, 10)
	for len(frac) < 6 {
		frac = "0" + frac
	}
	return s + frac
}
