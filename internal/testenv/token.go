package testenv

import (
	"context"
	"math/big"
	"testing"

	"github.com/ethereum/go-ethereum/accounts/abi"
	"github.com/ethereum/go-ethereum/common"

	"github.com/x402gate/x402gate/internal/contracts"
)

// Default token of StartChainWithToken: the EIP-712 domain of USDC on Base Sepolia, and what
// each payer account (1..9) is funded with.
const (
	DefaultTokenName    = "USDC"
	DefaultTokenVersion = "2"
)

// DefaultPayerFunds is what StartChainWithToken mints to each of Accounts[1:]: 1000 USDC in
// base units (6 decimals).
var DefaultPayerFunds = big.NewInt(1000_000_000)

// Token is a deployed X402Token (internal/contracts), our EIP-3009 stand-in for USDC.
type Token struct {
	// Chain is the chain the token lives on.
	Chain *Chain
	// Address is the token contract: the asset of payment requirements and the EIP-712
	// verifyingContract.
	Address common.Address
	// Name and Version are the EIP-712 domain name and version the token was deployed with.
	Name, Version string
}

// StartChainWithToken starts anvil (StartAnvil with opts), deploys X402Token with the domain
// "USDC"/"2", and mints DefaultPayerFunds (1000 USDC) to every account but Accounts[0], which
// stays reserved for the facilitator signer.
func StartChainWithToken(t testing.TB, opts ...AnvilOption) (*Chain, *Token) {
	t.Helper()
	c := StartAnvil(t, opts...)
	tok := c.DeployToken(t, DefaultTokenName, DefaultTokenVersion)
	for _, a := range c.Accounts[1:] {
		tok.Mint(t, a.Address, DefaultPayerFunds)
	}
	return c, tok
}

// DeployToken deploys X402Token with the EIP-712 domain name and version (e.g. "USDC", "2"),
// owned by the harness's deployer, which Mint uses.
func (c *Chain) DeployToken(t testing.TB, name, version string) *Token {
	t.Helper()
	args, err := contracts.TokenABI.Pack("", name, version)
	if err != nil {
		t.Fatalf("testenv: pack token constructor: %v", err)
	}
	addr := c.Deploy(t, append(append([]byte{}, contracts.TokenBytecode...), args...))
	return &Token{Chain: c, Address: addr, Name: name, Version: version}
}

// Mint creates amount base units of the token for to.
func (tok *Token) Mint(t testing.TB, to common.Address, amount *big.Int) {
	t.Helper()
	data := packOrFatal(t, contracts.TokenABI, "mint", to, amount)
	tok.Chain.Transact(t, tok.Chain.deployer, tok.Address, data)
}

// BalanceOf returns the token balance of addr at the latest block.
func (tok *Token) BalanceOf(t testing.TB, addr common.Address) *big.Int {
	t.Helper()
	var out *big.Int
	tok.call(t, &out, "balanceOf", addr)
	return out
}

// AuthorizationState reports whether the EIP-3009 nonce of authorizer is used or canceled.
func (tok *Token) AuthorizationState(t testing.TB, authorizer common.Address, nonce [32]byte) bool {
	t.Helper()
	var out bool
	tok.call(t, &out, "authorizationState", authorizer, nonce)
	return out
}

// DomainSeparator returns the token's EIP-712 domain separator as the contract computes it.
func (tok *Token) DomainSeparator(t testing.TB) [32]byte {
	t.Helper()
	var out [32]byte
	tok.call(t, &out, "DOMAIN_SEPARATOR")
	return out
}

// call runs a view method and unpacks its single result into out.
func (tok *Token) call(t testing.TB, out any, method string, args ...any) {
	t.Helper()
	callView(t, tok.Chain, contracts.TokenABI, tok.Address, out, method, args...)
}

// Wallet is a deployed TestWallet1271: a contract account that accepts, through ERC-1271, the
// signatures of its owner EOA. An authorization "from" the wallet is signed by the owner's key.
type Wallet struct {
	// Chain is the chain the wallet lives on.
	Chain *Chain
	// Address is the wallet contract, the payer ("from") of its authorizations.
	Address common.Address
	// Owner is the EOA whose signatures the wallet accepts.
	Owner Account
}

// DeployWallet1271 deploys a TestWallet1271 owned by owner.
func (c *Chain) DeployWallet1271(t testing.TB, owner Account) *Wallet {
	t.Helper()
	args, err := contracts.WalletABI.Pack("", owner.Address)
	if err != nil {
		t.Fatalf("testenv: pack wallet constructor: %v", err)
	}
	addr := c.Deploy(t, append(append([]byte{}, contracts.WalletBytecode...), args...))
	return &Wallet{Chain: c, Address: addr, Owner: owner}
}

// IsValidSignature calls the wallet's ERC-1271 isValidSignature and reports whether it
// returned the magic value 0x1626ba7e.
func (w *Wallet) IsValidSignature(t testing.TB, hash [32]byte, sig []byte) bool {
	t.Helper()
	var out [4]byte
	callView(t, w.Chain, contracts.WalletABI, w.Address, &out, "isValidSignature", hash, sig)
	return out == contracts.ERC1271MagicValue
}

// Execute makes the wallet call target with data (sent by the owner), e.g. a token transfer
// out of the wallet.
func (w *Wallet) Execute(t testing.TB, target common.Address, data []byte) {
	t.Helper()
	call := packOrFatal(t, contracts.WalletABI, "execute", target, data)
	w.Chain.Transact(t, w.Owner, w.Address, call)
}

func packOrFatal(t testing.TB, parsed abi.ABI, method string, args ...any) []byte {
	t.Helper()
	data, err := parsed.Pack(method, args...)
	if err != nil {
		t.Fatalf("testenv: pack %s: %v", method, err)
	}
	return data
}

func callView(t testing.TB, c *Chain, parsed abi.ABI, to common.Address, out any, method string, args ...any) {
	t.Helper()
	data := packOrFatal(t, parsed, method, args...)
	ctx, cancel := context.WithTimeout(context.Background(), rpcBound)
	defer cancel()
	ret, err := c.Call(ctx, common.Address{}, to, data)
	if err != nil {
		t.Fatalf("testenv: call %s on %s: %v", method, to, err)
	}
	if err := parsed.UnpackIntoInterface(out, method, ret); err != nil {
		t.Fatalf("testenv: unpack %s: %v", method, err)
	}
}
