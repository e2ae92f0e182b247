package facilitator

import (
	"context"
	"math/big"
	"testing"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"

	"github.com/x402gate/x402gate/internal/contracts"
	"github.com/x402gate/x402gate/internal/testenv"
	"github.com/x402gate/x402gate/x402"
)

// create2Deployer is the deterministic deployment proxy that anvil installs at start
// (its calldata is salt ‖ init code; it deploys with CREATE2). The tests use it as the
// ERC-6492 wallet factory: a counterfactual wallet is TestWallet1271 deployed through it.
var create2Deployer = common.HexToAddress("0x4e59b44847b379578588920ca78fbf26c0b4956c")

// counterfactual is a TestWallet1271 of owner that is not deployed yet: its address and
// the factory calldata that deploys it there.
type counterfactual struct {
	address  common.Address
	calldata []byte
}

func newCounterfactual(t *testing.T, env *testEnv, owner testenv.Account) counterfactual {
	t.Helper()
	code, err := env.chain.Client.CodeAt(context.Background(), create2Deployer, nil)
	if err != nil || len(code) == 0 {
		t.Fatalf("anvil has no CREATE2 deployer at %s (%v); use an anvil that installs it (the default; not --disable-default-create2-deployer)", create2Deployer.Hex(), err)
	}
	args, err := contracts.WalletABI.Pack("", owner.Address)
	if err != nil {
		t.Fatal(err)
	}
	initCode := append(append([]byte{}, contracts.WalletBytecode...), args...)
	salt := testenv.RandomNonce(t)
	return counterfactual{
		address:  crypto.CreateAddress2(create2Deployer, salt, crypto.Keccak256(initCode)),
		calldata: append(salt[:], initCode...),
	}
}

