package engine

import (
	"math"
	"testing"

	"github.com/x402gate/x402gate/internal/testenv"
	"github.com/x402gate/x402gate/verdict"
	"github.com/x402gate/x402gate/verdictserver/policy"
)

func TestMicroUSDRounding(t *testing.T) {
	for _, tc := range []struct {
		usd         float64
		ceil, floor int64
	}{
		{10, 10_000_000, 10_000_000},
		{0.01, 10_000, 10_000},
		{10.0000015, 10_000_002, 10_000_001}, // a notional counts up, a cap down
		{0.0000001, 1, 0},
		{0, 0, 0},
		{-1, 0, 0},
		{math.NaN(), 0, 0},
		{1e13, maxMicroUSD, maxMicroUSD},
		{math.Inf(1), maxMicroUSD, maxMicroUSD},
	} {
		if c, f := MicroUSDCeil(tc.usd), MicroUSDFloor(tc.usd); c != tc.ceil || f != tc.floor {
			t.Errorf("%v USD: ceil %d floor %d, want %d %d", tc.usd, c, f, tc.ceil, tc.floor)
		}
	}
}

func TestSpendWindowCheck(t *testing.T) {
	day := policy.SpendWindow{Period: "day", CapUSD: 150}
	hour := policy.SpendWindow{Period: "hour", CapUSD: 20, Asset: "0x036CbD53842c5426634e7929541eC2318f3dCF7e"}
	ten := int64(10_000_000)
	for _, tc := range []struct {
		name     string
		uses     []WindowUse
		notional *int64
		status   verdict.CheckStatus
		code     verdict.ReasonCode
		field    string
	}{
		{"room in every window passes", []WindowUse{{0, day, 100_000_000, 40_000_000}, {1, hour, 0, 10_000_000}}, &ten, verdict.CheckPassed, "", "spendWindows.windows"},
		{"exactly the room left passes", []WindowUse{{0, day, 140_000_000, 0}}, &ten, verdict.CheckPassed, "", "spendWindows.windows"},
		{"reserved counts like committed", []WindowUse{{0, day, 0, 140_000_001}}, &ten, verdict.CheckFailed, verdict.ReasonSpendWindowExceeded, "spendWindows.windows.0"},
		{"the first full window names itself", []WindowUse{{0, day, 0, 0}, {3, hour, 15_000_000, 0}}, &ten, verdict.CheckFailed, verdict.ReasonSpendWindowExceeded, "spendWindows.windows.3"},
		{"over the cap leaves nothing, never less", []WindowUse{{0, day, 200_000_000, 0}}, new(int64), verdict.CheckPassed, "", "spendWindows.windows"},
		{"unpriced is data_unavailable", []WindowUse{{0, day, 0, 0}}, nil, verdict.CheckFailed, verdict.ReasonDataUnavailable, "spendWindows.windows"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, obs := SpendWindow(tc.uses, tc.notional)
			if c.CheckID != verdict.CheckSpendWindow || c.Status != tc.status || *c.TriggeringPolicyField != tc.field {
				t.Fatalf("check %+v, want %s on %s", c, tc.status, tc.field)
			}
			if (c.Code == nil) != (tc.code == "") || c.Code != nil && *c.Code != tc.code {
				t.Fatalf("code %v, want %q", c.Code, tc.code)
			}
			want := testenv.JSON(t, windowsAsMaps(tc.uses, tc.notional))
			if got := testenv.JSON(t, obs); got != want {
				t.Fatalf("observation %s, want %s", got, want)
			}
			if got, err := obs.AppendJSON(nil); err != nil || string(got) != want {
				t.Fatalf("observation's AppendJSON %s (%v), want %s", got, err, want)
			}
		})
	}
}

// windowsAsMaps is the spend_window observation of uses as maps, as the check first wrote it:
// the JSON its structs must keep.
func windowsAsMaps(uses []WindowUse, notional *int64) map[string]any {
	observed := make([]map[string]any, len(uses))
	caps := make([]map[string]any, len(uses))
	for i, u := range uses {
		observed[i] = map[string]any{
			"period": u.Window.Period, "asset": u.Window.Asset, "usedUsd": float64(u.Committed) / 1e6,
			"reservedUsd": float64(u.Reserved) / 1e6, "leftUsd": float64(u.Left()) / 1e6,
		}
		caps[i] = map[string]any{"period": u.Window.Period, "asset": u.Window.Asset, "capUsd": u.Window.CapUSD}
	}
	obs := map[string]any{"windows": observed}
	if notional != nil {
		obs["notionalUsd"] = float64(*notional) / 1e6
	}
	return map[string]any{"expected": caps, "observed": obs}
}
