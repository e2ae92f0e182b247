package policy

import (
	"errors"
	"testing"
	"time"
)

func TestParseSpendWindows(t *testing.T) {
	d, err := Parse([]byte(`{"spendWindows": {"windows": [
		{"period": "hour", "capUsd": 20},
		{"period": "day", "capUsd": 150},
		{"period": "week", "capUsd": 500, "asset": "` + usdcBase + `"},
		{"period": "month", "capUsd": 0.5}]}}`))
	if err != nil {
		t.Fatal(err)
	}
	ws := d.SpendWindows.Windows
	want := []time.Duration{time.Hour, 24 * time.Hour, 7 * 24 * time.Hour, 30 * 24 * time.Hour}
	for i, w := range ws {
		if w.Span() != want[i] {
			t.Errorf("window %d spans %s, want %s", i, w.Span(), want[i])
		}
	}
	if ws[2].Scope() != "0x833589fcd6edb6e08f4c7c32d4f71b54bda02913" || ws[0].Scope() != "" {
		t.Errorf("scopes %q %q", ws[2].Scope(), ws[0].Scope())
	}
	if d.SpendWindows.ReservationTTL() != DefaultReservationTTL {
		t.Errorf("default reservation TTL %s", d.SpendWindows.ReservationTTL())
	}
}

func TestParseRefusesBadSpendWindows(t *testing.T) {
	for _, tc := range []struct{ name, doc, field string }{
		{"an unknown period", `{"spendWindows": {"windows": [{"period": "fortnight", "capUsd": 1}]}}`, "spendWindows.windows.0.period"},
		{"a negative cap", `{"spendWindows": {"windows": [{"period": "day", "capUsd": -1}]}}`, "spendWindows.windows.0.capUsd"},
		{"no windows", `{"spendWindows": {"windows": []}}`, "spendWindows.windows"},
		{"a bad checksum", `{"spendWindows": {"windows": [{"period": "day", "capUsd": 1, "asset": "` + badSum + `"}]}}`, "spendWindows.windows.0.asset"},
		{"one period and asset twice, in any case", `{"spendWindows": {"windows": [
			{"period": "day", "capUsd": 1, "asset": "` + payee + `"},
			{"period": "day", "capUsd": 2, "asset": "` + payeeLower + `"}]}}`, "spendWindows.windows.1"},
		{"a zero reservation TTL", `{"spendWindows": {"reservationTtlSeconds": 0, "windows": [{"period": "day", "capUsd": 1}]}}`, "spendWindows.reservationTtlSeconds"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.doc))
			var es *Errors
			if !errors.As(err, &es) {
				t.Fatalf("accepted: %v", err)
			}
			for _, p := range es.Problems {
				if p.Field == tc.field {
					return
				}
			}
			t.Fatalf("problems %v do not name %s", es.Problems, tc.field)
		})
	}
}
