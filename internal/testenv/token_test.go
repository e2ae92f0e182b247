package testenv_test

import (
	"context"
	"math/big"
	"testing"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/ethereum/go-ethereum/signer/core/apitypes"

	"github.com/x402gate/x402gate/internal/contracts"
	"github.com/x402gate/x402gate/internal/testenv"
)

// attempt is one transaction a rule sends: sender, calldata, and the authorization it spends.
type attempt struct {
	sender testenv.Account
	data   []byte
	auth   testenv.Authorization
	// gas 0 estimates (a revert fails before broadcast); a fixed gas mines the revert.
	gas uint64
}

// TestX402TokenFollowsFiatTokenV2 checks the EIP-3009 rules of X402Token that facilitators
// depend on, with the revert strings of USDC's FiatToken v2.2 (docs/protocol.md#eip-712-and-eip-3009).
func TestX402TokenFollowsFiatTokenV2(t *testing.T) {
	t.Parallel()
	c, tok := testenv.StartChainWithToken(t)
	ctx := context.Background()
	relayer := c.FacilitatorAccount()
	payer, payee, stranger := c.Accounts[1], c.Accounts[2], c.Accounts[3]
	value := big.NewInt(10_000) // 0.01 USDC

	signed := func(t *testing.T, mutate func(*testenv.Authorization)) (testenv.Authorization, []byte) {
		a := tok.NewAuthorization(t, payer.Address, payee.Address, value)
		if mutate != nil {
			mutate(&a)
		}
		return a, tok.SignAuthorization(t, payer.Key, a)
	}
	viaVRS := func(t *testing.T, a testenv.Authorization, sig []byte) attempt {
		return attempt{sender: relayer, data: testenv.TransferWithAuthorizationVRS(t, a, sig), auth: a}
	}

	for _, tc := range []struct {
		name string
		// prepare signs, may act on the chain first, and returns the attempt under test.
		prepare    func(t *testing.T) attempt
		wantReason string // "" means the attempt succeeds
		// usedAfterRevert is the nonce state expected after a revert (true when it was used before).
		usedAfterRevert bool
	}{
		{
			name: "transferWithAuthorization with v,r,s from a relayer moves exactly value",
			prepare: func(t *testing.T) attempt {
				a, sig := signed(t, nil)
				return viaVRS(t, a, sig)
			},
		},
		{
			name: "transferWithAuthorization with a bytes signature from an EOA moves exactly value",
			prepare: func(t *testing.T) attempt {
				a, sig := signed(t, nil)
				return attempt{sender: relayer, data: testenv.TransferWithAuthorizationBytes(t, a, sig), auth: a}
			},
		},
		{
			name: "a used authorization is rejected",
			prepare: func(t *testing.T) attempt {
				a, sig := signed(t, nil)
				c.Transact(t, relayer, tok.Address, testenv.TransferWithAuthorizationVRS(t, a, sig))
				return viaVRS(t, a, sig)
			},
			wantReason:      contracts.RevertAuthorizationUsed,
			usedAfterRevert: true,
		},
		{
			name: "a used authorization reverts on chain when broadcast with fixed gas",
			prepare: func(t *testing.T) attempt {
				a, sig := signed(t, nil)
				c.Transact(t, relayer, tok.Address, testenv.TransferWithAuthorizationVRS(t, a, sig))
				at := viaVRS(t, a, sig)
				at.gas = 200_000
				return at
			},
			wantReason:      contracts.RevertAuthorizationUsed,
			usedAfterRevert: true,
		},
		{
			name: "a canceled authorization is rejected",
			prepare: func(t *testing.T) attempt {
				a, sig := signed(t, nil)
				cancelSig := tok.SignCancelAuthorization(t, payer.Key, payer.Address, a.Nonce)
				r := c.Transact(t, relayer, tok.Address, testenv.CancelAuthorizationVRS(t, payer.Address, a.Nonce, cancelSig))
				if !hasLog(r.Logs, contracts.TokenABI.Events["AuthorizationCanceled"].ID) {
					t.Error("cancelAuthorization emitted no AuthorizationCanceled")
				}
				return viaVRS(t, a, sig)
			},
			wantReason:      contracts.RevertAuthorizationUsed,
			usedAfterRevert: true,
		},
		{
			name: "cancelAuthorization of a used nonce is rejected",
			prepare: func(t *testing.T) attempt {
				a, sig := signed(t, nil)
				c.Transact(t, relayer, tok.Address, testenv.TransferWithAuthorizationVRS(t, a, sig))
				cancelSig := tok.SignCancelAuthorization(t, payer.Key, payer.Address, a.Nonce)
				return attempt{sender: relayer, data: testenv.CancelAuthorizationVRS(t, payer.Address, a.Nonce, cancelSig), auth: a}
			},
			wantReason:      contracts.RevertAuthorizationUsed,
			usedAfterRevert: true,
		},
		{
			name: "cancelAuthorization signed by someone else is rejected",
			prepare: func(t *testing.T) attempt {
				a, _ := signed(t, nil)
				cancelSig := tok.SignCancelAuthorization(t, stranger.Key, payer.Address, a.Nonce)
				return attempt{sender: relayer, data: testenv.CancelAuthorizationVRS(t, payer.Address, a.Nonce, cancelSig), auth: a}
			},
			wantReason: contracts.RevertInvalidSignature,
		},
		{
			name: "receiveWithAuthorization by the payee moves exactly value",
			prepare: func(t *testing.T) attempt {
				a := tok.NewAuthorization(t, payer.Address, payee.Address, value)
				sig := tok.SignReceiveAuthorization(t, payer.Key, a)
				return attempt{sender: payee, data: testenv.ReceiveWithAuthorizationVRS(t, a, sig), auth: a}
			},
		},
		{
			name: "receiveWithAuthorization by anyone but the payee is rejected",
			prepare: func(t *testing.T) attempt {
				a := tok.NewAuthorization(t, payer.Address, payee.Address, value)
				sig := tok.SignReceiveAuthorization(t, payer.Key, a)
				return attempt{sender: relayer, data: testenv.ReceiveWithAuthorizationVRS(t, a, sig), auth: a}
			},
			wantReason: contracts.RevertCallerMustBePayee,
		},
		{
			name: "a receive signature does not authorize transferWithAuthorization",
			prepare: func(t *testing.T) attempt {
				a := tok.NewAuthorization(t, payer.Address, payee.Address, value)
				return viaVRS(t, a, tok.SignReceiveAuthorization(t, payer.Key, a))
			},
			wantReason: contracts.RevertInvalidSignature,
		},
		{
			name: "an authorization whose validAfter is in the future is not yet valid",
			prepare: func(t *testing.T) attempt {
				now := c.Now(t)
				a, sig := signed(t, func(a *testenv.Authorization) { a.ValidAfter = new(big.Int).SetUint64(now + 600) })
				return viaVRS(t, a, sig)
			},
			wantReason: contracts.RevertAuthorizationNotValid,
		},
		{
			name: "a block at exactly validAfter is not yet valid (now > validAfter)",
			prepare: func(t *testing.T) attempt {
				next := c.Now(t) + 100
				a, sig := signed(t, func(a *testenv.Authorization) { a.ValidAfter = new(big.Int).SetUint64(next) })
				c.SetNextBlockTimestamp(t, next)
				at := viaVRS(t, a, sig)
				at.gas = 200_000
				return at
			},
			wantReason: contracts.RevertAuthorizationNotValid,
		},
		{
			name: "a block at exactly validBefore is expired (now < validBefore)",
			prepare: func(t *testing.T) attempt {
				a, sig := signed(t, nil)
				c.SetNextBlockTimestamp(t, a.ValidBefore.Uint64())
				at := viaVRS(t, a, sig)
				at.gas = 200_000
				return at
			},
			wantReason: contracts.RevertAuthorizationExpired,
		},
		{
			name: "an authorization is expired once the chain passes validBefore",
			prepare: func(t *testing.T) attempt {
				a, sig := signed(t, nil)
				c.IncreaseTime(t, a.ValidBefore.Uint64()-c.Now(t)+1)
				return viaVRS(t, a, sig)
			},
			wantReason: contracts.RevertAuthorizationExpired,
		},
		{
			name: "a signature by another key is invalid",
			prepare: func(t *testing.T) attempt {
				a := tok.NewAuthorization(t, payer.Address, payee.Address, value)
				return viaVRS(t, a, tok.SignAuthorization(t, stranger.Key, a))
			},
			wantReason: contracts.RevertInvalidSignature,
		},
		{
			name: "a changed value invalidates the signature",
			prepare: func(t *testing.T) attempt {
				a, sig := signed(t, nil)
				a.Value = new(big.Int).Add(a.Value, big.NewInt(1))
				return viaVRS(t, a, sig)
			},
			wantReason: contracts.RevertInvalidSignature,
		},
		{
			name: "a signature for another EIP-712 domain name is invalid",
			prepare: func(t *testing.T) attempt {
				a := tok.NewAuthorization(t, payer.Address, payee.Address, value)
				other := *tok
				other.Name = "USD Coin"
				return viaVRS(t, a, other.SignAuthorization(t, payer.Key, a))
			},
			wantReason: contracts.RevertInvalidSignature,
		},
		{
			name: "a high-s signature is rejected (EIP-2)",
			prepare: func(t *testing.T) attempt {
				a, sig := signed(t, nil)
				return viaVRS(t, a, malleate(sig))
			},
			wantReason: contracts.RevertSignatureS,
		},
		{
			name: "a v other than 27 or 28 is rejected",
			prepare: func(t *testing.T) attempt {
				a, sig := signed(t, nil)
				sig[64] -= 27
				return viaVRS(t, a, sig)
			},
			wantReason: contracts.RevertSignatureV,
		},
		{
			name: "a bytes signature that is not 65 bytes from an EOA is rejected",
			prepare: func(t *testing.T) attempt {
				a, sig := signed(t, nil)
				return attempt{sender: relayer, data: testenv.TransferWithAuthorizationBytes(t, a, append(sig, 0)), auth: a}
			},
			wantReason: contracts.RevertSignatureLength,
		},
		{
			name: "more than the balance is rejected and the nonce stays unused",
			prepare: func(t *testing.T) attempt {
				a, sig := signed(t, func(a *testenv.Authorization) {
					a.Value = new(big.Int).Add(testenv.DefaultPayerFunds, big.NewInt(1))
				})
				return viaVRS(t, a, sig)
			},
			wantReason: contracts.RevertInsufficientBalance,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			at := tc.prepare(t)
			fromBefore := tok.BalanceOf(t, at.auth.From)
			toBefore := tok.BalanceOf(t, at.auth.To)

			r, err := c.SendAndWait(ctx, at.sender, &tok.Address, at.data, at.gas)

			if tc.wantReason == "" {
				if err != nil {
					t.Fatalf("want success, got %v", err)
				}
				checkDelta(t, "payer", tok.BalanceOf(t, at.auth.From), fromBefore, new(big.Int).Neg(at.auth.Value))
				checkDelta(t, "payee", tok.BalanceOf(t, at.auth.To), toBefore, at.auth.Value)
				if !tok.AuthorizationState(t, at.auth.From, at.auth.Nonce) {
					t.Error("authorizationState is false after a successful transfer")
				}
				if !hasLog(r.Logs, contracts.TokenABI.Events["AuthorizationUsed"].ID) {
					t.Error("no AuthorizationUsed event")
				}
				return
			}
			reason, ok := testenv.RevertReason(err)
			if !ok || reason != tc.wantReason {
				t.Fatalf("revert reason = %q (err %v), want %q", reason, err, tc.wantReason)
			}
			if at.gas != 0 && (r == nil || r.Status != 0) {
				t.Errorf("fixed-gas attempt: want a mined receipt with status 0, got %v", r)
			}
			checkDelta(t, "payer", tok.BalanceOf(t, at.auth.From), fromBefore, new(big.Int))
			checkDelta(t, "payee", tok.BalanceOf(t, at.auth.To), toBefore, new(big.Int))
			if got := tok.AuthorizationState(t, at.auth.From, at.auth.Nonce); got != tc.usedAfterRevert {
				t.Errorf("authorizationState after the revert = %v, want %v", got, tc.usedAfterRevert)
			}
		})
	}
}

