package verdictclient

import (
	"context"
	"errors"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/x402gate/x402gate/internal/testenv"
)

// sleeps records the waits of a schedule instead of sleeping.
type sleeps struct {
	mu sync.Mutex
	d  []time.Duration
}

func (s *sleeps) sleep(ctx context.Context, d time.Duration) error {
	s.mu.Lock()
	s.d = append(s.d, d)
	s.mu.Unlock()
	return ctx.Err()
}

func TestPollDefaults(t *testing.T) {
	o := PollOptions{}.normalized()
	if o.IntervalMs != 1000 || o.MaxAttempts != 20 || o.MaxDelay != 5*time.Second {
		t.Fatalf("defaults = %d ms, %d attempts, %s; want the default 1000 ms and 20, and 5 s", o.IntervalMs, o.MaxAttempts, o.MaxDelay)
	}
	o = PollOptions{IntervalMs: -5, MaxAttempts: -1, MaxDelay: -time.Second}.normalized()
	if o.IntervalMs != 1000 || o.MaxAttempts != 20 || o.MaxDelay != 5*time.Second {
		t.Fatalf("negative values = %+v; want the defaults", o)
	}
	if o := (PollOptions{IntervalMs: 8000}).normalized(); o.MaxDelay != 8*time.Second {
		t.Fatalf("MaxDelay below the interval = %s, want raised to 8s", o.MaxDelay)
	}
}

// TestPollDelaySchedule: bounded exponential backoff with equal jitter (docs/verdict.md#envelope
// rule 2): nominal 1, 2, 4, 5, 5 … s, each spread over [d/2, d), capped at MaxDelay.
func TestPollDelaySchedule(t *testing.T) {
	nominal := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second, 5 * time.Second, 5 * time.Second}
	for _, j := range []float64{0, 0.25, 0.999999} {
		o := PollOptions{Jitter: func() float64 { return j }}
		for i, d := range nominal {
			got := o.Delay(i+1, 0)
			want := d/2 + time.Duration(j*float64(d/2))
			if got != want || got < d/2 || got >= d {
				t.Fatalf("jitter %v: delay after attempt %d = %s, want %s in [%s, %s)", j, i+1, got, want, d/2, d)
			}
		}
	}
	t.Run("Retry-After raises a delay, never past MaxDelay", func(t *testing.T) {
		o := PollOptions{IntervalMs: 100, MaxDelay: 3 * time.Second, Jitter: func() float64 { return 0 }}
		if got := o.Delay(1, 2*time.Second); got != 2*time.Second {
			t.Fatalf("delay = %s, want Retry-After's 2s", got)
		}
		if got := o.Delay(1, time.Hour); got != 3*time.Second {
			t.Fatalf("delay = %s, want MaxDelay 3s", got)
		}
		if got := o.Delay(1, time.Millisecond); got != 50*time.Millisecond {
			t.Fatalf("delay = %s, want the backoff's 50ms", got)
		}
	})
	t.Run("broken jitter counts as zero", func(t *testing.T) {
		for _, j := range []float64{math.NaN(), -1, 1, 7} {
			o := PollOptions{Jitter: func() float64 { return j }}
			if got := o.Delay(1, 0); got != 500*time.Millisecond {
				t.Fatalf("jitter %v: delay %s", j, got)
			}
		}
	})
	t.Run("huge settings stay bounded and positive", func(t *testing.T) {
		o := PollOptions{IntervalMs: math.MaxInt, MaxDelay: math.MaxInt64, Jitter: func() float64 { return 0.5 }}
		for n := 1; n < 200; n += 37 {
			if got := o.Delay(n, 0); got <= 0 || got > time.Hour {
				t.Fatalf("delay after attempt %d = %s", n, got)
			}
		}
		o = PollOptions{IntervalMs: 1, MaxDelay: math.MaxInt64}
		for n := 1; n < 200; n++ {
			if got := o.Delay(n, 0); got <= 0 || got > time.Hour {
				t.Fatalf("delay after attempt %d = %s", n, got)
			}
		}
	})
}

