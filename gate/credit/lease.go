package credit

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/x402gate/x402gate/gate/payledger"
)

// Lease is the lease one attempt holds on its payment's record. While it is held, a
// goroutine renews it every third of the lease, so a live holder keeps it however long
// its upstream runs and a dead one's lapses within a lease. The holder's own clock bounds
// it too: unless a renewal is confirmed, the lease counts as lost leaseMargin before it
// would lapse on the store's clock (counted from the start of the last Begin or Renew
// that succeeded), and when a renewal reports it lost; ctx, which the settle and the
// upstream run under, is then cancelled, so the attempt ends before another can begin.
type Lease struct {
	ledger     payledger.Ledger
	log        *zap.Logger
	length     time.Duration
	key, owner string
	expires    time.Time       // the record's, at the latest: no end is retried past it
	ctx        context.Context // cancelled when the lease is lost
	lose       context.CancelFunc
	deadline   *time.Timer // loses the lease unless a renewal resets it
	stop       chan struct{}
	mu         sync.Mutex  // a renewal or an end runs under it, so release waits for one in flight
	stopped    bool        // stop is closed; under mu
	gone       atomic.Bool // a renewal found the lease held by no one or by another attempt
	reported   atomic.Bool // MarkReported ran
}

// Hold starts renewing the lease of length that owner took on key in l by a Begin that
// started at begun, on a record that expires at expires. ctx's values carry over to
// Context; its cancellation does not. Failures are logged to log.
func Hold(ctx context.Context, l payledger.Ledger, key, owner string, length time.Duration, begun, expires time.Time, log *zap.Logger) *Lease {
	h := &Lease{ledger: l, log: log, length: length, key: key, owner: owner, expires: expires, stop: make(chan struct{})}
	h.ctx, h.lose = context.WithCancel(context.WithoutCancel(ctx))
	h.deadline = time.AfterFunc(time.Until(h.until(begun)), h.lapse)
	go h.renew()
	return h
}

// until is when the lease taken or renewed by a call that started at start counts as lost.
func (h *Lease) until(start time.Time) time.Time {
	return start.Add(h.length - h.length/leaseMargin)
}

// leaseMargin: the lease counts as lost a leaseMargin-th of it before it lapses on the
// store's clock, for the clocks' drift and the cancelled attempt's last steps.
const leaseMargin = 4

// lapse loses the lease when its deadline passed without a confirmed renewal.
func (h *Lease) lapse() {
	select {
	case <-h.stop:
		return
	default:
	}
	h.log.Error("x402 lease of a payment could not be renewed in time; its attempt is cancelled")
	h.lose()
}

// Bound returns ctx, also cancelled when the lease is lost; call stop when done with it.
func (h *Lease) Bound(ctx context.Context) (bounded context.Context, stop func()) {
	bounded, cancel := context.WithCancel(ctx)
	unregister := context.AfterFunc(h.ctx, cancel)
	return bounded, func() {
		unregister()
		cancel()
	}
}

func (h *Lease) renew() {
	every := max(h.length/3, time.Millisecond)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-h.stop:
			return
		case <-t.C:
		}
		ok, stopped, err := h.renewOnce(every)
		switch {
		case stopped:
			return
		case err != nil:
			h.log.Warn("x402 payment ledger unavailable; the lease was not renewed", zap.Error(err))
		case !ok:
			h.log.Error("x402 lease of a payment lapsed while its attempt ran; its attempt is cancelled")
			h.gone.Store(true)
			h.lose()
			return
		}
	}
}

// renewOnce renews the lease unless the hold was released, and moves its deadline on
// when the store confirms it.
func (h *Lease) renewOnce(timeout time.Duration) (ok, stopped bool, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stopped {
		return false, true, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	start := time.Now()
	ok, err = h.ledger.Renew(ctx, h.key, h.owner, h.length)
	if ok && err == nil && h.ctx.Err() == nil {
		h.deadline.Reset(time.Until(h.until(start)))
	}
	return ok, false, err
}

// Release stops renewing the lease, after a renewal in flight, and stops its deadline.
// Call it before the transition that ends the lease (End, Forget, Pend), so no renewal
// follows that.
func (h *Lease) Release() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.stopLocked()
}

// stopLocked stops renewing the lease and its deadline; h.mu is held.
func (h *Lease) stopLocked() {
	if !h.stopped {
		h.stopped = true
		close(h.stop)
		h.deadline.Stop()
	}
}

// Finish ends the lease with end, a Ledger.End call, between renewals: when it succeeds,
// renewing stops; when it fails, the lease stays renewed (EndLater tries again). After
// Release it does nothing.
func (h *Lease) Finish(end func() (bool, error)) (bool, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stopped {
		return false, nil
	}
	granted, err := end()
	if err == nil {
		h.stopLocked()
	}
	return granted, err
}

// EndLater ends the lease with outcome after an End that failed: it tries again with
// backoff, while the lease stays renewed, until an End succeeds, a renewal finds the
// lease gone, or the record expires. So an answered payment is not left settled, to be
// served again to its bare header once its lease lapsed.
func (h *Lease) EndLater(outcome int, timeout time.Duration) {
	wait := max(h.length/10, 10*time.Millisecond)
	for {
		time.Sleep(wait)
		if h.gone.Load() || !time.Now().Before(h.expires) {
			h.log.Error("x402 payment ledger unavailable; the end of a lease was given up")
			h.Release()
			return
		}
		if _, err := h.Finish(func() (bool, error) {
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			return h.ledger.End(ctx, h.key, h.owner, outcome, nil, 0, 0)
		}); err == nil {
			return
		}
		wait = min(2*wait, max(h.length, wait))
	}
}

// Key and Owner name the record the lease is on and the attempt that holds it, for the
// ledger's transitions that end it.
func (h *Lease) Key() string { return h.key }

// Owner is the attempt that holds the lease (see Key).
func (h *Lease) Owner() string { return h.owner }

// Context is cancelled when the lease is lost.
func (h *Lease) Context() context.Context { return h.ctx }

// Lost reports whether the lease was lost: Context is done.
func (h *Lease) Lost() bool { return h.ctx.Err() != nil }

// MarkReported reports whether this is the first call: the upstream's answer is
// reported once.
func (h *Lease) MarkReported() bool { return h.reported.CompareAndSwap(false, true) }

// End releases the lease and ends it with outcome, without credits.
func (h *Lease) End(ctx context.Context, outcome int) error {
	h.Release()
	_, err := h.ledger.End(context.WithoutCancel(ctx), h.key, h.owner, outcome, nil, 0, 0)
	return err
}
