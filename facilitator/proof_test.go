package facilitator

import (
	"context"
	"math/big"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"

	"github.com/x402gate/x402gate/internal/testenv"
	"github.com/x402gate/x402gate/x402"
)

// authorizationStateSelector is the token's authorizationState(address,bytes32): one read
// of it is one read of the token's state for a payment (chain.tokenState).
var authorizationStateSelector = crypto.Keccak256([]byte("authorizationState(address,bytes32)"))[:4]

// countRecoveries counts the signature recoveries of this package until t ends.
func countRecoveries(t testing.TB) *atomic.Int64 {
	var n atomic.Int64
	orig := recoverSigner
	recoverSigner = func(hash common.Hash, sig []byte) (common.Address, error) {
		n.Add(1)
		return orig(hash, sig)
	}
	t.Cleanup(func() { recoverSigner = orig })
	return &n
}

// TestSettleReusesWhatVerifyProved: a paid request on the bundled facilitator, Verify
// then Settle of the same payment values in process, recovers the signature once and
// reads the token's state once (docs/facilitator.md#settle-order). A Settle of anything but
// exactly what Verify proved, fresh, runs every check again: an equal copy of the payment,
// a proof older than proofTTL, a signature changed after Verify (which is then refused).
func TestSettleReusesWhatVerifyProved(t *testing.T) {
	env := newTestEnv(t)
	node := testenv.CountCalls(t, env.chain.RPCURL, authorizationStateSelector)
	cfg := env.config(t)
	cfg.Networks[0].RPC = node.URL
	var skew atomic.Int64 // how far the engine's clock runs ahead of env.now
	cfg.Now = func() time.Time { return env.now.Add(time.Duration(skew.Load())) }
	e := env.engine(t, cfg)
	recoveries := countRecoveries(t)
	payer, payee := env.chain.Accounts[1], env.chain.Accounts[2]
	paid := env.token.BalanceOf(t, payee.Address)

	same := func(p *x402.Payment, r *x402.Requirements) (*x402.Payment, *x402.Requirements) { return p, r }
	cases := []struct {
		name string
		// settle is what Settle is given after Verify proved p paying r.
		settle          func(p *x402.Payment, r *x402.Requirements) (*x402.Payment, *x402.Requirements)
		wait            time.Duration // between Verify and Settle
		settled         bool
		recover, states int64
	}{
		{name: "the payment Verify proved: one recovery, one token state read", settle: same, settled: true, recover: 1, states: 1},
		{name: "an equal copy of the payment and requirements: every check again", settle: func(p *x402.Payment, r *x402.Requirements) (*x402.Payment, *x402.Requirements) {
			pc, rc := *p, *r
			return &pc, &rc
		}, settled: true, recover: 2, states: 2},
		{name: "a proof older than proofTTL: every check again", settle: same, wait: proofTTL + time.Second, settled: true, recover: 2, states: 2},
		{name: "a signature changed after Verify: checked again and refused", settle: func(p *x402.Payment, r *x402.Requirements) (*x402.Payment, *x402.Requirements) {
			p.Signature[10] ^= 0xff
			return p, r
		}, settled: false, recover: 2, states: 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, r := env.pay(t, x402.Version2, payer, payee.Address)
			recoveries.Store(0)
			before := node.Calls()
			if v, err := e.InProcess().Verify(context.Background(), x402.VerifyInput{Payment: p, Requirements: r}); err != nil || !v.IsValid {
				t.Fatalf("verify = %+v, %v", v, err)
			}
			skew.Add(int64(tc.wait))
			sp, sr := tc.settle(p, r)
			res, err := e.InProcess().Settle(context.Background(), sp, sr)
			if err != nil || res.Success != tc.settled {
				t.Fatalf("settle = %+v, %v; want success %v", res, err, tc.settled)
			}
			if got := recoveries.Load(); got != tc.recover {
				t.Errorf("%d signature recoveries for one paid request, want %d", got, tc.recover)
			}
			if got := node.Calls() - before; got != tc.states {
				t.Errorf("%d token state reads for one paid request, want %d", got, tc.states)
			}
		})
	}
	paid.Sub(env.token.BalanceOf(t, payee.Address), paid)
	if want := new(big.Int).Mul(testAmount, big.NewInt(3)); paid.Cmp(want) != 0 {
		t.Errorf("payee got %s, want the three settled payments, %s", paid, want)
	}
}

// TestSettleReusesAContractWalletsProof: the payment of a deployed ERC-1271 wallet is
// proved once too: Verify asks the wallet (isValidSignature by eth_call) and reads the
// token's state, and the Settle of the same payment values does neither again; the
// token's own check of the wallet runs in the settlement's gas estimate.
func TestSettleReusesAContractWalletsProof(t *testing.T) {
	env := newTestEnv(t)
	states := testenv.CountCalls(t, env.chain.RPCURL, authorizationStateSelector)
	asks := testenv.CountCalls(t, states.URL, crypto.Keccak256([]byte("isValidSignature(bytes32,bytes)"))[:4])
	cfg := env.config(t)
	cfg.Networks[0].RPC = asks.URL
	e := env.engine(t, cfg)
	owner, payee := env.chain.Accounts[4], env.chain.Accounts[5]
	wallet := env.chain.DeployWallet1271(t, owner)
	env.token.Mint(t, wallet.Address, big.NewInt(1_000_000))
	r := env.requirements(payee.Address, testAmount)
	a := env.authorization(t, wallet.Address, payee.Address, testAmount)
	p := env.payment(x402.Version2, a, env.sign(t, owner.Key, a), r)
	before := env.token.BalanceOf(t, payee.Address)
	if v, err := e.InProcess().Verify(context.Background(), x402.VerifyInput{Payment: p, Requirements: r}); err != nil || !v.IsValid {
		t.Fatalf("verify = %+v, %v", v, err)
	}
	if res, err := e.InProcess().Settle(context.Background(), p, r); err != nil || !res.Success {
		t.Fatalf("settle = %+v, %v", res, err)
	}
	if got, want := new(big.Int).Sub(env.token.BalanceOf(t, payee.Address), before), testAmount; got.Cmp(want) != 0 {
		t.Errorf("payee got %s, want %s", got, want)
	}
	if n := asks.Calls(); n != 1 {
		t.Errorf("the wallet was asked %d times by eth_call for one paid request, want 1", n)
	}
	if n := states.Calls(); n != 1 {
		t.Errorf("%d token state reads for one paid request, want 1", n)
	}
}
