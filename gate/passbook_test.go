package gate

import (
	"testing"
	"time"

	"github.com/x402gate/x402gate/gate/redisretry"
	"github.com/x402gate/x402gate/internal/testenv"
)

// TestPassBooks: the in-process and the Redis pass book behave alike: a later expiry wins
// over an earlier one and never the other way, the latest of several keys is returned,
// an unknown key has none, and a nonce is fresh exactly once.
func TestPassBooks(t *testing.T) {
	rs, err := redisretry.Open(t.Context(), testenv.StartRedis(t), "")
	if err != nil {
		t.Fatalf("redisretry.Open: %v", err)
	}
	t.Cleanup(func() { _ = rs.Close() })
	for name, book := range map[string]PassBook{"memory": NewMemoryPassBook(0), "ledger": NewMemoryLedger(0), "redis": rs} {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			now := time.Now().Truncate(time.Millisecond)
			early, late := now.Add(time.Hour), now.Add(2*time.Hour)
			for _, step := range []struct {
				key string
				exp time.Time
			}{{"pass:a", early}, {"pass:a", late}, {"pass:a", early}, {"pass:b", early}} {
				if err := book.RecordPass(ctx, step.key, step.exp); err != nil {
					t.Fatalf("RecordPass: %v", err)
				}
			}
			for _, tc := range []struct {
				keys []string
				want time.Time
			}{
				{[]string{"pass:a"}, late},
				{[]string{"pass:b"}, early},
				{[]string{"pass:b", "pass:a", "pass:none"}, late},
				{[]string{"pass:none"}, time.Time{}},
				{nil, time.Time{}},
			} {
				got, err := book.PassExpiry(ctx, tc.keys)
				if err != nil || !got.Equal(tc.want) {
					t.Errorf("PassExpiry(%v) = %v, %v; want %v", tc.keys, got, err, tc.want)
				}
			}
			for i, want := range []bool{true, false, false} {
				fresh, err := book.UseNonce(ctx, "siwx:h:n1", time.Minute)
				if err != nil || fresh != want {
					t.Errorf("UseNonce #%d = %v, %v; want %v", i+1, fresh, err, want)
				}
			}
			if fresh, err := book.UseNonce(ctx, "siwx:h:n2", time.Minute); err != nil || !fresh {
				t.Errorf("another nonce: %v, %v", fresh, err)
			}
		})
	}
}
