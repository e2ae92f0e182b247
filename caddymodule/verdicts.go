package caddymodule

import (
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/x402gate/x402gate/facilitator"
	"github.com/x402gate/x402gate/verdictclient"
	"github.com/x402gate/x402gate/x402"
)

// newVerdicts builds the verdict service client of a bundled facilitator, timed for
// caddy_x402_verdict_duration_seconds. Without verdict_url there is none: resolve has
// already refused a guardian_mode other than off without it (fail closed).
func newVerdicts(rc *resolved, reg *x402.Registry, log *zap.Logger) (facilitator.Verdicts, error) {
	if rc.VerdictURL == "" {
		return nil, nil
	}
	vc, err := facilitator.NewVerdictClient(facilitator.VerdictClientConfig{
		BaseURL: rc.VerdictURL,
		APIKey:  rc.VerdictKey,
		Poll: verdictclient.PollOptions{
			IntervalMs:  int(rc.PollInterval / time.Millisecond),
			MaxAttempts: rc.PollAttempts,
			MaxDelay:    rc.PollMaxDelay,
		},
		Assets: reg,
		Logger: log,
	})
	if err != nil {
		return nil, fmt.Errorf("verdict_url/verdict_key: %w", err) // never quotes the key
	}
	return meteredVerdicts{next: vc}, nil
}
