package gate

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/x402gate/x402gate/gate/payledger"
)

// retryHeapCredits is how many records BenchmarkMemoryLedgerHeap holds (bench/verdict.md).
const retryHeapCredits = 1_000_000

// BenchmarkMemoryLedgerHeap: the heap a MemoryLedger holds for 1M payments whose first
// run failed, each granted 3 credits and holding its settlement as the gate encodes it,
// in bytes per record. Run it with -benchtime=1x.
func BenchmarkMemoryLedgerHeap(b *testing.B) {
	b.ReportAllocs()
	var perRecord float64
	for b.Loop() {
		perRecord = ledgerHeap(b, retryHeapCredits)
	}
	b.ReportMetric(perRecord, "B/record")
	b.ReportMetric(float64(len(heapSettlement(b))), "B-data/record")
}

// maxLedgerRecordBytes is issue 27's bound on the heap of one retry credit's record.
const maxLedgerRecordBytes = 300

// TestMemoryLedgerHeapBound: a record whose first run failed, granted credits and holding
// its settlement, takes at most maxLedgerRecordBytes of live heap (200,000 of them).
func TestMemoryLedgerHeapBound(t *testing.T) {
	if testing.Short() {
		t.Skip("fills a ledger with 200,000 records")
	}
	got := ledgerHeap(t, 200_000)
	t.Logf("%.1f B of live heap per record", got)
	if got > maxLedgerRecordBytes {
		t.Errorf("want <= %d B per record", maxLedgerRecordBytes)
	}
}

// heapSettlement is a settlement as the gate encodes it.
func heapSettlement(tb testing.TB) []byte {
	data, err := json.Marshal(Settlement{
		Success: true, Payer: "0xA11CE00000000000000000000000000000000001",
		Transaction: "0x" + fmt.Sprintf("%064x", 0xfeed), Amount: "10000", Network: "eip155:84532",
		NetworkName: "base-sepolia", Asset: "0x036CbD53842c5426634e7929541eC2318f3dCF7e",
		PayTo: "0x209693Bc6afc0C5328bA36FaF03C514EF312287C", Version: 2,
	})
	if err != nil {
		tb.Fatal(err)
	}
	return data
}

// ledgerHeap fills a MemoryLedger with n payments whose first run failed, each granted 3
// credits and holding its settlement, and returns the live heap it holds per record.
func ledgerHeap(tb testing.TB, n int) float64 {
	ctx := context.Background()
	data := heapSettlement(tb)
	sums := make([][32]byte, n)
	hashes := make([][]byte, n)
	for i := range sums {
		sums[i] = sha256.Sum256([]byte(fmt.Sprint(i)))
		tok := sha256.Sum256(sums[i][:])
		hashes[i] = tok[:]
	}
	before := liveHeap()
	s := NewMemoryLedger(n)
	for i, sum := range sums {
		// each key is a new string, as ledgerKey makes one per request: a ledger that
		// keeps it holds it
		k := "pay:" + hex.EncodeToString(sum[:])
		c := payledger.Claim{Key: k, Fingerprint: hashes[i], Binding: sum[:], Owner: "o", Lease: time.Hour, TTL: time.Hour}
		if e, err := s.Begin(ctx, c); e.Status != payledger.New || err != nil {
			tb.Fatalf("begin %d: %v %v", i, e.Status, err)
		}
		if ok, err := s.Settle(ctx, k, "o", data); !ok || err != nil {
			tb.Fatalf("settle %d: %v %v", i, ok, err)
		}
		if ok, err := s.End(ctx, k, "o", payledger.Fail, hashes[i], 3, time.Hour); !ok || err != nil {
			tb.Fatalf("grant %d: %v %v", i, ok, err)
		}
	}
	perRecord := float64(liveHeap()-before) / float64(n)
	runtime.KeepAlive(s)
	runtime.KeepAlive(sums)
	runtime.KeepAlive(hashes)
	return perRecord
}

// liveHeap is the heap in use after a full collection.
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
