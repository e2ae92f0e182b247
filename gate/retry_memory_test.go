package gate

import (
	"context"
	"testing"
	"time"
)

// TestMemoryRetryStoreTokenHashes: a grant takes only a 32-byte token hash (a SHA-256),
// and only that whole hash unlocks it: a prefix or an extension takes nothing.
func TestMemoryRetryStoreTokenHashes(t *testing.T) {
	ctx := context.Background()
	s := NewMemoryRetryStore(0)
	good := hashOf("good")
	if ok, err := s.Grant(ctx, "short", good[:31], 1, time.Hour, nil); ok || err == nil {
		t.Errorf("a 31-byte token hash was granted: %v %v", ok, err)
	}
	if ok, err := s.Grant(ctx, "k", good, 2, time.Hour, []byte("d")); !ok || err != nil {
		t.Fatalf("grant: %v %v", ok, err)
	}
	for name, h := range map[string][]byte{"a prefix": good[:31], "an extension": append(append([]byte(nil), good...), 0), "none": nil} {
		if _, st, err := s.Acquire(ctx, "k", h, time.Minute); st != CreditNone || err != nil {
			t.Errorf("%s of the hash: %v %v, want CreditNone", name, st, err)
		}
		if _, ok, _ := s.Peek(ctx, "k", h); ok {
			t.Errorf("%s of the hash peeks the grant", name)
		}
	}
	if d, st, err := s.Acquire(ctx, "k", good, time.Minute); st != CreditTaken || err != nil || string(d) != "d" {
		t.Errorf("the grant's own hash: %q %v %v", d, st, err)
	}
}
