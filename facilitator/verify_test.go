package facilitator

import (
	"context"
	"crypto/rand"
	"errors"
	"math/big"
	"slices"
	"strings"
	"testing"

	"github.com/ethereum/go-ethereum/accounts/abi"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"

	"github.com/x402gate/x402gate/facilitator/journal"
	"github.com/x402gate/x402gate/internal/testenv"
	"github.com/x402gate/x402gate/x402"
)

func TestVerifyAcceptsValidPayment(t *testing.T) {
	env := newTestEnv(t)
	e := env.engine(t, env.config(t))
	payer, payee := env.chain.Accounts[1], env.chain.Accounts[2]
	for _, version := range []int{x402.Version1, x402.Version2} {
		p, r := env.pay(t, version, payer, payee.Address)
		got, err := e.Verify(context.Background(), x402.VerifyInput{Payment: p, Requirements: r})
		if err != nil {
			t.Fatalf("v%d: %v", version, err)
		}
		if !got.IsValid || got.Payer != payer.Address.Hex() || got.InvalidReason != "" {
			t.Errorf("v%d: verify = %+v, want valid with payer %s", version, got, payer.Address.Hex())
		}
	}
}

// TestVerifyRefusesWithExactReason runs each rule of docs/facilitator.md#verify and
// docs/facilitator.md#verify on its own, in both x402 versions: v1 answers carry the v1 enum
// value, v2 answers the v2 string.
func TestVerifyRefusesWithExactReason(t *testing.T) {
	env := newTestEnv(t)
	cfg := env.config(t)
	cfg.Networks[0].MinAmount = "1000"
	e := env.engine(t, cfg)
	payer, payee, other := env.chain.Accounts[1], env.chain.Accounts[2], env.chain.Accounts[3]

	// An authorization whose nonce the payer cancelled on chain (sent by account 9, never
	// by the facilitator's account 0).
	usedNonce := env.authorization(t, payer.Address, payee.Address, testAmount)
	cancelSig := env.token.SignCancelAuthorization(t, payer.Key, payer.Address, usedNonce.Nonce)
	env.chain.Transact(t, env.chain.Accounts[9], env.token.Address,
		testenv.CancelAuthorizationVRS(t, payer.Address, usedNonce.Nonce, cancelSig))

	type tc struct {
		name string
		only int // 0: both versions
		// build returns the payment and requirements to verify, from a valid pair.
		build func(t *testing.T, version int) (*x402.Payment, *x402.Requirements)
		want  x402.Reason
	}
	// valid builds a valid payment after mutating its authorization and requirements;
	// the payment is signed after the mutation by key (payer's when nil).
	valid := func(mutA func(*x402.Authorization), mutR func(*x402.Requirements), from *testenv.Account) func(*testing.T, int) (*x402.Payment, *x402.Requirements) {
		return func(t *testing.T, version int) (*x402.Payment, *x402.Requirements) {
			signer := payer
			if from != nil {
				signer = *from
			}
			r := env.requirements(payee.Address, testAmount)
			a := env.authorization(t, signer.Address, payee.Address, testAmount)
			if mutA != nil {
				mutA(&a)
			}
			p := env.payment(version, a, env.sign(t, signer.Key, a), r)
			if mutR != nil {
				mutR(r)
				if version == x402.Version2 {
					acc := *r
					p.Accepted = &acc
				}
			}
			return p, r
		}
	}
	fresh := testenv.NewAccount(t) // holds no token
	now := env.now.Unix()
	cases := []tc{
		{name: "network not served by the facilitator", want: x402.ReasonInvalidNetwork,
			build: func(t *testing.T, v int) (*x402.Payment, *x402.Requirements) {
				p, r := valid(nil, nil, nil)(t, v)
				r.Network, p.Network = x402.Base.CAIP2, x402.Base.CAIP2
				return p, r
			}},
		{name: "payment network differs from the requirement", want: x402.ReasonNetworkMismatch,
			build: func(t *testing.T, v int) (*x402.Payment, *x402.Requirements) {
				p, r := valid(nil, nil, nil)(t, v)
				p.Network = x402.Base.CAIP2
				return p, r
			}},
		{name: "asset is not the configured token", want: x402.ReasonAssetMismatch,
			build: valid(nil, func(r *x402.Requirements) { r.Asset = x402.BaseSepolia.USDC.Address }, nil)},
		{name: "amount below the configured minimum", want: x402.ReasonAmountBelowMinimum,
			build: valid(func(a *x402.Authorization) { a.Value = big.NewInt(999) },
				func(r *x402.Requirements) { r.Amount = big.NewInt(999) }, nil)},
		{name: "scheme is not exact", want: x402.ReasonInvalidScheme,
			build: func(t *testing.T, v int) (*x402.Payment, *x402.Requirements) {
				p, r := valid(nil, nil, nil)(t, v)
				p.Scheme = "upto"
				return p, r
			}},
		{name: "requirement lacks the EIP-712 domain", want: x402.ReasonMissingEIP712Domain,
			build: valid(nil, func(r *x402.Requirements) { r.Extra = map[string]any{"name": "USDC"} }, nil)},
		{name: "requirement names another EIP-712 domain", want: x402.ReasonInvalidRequirements,
			build: valid(nil, func(r *x402.Requirements) { r.Extra = map[string]any{"name": "USD Coin", "version": "2"} }, nil)},
		{name: "signature is corrupted", want: x402.ReasonInvalidSignature,
			build: func(t *testing.T, v int) (*x402.Payment, *x402.Requirements) {
				p, r := valid(nil, nil, nil)(t, v)
				p.Signature[10] ^= 0xff
				return p, r
			}},
		{name: "signer is not from", want: x402.ReasonInvalidSignature,
			build: func(t *testing.T, v int) (*x402.Payment, *x402.Requirements) {
				r := env.requirements(payee.Address, testAmount)
				a := env.authorization(t, payer.Address, payee.Address, testAmount)
				return env.payment(v, a, env.sign(t, other.Key, a), r), r
			}},
		{name: "to is not payTo", want: x402.ReasonRecipientMismatch,
			build: valid(func(a *x402.Authorization) { a.To = other.Address }, nil, nil)},
		{name: "validBefore is under now+6s", want: x402.ReasonValidBefore,
			build: valid(func(a *x402.Authorization) { a.ValidBefore = big.NewInt(now + 5) }, nil, nil)},
		{name: "validAfter is in the future", want: x402.ReasonValidAfter,
			build: valid(func(a *x402.Authorization) { a.ValidAfter = big.NewInt(now + 1) }, nil, nil)},
		{name: "value differs from the amount", want: x402.ReasonValueMismatch,
			build: valid(func(a *x402.Authorization) { a.Value = big.NewInt(10_001) }, nil, nil)},
		{name: "overpayment is not exact either", want: x402.ReasonValueMismatch,
			build: valid(func(a *x402.Authorization) { a.Value = big.NewInt(20_000) }, nil, nil)},
		{name: "payer balance below the value", want: x402.ReasonInsufficientFunds,
			build: valid(nil, nil, &fresh)},
		{name: "nonce already used on chain", want: x402.ReasonNonceUsed,
			build: valid(func(a *x402.Authorization) { *a = usedNonce }, nil, nil)},
		{name: "accepted amount differs from the requirement", only: x402.Version2, want: x402.ReasonValueMismatch,
			build: func(t *testing.T, v int) (*x402.Payment, *x402.Requirements) {
				p, r := valid(nil, nil, nil)(t, v)
				p.Accepted.Amount = big.NewInt(1)
				return p, r
			}},
		{name: "v2 payment without accepted", only: x402.Version2, want: x402.ReasonInvalidPayload,
			build: func(t *testing.T, v int) (*x402.Payment, *x402.Requirements) {
				p, r := valid(nil, nil, nil)(t, v)
				p.Accepted = nil
				return p, r
			}},
		{name: "smart wallet not deployed and signature not ERC-6492", want: x402.ReasonUndeployedWallet,
			build: func(t *testing.T, v int) (*x402.Payment, *x402.Requirements) {
				p, r := valid(nil, nil, nil)(t, v)
				p.Authorization.From = testenv.NewAccount(t).Address
				p.Signature = randomBytes(t, 130)
				return p, r
			}},
		{name: "ERC-6492 factory not allow-listed", want: x402.ReasonFactoryNotAllowed,
			build: func(t *testing.T, v int) (*x402.Payment, *x402.Requirements) {
				p, r := valid(nil, nil, nil)(t, v)
				p.Authorization.From = testenv.NewAccount(t).Address
				p.Signature = wrap6492(t, common.HexToAddress("0x00000000000000000000000000000000000fac70"), []byte{1, 2, 3}, randomBytes(t, 65))
				return p, r
			}},
		{name: "requirement amount is zero", want: x402.ReasonInvalidRequirements,
			build: valid(func(a *x402.Authorization) { a.Value = big.NewInt(0) },
				func(r *x402.Requirements) { r.Amount = big.NewInt(0) }, nil)},
		{name: "requirement payTo is empty", want: x402.ReasonInvalidRequirements,
			build: valid(nil, func(r *x402.Requirements) { r.PayTo = common.Address{} }, nil)},
		{name: "authorization lacks validBefore", want: x402.ReasonInvalidPayload,
			build: func(t *testing.T, v int) (*x402.Payment, *x402.Requirements) {
				p, r := valid(nil, nil, nil)(t, v)
				p.Authorization.ValidBefore = nil
				return p, r
			}},
		{name: "signature is missing", want: x402.ReasonInvalidPayload,
			build: func(t *testing.T, v int) (*x402.Payment, *x402.Requirements) {
				p, r := valid(nil, nil, nil)(t, v)
				p.Signature = nil
				return p, r
			}},
		{name: "ERC-6492 wrapper does not decode", want: x402.ReasonInvalidSignature,
			build: func(t *testing.T, v int) (*x402.Payment, *x402.Requirements) {
				p, r := valid(nil, nil, nil)(t, v)
				p.Signature = append(randomBytes(t, 40), erc6492Suffix...)
				return p, r
			}},
		{name: "x402 version 3", want: x402.ReasonInvalidVersion,
			build: func(t *testing.T, v int) (*x402.Payment, *x402.Requirements) {
				p, r := valid(nil, nil, nil)(t, v)
				p.Version = 3
				return p, r
			}},
	}
	for _, c := range cases {
		for _, version := range []int{x402.Version1, x402.Version2} {
			if c.only != 0 && c.only != version {
				continue
			}
			t.Run(c.name+"/v"+big.NewInt(int64(version)).String(), func(t *testing.T) {
				p, r := c.build(t, version)
				got, err := e.Verify(context.Background(), x402.VerifyInput{Payment: p, Requirements: r})
				if err != nil {
					t.Fatalf("Verify: %v", err)
				}
				want := c.want.For(p.Version)
				if got.IsValid || got.InvalidReason != want {
					t.Fatalf("verify = %+v, want invalid with %q", got, want)
				}
				if p.Version == x402.Version1 && !slices.Contains(x402.V1Reasons, got.InvalidReason) {
					t.Errorf("v1 reason %q is not in the v1 enum", got.InvalidReason)
				}
				if got.Payer != p.Authorization.From.Hex() {
					t.Errorf("payer = %q, want %s", got.Payer, p.Authorization.From.Hex())
				}
			})
		}
	}
}

