package facilitator

import (
	"context"
	"time"

	"go.uber.org/zap"
)

// ExecutionReporter is a Verdicts that can tell the verdict service an approved payment was
// settled, so that its spend reservation is committed (docs/spend-windows.md#reporting).
// VerdictClient is one.
type ExecutionReporter interface {
	ReportExecution(ctx context.Context, requestHash string, executed bool) error
}

var _ ExecutionReporter = (*VerdictClient)(nil)

// ReportExecution reports through the verdict client's agent key.
func (c *VerdictClient) ReportExecution(ctx context.Context, requestHash string, executed bool) error {
	_, err := c.g.Client().ReportExecution(ctx, requestHash, executed)
	return err
}

// reportBound bounds the report of a settled payment, which the settle's answer waits for.
const reportBound = 2 * time.Second

// reportSettled tells the verdict service that the payment its verdict requestHash approved
// is settled on chain (docs/spend-windows.md#reporting). A refused or failed settle is not
// reported: its reservation expires. A failed report is logged and changes nothing for the
// payer; under a policy without spend windows the service answers 404, which is expected.
func (e *Service) reportSettled(ctx context.Context, requestHash string) {
	r, ok := e.cfg.Verdicts.(ExecutionReporter)
	if !ok || requestHash == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), reportBound)
	defer cancel()
	if err := r.ReportExecution(ctx, requestHash, true); err != nil {
		e.log.Debug("report settlement to the verdict service", zap.String("requestHash", requestHash), zap.Error(err))
	}
}
