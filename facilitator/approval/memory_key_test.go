package approval

import (
	"context"
	"math/big"
	"testing"
	"time"

	"github.com/x402gate/x402gate/x402"
)

// TestMemoryKeysFollowTheTextKeys: the store's 32-byte keys tell payments apart exactly as
// x402.PaymentKey.String and AuthorizationKey do.
func TestMemoryKeysFollowTheTextKeys(t *testing.T) {
	base := heapKey(7)
	edits := []struct {
		name string
		edit func(k *x402.PaymentKey)
	}{
		{"the same key", func(*x402.PaymentKey) {}},
		{"the network in upper case", func(k *x402.PaymentKey) { k.Network = "EIP155:84532" }},
		{"another network", func(k *x402.PaymentKey) { k.Network = "eip155:8453" }},
		{"another asset", func(k *x402.PaymentKey) { k.Asset[19]++ }},
		{"another payer", func(k *x402.PaymentKey) { k.Payer[0]++ }},
		{"another payee", func(k *x402.PaymentKey) { k.PayTo[5]++ }},
		{"another amount", func(k *x402.PaymentKey) { k.Amount = big.NewInt(10_001) }},
		{"another nonce", func(k *x402.PaymentKey) { k.Nonce[31]++ }},
		{"a nil amount", func(k *x402.PaymentKey) { k.Amount = nil }},
		{"amount 0", func(k *x402.PaymentKey) { k.Amount = big.NewInt(0) }},
		{"a Permit2 payment", func(k *x402.PaymentKey) { k.Permit2 = true }},
		{"a Permit2 payment in another token", func(k *x402.PaymentKey) { k.Permit2 = true; k.Asset[0]++ }},
		{"a Permit2 payment of the Permit2 contract's EIP-3009 twin", func(k *x402.PaymentKey) { k.Asset = x402.Permit2Address }},
	}
	keys := []x402.PaymentKey{base}
	for _, e := range edits {
		k := base
		k.Amount = new(big.Int).Set(base.Amount)
		e.edit(&k)
		keys = append(keys, k)
	}
	for i, a := range keys {
		for j, b := range keys {
			if got, want := paymentKey(a) == paymentKey(b), a.String() == b.String(); got != want {
				t.Errorf("payment keys %d and %d: equal %v, their text equal %v", i, j, got, want)
			}
			if got, want := authorizationKey(a) == authorizationKey(b), a.AuthorizationKey() == b.AuthorizationKey(); got != want {
				t.Errorf("authorization keys %d and %d: equal %v, their text equal %v", i, j, got, want)
			}
			if paymentKey(a) == authorizationKey(b) {
				t.Errorf("payment key %d equals authorization key %d", i, j)
			}
		}
	}
}

// TestMemoryApprovalsComeBackAsRecorded: an approval kept compact (a verdict service's
// requestHash and ordinary times) and one kept whole come back as they were recorded.
func TestMemoryApprovalsComeBackAsRecorded(t *testing.T) {
	now := time.Now()
	for _, a := range []Approval{
		{RequestHash: "0x5b0c" + "00112233445566778899aabbccddeeff00112233445566778899aabbccdd", RecordedAt: now, ExpiresAt: now.Add(time.Minute)},
		{RequestHash: "0x5B0C" + "00112233445566778899AABBCCDDEEFF00112233445566778899AABBCCDD", RecordedAt: now, ExpiresAt: now.Add(time.Minute)},
		{RequestHash: "req-1", RecordedAt: now, ExpiresAt: now.Add(time.Minute)},
		{RequestHash: "0x5b0c00112233445566778899aabbccddeeff00112233445566778899aabbccdd"},
		{RequestHash: "", RecordedAt: time.Date(1960, 1, 1, 0, 0, 0, 0, time.UTC), ExpiresAt: time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC)},
	} {
		s := NewMemoryStore(4)
		k := heapKey(1)
		if err := s.Record(context.Background(), k, a, time.Minute); err != nil {
			t.Fatal(err)
		}
		got, err := s.Consume(context.Background(), k)
		if err != nil || got.RequestHash != a.RequestHash || !got.RecordedAt.Equal(a.RecordedAt) || !got.ExpiresAt.Equal(a.ExpiresAt) {
			t.Errorf("recorded %+v, consumed %+v, %v", a, got, err)
		}
	}
}
