package verdictclient

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/x402gate/x402gate/verdict"
)

// Polling defaults (docs/verdict.md#fail-closed the interval and attempts; the delay cap is ours).
const (
	DefaultIntervalMs  = 1000
	DefaultMaxAttempts = 20
	DefaultMaxDelay    = 5 * time.Second

	// maxPollDelay caps IntervalMs and MaxDelay so that doubling cannot overflow.
	maxPollDelay = time.Hour
)

// PollOptions bounds Await (docs/verdict.md#envelope rule 2). The zero value means the
// defaults. With the defaults the nominal waits are 1, 2, 4 s and then 5 s, so 20
// attempts span at most about 87 s, less with jitter; the caller's context can end it
// sooner.
type PollOptions struct {
	// IntervalMs is the first delay in milliseconds; each further delay doubles, up to
	// MaxDelay. Default DefaultIntervalMs (1000). Values <= 0 mean the default; values
	// over an hour mean an hour.
	IntervalMs int
	// MaxAttempts is the total number of GET requests, including the first, which is
	// sent at once. Default DefaultMaxAttempts (20). Values <= 0 mean the default.
	MaxAttempts int
	// MaxDelay caps every delay, including one asked for by Retry-After. Default
	// DefaultMaxDelay (5 s); never less than the interval, never more than an hour.
	MaxDelay time.Duration
	// Jitter returns a number in [0, 1) that spreads each delay over [d/2, d) ("equal
	// jitter"), so that many callers do not poll in step. Default: math/rand/v2.
	Jitter func() float64
	// Sleep waits d or until ctx ends, returning ctx.Err() in the latter case. Tests may
	// replace it to record the schedule. Default: a timer.
	Sleep func(ctx context.Context, d time.Duration) error
}

func (o PollOptions) normalized() PollOptions {
	if o.IntervalMs <= 0 {
		o.IntervalMs = DefaultIntervalMs
	}
	if o.MaxAttempts <= 0 {
		o.MaxAttempts = DefaultMaxAttempts
	}
	if o.IntervalMs > int(maxPollDelay/time.Millisecond) {
		o.IntervalMs = int(maxPollDelay / time.Millisecond)
	}
	if o.MaxDelay <= 0 {
		o.MaxDelay = DefaultMaxDelay
	}
	if o.MaxDelay > maxPollDelay {
		o.MaxDelay = maxPollDelay
	}
	if iv := time.Duration(o.IntervalMs) * time.Millisecond; o.MaxDelay < iv {
		o.MaxDelay = iv
	}
	if o.Jitter == nil {
		o.Jitter = rand.Float64
	}
	if o.Sleep == nil {
		o.Sleep = sleepCtx
	}
	return o
}

// Delay returns the wait after attempt n (1-based) of a normalised schedule: the interval
// doubled n-1 times, capped at MaxDelay, spread by jitter over [d/2, d), then raised to
// retryAfter if that is longer, and capped at MaxDelay again.
func (o PollOptions) Delay(n int, retryAfter time.Duration) time.Duration {
	o = o.normalized()
	d := time.Duration(o.IntervalMs) * time.Millisecond
	for i := 1; i < n && d < o.MaxDelay; i++ {
		d *= 2
	}
	if d > o.MaxDelay {
		d = o.MaxDelay
	}
	j := o.Jitter()
	if !(j >= 0 && j < 1) { // also catches NaN
		j = 0
	}
	d = d/2 + time.Duration(j*float64(d/2))
	if retryAfter > d {
		d = retryAfter
	}
	if d > o.MaxDelay {
		d = o.MaxDelay
	}
	return d
}

// Bound is the longest Await waits between its status reads with o: the sum of every
// delay at its longest (jitter only shortens them; a Retry-After is capped at MaxDelay
// too). The requests themselves come on top, each bounded by the client's timeout.
func (o PollOptions) Bound() time.Duration {
	o = o.normalized()
	o.Jitter = func() float64 { return math.Nextafter(1, 0) }
	var total time.Duration
	for n := 1; n < o.MaxAttempts; n++ {
		total += o.Delay(n, 0)
	}
	return total
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// errBound is run's internal report that every attempt was used.
var errBound = errors.New("bound reached")

// run calls read up to MaxAttempts times, waiting Delay between calls, while read
// reports "not done" without error or with a transient error (docs/verdict.md#envelope rules 2–3).
// It returns the number of calls, the last transient error (nil if the last call was
// merely not done), and nil, errBound, or read's non-transient error / the context's.
func (o PollOptions) run(ctx context.Context, read func() (bool, error)) (int, error, error) {
	o = o.normalized()
	var last error
	for n := 1; ; n++ {
		done, err := read()
		var retryAfter time.Duration
		switch {
		case err == nil && done:
			return n, nil, nil
		case err == nil:
			last = nil
		case IsTransient(err):
			last = err
			var se *StatusError
			if errors.As(err, &se) {
				retryAfter = se.RetryAfter
			}
		default:
			return n, last, err
		}
		if n >= o.MaxAttempts {
			return n, last, errBound
		}
		if err := o.Sleep(ctx, o.Delay(n, retryAfter)); err != nil {
			return n, last, err
		}
	}
}

// Await polls Status until the verdict is terminal and returns it; the verdict may be
// rejected, so check Approved. It polls while the verdict is missing, null or pending and
// after transient failures (429, 5xx, network), with bounded exponential backoff and
// jitter; ctx governs every request and every delay (docs/verdict.md#envelope rules 1–3).
//
// It fails closed: 400/401/403/404 (*StatusError), an invalid answer
// (*ValidationError), a redirect or oversized answer stop at once; a used-up bound
// returns *PollBoundError (Last nil: still pending; Last set: the service stayed
// unavailable); an ended context returns an error wrapping ctx.Err().
func (c *Client) Await(ctx context.Context, requestHash string, opts PollOptions) (*verdict.Verdict, error) {
	var v *verdict.Verdict
	n, last, err := opts.run(ctx, func() (bool, error) {
		env, err := c.Status(ctx, requestHash)
		if err != nil {
			return false, err
		}
		v = env.Verdict
		return v.Terminal(), nil
	})
	switch {
	case err == nil:
		return v, nil
	case errors.Is(err, errBound):
		return nil, &PollBoundError{RequestHash: requestHash, Attempts: n, Last: last}
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		if ctx.Err() != nil {
			return nil, fmt.Errorf("await verdict for request %s after %d attempts: %w", requestHash, n, ctx.Err())
		}
	}
	return nil, err
}

// reconcileWithin retries Reconcile within the poll bound on transient failures.
func (c *Client) reconcileWithin(ctx context.Context, traceID string, opts PollOptions) (*verdict.Transaction, error) {
	var tx *verdict.Transaction
	n, last, err := opts.run(ctx, func() (bool, error) {
		var err error
		tx, err = c.Reconcile(ctx, traceID)
		return err == nil, err
	})
	if errors.Is(err, errBound) {
		return nil, fmt.Errorf("reconcile trace %s: gave up after %d attempts: %w", traceID, n, last)
	}
	return tx, err
}
