package caddymodule

import (
	"errors"

	"github.com/x402gate/x402gate/facilitator"
)

// newVerdicts builds the verdict service client of a bundled facilitator, timed for
// caddy_x402_verdict_duration_seconds. Without verdict_url there is none (guardian_mode
// off, checked in resolve).
func newVerdicts(rc *resolved) (facilitator.Verdicts, error) {
	if rc.VerdictURL == "" {
		return nil, nil
	}
	return nil, errors.New("verdict client: not wired yet")
}
