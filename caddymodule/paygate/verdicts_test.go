package paygate

import (
	"testing"
	"time"

	"github.com/x402gate/x402gate/facilitator"
	"github.com/x402gate/x402gate/gate"
)

// TestVerifyDeadlineCoversTheVerdictPoll: a gate's /verify deadline must outlast the
// verdict poll of its facilitator, or a slow but valid verdict always ends as the gate's
// timeout. With the default poll (87 s of delays) it was 30 s.
func TestVerifyDeadlineCoversTheVerdictPoll(t *testing.T) {
	for _, tc := range []struct {
		name    string
		rc      facilitator.Config
		atLeast time.Duration
		exactly time.Duration
	}{
		{"guardian off keeps the default", facilitator.Config{VerdictMode: facilitator.VerdictOff}, 0, gate.DefaultVerifyTimeout},
		{"guardian required, default poll", facilitator.Config{VerdictMode: facilitator.VerdictRequired}, 87 * time.Second, 0},
		{"guardian optional, a longer poll", facilitator.Config{VerdictMode: facilitator.VerdictOptional,
			VerdictPoll: &facilitator.VerdictPollConfig{Interval: facilitator.Duration(2 * time.Second), MaxAttempts: 40, MaxDelay: facilitator.Duration(10 * time.Second)}}, 360 * time.Second, 0},
		{"a short poll never goes below the default", facilitator.Config{VerdictMode: facilitator.VerdictRequired,
			VerdictPoll: &facilitator.VerdictPollConfig{Interval: facilitator.Duration(10 * time.Millisecond), MaxAttempts: 2}}, gate.DefaultVerifyTimeout, 0},
	} {
		got := verifyTimeout(&tc.rc)
		if (tc.exactly != 0 && got != tc.exactly) || got < tc.atLeast {
			t.Errorf("%s: verify deadline %v; want %v", tc.name, got, max(tc.exactly, tc.atLeast))
		}
		if tc.rc.VerdictMode != facilitator.VerdictOff && got <= pollOptions(&tc.rc).Bound() {
			t.Errorf("%s: verify deadline %v does not outlast the poll bound %v", tc.name, got, pollOptions(&tc.rc).Bound())
		}
	}
}
