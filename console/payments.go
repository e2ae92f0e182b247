package console

import (
	"math/big"
	"net/http"
	"strings"

	"github.com/x402gate/x402gate/facilitator/journal"
)

// Bounds of the Payments page (docs/console.md#payments): the chart sums the newest
// paymentsScanned settlements, and the table lists the newest paymentsShown.
const (
	paymentsScanned = 1000
	paymentsShown   = 100
)

// payment is one settlement on the Payments page.
type payment struct {
	journal.Settlement
	Shown  string // pending, settled, failed or reconciled
	Tx     string // the hash of the attempt that settled it, else the first attempt's
	Link   string // Tx on the explorer; "" without one
	Amount string // in units of 10^6 base units (USDC)
}

// shownState maps a journal state to the console's words: prepared and broadcast are
// pending, confirmed is settled, and a row a fee-bumped replacement settled is reconciled,
// since only the reconciler signs replacements (docs/console.md#payments).
func shownState(s journal.Settlement, attempts []journal.Attempt) (state, tx string) {
	tx = s.TxHash.Hex()
	for _, a := range attempts {
		if a.Settled {
			tx = a.TxHash.Hex()
			if a.Seq > 0 {
				return "reconciled", tx
			}
		}
	}
	switch s.State {
	case journal.StateConfirmed:
		return "settled", tx
	case journal.StateFailed:
		return "failed", tx
	default:
		return "pending", tx
	}
}

// paymentsPage lists the newest settlements and charts revenue per route and per day.
func (c *Console) paymentsPage(w http.ResponseWriter, r *http.Request, s *session) {
	if c.journal == nil {
		c.fail(w, r, s, http.StatusNotFound, "the Payments page needs the journal option of the console (docs/console.md#payments)")
		return
	}
	rows, err := c.journal.Recent(r.Context(), paymentsScanned)
	if err != nil {
		c.failed(w, r, s, "reading the settlement journal", err)
		return
	}
	var shown []payment
	for _, row := range rows[:min(len(rows), paymentsShown)] {
		attempts, err := c.journal.Attempts(r.Context(), row.AuthorizationKey)
		if err != nil {
			c.failed(w, r, s, "reading the settlement journal", err)
			return
		}
		p := payment{Settlement: row, Amount: units(row.Amount)}
		p.Shown, p.Tx = shownState(row, attempts)
		p.Link = c.explorerLink(row.Network, p.Tx)
		shown = append(shown, p)
	}
	c.render(w, r, s, http.StatusOK, "payments", "Payments", map[string]any{
		"Rows": shown, "Chart": revenueChart(rows), "Scanned": len(rows), "Limit": paymentsScanned,
	})
}

// explorerLink is tx on the configured explorer; "" without one.
func (c *Console) explorerLink(network, tx string) string {
	if c.cfg.Explorer == "" {
		return ""
	}
	return strings.NewReplacer("{tx}", tx, "{network}", network).Replace(c.cfg.Explorer)
}

// units formats base units of a 6-decimal token (USDC) as whole units.
func units(v *big.Int) string {
	if v == nil {
		return "0"
	}
	r := new(big.Rat).SetFrac(v, big.NewInt(1_000_000))
	return strings.TrimRight(strings.TrimRight(r.FloatString(6), "0"), ".")
}
