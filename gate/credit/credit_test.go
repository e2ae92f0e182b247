package credit

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/x402gate/x402gate/gate/payledger"
	"github.com/x402gate/x402gate/x402"
)

// TestTokenHash: a request presents its retry token once, as 64 hex digits; anything else
// presents none, and the hash is the one NewToken gave.
func TestTokenHash(t *testing.T) {
	token, hash, err := NewToken()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		values []string
		ok     bool
	}{
		{"the token", []string{token}, true},
		{"the token with spaces", []string{" " + token + " "}, true},
		{"no token", nil, false},
		{"the token twice", []string{token, token}, false},
		{"a short token", []string{token[:62]}, false},
		{"not hex", []string{strings.Repeat("zz", TokenBytes)}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := http.Header{}
			for _, v := range c.values {
				h.Add(HeaderPaymentRetry, v)
			}
			got, ok := TokenHash(h)
			if ok != c.ok || (ok && !bytes.Equal(got, hash)) {
				t.Errorf("TokenHash = %x, %v; want ok %v", got, ok, c.ok)
			}
		})
	}
}

// TestBindingNamesTheRequest: a payment is bound to its resource, method and request URI.
func TestBindingNamesTheRequest(t *testing.T) {
	b := Binding("https://a.example/r", "GET", "/r?a=1")
	for _, other := range [][]byte{
		Binding("https://a.example/r", "POST", "/r?a=1"),
		Binding("https://a.example/r", "GET", "/r?a=2"),
		Binding("https://b.example/r", "GET", "/r?a=1"),
	} {
		if bytes.Equal(b, other) {
			t.Errorf("two requests share the binding %x", b)
		}
	}
}

// TestPaymentIDOf: an id is 16 to 128 of [A-Za-z0-9_-] in extensions["payment-identifier"].info.id.
func TestPaymentIDOf(t *testing.T) {
	ext := func(info any) *x402.Payment {
		return &x402.Payment{Extensions: map[string]any{PaymentIDExtension: map[string]any{"info": info}}}
	}
	for _, c := range []struct {
		name string
		p    *x402.Payment
		id   string
		bad  bool
	}{
		{"none", &x402.Payment{}, "", false},
		{"no id in the info", ext(map[string]any{}), "", false},
		{"a good id", ext(map[string]any{"id": "order_0123456789-abc"}), "order_0123456789-abc", false},
		{"too short", ext(map[string]any{"id": "short"}), "", true},
		{"a space", ext(map[string]any{"id": "order 0123456789abc"}), "", true},
		{"not a string", ext(map[string]any{"id": 12}), "", true},
		{"no info", &x402.Payment{Extensions: map[string]any{PaymentIDExtension: map[string]any{}}}, "", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			id, err := PaymentIDOf(c.p)
			if id != c.id || (err != nil) != c.bad {
				t.Errorf("PaymentIDOf = %q, %v; want %q, error %v", id, err, c.id, c.bad)
			}
		})
	}
}

// TestLeaseHoldsUntilEnded: while the lease is held no other attempt begins the payment;
// once it is ended, another attempt takes it, and the ended lease is not renewed.
// Renewal over time is tested end to end (gate's retry_lease_test.go).
func TestLeaseHoldsUntilEnded(t *testing.T) {
	ctx := context.Background()
	l := payledger.NewMemory(0, nil)
	const length = time.Minute
	claim := func(owner string) payledger.Status {
		e, err := l.Begin(ctx, payledger.Claim{Key: "pay:k", Fingerprint: []byte("f"), Binding: []byte("b"), Owner: owner, Lease: length, TTL: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		return e.Status
	}
	if s := claim("a"); s != payledger.New {
		t.Fatalf("first Begin: %v, want New", s)
	}
	now := time.Now()
	h := Hold(ctx, l, "pay:k", "a", length, now, now.Add(time.Hour), zap.NewNop())
	if h.Lost() || h.Key() != "pay:k" || h.Owner() != "a" {
		t.Fatalf("a fresh lease: lost %v, key %q, owner %q", h.Lost(), h.Key(), h.Owner())
	}
	if s := claim("b"); s != payledger.Busy {
		t.Fatalf("Begin while the lease is renewed: %v, want Busy", s)
	}
	if err := h.End(ctx, payledger.Release); err != nil {
		t.Fatal(err)
	}
	if s := claim("c"); s != payledger.Resume {
		t.Errorf("Begin after the release: %v, want Resume", s)
	}
	if ok, err := h.Finish(func() (bool, error) { return true, nil }); ok || err != nil {
		t.Errorf("Finish after End: %v, %v; want nothing done", ok, err)
	}
}