// TestAwaitRespectsMaxAttempts counts GETs on the wire: the bound is exact whatever
// keeps the verdict from being terminal, and the waits between them follow Delay.
func TestAwaitRespectsMaxAttempts(t *testing.T) {
	cases := []struct {
		name     string
		reply    reply
		attempts int // 0: the default
		wantGETs int
		lastNil  bool // PollBoundError.Last nil: still pending (timeout)
		lastIs   error
	}{
		{"pending with the default bound", envelope(testenv.PendingVerdict()), 0, 20, true, nil},
		{"null verdict, 7 attempts", reply{body: `{"verdict":null}`}, 7, 7, true, nil},
		{"one attempt means no retry", envelope(testenv.PendingVerdict()), 1, 1, true, nil},
		{"503 forever, 4 attempts", statusReply(503), 4, 4, false, ErrServerError},
		{"429 forever, 5 attempts", statusReply(429).withHeader("Retry-After", "1"), 5, 5, false, ErrRateLimited},
		{"connection dropped forever, 6 attempts", reply{hangUp: true}, 6, 6, false, ErrNetwork},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newScript(t).on(routeStatus("0xabc"), tc.reply)
			rec := &sleeps{}
			opts := PollOptions{MaxAttempts: tc.attempts, Sleep: rec.sleep, Jitter: func() float64 { return 0.5 }}
			v, err := s.client(t).Await(t.Context(), "0xabc", opts)
			var pb *PollBoundError
			if !errors.As(err, &pb) || !errors.Is(err, ErrPollBound) || v != nil {
				t.Fatalf("Await = %v, %v; want *PollBoundError", v, err)
			}
			if got := s.count(routeStatus("0xabc")); got != tc.wantGETs || pb.Attempts != tc.wantGETs {
				t.Fatalf("GETs = %d (reported %d), want %d", got, pb.Attempts, tc.wantGETs)
			}
			if (pb.Last == nil) != tc.lastNil || (tc.lastIs != nil && !errors.Is(err, tc.lastIs)) {
				t.Fatalf("Last = %v", pb.Last)
			}
			if len(rec.d) != tc.wantGETs-1 {
				t.Fatalf("%d waits for %d attempts", len(rec.d), tc.wantGETs)
			}
			norm := opts.normalized()
			for i, d := range rec.d {
				want := norm.Delay(i+1, 0)
				if tc.lastIs == ErrRateLimited {
					want = max(want, time.Second) // Retry-After: 1
				}
				if d != want || d > norm.MaxDelay {
					t.Fatalf("wait %d = %s, want %s (cap %s)", i+1, d, want, norm.MaxDelay)
				}
			}
		})
	}
}

// A transient failure followed by a pending verdict at the bound is a timeout, not an
// error: only the final attempt decides.
func TestPollBoundLastAttemptDecides(t *testing.T) {
	s := newScript(t).on(routeStatus("0xabc"), statusReply(503), envelope(testenv.PendingVerdict()))
	_, err := s.client(t).Await(t.Context(), "0xabc", fast(3))
	var pb *PollBoundError
	if !errors.As(err, &pb) || pb.Last != nil || pb.Attempts != 3 {
		t.Fatalf("err = %v", err)
	}
}

// TestPollBound: the default schedule waits at most 87 s between its 20 reads (1, 2 and
// 4 s, then 5 s sixteen times; jitter only shortens them), and Bound says so; a custom one
// sums its own delays.
func TestPollBound(t *testing.T) {
	for _, tc := range []struct {
		opts PollOptions
		want time.Duration
	}{
		{PollOptions{}, 87 * time.Second},
		{PollOptions{IntervalMs: 100, MaxAttempts: 4, MaxDelay: time.Second}, 700 * time.Millisecond},
		{PollOptions{MaxAttempts: 1}, 0},
	} {
		if got := tc.opts.Bound(); got < tc.want-time.Millisecond || got > tc.want {
			t.Errorf("%+v.Bound() = %v, want %v", tc.opts, got, tc.want)
		}
	}
}