// TestX402TokenAcceptsERC1271Wallets checks contract-wallet payers: the token asks the wallet
// (isValidSignature) instead of ecrecover when the payer has code.
func TestX402TokenAcceptsERC1271Wallets(t *testing.T) {
	t.Parallel()
	c, tok := testenv.StartChainWithToken(t)
	ctx := context.Background()
	relayer, owner, payee, stranger := c.FacilitatorAccount(), c.Accounts[4], c.Accounts[5], c.Accounts[6]
	wallet := c.DeployWallet1271(t, owner)
	tok.Mint(t, wallet.Address, big.NewInt(1_000_000))
	value := big.NewInt(250_000)

	for _, tc := range []struct {
		name       string
		signer     testenv.Account
		overload   func(testing.TB, testenv.Authorization, []byte) []byte
		wantReason string
	}{
		{"the owner's signature pays through the bytes overload", owner, testenv.TransferWithAuthorizationBytes, ""},
		{"the owner's signature pays through the v,r,s overload too (FiatToken v2.2)", owner, testenv.TransferWithAuthorizationVRS, ""},
		{"a stranger's signature is invalid", stranger, testenv.TransferWithAuthorizationBytes, contracts.RevertInvalidSignature},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := tok.NewAuthorization(t, wallet.Address, payee.Address, value)
			sig := tok.SignAuthorization(t, tc.signer.Key, a)
			if got, want := wallet.IsValidSignature(t, tok.Digest(t, testenv.PrimaryTransfer, a), sig), tc.wantReason == ""; got != want {
				t.Errorf("wallet.isValidSignature = %v, want %v", got, want)
			}
			before := tok.BalanceOf(t, payee.Address)
			_, err := c.SendAndWait(ctx, relayer, &tok.Address, tc.overload(t, a, sig), 0)
			if tc.wantReason != "" {
				if reason, _ := testenv.RevertReason(err); reason != tc.wantReason {
					t.Fatalf("revert reason = %q (err %v), want %q", reason, err, tc.wantReason)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			checkDelta(t, "payee", tok.BalanceOf(t, payee.Address), before, value)
			if !tok.AuthorizationState(t, wallet.Address, a.Nonce) {
				t.Error("the wallet's nonce is not marked used")
			}
		})
	}

	t.Run("the owner can move the wallet's tokens with execute", func(t *testing.T) {
		before := tok.BalanceOf(t, payee.Address)
		data, err := contracts.TokenABI.Pack("transfer", payee.Address, big.NewInt(1))
		if err != nil {
			t.Fatal(err)
		}
		wallet.Execute(t, tok.Address, data)
		checkDelta(t, "payee", tok.BalanceOf(t, payee.Address), before, big.NewInt(1))
	})
}

