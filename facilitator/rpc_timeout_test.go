package facilitator

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/x402gate/x402gate/facilitator/txsender"
	"github.com/x402gate/x402gate/internal/testenv"
)

// TestRPCCallsHaveADeadline: with a node that accepts requests and never answers, opening
// an engine under a context with no deadline fails as chain unavailable once RPCTimeout
// ends the chain-id request, instead of hanging (docs/reliability.md#resource-limits). The
// test's own bound only turns a hang into a failure.
func TestRPCCallsHaveADeadline(t *testing.T) {
	env := newTestEnv(t)
	cfg := env.config(t)
	cfg.Networks[0].RPC = testenv.HungRPC(t)
	cfg.RPCTimeout = 200 * time.Millisecond
	done := make(chan error, 1)
	go func() {
		e, err := New(context.Background(), cfg)
		if e != nil {
			e.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, txsender.ErrRPCUnavailable) {
			t.Fatalf("New against a hung node: %v, want the chain unavailable", err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("New against a hung node did not return")
	}
}