func TestVerifyContractWalletByERC1271(t *testing.T) {
	env := newTestEnv(t)
	e := env.engine(t, env.config(t))
	owner, payee := env.chain.Accounts[4], env.chain.Accounts[5]
	wallet := env.chain.DeployWallet1271(t, owner)
	env.token.Mint(t, wallet.Address, big.NewInt(1_000_000))

	r := env.requirements(payee.Address, testAmount)
	a := env.authorization(t, wallet.Address, payee.Address, testAmount)
	p := env.payment(x402.Version2, a, env.sign(t, owner.Key, a), r)
	got, err := e.Verify(context.Background(), x402.VerifyInput{Payment: p, Requirements: r})
	if err != nil || !got.IsValid {
		t.Fatalf("verify of the wallet's payment = %+v, %v; want valid", got, err)
	}

	stranger := env.chain.Accounts[6]
	bad := env.payment(x402.Version2, a, env.sign(t, stranger.Key, a), r)
	got, err = e.Verify(context.Background(), x402.VerifyInput{Payment: bad, Requirements: r})
	if err != nil || got.IsValid || got.InvalidReason != x402.ReasonInvalidSignature.V2() {
		t.Fatalf("verify signed by a stranger = %+v, %v; want %s", got, err, x402.ReasonInvalidSignature)
	}

	// The wallet's payment settles through the bytes overload: the token asks the wallet.
	before := env.token.BalanceOf(t, payee.Address)
	res, err := e.Settle(context.Background(), p, r)
	if err != nil || !res.Success {
		t.Fatalf("settle = %+v, %v", res, err)
	}
	if diff := new(big.Int).Sub(env.token.BalanceOf(t, payee.Address), before); diff.Cmp(testAmount) != 0 {
		t.Errorf("payee received %s, want %s", diff, testAmount)
	}
}

