package gate_test

import (
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/x402gate/x402gate/gate"
	"github.com/x402gate/x402gate/gate/gatetest"
)

// TestPriceWarnings: a USDC price above what x402 clients pay by default is logged as a
// warning when the gate starts; one they pay is not.
func TestPriceWarnings(t *testing.T) {
	for _, tc := range []struct {
		price, want string
	}{
		{"0.01 USDC", ""},
		{"0.1 USDC", ""},
		{"0.5 USDC", "x402 price above 0.1 USDC: x402-fetch v1 clients refuse it by default (v2 clients pay up to $1)"},
		{"1 USDC", "x402 price above 0.1 USDC: x402-fetch v1 clients refuse it by default (v2 clients pay up to $1)"},
		{"1.01 USDC", "x402 price above 1 USDC: x402 v2 clients refuse more than $1 per payment by default, and x402-fetch v1 more than 0.1 USDC"},
	} {
		t.Run(tc.price, func(t *testing.T) {
			core, logs := observer.New(zapcore.WarnLevel)
			cfg := rulesRoute()
			cfg.Price = tc.price
			if _, err := gate.New(cfg, gate.Options{Facilitator: gatetest.NewFacilitator(), Logger: zap.New(core)}); err != nil {
				t.Fatal(err)
			}
			got := logs.FilterMessage(tc.want).All()
			switch {
			case tc.want == "" && logs.Len() != 0:
				t.Errorf("warned: %v", logs.All()[0].Message)
			case tc.want != "" && (len(got) != 1 || got[0].ContextMap()["price"] != tc.price):
				t.Errorf("warnings %v, want one %q with price %q", logs.All(), tc.want, tc.price)
			}
		})
	}
}
