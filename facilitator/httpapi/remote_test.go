package httpapi

import (
	"testing"

	"github.com/x402gate/x402gate/facilitator"
)

// NewHandler serves a *facilitator.Service only through its Remote view.
func TestProofHandlerServesRemote(t *testing.T) {
	env := newTestEnv(t)
	e := env.engine(t, func(*facilitator.Config) {})
	h := NewHandler(e, HandlerOptions{APIKey: apiTestKey, Registry: env.reg}).(*apiHandler)
	if _, ok := h.backend.(*facilitator.Remote); !ok {
		t.Fatalf("backend is %T, want *facilitator.Remote", h.backend)
	}
}
