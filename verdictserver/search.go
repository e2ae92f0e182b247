package verdictserver

import (
	"context"
	"fmt"

	"github.com/x402gate/x402gate/verdictserver/store"
)

// SearchTransactions lists up to limit (1 to store.MaxPage) transactions of every agent, or
// of one, that match q (status, reason code, time), newest first, created before the cursor
// after, with their verdicts: the console's Verdicts page (docs/console.md#verdicts).
func (o *Operator) SearchTransactions(ctx context.Context, q store.Search, after store.Cursor, limit int) ([]store.Transaction, error) {
	if limit < 1 || limit > store.MaxPage {
		return nil, &InputError{Field: "limit", Problem: fmt.Sprintf("must be 1 to %d", store.MaxPage)}
	}
	return o.store.SearchTransactions(ctx, q, after, limit)
}
