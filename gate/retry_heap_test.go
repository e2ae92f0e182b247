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
)

// retryHeapCredits is how many grants BenchmarkMemoryRetryStoreHeap holds (bench/verdict.md).
const retryHeapCredits = 1_000_000

// BenchmarkMemoryRetryStoreHeap: the heap a MemoryRetryStore holds for 1M retry grants of
// 3 credits, each with its settlement as armRetry encodes it, in bytes per grant. Run it
// with -benchtime=1x.
func BenchmarkMemoryRetryStoreHeap(b *testing.B) {
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
	var perGrant float64
	for b.Loop() {
		before := liveHeap()
		s := NewMemoryRetryStore(retryHeapCredits)
		for i, sum := range sums {
			// each key is a new string, as retryKey makes one per request: a store that
			// keeps it holds it
			k := "retry:" + hex.EncodeToString(sum[:])
			if ok, err := s.Grant(ctx, k, hashes[i], 3, time.Hour, data); !ok || err != nil {
				b.Fatalf("grant %d: %v %v", i, ok, err)
			}
		}
		perGrant = float64(liveHeap()-before) / retryHeapCredits
		runtime.KeepAlive(s)
	}
	b.ReportMetric(perGrant, "B/grant")
	b.ReportMetric(float64(len(data)), "B-data/grant")
}

// liveHeap is the heap in use after a full collection.
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
