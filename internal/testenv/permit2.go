package testenv

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"math/big"
	"testing"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/ethereum/go-ethereum/rpc"

	"github.com/x402gate/x402gate/internal/contracts"
)

// Canonical addresses of Permit2 and of the x402 exact and upto Permit2 proxies, the same on
// every chain (Permit2Address and the proxies'; testenv cannot import x402, whose tests
// use testenv, and TestCanonicalAddressesAreX402s holds the two equal).
var (
	Permit2Address           = common.HexToAddress("0x000000000022D473030F116dDEE9F6B43aC78BA3")
	ExactPermit2ProxyAddress = common.HexToAddress("0x402085c248EeA27D92E8b30b2C58ed07f9E20001")
	UptoPermit2ProxyAddress  = common.HexToAddress("0x4020A4f3b7b90ccA423B9fabCc0CE57C6C240002")
)

// InstallPermit2 places our Permit2 (internal/contracts) at Permit2's canonical address and
// our x402 exact and upto Permit2 proxies at theirs, with anvil_setCode, as the chains x402
// pays on have them (docs/payments.md#permit2). The three contracts need no constructor or
// storage: Permit2 computes its domain separator from the chain id and its own address, and
// the proxies hold the canonical Permit2 address as a constant. It is idempotent.
func (c *Chain) InstallPermit2(t testing.TB) {
	t.Helper()
	for _, p := range []struct {
		at   common.Address
		code []byte
	}{
		{Permit2Address, contracts.Permit2.DeployedBytecode},
		{ExactPermit2ProxyAddress, contracts.ExactPermit2Proxy.DeployedBytecode},
		{UptoPermit2ProxyAddress, contracts.UptoPermit2Proxy.DeployedBytecode},
	} {
		c.RPC(t, nil, "anvil_setCode", p.at, hexutil.Bytes(p.code))
	}
}

// PlainToken is a deployed PlainToken: an ERC-20 without EIP-3009, paid through Permit2.
type PlainToken struct {
	// Chain is the chain the token lives on.
	Chain *Chain
	// Address is the token contract, the asset of Permit2 requirements.
	Address common.Address
	// Symbol and Decimals are what the token was deployed with.
	Symbol   string
	Decimals uint8
}

// DeployPlainToken deploys PlainToken with symbol and decimals (its name is the symbol),
// owned by the harness's deployer, which Mint uses.
func (c *Chain) DeployPlainToken(t testing.TB, symbol string, decimals uint8) *PlainToken {
	t.Helper()
	args, err := contracts.PlainTokenABI.Pack("", symbol, symbol, decimals)
	if err != nil {
		t.Fatalf("testenv: pack plain token constructor: %v", err)
	}
	addr := c.Deploy(t, append(append([]byte{}, contracts.PlainToken.Bytecode...), args...))
	return &PlainToken{Chain: c, Address: addr, Symbol: symbol, Decimals: decimals}
}

// Mint creates amount base units of the token for to.
func (tok *PlainToken) Mint(t testing.TB, to common.Address, amount *big.Int) {
	t.Helper()
	tok.Chain.Transact(t, tok.Chain.deployer, tok.Address, packOrFatal(t, contracts.PlainTokenABI, "mint", to, amount))
}

// Approve sets owner's allowance of spender to amount (an ERC-20 approve sent by owner).
func (tok *PlainToken) Approve(t testing.TB, owner Account, spender common.Address, amount *big.Int) {
	t.Helper()
	tok.Chain.Transact(t, owner, tok.Address, packOrFatal(t, contracts.PlainTokenABI, "approve", spender, amount))
}

// ApprovePermit2 gives Permit2 owner's unlimited allowance: the payer's one-time approval
// that every later Permit2 payment in this token spends from.
func (tok *PlainToken) ApprovePermit2(t testing.TB, owner Account) {
	t.Helper()
	tok.Approve(t, owner, Permit2Address, new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 256), big.NewInt(1)))
}

// BalanceOf returns the token balance of addr at the latest block.
func (tok *PlainToken) BalanceOf(t testing.TB, addr common.Address) *big.Int {
	t.Helper()
	var out *big.Int
	callView(t, tok.Chain, contracts.PlainTokenABI, tok.Address, &out, "balanceOf", addr)
	return out
}

// Permit2NonceUsed reports whether Permit2 has spent owner's nonce (its bit in nonceBitmap).
func (c *Chain) Permit2NonceUsed(t testing.TB, owner common.Address, nonce *big.Int) bool {
	t.Helper()
	var word *big.Int
	callView(t, c, contracts.Permit2ABI, Permit2Address, &word, "nonceBitmap", owner, new(big.Int).Rsh(nonce, 8))
	return word.Bit(int(new(big.Int).And(nonce, big.NewInt(0xff)).Int64())) == 1
}

// SignPermit2 has the real @x402/evm 2.27 client (integration/scripts/sign-permit2.mjs) pay
// each PaymentRequired (an x402.PaymentRequiredV2, or its JSON shape) with payer's key, and
// returns the PAYMENT-SIGNATURE values, in order:
// `exact` over Permit2 for a requirement with extra.assetTransferMethod "permit2", `upto`
// for scheme upto. One node process signs them all.
func SignPermit2(t testing.TB, payer Account, required ...any) []string {
	t.Helper()
	in, err := json.Marshal(required)
	if err != nil {
		t.Fatalf("testenv: encode payment required: %v", err)
	}
	out := RunNode(t, "scripts/sign-permit2.mjs", []string{"X402_PAYER_KEY=" + hexutil.Encode(crypto.FromECDSA(payer.Key))}, in)
	var headers []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		if line := sc.Text(); line != "" {
			headers = append(headers, line)
		}
	}
	if len(headers) != len(required) {
		t.Fatalf("testenv: sign-permit2 made %d headers for %d requirements", len(headers), len(required))
	}
	return headers
}

// RevertError4 returns the selector (0x-hex, 4 bytes) of the custom error an eth_call or gas
// estimation reverted with, e.g. Permit2's InvalidNonce(); ok is false when err carries no
// revert data.
func RevertError4(err error) (string, bool) {
	var de rpc.DataError
	if !errors.As(err, &de) {
		return "", false
	}
	s, _ := de.ErrorData().(string)
	data, derr := hexutil.Decode(s)
	if derr != nil || len(data) < 4 {
		return "", false
	}
	return hexutil.Encode(data[:4]), true
}
