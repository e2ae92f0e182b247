package facilitator

import (
	"context"
	"crypto/ecdsa"
	"math/big"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"

	"github.com/x402gate/x402gate/facilitator/approval"
	"github.com/x402gate/x402gate/facilitator/journal"
	"github.com/x402gate/x402gate/facilitator/txsender"
	"github.com/x402gate/x402gate/internal/testenv"
	"github.com/x402gate/x402gate/x402"
)

// offlineService is a Service on net with no RPC client: enough for checkStatic, the CPU
// part of verify. It is built like New builds one, minus the dial.
func offlineService(b testing.TB, net x402.Network) *Service {
	b.Helper()
	key, err := crypto.GenerateKey()
	if err != nil {
		b.Fatal(err)
	}
	cfg := Config{
		Networks: []NetworkConfig{NetworkOf(net, "http://127.0.0.1:1")},
		Signer:   key, Store: approval.NewMemoryStore(0), Journal: nopJournal{},
	}
	if err := cfg.prepare(); err != nil {
		b.Fatal(err)
	}
	tabi, err := loadTokenABI()
	if err != nil {
		b.Fatal(err)
	}
	e := &Service{cfg: cfg, log: cfg.Logger, now: cfg.Now, abi: tabi, chains: map[string]*chain{}, factories: map[common.Address]bool{}}
	node, err := txsender.Dial(net.CAIP2, cfg.Networks[0].RPC, cfg.RPCTimeout, nil) // an http endpoint: nothing is sent
	if err != nil {
		b.Fatal(err)
	}
	c := &chain{Node: node, net: net, abi: tabi}
	e.chains[net.CAIP2], e.order = c, []*chain{c}
	return e
}

// nopJournal satisfies Config.prepare for the offline engine; checkStatic never uses it.
type nopJournal struct{ journal.Journal }

// signedPayment is a valid v2 payment of amount from key to payTo on net, as a client
// signs it (EIP-712 digest, 65-byte signature with v = 27/28).
func signedPayment(b testing.TB, net x402.Network, key *ecdsa.PrivateKey, payTo common.Address, amount *big.Int, now time.Time) (*x402.Payment, *x402.Requirements) {
	b.Helper()
	r := &x402.Requirements{
		Scheme: x402.SchemeExact, Network: net.CAIP2, Amount: new(big.Int).Set(amount), Asset: net.USDC.Address,
		PayTo: payTo, MaxTimeoutSeconds: 600, Extra: map[string]any{"name": net.USDC.Name, "version": net.USDC.Version},
	}
	a := x402.Authorization{
		From: crypto.PubkeyToAddress(key.PublicKey), To: payTo, Value: new(big.Int).Set(amount),
		ValidAfter: big.NewInt(now.Unix() - 600), ValidBefore: big.NewInt(now.Unix() + 600),
	}
	a.Nonce[0], a.Nonce[31] = 0x40, 0x02
	h, err := x402.TransferWithAuthorizationHash(net.ChainID, net.USDC.Address, net.USDC.Name, net.USDC.Version, a)
	if err != nil {
		b.Fatal(err)
	}
	sig := testenv.SignDigest(b, key, h)
	acc := *r
	return &x402.Payment{Version: x402.Version2, Scheme: x402.SchemeExact, Network: net.CAIP2,
		Signature: sig, Authorization: a, Accepted: &acc}, r
}

// BenchmarkVerifyCPU is the CPU path of /verify for an EOA payment, with no RPC: the pins
// of network, asset and amount, the v2 accepted requirement, the EIP-712 domain, the
// EIP-712 digest, ECDSA recovery of the signer, and recipient, time window and value.
// What remains of a verify is chain state (one batched eth_call round trip).
func BenchmarkVerifyCPU(b *testing.B) { benchVerifyCPU(b, signedPayment) }

// signPayment signs a valid payment of amount of net's asset from key to payTo, valid
// around now (signedPayment, signedPermit2Payment).
type signPayment func(t testing.TB, net x402.Network, key *ecdsa.PrivateKey, payTo common.Address, amount *big.Int, now time.Time) (*x402.Payment, *x402.Requirements)

// benchVerifyCPU runs checkStatic on the valid payment sign makes.
func benchVerifyCPU(b *testing.B, sign signPayment) {
	e := offlineService(b, x402.BaseSepolia)
	key, _ := crypto.GenerateKey()
	now := time.Now()
	p, r := sign(b, x402.BaseSepolia, key, common.HexToAddress("0x000000000000000000000000000000000000beef"), big.NewInt(10_000), now)
	b.ReportAllocs()
	for b.Loop() {
		c, f := e.checkStatic(p, r, now, nil)
		if f != nil || !c.eoa {
			b.Fatalf("checkStatic = %+v, %v", c, f)
		}
	}
}

