package facilitator

import (
	"context"
	"crypto/ecdsa"
	"encoding/json"
	"math/big"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"

	"github.com/x402gate/x402gate/internal/testenv"
	"github.com/x402gate/x402gate/x402"
)

// signedPermit2Payment is a valid v2 exact payment over Permit2 of amount of net's asset
// from key to payTo, signed as the client signs it (Permit2's EIP-712 digest, v = 27/28),
// in the normalised form the decoder gives.
func signedPermit2Payment(b testing.TB, net x402.Network, key *ecdsa.PrivateKey, payTo common.Address, amount *big.Int, now time.Time) (*x402.Payment, *x402.Requirements) {
	b.Helper()
	r := &x402.Requirements{
		Scheme: x402.SchemeExact, Network: net.CAIP2, Amount: new(big.Int).Set(amount), Asset: net.USDC.Address,
		PayTo: payTo, MaxTimeoutSeconds: 600, Extra: map[string]any{x402.ExtraAssetTransferMethod: x402.TransferPermit2},
	}
	a := &x402.Permit2Authorization{
		From: crypto.PubkeyToAddress(key.PublicKey), Token: net.USDC.Address, Amount: new(big.Int).Set(amount),
		Spender: x402.ExactPermit2ProxyAddress, Nonce: big.NewInt(0x4002), Deadline: big.NewInt(now.Unix() + 600),
		To: payTo, ValidAfter: big.NewInt(0),
	}
	return permit2Payment(b, net.ChainID, a, r, key), r
}

// permit2Payment is the normalised v2 payment of a for r, signed with key over Permit2's
// EIP-712 digest on chainID (a wallet's owner key signs for the wallet).
func permit2Payment(t testing.TB, chainID *big.Int, a *x402.Permit2Authorization, r *x402.Requirements, key *ecdsa.PrivateKey) *x402.Payment {
	t.Helper()
	h, err := x402.Permit2Hash(chainID, a)
	if err != nil {
		t.Fatal(err)
	}
	acc := *r
	raw, err := json.Marshal((&x402.Payment{Version: x402.Version2, Scheme: r.Scheme, Network: r.Network,
		Signature: testenv.SignDigest(t, key, h), Permit2: a, Accepted: &acc}).PayloadV2())
	if err != nil {
		t.Fatal(err)
	}
	p, err := x402.DecodePayloadJSON(raw, nil)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// BenchmarkVerifyCPUPermit2 is BenchmarkVerifyCPU for an exact payment over Permit2: the
// same pins and match plus the spender, witness and token, Permit2's EIP-712 digest (three
// struct hashes besides the domain's), and ECDSA recovery.
func BenchmarkVerifyCPUPermit2(b *testing.B) { benchVerifyCPU(b, signedPermit2Payment) }

// BenchmarkVerifyRPCPermit2 is BenchmarkVerifyRPC for an exact payment over Permit2 made
// by the real client: the CPU path plus one batched round trip for the balance, the
// allowance to Permit2, the nonce's word of Permit2's bitmap and the payer's code.
func BenchmarkVerifyRPCPermit2(b *testing.B) {
	env := newPermit2Env(b)
	e := env.engine(b, env.config(b))
	r := env.permit2Requirements(e, x402.SchemeExact, permit2Price)
	p := payPermit2(b, env.chain.Accounts[1], r)[0]
	benchVerify(b, e, p, r)
}

// BenchmarkPaidRequestUpto is BenchmarkPaidRequest for upto over Permit2, signed by the real
// @x402/evm client for a maximum and settled for half of it in a copy of the requirements,
// as the gate settles a metered cost (docs/gate.md#metering): the node requests and
// allocations per paid request show whether Settle reuses what Verify proved.
//
//	go test -run '^$' -bench BenchmarkPaidRequestUpto -benchtime 100x ./facilitator/
func BenchmarkPaidRequestUpto(b *testing.B) {
	env := newPermit2Env(b)
	e := env.engine(b, env.config(b)).InProcess()
	max := big.NewInt(1_000_000)
	r := env.permit2Requirements(e.Service, x402.SchemeUpto, max)
	ctx := context.Background()
	pay := func(p *x402.Payment) {
		if v, err := e.Verify(ctx, x402.VerifyInput{Payment: p, Requirements: r}); err != nil || !v.IsValid {
			b.Fatalf("verify = %+v, %v", v, err)
		}
		half := *r
		half.Amount = big.NewInt(500_000)
		if s, err := e.Settle(ctx, p, &half); err != nil || !s.Success {
			b.Fatalf("settle = %+v, %v", s, err)
		}
	}
	payers := env.chain.Accounts[1:7] // the payers that approved Permit2
	rs := make([]*x402.Requirements, b.N+1)
	for i := range rs {
		rs[i] = r
	}
	ps := make([]*x402.Payment, 0, b.N+1)
	for i, payer := range payers {
		n := (len(rs) - i + len(payers) - 1) / len(payers)
		ps = append(ps, payPermit2(b, payer, rs[:n]...)...)
	}
	pay(ps[0]) // warm the nonce and connections
	b.ReportAllocs()
	b.ResetTimer()
	rpcBefore := e.order[0].Requests()
	for _, p := range ps[1:] {
		pay(p)
	}
	rpcs := e.order[0].Requests() - rpcBefore
	b.StopTimer()
	b.ReportMetric(float64(rpcs)/float64(len(ps)-1), "rpc/payment")
}
