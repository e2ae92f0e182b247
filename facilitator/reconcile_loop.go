package facilitator

import (
	"context"
	"time"

	"go.uber.org/zap"
)

// RunReconcile runs ReconcileIdle every interval (DefaultReconcileInterval when it is not
// positive) until ctx is done, and returns then, after the run in progress: late receipts
// and transactions stuck under a risen base fee are finished while the engine serves
// (docs/facilitator.md#reconcile). A run's error is logged; the journal keeps every row
// for the next run.
func (e *Service) RunReconcile(ctx context.Context, interval time.Duration) {
	if interval <= 0 {
		interval = DefaultReconcileInterval
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if _, err := e.ReconcileIdle(ctx); err != nil && ctx.Err() == nil {
			e.log.Error("periodic reconcile", zap.Error(err))
		}
	}
}
