package facilitator

import (
	"sync"
	"time"

	"github.com/ethereum/go-ethereum/common"
)

// Defaults of the verdict-marker budget.
const (
	// DefaultMaxMarkersPerPayer bounds the optional-mode verdict markers of one payer
	// that no settlement has used yet.
	DefaultMaxMarkersPerPayer = 32
	// maxMarkerPayers bounds how many payers the budget tracks at once.
	maxMarkerPayers = 50_000
)

// markerBudget bounds, per payer, the optional-mode verdict markers that are still
// outstanding: written by a /verify that asked for a verdict, not yet used by a
// settlement, not yet expired. A marker lives in the approval store beside the
// settlement claims until the authorization expires, and it cannot be dropped when the
// verdict is a rejection (the payment could then settle without one), so without a bound
// whoever can call /verify could fill the claim table and make every real settle fail
// closed (docs/facilitator.md#guardian). It is per process: the memory store it protects
// is too.
type markerBudget struct {
	mu     sync.Mutex
	max    int
	payers map[common.Address][]time.Time // expiries of outstanding markers
}

func newMarkerBudget(max int) *markerBudget {
	if max <= 0 {
		max = DefaultMaxMarkersPerPayer
	}
	return &markerBudget{max: max, payers: map[common.Address][]time.Time{}}
}

// take counts one more marker of payer until expiry; false when payer has max
// outstanding markers, or the budget tracks too many payers.
func (b *markerBudget) take(payer common.Address, now, expiry time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	live := prune(b.payers[payer], now)
	if len(live) >= b.max {
		b.payers[payer] = live
		return false
	}
	if _, known := b.payers[payer]; !known && len(b.payers) >= maxMarkerPayers {
		for p, exp := range b.payers {
			if len(prune(exp, now)) == 0 {
				delete(b.payers, p)
			}
		}
		if len(b.payers) >= maxMarkerPayers {
			return false
		}
	}
	b.payers[payer] = append(live, expiry)
	return true
}

// release forgets one outstanding marker of payer: its payment was settled.
func (b *markerBudget) release(payer common.Address) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if exp := b.payers[payer]; len(exp) > 1 {
		b.payers[payer] = exp[1:]
	} else {
		delete(b.payers, payer)
	}
}

// prune keeps the expiries after now.
func prune(exp []time.Time, now time.Time) []time.Time {
	live := exp[:0]
	for _, t := range exp {
		if now.Before(t) {
			live = append(live, t)
		}
	}
	return live
}