func TestX402TokenMetadataAndDomain(t *testing.T) {
	t.Parallel()
	c := testenv.StartAnvil(t)
	tok := c.DeployToken(t, "USD Coin", "2")

	domain := tok.Domain()
	wantDomain, err := (&apitypes.TypedData{
		Types:  apitypes.Types{"EIP712Domain": tok.TypedData(testenv.PrimaryTransfer, testenv.Authorization{}).Types["EIP712Domain"]},
		Domain: domain,
	}).HashStruct("EIP712Domain", domain.Map())
	if err != nil {
		t.Fatal(err)
	}
	if got := tok.DomainSeparator(t); common.Hash(got) != common.BytesToHash(wantDomain) {
		t.Errorf("DOMAIN_SEPARATOR = %x, want the EIP-712 hash of {USD Coin, 2, 84532, token} %x", got, wantDomain)
	}

	for _, tc := range []struct {
		method string
		want   any
	}{
		{"name", "USD Coin"},
		{"version", "2"},
		{"symbol", contracts.TokenSymbol},
		{"decimals", uint8(contracts.TokenDecimals)},
	} {
		t.Run(tc.method, func(t *testing.T) {
			data, err := contracts.TokenABI.Pack(tc.method)
			if err != nil {
				t.Fatal(err)
			}
			out, err := c.Call(context.Background(), common.Address{}, tok.Address, data)
			if err != nil {
				t.Fatal(err)
			}
			got, err := contracts.TokenABI.Unpack(tc.method, out)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != 1 || got[0] != tc.want {
				t.Errorf("%s() = %v, want %v", tc.method, got, tc.want)
			}
		})
	}

	t.Run("only the owner can mint", func(t *testing.T) {
		data, err := contracts.TokenABI.Pack("mint", c.Accounts[1].Address, big.NewInt(1))
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.SendAndWait(context.Background(), c.Accounts[1], &tok.Address, data, 0)
		if reason, _ := testenv.RevertReason(err); reason != contracts.RevertNotOwner {
			t.Errorf("mint by a non-owner: revert reason = %q (err %v), want %q", reason, err, contracts.RevertNotOwner)
		}
	})
}

// malleate returns the other valid signature of the same message: s' = n - s, v flipped.
func malleate(sig []byte) []byte {
	out := append([]byte(nil), sig...)
	s := new(big.Int).SetBytes(sig[32:64])
	s.Sub(crypto.S256().Params().N, s)
	s.FillBytes(out[32:64])
	out[64] = 27 + 28 - sig[64]
	return out
}

func checkDelta(t *testing.T, who string, after, before, want *big.Int) {
	t.Helper()
	if got := new(big.Int).Sub(after, before); got.Cmp(want) != 0 {
		t.Errorf("%s balance changed by %s, want %s", who, got, want)
	}
}

func hasLog(logs []*types.Log, topic common.Hash) bool {
	for _, l := range logs {
		if len(l.Topics) > 0 && l.Topics[0] == topic {
			return true
		}
	}
	return false
}
