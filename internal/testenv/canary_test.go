package testenv

import (
	"strings"
	"testing"
)

// TestCanaries: a registered secret is found in any case and reported by name only, and a
// Caddy output buffer that drops its head scans what it drops, a canary cut by the
// boundary included.
func TestCanaries(t *testing.T) {
	const secret = "TestCanariesSecretValue0123"
	AddCanary("test secret", secret)
	if got := ScanCanaries("clean", []byte("nothing to see")); len(got) != 0 {
		t.Fatalf("clean text: hits %v", got)
	}
	if got := ScanCanaries("upper", []byte("x"+strings.ToUpper(secret)+"y")); len(got) != 1 || got[0] != "test secret" {
		t.Fatalf("upper-case copy: hits %v", got)
	}
	b := &tailBuffer{max: 64, scanAs: "dropped"}
	_, _ = b.Write([]byte(strings.Repeat("a", 50) + secret[:10]))
	_, _ = b.Write([]byte(secret[10:] + strings.Repeat("b", 100)))
	found := false
	for _, h := range CanaryHits() {
		if h == "dropped: test secret" {
			found = true
		}
		if strings.Contains(h, secret) {
			t.Fatalf("a hit quotes the secret: %q", h)
		}
	}
	if !found {
		t.Fatalf("the dropped head was not scanned: hits %v", CanaryHits())
	}
	defer func() {
		if recover() == nil {
			t.Fatal("a 3-byte canary was accepted")
		}
	}()
	AddCanary("short", "abc")
}
