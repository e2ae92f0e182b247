package facilitator

import (
	"math/big"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"

	"github.com/x402gate/x402gate/internal/testenv"
	"github.com/x402gate/x402gate/x402"
)

// BenchmarkPaidVerifyCPU is the CPU of the signature checks of one paid request on the
// bundled path, with no RPC: Verify's checks (EIP-712 digest, recovery of the signer, the
// pins and the time window), its proof kept, then Settle's checks of the same payment
// values, which compare them field by field with the proof's copy instead of hashing and
// recovering again, and check the time window. It reports the signature recoveries per payment (countRecoveries). Its bound (issue 27, ≤ 1.1×) is BenchmarkEcrecoverHashBound.
func BenchmarkPaidVerifyCPU(b *testing.B) {
	e, p, r := paidCPUBench(b)
	recoveries := countRecoveries(b)
	b.ReportAllocs()
	defer testenv.ReportCPU(b, testenv.SelfCPU())
	for b.Loop() {
		now := time.Now()
		c, f := e.checkStatic(p, r, now, nil)
		if f != nil || !c.eoa {
			b.Fatalf("verify: checkStatic = %+v, %v", c, f)
		}
		e.proofs.put(c, now)
		if c, f = e.checkStatic(p, r, now, e.proofs.take(p, r, now)); f != nil || !c.proven {
			b.Fatalf("settle: checkStatic = %+v, %v", c, f)
		}
	}
	b.ReportMetric(float64(recoveries.Load())/float64(b.N), "recoveries/payment")
}

// BenchmarkEcrecoverHashBound is the bound of BenchmarkPaidVerifyCPU: the payment's
// EIP-712 digest and one bare crypto.Ecrecover of its signature over it, nothing else.
func BenchmarkEcrecoverHashBound(b *testing.B) {
	_, p, _ := paidCPUBench(b)
	net := x402.BaseSepolia
	sig := append([]byte(nil), p.Signature...)
	sig[64] -= 27
	b.ReportAllocs()
	defer testenv.ReportCPU(b, testenv.SelfCPU())
	for b.Loop() {
		h, err := x402.TransferWithAuthorizationHash(net.ChainID, net.USDC.Address, net.USDC.Name, net.USDC.Version, p.Authorization)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := crypto.Ecrecover(h[:], sig); err != nil {
			b.Fatal(err)
		}
	}
}

// paidCPUBench is an offline Service on Base Sepolia and a valid EOA payment of it.
func paidCPUBench(b *testing.B) (*Service, *x402.Payment, *x402.Requirements) {
	e := offlineService(b, x402.BaseSepolia)
	key, _ := crypto.GenerateKey()
	p, r := signedPayment(b, x402.BaseSepolia, key, common.HexToAddress("0x000000000000000000000000000000000000beef"), big.NewInt(10_000), time.Now())
	return e, p, r
}
