package facilitator

import (
	"context"
	"fmt"
	"math/big"
	"net/http"
	"slices"
	"testing"

	"go.uber.org/zap"

	"github.com/x402gate/x402gate/verdict"
	"github.com/x402gate/x402gate/verdictclient"
	"github.com/x402gate/x402gate/x402"
)

// reports is a Verdicts and ExecutionReporter that records the reports it gets; a report of
// less than the maximum is refused 403 unless it may release, as the verdict service does,
// or 400 by an older service (refusal set).
type reports struct {
	mayRelease bool
	refusal    int
	got        []string
}

func (r *reports) VerifyPayment(context.Context, *x402.Payment, *x402.Requirements) (verdict.GuardianResult, error) {
	return verdict.GuardianResult{}, nil
}

func (r *reports) ReportExecution(_ context.Context, hash string, executed bool) error {
	r.got = append(r.got, fmt.Sprintf("%s executed %v", hash, executed))
	return nil
}

func (r *reports) ReportMoved(_ context.Context, hash string, amount *big.Int) error {
	r.got = append(r.got, fmt.Sprintf("%s moved %s", hash, amount))
	if r.refusal != 0 {
		return &verdictclient.StatusError{Op: "report execution", Status: r.refusal, RequestHash: hash}
	}
	if !r.mayRelease {
		return &verdictclient.StatusError{Op: "report execution", Status: http.StatusForbidden, RequestHash: hash}
	}
	return nil
}

// TestReportSettledCarriesWhatMoved: an exact settle is reported executed; an upto settle
// with the amount it moved, 0 included. A key that may not release (403) falls back to
// committing the whole maximum for a partial settle, since money moved, and leaves a settle
// of 0 to expire (docs/spend-windows.md#reporting).
func TestReportSettledCarriesWhatMoved(t *testing.T) {
	for _, tc := range []struct {
		name       string
		mayRelease bool
		moved      *big.Int
		want       []string
		refusal    int
	}{
		{"exact", false, nil, []string{"0xh executed true"}, 0},
		{"upto, with verdicts:release:own", true, big.NewInt(3700), []string{"0xh moved 3700"}, 0},
		{"upto of 0, with verdicts:release:own", true, big.NewInt(0), []string{"0xh moved 0"}, 0},
		{"upto, without: the maximum is committed", false, big.NewInt(3700), []string{"0xh moved 3700", "0xh executed true"}, 0},
		{"upto of 0, without: left to expire", false, big.NewInt(0), []string{"0xh moved 0"}, 0},
		{"upto, to a service without the amount member (400): the maximum is committed", true, big.NewInt(3700), []string{"0xh moved 3700", "0xh executed true"}, http.StatusBadRequest},
		{"upto, a transaction without a reservation (404): nothing more", true, big.NewInt(3700), []string{"0xh moved 3700"}, http.StatusNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &reports{mayRelease: tc.mayRelease, refusal: tc.refusal}
			e := &Service{cfg: Config{Verdicts: r}, log: zap.NewNop()}
			e.reportSettled(t.Context(), "0xh", tc.moved)
			if !slices.Equal(r.got, tc.want) {
				t.Errorf("reported %q, want %q", r.got, tc.want)
			}
		})
	}
}