func TestVerifyWithRPCDownIsClearAndHidesURL(t *testing.T) {
	env := newTestEnv(t)
	cfg := env.config(t)
	e := env.engine(t, cfg)
	payer, payee := env.chain.Accounts[1], env.chain.Accounts[2]
	p1, r1 := env.pay(t, x402.Version1, payer, payee.Address)
	p2, r2 := env.pay(t, x402.Version2, payer, payee.Address)
	env.chain.Stop()
	host := strings.TrimPrefix(env.chain.RPCURL, "http://")

	for _, tc := range []struct {
		p *x402.Payment
		r *x402.Requirements
	}{{p1, r1}, {p2, r2}} {
		v := tc.p.Version
		got, err := e.Verify(context.Background(), x402.VerifyInput{Payment: tc.p, Requirements: tc.r})
		if err != nil {
			t.Fatalf("v%d Verify: %v", v, err)
		}
		want := x402.ReasonChainUnavailable.For(v)
		if got.IsValid || got.InvalidReason != want || got.InvalidMessage != "rpc unavailable" {
			t.Errorf("v%d verify = %+v, want %s / rpc unavailable", v, got, want)
		}
		res, err := e.Settle(context.Background(), tc.p, tc.r)
		if err != nil {
			t.Fatalf("v%d Settle: %v", v, err)
		}
		if res.Success || res.ErrorReason != want || res.ErrorMessage != "rpc unavailable" || res.Transaction != "" {
			t.Errorf("v%d settle = %+v, want %s / rpc unavailable and no transaction", v, res, want)
		}
		if v == x402.Version1 && (!slices.Contains(x402.V1Reasons, got.InvalidReason) || !slices.Contains(x402.V1Reasons, res.ErrorReason)) {
			t.Errorf("v1 reasons %q / %q are not in the v1 enum", got.InvalidReason, res.ErrorReason)
		}
		for _, s := range []string{got.InvalidMessage, res.ErrorMessage, res.ErrorReason} {
			if strings.Contains(s, host) {
				t.Errorf("%q carries the RPC endpoint", s)
			}
		}
		if _, err := cfg.Journal.Get(context.Background(), x402.KeyOf(tc.p, tc.r).AuthorizationKey()); !errors.Is(err, journal.ErrNotFound) {
			t.Errorf("v%d: a settlement was journaled with the chain down: %v", v, err)
		}
	}
}