// BenchmarkEcrecoverBound is the bound of BenchmarkVerifyCPU: go-ethereum's bare
// crypto.Ecrecover of the same payment's signature over its digest, and nothing else.
func BenchmarkEcrecoverBound(b *testing.B) {
	key, _ := crypto.GenerateKey()
	now := time.Now()
	p, _ := signedPayment(b, x402.BaseSepolia, key, common.HexToAddress("0x000000000000000000000000000000000000beef"), big.NewInt(10_000), now)
	net := x402.BaseSepolia
	h, err := x402.TransferWithAuthorizationHash(net.ChainID, net.USDC.Address, net.USDC.Name, net.USDC.Version, p.Authorization)
	if err != nil {
		b.Fatal(err)
	}
	sig := append([]byte(nil), p.Signature...)
	sig[64] -= 27
	b.ReportAllocs()
	for b.Loop() {
		if _, err := crypto.Ecrecover(h[:], sig); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkVerifyCPUParallel is BenchmarkVerifyCPU on every core (GOMAXPROCS goroutines).
func BenchmarkVerifyCPUParallel(b *testing.B) {
	e := offlineService(b, x402.BaseSepolia)
	key, _ := crypto.GenerateKey()
	now := time.Now()
	p, r := signedPayment(b, x402.BaseSepolia, key, common.HexToAddress("0x000000000000000000000000000000000000beef"), big.NewInt(10_000), now)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if c, f := e.checkStatic(p, r, now, nil); f != nil || !c.eoa {
				b.Errorf("checkStatic = %+v, %v", c, f)
				return
			}
		}
	})
}

// BenchmarkVerifyRPC is a whole Service.Verify of a valid EOA payment against anvil and our
// token over loopback HTTP JSON-RPC (GUARDIAN_MODE off): the CPU path plus one batched
// round trip for balanceOf and authorizationState.
func BenchmarkVerifyRPC(b *testing.B) {
	e, p, r := rpcBenchEngine(b)
	benchVerify(b, e, p, r)
}

// BenchmarkVerifyRPCParallel is BenchmarkVerifyRPC from GOMAXPROCS*4 goroutines at once,
// sharing one engine and one anvil: throughput under concurrent verifies.
func BenchmarkVerifyRPCParallel(b *testing.B) {
	e, p, r := rpcBenchEngine(b)
	ctx := context.Background()
	b.ReportAllocs()
	b.SetParallelism(4)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if got, err := e.Verify(ctx, x402.VerifyInput{Payment: p, Requirements: r}); err != nil || !got.IsValid {
				b.Errorf("verify = %+v, %v", got, err)
				return
			}
		}
	})
}

// BenchmarkVerifyRPCContractWallet is Service.Verify of a payment from a deployed ERC-1271
// wallet against anvil: eth_getCode, the wallet's isValidSignature, then the batched
// token state read (three round trips).
func BenchmarkVerifyRPCContractWallet(b *testing.B) {
	env := benchEnv(b)
	e := env.engine(b, env.config(b))
	owner, payee := env.chain.Accounts[4], env.chain.Accounts[5]
	wallet := env.chain.DeployWallet1271(b, owner)
	env.token.Mint(b, wallet.Address, big.NewInt(1_000_000))
	r := env.requirements(payee.Address, testAmount)
	a := env.authorization(b, wallet.Address, payee.Address, testAmount)
	p := env.payment(x402.Version2, a, env.sign(b, owner.Key, a), r)
	benchVerify(b, e, p, r)
}

// BenchmarkSettleRPC is a whole Service.Settle against anvil with automine (GUARDIAN_MODE
// off, MemoryStore, SQLite journal): re-verify, eth_estimateGas, claim, sign, journal
// write, eth_sendRawTransaction and the receipt poll. Each iteration settles a fresh
// payment, signed outside the timer.
func BenchmarkSettleRPC(b *testing.B) {
	env := benchEnv(b)
	e := env.engine(b, env.config(b))
	payer, payee := env.chain.Accounts[1], env.chain.Accounts[2]
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		p, r := env.pay(b, x402.Version2, payer, payee.Address)
		b.StartTimer()
		res, err := e.Settle(ctx, p, r)
		if err != nil || !res.Success {
			b.Fatalf("settle = %+v, %v", res, err)
		}
	}
}

// rpcBenchEngine starts anvil with our token and an engine on it, and returns a valid
// payment of account 1 to account 2.
func rpcBenchEngine(b *testing.B) (*Service, *x402.Payment, *x402.Requirements) {
	env := benchEnv(b)
	e := env.engine(b, env.config(b))
	p, r := env.pay(b, x402.Version2, env.chain.Accounts[1], env.chain.Accounts[2].Address)
	return e, p, r
}

// benchEnv is newTestEnv for a benchmark.
func benchEnv(b *testing.B) *testEnv {
	b.Helper()
	return newTestEnv(b)
}

// benchVerify times e.Verify of the valid payment p for r, once an iteration.
func benchVerify(b *testing.B, e *Service, p *x402.Payment, r *x402.Requirements) {
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		got, err := e.Verify(ctx, x402.VerifyInput{Payment: p, Requirements: r})
		if err != nil || !got.IsValid {
			b.Fatalf("verify = %+v, %v", got, err)
		}
	}
}
