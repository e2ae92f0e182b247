package payledger

import (
	"context"
	"crypto/sha256"
	"errors"
	"strconv"
	"testing"
	"time"
)

// TestMemoryOddHashes: hashes of any length compare as they are (Memory keeps those not 32
// bytes long as their SHA-256), and a nil token differs from an empty one.
func TestMemoryOddHashes(t *testing.T) {
	ctx := context.Background()
	m := NewMemory(0, nil)
	c := Claim{Key: "k", Fingerprint: []byte("fp"), Binding: []byte("GET /r"), Owner: "a", Lease: time.Nanosecond, TTL: time.Hour}
	if e, err := m.Begin(ctx, c); e.Status != New || err != nil {
		t.Fatalf("begin: %v %v", e.Status, err)
	}
	for _, tc := range []struct {
		name   string
		edit   func(*Claim)
		status Status
	}{
		{"other fingerprint", func(c *Claim) { c.Fingerprint = []byte("fq") }, Conflict},
		{"longer fingerprint", func(c *Claim) { c.Fingerprint = []byte("fp.") }, Conflict},
		{"other binding", func(c *Claim) { c.Binding = []byte("GET /s") }, Mismatch},
		{"same claim, lease lapsed", func(*Claim) {}, Resume},
	} {
		d := c
		tc.edit(&d)
		if e, err := m.Begin(ctx, d); e.Status != tc.status || err != nil {
			t.Errorf("%s: %v %v, want %v", tc.name, e.Status, err, tc.status)
		}
	}
	c.Owner, c.Lease = "b", time.Hour
	if e, err := m.Begin(ctx, c); e.Status != Resume || err != nil {
		t.Fatalf("resume: %v %v", e.Status, err)
	}
	if ok, err := m.Pend(ctx, "k", "b", []byte{}, []byte("data")); !ok || err != nil {
		t.Fatalf("pend: %v %v", ok, err)
	}
	// an empty token was issued: a claim presenting none may not redeem
	if e, err := m.Begin(ctx, c); e.Status != Refused || err != nil {
		t.Errorf("redeem without the token: %v %v, want Refused", e.Status, err)
	}
}

// TestMemoryReusesExpiredSlots: a full ledger drops its expired records for a new one and
// keeps refusing while every record is live; times keep their meaning on a clock without
// a monotonic reading.
func TestMemoryReusesExpiredSlots(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	m := NewMemory(2, func() time.Time { return now })
	claim := func(k string) Claim {
		return Claim{Key: k, Fingerprint: []byte(k), Binding: []byte("b"), Owner: "o", Lease: time.Minute, TTL: time.Hour}
	}
	for _, k := range []string{"a", "b"} {
		if e, err := m.Begin(ctx, claim(k)); e.Status != New || err != nil {
			t.Fatalf("begin %s: %v %v", k, e.Status, err)
		}
	}
	if _, err := m.Begin(ctx, claim("c")); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("begin c on a full ledger: %v, want ErrUnavailable", err)
	}
	now = now.Add(time.Hour)
	if e, err := m.Begin(ctx, claim("c")); e.Status != New || err != nil {
		t.Fatalf("begin c once a and b expired: %v %v", e.Status, err)
	}
	if len(m.slots) != 2 {
		t.Errorf("%d slots, want the 2 of the expired records reused", len(m.slots))
	}
	if e, err := m.Begin(ctx, claim("c")); e.Status != Busy || err != nil {
		t.Errorf("c again within its lease: %v %v, want Busy", e.Status, err)
	}
}

// BenchmarkMemoryCycle: one payment whose first run fails, on Memory: Begin, Settle with a
// settlement of the gate's form, and End granting 3 credits.
func BenchmarkMemoryCycle(b *testing.B) {
	ctx := context.Background()
	m := NewMemory(1<<30, nil)
	fp, bind, tok := sum("fp"), sum("GET /r"), sum("token")
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		k := "pay:" + strconv.Itoa(i)
		c := Claim{Key: k, Fingerprint: fp, Binding: bind, Owner: "o", Lease: time.Hour, TTL: time.Hour}
		if e, err := m.Begin(ctx, c); e.Status != New || err != nil {
			b.Fatal(e.Status, err)
		}
		if ok, err := m.Settle(ctx, k, "o", []byte(another)); !ok || err != nil {
			b.Fatal(ok, err)
		}
		if ok, err := m.End(ctx, k, "o", Fail, tok, 3, time.Hour); !ok || err != nil {
			b.Fatal(ok, err)
		}
	}
}

func sum(s string) []byte { h := sha256.Sum256([]byte(s)); return h[:] }
