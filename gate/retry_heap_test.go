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
	ctx := context.Background()
	data, err := json.Marshal(Settlement{
		Success: true, Payer: "0xA11CE00000000000000000000000000000000001",
		Transaction: "0x" + fmt.Sprintf("%064x", 0xfeed), Amount: "10000", Network: "eip155:84532",
		NetworkName: "base-sepolia", Asset: "0x036CbD53842c5426634e7929541eC2318f3dCF7e",
		PayTo: "0x209693Bc6afc0C5328bA36FaF03C514EF312287C", Version: 2,
	})
	if err != nil {
		b.Fatal(err)
	}
	sums := make([][32]byte, retryHeapCredits)
	hashes := make([][]byte, retryHeapCredits)
	for i := range sums {
		sums[i] = sha256.Sum256([]byte(fmt.Sprint(i)))
		tok := sha256.Sum256(sums[i][:])
		hashes[i] = tok[:]
	}
	b.ReportAllocs()
	var perRecord float64
	for b.Loop() {
		before := liveHeap()
		s := NewMemoryLedger(retryHeapCredits)
		for i, sum := range sums {
			// each key is a new string, as ledgerKey makes one per request: a ledger that
			// keeps it holds it
			k := "pay:" + hex.EncodeToString(sum[:])
			c := payledger.Claim{Key: k, Fingerprint: hashes[i], Binding: sum[:], Owner: "o", Lease: time.Hour, TTL: time.Hour}
			if e, err := s.Begin(ctx, c); e.Status != payledger.New || err != nil {
				b.Fatalf("begin %d: %v %v", i, e.Status, err)
			}
			if ok, err := s.Settle(ctx, k, "o", data); !ok || err != nil {
				b.Fatalf("settle %d: %v %v", i, ok, err)
			}
			if ok, err := s.End(ctx, k, "o", payledger.Fail, hashes[i], 3, time.Hour); !ok || err != nil {
				b.Fatalf("grant %d: %v %v", i, ok, err)
			}
		}
		perRecord = float64(liveHeap()-before) / retryHeapCredits
		runtime.KeepAlive(s)
	}
	b.ReportMetric(perRecord, "B/record")
	b.ReportMetric(float64(len(data)), "B-data/record")
}

// liveHeap is the heap in use after a full collection.
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
