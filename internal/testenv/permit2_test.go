package testenv_test

import (
	"context"
	"math/big"
	"testing"

	"github.com/ethereum/go-ethereum/accounts/abi"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"

	"github.com/x402gate/x402gate/internal/contracts"
	"github.com/x402gate/x402gate/internal/testenv"
	"github.com/x402gate/x402gate/x402"
)

// permitArg and the witness structs are the tuples of the proxies' settle, for abi.Pack.
type permitArg struct {
	Permitted struct {
		Token  common.Address
		Amount *big.Int
	}
	Nonce    *big.Int
	Deadline *big.Int
}

type exactWitness struct {
	To         common.Address
	ValidAfter *big.Int
}

type uptoWitness struct {
	To          common.Address
	Facilitator common.Address
	ValidAfter  *big.Int
}

func permitOf(a *x402.Permit2Authorization) permitArg {
	var p permitArg
	p.Permitted.Token, p.Permitted.Amount, p.Nonce, p.Deadline = a.Token, a.Amount, a.Nonce, a.Deadline
	return p
}

// TestRealClientPermit2PaymentsSettleThroughOurContracts: payments the real @x402/evm 2.27
// clients sign, exact over Permit2 and upto, settle through our Permit2 and x402 proxies at
// the canonical addresses, so the clients' EIP-712 domain, types and spender agree with our
// contracts; and the contracts refuse what the canonical ones refuse: a replayed nonce, a
// redirected witness, an upto settlement above the signed maximum or by another caller than
// the witness's facilitator.
func TestRealClientPermit2PaymentsSettleThroughOurContracts(t *testing.T) {
	t.Parallel()
	c := testenv.StartAnvil(t, testenv.WithChainID(84532))
	c.InstallPermit2(t)
	tok := c.DeployPlainToken(t, "TUSD", 18)
	facilitator, payer, payee, stranger := c.FacilitatorAccount(), c.Accounts[1], c.Accounts[2], c.Accounts[3]
	tok.Mint(t, payer.Address, new(big.Int).Mul(big.NewInt(100), big.NewInt(1e18)))
	tok.ApprovePermit2(t, payer)

	required := func(scheme, amount string, extra map[string]any) x402.PaymentRequiredV2 {
		return x402.PaymentRequiredV2{X402Version: 2, Resource: &x402.ResourceInfo{URL: "http://api.test/metered"},
			Accepts: []x402.RequirementsV2{{Scheme: scheme, Network: x402.BaseSepolia.CAIP2, Amount: amount,
				Asset: tok.Address.Hex(), PayTo: payee.Address.Hex(), MaxTimeoutSeconds: 300, Extra: extra}}}
	}
	headers := testenv.SignPermit2(t, payer,
		required("exact", "1500000000000000000", map[string]any{x402.ExtraAssetTransferMethod: x402.TransferPermit2}),
		required("upto", "2000000000000000000", map[string]any{x402.ExtraFacilitatorAddress: facilitator.Address.Hex()}))
	exact, upto := decodePermit2(t, headers[0]), decodePermit2(t, headers[1])

	ctx := context.Background()
	exactSettle := func(w exactWitness) []byte {
		return pack(t, contracts.ExactPermit2ProxyABI, "settle", permitOf(exact.Permit2), exact.Permit2.From, w, exact.Signature)
	}
	uptoSettle := func(amount *big.Int) []byte {
		a := upto.Permit2
		return pack(t, contracts.UptoPermit2ProxyABI, "settle", permitOf(a), amount, a.From,
			uptoWitness{To: a.To, Facilitator: a.Facilitator, ValidAfter: a.ValidAfter}, upto.Signature)
	}
	wantRevert := func(t *testing.T, from testenv.Account, to common.Address, data []byte, parsed abi.ABI, name string) {
		t.Helper()
		_, err := c.Call(ctx, from.Address, to, data)
		got, _ := testenv.RevertError4(err)
		if want := hexutil.Encode(parsed.Errors[name].ID.Bytes()[:4]); got != want {
			t.Fatalf("revert %v (selector %s), want %s (%s)", err, got, name, want)
		}
	}
	before := tok.BalanceOf(t, payee.Address)

	// exact: the witness binds the payee; anyone may call; one nonce settles once.
	w := exactWitness{To: exact.Permit2.To, ValidAfter: exact.Permit2.ValidAfter}
	wantRevert(t, stranger, x402.ExactPermit2ProxyAddress, exactSettle(exactWitness{To: stranger.Address, ValidAfter: w.ValidAfter}), contracts.Permit2ABI, "InvalidSigner")
	c.Transact(t, stranger, x402.ExactPermit2ProxyAddress, exactSettle(w))
	if !c.Permit2NonceUsed(t, payer.Address, exact.Permit2.Nonce) {
		t.Fatal("the exact payment's Permit2 nonce is not spent")
	}
	wantRevert(t, stranger, x402.ExactPermit2ProxyAddress, exactSettle(w), contracts.Permit2ABI, "InvalidNonce")

	// upto: only the named facilitator, at most the signed maximum.
	part := big.NewInt(740_000_000_000_000_000) // 37% of 2e18
	wantRevert(t, stranger, x402.UptoPermit2ProxyAddress, uptoSettle(part), contracts.UptoPermit2ProxyABI, "UnauthorizedFacilitator")
	wantRevert(t, facilitator, x402.UptoPermit2ProxyAddress, uptoSettle(new(big.Int).Add(upto.Permit2.Amount, big.NewInt(1))), contracts.UptoPermit2ProxyABI, "AmountExceedsPermitted")
	wantRevert(t, facilitator, x402.UptoPermit2ProxyAddress, uptoSettle(new(big.Int)), contracts.UptoPermit2ProxyABI, "InvalidAmount")
	c.Transact(t, facilitator, x402.UptoPermit2ProxyAddress, uptoSettle(part))
	wantRevert(t, facilitator, x402.UptoPermit2ProxyAddress, uptoSettle(part), contracts.Permit2ABI, "InvalidNonce")

	got := new(big.Int).Sub(tok.BalanceOf(t, payee.Address), before)
	if want := new(big.Int).Add(exact.Permit2.Amount, part); got.Cmp(want) != 0 {
		t.Fatalf("payee received %s, want %s", got, want)
	}
}

// TestCanonicalAddressesAreX402s: testenv's copies of the canonical addresses are x402's.
func TestCanonicalAddressesAreX402s(t *testing.T) {
	if testenv.Permit2Address != x402.Permit2Address || testenv.ExactPermit2ProxyAddress != x402.ExactPermit2ProxyAddress ||
		testenv.UptoPermit2ProxyAddress != x402.UptoPermit2ProxyAddress {
		t.Fatal("testenv's canonical addresses differ from x402's")
	}
}

func decodePermit2(t *testing.T, header string) *x402.Payment {
	t.Helper()
	p, err := x402.DecodePaymentHeader(x402.HeaderPaymentSignature, header, nil)
	if err != nil {
		t.Fatal(err)
	}
	if p.Permit2 == nil {
		t.Fatal("the client made no Permit2 payment")
	}
	return p
}

func pack(t *testing.T, parsed abi.ABI, method string, args ...any) []byte {
	t.Helper()
	data, err := parsed.Pack(method, args...)
	if err != nil {
		t.Fatalf("pack %s: %v", method, err)
	}
	return data
}
