package approval

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/big"
	"runtime"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"

	"github.com/x402gate/x402gate/x402"
)

// heapRecords is how many records the heap benchmarks hold (bench/verdict.md).
const heapRecords = 1_000_000

// heapKey is a realistic, distinct payment key i: Base Sepolia USDC, distinct payers and
// nonces, a 0.01 USDC amount.
func heapKey(i int) x402.PaymentKey {
	k := x402.PaymentKey{
		Network: "eip155:84532",
		Asset:   common.HexToAddress("0x036CbD53842c5426634e7929541eC2318f3dCF7e"),
		PayTo:   common.HexToAddress("0x209693Bc6afc0C5328bA36FaF03C514EF312287C"),
		Amount:  big.NewInt(10_000),
	}
	binary.BigEndian.PutUint64(k.Payer[12:], uint64(i)+0xA11CE)
	binary.BigEndian.PutUint64(k.Nonce[24:], uint64(i))
	k.Nonce[0] = 0x5e
	return k
}

// liveHeap is the heap in use after a full collection.
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// BenchmarkMemoryStoreHeap: the heap a MemoryStore holds for 1M approval records (each
// with its verdict's requestHash), and for 1M settlement claims, in bytes per record. The
// keys are built before the first measure, so only what the store keeps is counted. Run it
// with -benchtime=1x.
func BenchmarkMemoryStoreHeap(b *testing.B) {
	b.ReportAllocs()
	var perApproval, perClaim float64
	for b.Loop() {
		perApproval, perClaim = storeHeap(b, heapRecords)
	}
	b.ReportMetric(perApproval, "B/approval")
	b.ReportMetric(perClaim, "B/claim")
}

// maxApprovalBytes is issue 27's bound on the heap of one approval record.
const maxApprovalBytes = 300

// TestMemoryStoreHeapBound: an approval record takes at most maxApprovalBytes of live heap
// (200,000 of them).
func TestMemoryStoreHeapBound(t *testing.T) {
	if testing.Short() {
		t.Skip("fills a store with 200,000 records")
	}
	perApproval, perClaim := storeHeap(t, 200_000)
	t.Logf("%.1f B per approval, %.1f B per claim", perApproval, perClaim)
	if perApproval > maxApprovalBytes {
		t.Errorf("want <= %d B per approval", maxApprovalBytes)
	}
}

// storeHeap records n approvals in a MemoryStore, then claims their n authorizations, and
// returns the live heap the store holds per approval and per claim.
func storeHeap(tb testing.TB, n int) (perApproval, perClaim float64) {
	ctx := context.Background()
	keys := make([]x402.PaymentKey, n)
	for i := range keys {
		keys[i] = heapKey(i)
	}
	now := time.Now()
	before := liveHeap()
	s := NewMemoryStore(n)
	for i, k := range keys {
		a := Approval{RequestHash: fmt.Sprintf("0x%064x", i), RecordedAt: now, ExpiresAt: now.Add(5 * time.Minute)}
		if err := s.Record(ctx, k, a, 5*time.Minute); err != nil {
			tb.Fatal(err)
		}
	}
	withApprovals := liveHeap()
	for _, k := range keys {
		if err := s.Claim(ctx, k, 10*time.Minute); err != nil {
			tb.Fatal(err)
		}
	}
	withClaims := liveHeap()
	runtime.KeepAlive(s)
	runtime.KeepAlive(keys)
	return float64(withApprovals-before) / float64(n), float64(withClaims-withApprovals) / float64(n)
}
