package gate

import (
	"math/big"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/x402gate/x402gate/facilitator"
	"github.com/x402gate/x402gate/x402"
)

// TestPendingRedeemedNearValidBefore: a settlement pending at answer time and mined
// later is redeemed with its retry token even when the authorization is about to expire
// or has expired (within the grace): redemption checks the signature and the exact match
// of the payment, not its time window, so the payer is never charged with nothing served.
// The facilitator and the gate share a clock the test moves.
func TestPendingRedeemedNearValidBefore(t *testing.T) {
	for _, tc := range []struct {
		name   string
		offset time.Duration // from validBefore
	}{
		{"5 s before validBefore", -5 * time.Second},
		{"30 s after validBefore, within the grace", 30 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var clock atomic.Int64 // unix nanoseconds; 0 means the real time
			now := func() time.Time {
				if n := clock.Load(); n != 0 {
					return time.Unix(0, n)
				}
				return time.Now()
			}
			env := newTestEnvWith(t, func(c *facilitator.Config) { c.ReceiptTimeout = facilitator.Duration(time.Second); c.Now = now })
			cfg := env.config()
			cfg.Retry.Grace = time.Minute
			up := &upstream{}
			srv := serve(t, env.gate(t, cfg, Options{Now: now}), up)
			url := srv.URL + "/r"
			before := env.ledger(t, env.payer.Address)
			name, value, p, first := pendingAnswer(t, env, url, x402.Version2)
			env.chain.SetAutomine(t, true)
			env.chain.Mine(t)

			validBefore := time.Unix(new(big.Int).Set(p.Authorization.ValidBefore).Int64(), 0)
			clock.Store(validBefore.Add(tc.offset).UnixNano())
			a := presentToken(t, url, name, value, first.token)
			if a.status != http.StatusOK || a.tx != first.tx {
				t.Fatalf("redemption: %+v, want 200 with %s", a, first.tx)
			}
			if a := presentToken(t, url, name, value, first.token); a.status == http.StatusOK {
				t.Errorf("a second redemption: %+v, want a refusal", a)
			}
			if n := up.calls.Load(); n != 1 {
				t.Errorf("upstream ran %d times, want 1", n)
			}
			env.expectMoved(t, env.payer.Address, before, 1)
		})
	}
}
