package facilitator

import (
	"context"
	"errors"
	"math/big"
	"net/http"
	"time"

	"go.uber.org/zap"

	"github.com/x402gate/x402gate/verdictclient"
	"github.com/x402gate/x402gate/x402"
)

// ExecutionReporter is a Verdicts that can tell the verdict service an approved payment was
// settled, so that its spend reservation is committed (docs/spend-windows.md#reporting).
// VerdictClient is one.
type ExecutionReporter interface {
	ReportExecution(ctx context.Context, requestHash string, executed bool) error
	// ReportMoved reports that the payment moved amount of its action's amount (an upto
	// settle): the service commits that share and releases the rest, or all of it for 0.
	ReportMoved(ctx context.Context, requestHash string, amount *big.Int) error
}

var _ ExecutionReporter = (*VerdictClient)(nil)

// ReportExecution reports through the verdict client's agent key.
func (c *VerdictClient) ReportExecution(ctx context.Context, requestHash string, executed bool) error {
	_, err := c.g.Client().ReportExecution(ctx, requestHash, executed)
	return err
}

// ReportMoved reports an upto settle's amount through the verdict client's agent key.
func (c *VerdictClient) ReportMoved(ctx context.Context, requestHash string, amount *big.Int) error {
	_, err := c.g.Client().ReportMoved(ctx, requestHash, amount)
	return err
}

// reportBound bounds the report of a settled payment, which the settle's answer waits for.
const reportBound = 2 * time.Second

// reportSettled tells the verdict service that the payment its verdict requestHash approved
// is settled on chain (docs/spend-windows.md#reporting): moved is nil for a payment that moved
// its whole amount, else what an upto settle moved of its maximum, 0 included, so that the
// service commits only that and releases the rest. A key without verdicts:release:own may not
// commit less than the maximum (403), and a verdict service older than the amount member
// refuses it (400): the whole maximum is then committed, since money moved (a settle of 0 is
// left to expire). A refused or failed settle is not reported: its
// reservation expires. A failed report is logged and changes nothing for the payer; under a
// policy without spend windows the service answers 404, which is expected.
func (e *Service) reportSettled(ctx context.Context, requestHash string, moved *big.Int) {
	r, ok := e.cfg.Verdicts.(ExecutionReporter)
	if !ok || requestHash == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), reportBound)
	defer cancel()
	var err error
	if moved != nil {
		err = r.ReportMoved(ctx, requestHash, moved)
		var se *verdictclient.StatusError
		if errors.As(err, &se) && (se.Status == http.StatusForbidden || se.Status == http.StatusBadRequest) && moved.Sign() > 0 {
			err = r.ReportExecution(ctx, requestHash, true)
		}
	} else {
		err = r.ReportExecution(ctx, requestHash, true)
	}
	if err != nil {
		e.log.Debug("report settlement to the verdict service", zap.String("requestHash", requestHash), zap.Error(err))
	}
}

// movedOf is what a settle of p moves for the verdict service's report: nil (the action's
// whole amount) except for upto, whose settle moves r.Amount of the signed maximum.
func movedOf(p *x402.Payment, r *x402.Requirements) *big.Int {
	if p.Scheme != x402.SchemeUpto {
		return nil
	}
	return r.Amount
}