func randomBytes(t *testing.T, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

// wrap6492 wraps sig as ERC-6492: abi.encode(factory, calldata, sig) ‖ magic suffix.
func wrap6492(t *testing.T, factory common.Address, calldata, sig []byte) []byte {
	t.Helper()
	addrT, _ := abi.NewType("address", "", nil)
	bytesT, _ := abi.NewType("bytes", "", nil)
	enc, err := abi.Arguments{{Type: addrT}, {Type: bytesT}, {Type: bytesT}}.Pack(factory, calldata, sig)
	if err != nil {
		t.Fatal(err)
	}
	return append(enc, erc6492Suffix...)
}

// TestVerifyAccountWithCodeIsAskedLikeTheTokenAsks: when from has code (an EIP-7702
// delegated account, made here with anvil_setCode), the token checks the signature with
// from's ERC-1271 isValidSignature even if it recovers to from; verify does the same, so
// it never calls valid a payment that settle cannot move.
func TestVerifyAccountWithCodeIsAskedLikeTheTokenAsks(t *testing.T) {
	env := newTestEnv(t)
	e := env.engine(t, env.config(t))
	account, delegateOwner, payee := env.chain.Accounts[8], env.chain.Accounts[6], env.chain.Accounts[5]
	signer := env.chain.FacilitatorAccount().Address
	// Give the funded EOA the code of a TestWallet1271 that accepts delegateOwner's signatures.
	wallet := env.chain.DeployWallet1271(t, delegateOwner)
	code, err := env.chain.Client.CodeAt(context.Background(), wallet.Address, nil)
	if err != nil || len(code) == 0 {
		t.Fatalf("wallet code: %v", err)
	}
	env.chain.RPC(t, nil, "anvil_setCode", account.Address, hexutil.Bytes(code))

	for _, version := range []int{x402.Version1, x402.Version2} {
		r := env.requirements(payee.Address, testAmount)
		a := env.authorization(t, account.Address, payee.Address, testAmount)
		own := env.payment(version, a, env.sign(t, account.Key, a), r)
		nonce := env.pendingNonce(t, signer)
		want := x402.ReasonInvalidSignature.For(version)
		ver, err := e.Verify(context.Background(), x402.VerifyInput{Payment: own, Requirements: r})
		if err != nil || ver.IsValid || ver.InvalidReason != want {
			t.Errorf("v%d: verify of the account's own ECDSA signature = %+v, %v; want %s", version, ver, err, want)
		}
		res, err := e.Settle(context.Background(), own, r)
		if err != nil || res.Success || res.ErrorReason != want || env.pendingNonce(t, signer) != nonce {
			t.Errorf("v%d: settle = %+v, %v; want %s and nothing sent", version, res, err, want)
		}

		delegated := env.payment(version, a, env.sign(t, delegateOwner.Key, a), r)
		ver, err = e.Verify(context.Background(), x402.VerifyInput{Payment: delegated, Requirements: r})
		if err != nil || !ver.IsValid {
			t.Fatalf("v%d: verify of the code's accepted signature = %+v, %v; want valid", version, ver, err)
		}
		before := env.token.BalanceOf(t, payee.Address)
		res, err = e.Settle(context.Background(), delegated, r)
		if err != nil || !res.Success {
			t.Fatalf("v%d: settle = %+v, %v", version, res, err)
		}
		if d := new(big.Int).Sub(env.token.BalanceOf(t, payee.Address), before); d.Cmp(testAmount) != 0 {
			t.Errorf("v%d: payee received %s, want %s", version, d, testAmount)
		}
	}
}
