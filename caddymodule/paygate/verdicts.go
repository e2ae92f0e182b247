package paygate

import (
	"fmt"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"go.uber.org/zap"

	"github.com/x402gate/x402gate/facilitator"
	"github.com/x402gate/x402gate/gate"
	"github.com/x402gate/x402gate/verdictclient"
	"github.com/x402gate/x402gate/x402"
)

// newVerdicts builds the verdict service client of a bundled facilitator, timed for
// caddy_x402_verdict_duration_seconds. Without verdict_url there is none: resolve has
// already refused a guardian_mode other than off without it (fail closed).
func newVerdicts(rc *facilitator.Config, reg *x402.Registry, log *zap.Logger) (facilitator.Verdicts, error) {
	if rc.VerdictURL == "" {
		return nil, nil
	}
	vc, err := facilitator.NewVerdictClient(facilitator.VerdictClientConfig{
		BaseURL: rc.VerdictURL,
		APIKey:  rc.VerdictKey,
		Signer:  common.HexToAddress(rc.VerdictSigner), // valid or empty: checked by Validate
		Poll:    pollOptions(rc),
		Assets:  reg,
		Logger:  log,
	})
	if err != nil {
		return nil, fmt.Errorf("verdict_url/verdict_key: %w", err) // never quotes the key
	}
	return reportingVerdicts{meteredVerdicts{next: vc}, vc}, nil
}

// reportingVerdicts is the timed verdict client that also reports settled payments
// (docs/spend-windows.md#reporting).
type reportingVerdicts struct {
	meteredVerdicts
	facilitator.ExecutionReporter
}

var _ facilitator.ExecutionReporter = reportingVerdicts{}

// pollOptions is how the bundled facilitator of rc polls for a verdict.
func pollOptions(rc *facilitator.Config) verdictclient.PollOptions {
	p := rc.VerdictPoll
	if p == nil {
		return verdictclient.PollOptions{}
	}
	return verdictclient.PollOptions{
		IntervalMs:  int(time.Duration(p.Interval) / time.Millisecond),
		MaxAttempts: p.MaxAttempts,
		MaxDelay:    time.Duration(p.MaxDelay),
	}
}

// verifyTimeout is how long a gate waits for one /verify of the bundled facilitator of
// rc: the default, or, when the facilitator asks for verdicts, long enough for the whole
// verdict poll (its delays, a submit and a last read at the client's timeout) and a
// verification fee's receipt, so a slow verdict ends as the verdict service's own timeout
// rather than the gate's (docs/gate.md#guardian).
func verifyTimeout(rc *facilitator.Config) time.Duration {
	if rc.VerdictMode == "" || rc.VerdictMode == facilitator.VerdictOff {
		return gate.DefaultVerifyTimeout
	}
	receipt := time.Duration(rc.ReceiptTimeout)
	if receipt <= 0 {
		receipt = facilitator.DefaultReceiptTimeout
	}
	return max(gate.DefaultVerifyTimeout, pollOptions(rc).Bound()+2*verdictclient.DefaultTimeout+receipt)
}
