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
	ctx := context.Background()
	keys := make([]x402.PaymentKey, heapRecords)
	for i := range keys {
		keys[i] = heapKey(i)
	}
	now := time.Now()
	b.ReportAllocs()
	var perApproval, perClaim float64
	for b.Loop() {
		before := liveHeap()
		s := NewMemoryStore(heapRecords)
		for i, k := range keys {
			a := Approval{RequestHash: fmt.Sprintf("0x%064x", i), RecordedAt: now, ExpiresAt: now.Add(5 * time.Minute)}
			if err := s.Record(ctx, k, a, 5*time.Minute); err != nil {
				b.Fatal(err)
			}
		}
		withApprovals := liveHeap()
		for _, k := range keys {
			if err := s.Claim(ctx, k, 10*time.Minute); err != nil {
				b.Fatal(err)
			}
		}
		withClaims := liveHeap()
		perApproval = float64(withApprovals-before) / heapRecords
		perClaim = float64(withClaims-withApprovals) / heapRecords
		runtime.KeepAlive(s)
	}
	b.ReportMetric(perApproval, "B/approval")
	b.ReportMetric(perClaim, "B/claim")
}