// TestVerifyERC6492OnlyFromAnAllowListedFactory: a payment from a wallet that is not
// deployed yet, signed by its owner and wrapped in ERC-6492, verifies only when the
// factory is allow-listed; then settle deploys the wallet and moves the value. A wrapper
// whose inner signature the wallet will not accept is refused at verify, and nothing is
// deployed or sent.
func TestVerifyERC6492OnlyFromAnAllowListedFactory(t *testing.T) {
	env := newTestEnv(t)
	owner, payee, stranger := env.chain.Accounts[4], env.chain.Accounts[5], env.chain.Accounts[6]
	signer := env.chain.FacilitatorAccount().Address

	open := env.engine(t, env.config(t)) // no factory allow-listed
	cfg := env.config(t)
	cfg.ERC6492Factories = []string{create2Deployer.Hex()}
	cfg.SkipStartupReconcile = true
	allowed := env.engine(t, cfg)

	// payment is a payment from a fresh counterfactual wallet of owner, signed by key.
	payment := func(t *testing.T, version int, signBy testenv.Account) (counterfactual, *x402.Payment, *x402.Requirements) {
		w := newCounterfactual(t, env, owner)
		env.token.Mint(t, w.address, big.NewInt(1_000_000))
		r := env.requirements(payee.Address, testAmount)
		a := env.authorization(t, w.address, payee.Address, testAmount)
		sig := wrap6492(t, create2Deployer, w.calldata, env.sign(t, signBy.Key, a))
		return w, env.payment(version, a, sig, r), r
	}
	deployed := func(t *testing.T, addr common.Address) bool {
		code, err := env.chain.Client.CodeAt(context.Background(), addr, nil)
		if err != nil {
			t.Fatal(err)
		}
		return len(code) > 0
	}

	for _, version := range []int{x402.Version1, x402.Version2} {
		t.Run("factory not allow-listed/v"+big.NewInt(int64(version)).String(), func(t *testing.T) {
			w, p, r := payment(t, version, owner)
			nonce := env.pendingNonce(t, signer)
			want := x402.ReasonFactoryNotAllowed.For(version)
			ver, err := open.Verify(context.Background(), x402.VerifyInput{Payment: p, Requirements: r})
			if err != nil || ver.IsValid || ver.InvalidReason != want {
				t.Fatalf("verify = %+v, %v; want %s", ver, err, want)
			}
			res, err := open.Settle(context.Background(), p, r)
			if err != nil || res.Success || res.ErrorReason != want {
				t.Fatalf("settle = %+v, %v; want %s", res, err, want)
			}
			if deployed(t, w.address) || env.pendingNonce(t, signer) != nonce {
				t.Error("the wallet was deployed or a transaction was sent")
			}
		})

		t.Run("inner signature not the owner's/v"+big.NewInt(int64(version)).String(), func(t *testing.T) {
			w, p, r := payment(t, version, stranger)
			nonce := env.pendingNonce(t, signer)
			want := x402.ReasonInvalidSignature.For(version)
			ver, err := allowed.Verify(context.Background(), x402.VerifyInput{Payment: p, Requirements: r})
			if err != nil || ver.IsValid || ver.InvalidReason != want {
				t.Fatalf("verify = %+v, %v; want %s", ver, err, want)
			}
			res, err := allowed.Settle(context.Background(), p, r)
			if err != nil || res.Success || res.ErrorReason != want {
				t.Fatalf("settle = %+v, %v; want %s", res, err, want)
			}
			if deployed(t, w.address) || env.pendingNonce(t, signer) != nonce {
				t.Error("the wallet was deployed or a transaction was sent for a forged signature")
			}
		})

		t.Run("factory call fails/v"+big.NewInt(int64(version)).String(), func(t *testing.T) {
			r := env.requirements(payee.Address, testAmount)
			from := testenv.NewAccount(t).Address
			env.token.Mint(t, from, big.NewInt(1_000_000))
			a := env.authorization(t, from, payee.Address, testAmount)
			// Init code that reverts at once (PUSH1 0 PUSH1 0 REVERT): the proxy's CREATE2 fails.
			sig := wrap6492(t, create2Deployer, append(make([]byte, 32), 0x60, 0x00, 0x60, 0x00, 0xfd), randomBytes(t, 65))
			p := env.payment(version, a, sig, r)
			want := x402.ReasonUndeployedWallet.For(version)
			ver, err := allowed.Verify(context.Background(), x402.VerifyInput{Payment: p, Requirements: r})
			if err != nil || ver.IsValid || ver.InvalidReason != want {
				t.Fatalf("verify = %+v, %v; want %s", ver, err, want)
			}
		})

		t.Run("allow-listed factory verifies and settles/v"+big.NewInt(int64(version)).String(), func(t *testing.T) {
			w, p, r := payment(t, version, owner)
			ver, err := allowed.Verify(context.Background(), x402.VerifyInput{Payment: p, Requirements: r})
			if err != nil || !ver.IsValid || ver.Payer != w.address.Hex() {
				t.Fatalf("verify = %+v, %v; want valid with payer %s", ver, err, w.address.Hex())
			}
			if deployed(t, w.address) {
				t.Fatal("verify deployed the wallet")
			}
			before := env.token.BalanceOf(t, payee.Address)
			res, err := allowed.Settle(context.Background(), p, r)
			if err != nil || !res.Success {
				t.Fatalf("settle = %+v, %v", res, err)
			}
			if !deployed(t, w.address) {
				t.Error("settle did not deploy the wallet")
			}
			if d := new(big.Int).Sub(env.token.BalanceOf(t, payee.Address), before); d.Cmp(testAmount) != 0 {
				t.Errorf("payee received %s, want %s", d, testAmount)
			}
			if !env.token.AuthorizationState(t, w.address, p.Authorization.Nonce) {
				t.Error("authorization not used on chain")
			}
			// Replayed, the wrapper now meets a deployed wallet: the nonce is used.
			again, err := allowed.Settle(context.Background(), p, r)
			if err != nil || again.Success || again.ErrorReason != x402.ReasonNonceUsed.For(version) {
				t.Errorf("replayed settle = %+v, %v; want %s", again, err, x402.ReasonNonceUsed.For(version))
			}
		})
	}
}
