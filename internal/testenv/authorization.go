package testenv

import (
	"crypto/ecdsa"
	"crypto/rand"
	"math/big"
	"testing"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/math"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/ethereum/go-ethereum/signer/core/apitypes"

	"github.com/x402gate/x402gate/internal/contracts"
)

// Authorization is an EIP-3009 authorization: the message of TransferWithAuthorization and
// ReceiveWithAuthorization (docs/protocol.md#eip-712-and-eip-3009).
type Authorization struct {
	From        common.Address
	To          common.Address
	Value       *big.Int
	ValidAfter  *big.Int
	ValidBefore *big.Int
	Nonce       [32]byte
}

// EIP-712 primary types of X402Token's signed messages.
const (
	PrimaryTransfer = "TransferWithAuthorization"
	PrimaryReceive  = "ReceiveWithAuthorization"
	PrimaryCancel   = "CancelAuthorization"
)

var authorizationFields = []apitypes.Type{
	{Name: "from", Type: "address"},
	{Name: "to", Type: "address"},
	{Name: "value", Type: "uint256"},
	{Name: "validAfter", Type: "uint256"},
	{Name: "validBefore", Type: "uint256"},
	{Name: "nonce", Type: "bytes32"},
}

// NewAuthorization returns an authorization of value from from to to with a random nonce and
// the window the x402 clients use, taken from the chain's clock: validAfter = now-600,
// validBefore = now+3600.
func (tok *Token) NewAuthorization(t testing.TB, from, to common.Address, value *big.Int) Authorization {
	t.Helper()
	now := int64(tok.Chain.Now(t))
	return Authorization{
		From:        from,
		To:          to,
		Value:       new(big.Int).Set(value),
		ValidAfter:  big.NewInt(now - 600),
		ValidBefore: big.NewInt(now + 3600),
		Nonce:       RandomNonce(t),
	}
}

// RandomNonce returns 32 random bytes, as the x402 clients make EIP-3009 nonces.
func RandomNonce(t testing.TB) [32]byte {
	t.Helper()
	var n [32]byte
	if _, err := rand.Read(n[:]); err != nil {
		t.Fatalf("testenv: random nonce: %v", err)
	}
	return n
}

// Domain returns the token's EIP-712 domain on its chain.
func (tok *Token) Domain() apitypes.TypedDataDomain {
	return apitypes.TypedDataDomain{
		Name:              tok.Name,
		Version:           tok.Version,
		ChainId:           (*math.HexOrDecimal256)(new(big.Int).Set(tok.Chain.ChainID)),
		VerifyingContract: tok.Address.Hex(),
	}
}

// TypedData returns the EIP-712 typed data of a under primary (PrimaryTransfer or PrimaryReceive).
func (tok *Token) TypedData(primary string, a Authorization) apitypes.TypedData {
	return apitypes.TypedData{
		Types: apitypes.Types{
			"EIP712Domain": domainFields,
			primary:        authorizationFields,
		},
		PrimaryType: primary,
		Domain:      tok.Domain(),
		Message: apitypes.TypedDataMessage{
			"from":        a.From.Hex(),
			"to":          a.To.Hex(),
			"value":       a.Value,
			"validAfter":  a.ValidAfter,
			"validBefore": a.ValidBefore,
			"nonce":       a.Nonce[:],
		},
	}
}

var domainFields = []apitypes.Type{
	{Name: "name", Type: "string"},
	{Name: "version", Type: "string"},
	{Name: "chainId", Type: "uint256"},
	{Name: "verifyingContract", Type: "address"},
}

// Digest returns the EIP-712 digest of a under primary, the hash that is signed.
func (tok *Token) Digest(t testing.TB, primary string, a Authorization) [32]byte {
	t.Helper()
	return typedDataDigest(t, tok.TypedData(primary, a))
}

// SignAuthorization signs a as TransferWithAuthorization with key and returns the 65-byte
// signature r ‖ s ‖ v with v in {27, 28}, as wallets produce it.
func (tok *Token) SignAuthorization(t testing.TB, key *ecdsa.PrivateKey, a Authorization) []byte {
	t.Helper()
	return SignDigest(t, key, tok.Digest(t, PrimaryTransfer, a))
}

// SignReceiveAuthorization signs a as ReceiveWithAuthorization with key.
func (tok *Token) SignReceiveAuthorization(t testing.TB, key *ecdsa.PrivateKey, a Authorization) []byte {
	t.Helper()
	return SignDigest(t, key, tok.Digest(t, PrimaryReceive, a))
}

// SignCancelAuthorization signs CancelAuthorization(authorizer, nonce) with key.
func (tok *Token) SignCancelAuthorization(t testing.TB, key *ecdsa.PrivateKey, authorizer common.Address, nonce [32]byte) []byte {
	t.Helper()
	return SignDigest(t, key, typedDataDigest(t, apitypes.TypedData{
		Types: apitypes.Types{
			"EIP712Domain": domainFields,
			PrimaryCancel: {
				{Name: "authorizer", Type: "address"},
				{Name: "nonce", Type: "bytes32"},
			},
		},
		PrimaryType: PrimaryCancel,
		Domain:      tok.Domain(),
		Message: apitypes.TypedDataMessage{
			"authorizer": authorizer.Hex(),
			"nonce":      nonce[:],
		},
	}))
}

// SignDigest signs a 32-byte digest with key and returns r ‖ s ‖ v with v in {27, 28}.
func SignDigest(t testing.TB, key *ecdsa.PrivateKey, digest [32]byte) []byte {
	t.Helper()
	sig, err := crypto.Sign(digest[:], key)
	if err != nil {
		t.Fatalf("testenv: sign digest: %v", err)
	}
	sig[64] += 27
	return sig
}

func typedDataDigest(t testing.TB, td apitypes.TypedData) [32]byte {
	t.Helper()
	hash, _, err := apitypes.TypedDataAndHash(td)
	if err != nil {
		t.Fatalf("testenv: EIP-712 hash of %s: %v", td.PrimaryType, err)
	}
	return [32]byte(hash)
}

// SplitSignature splits a 65-byte r ‖ s ‖ v signature into v, r and s for the (v,r,s) overloads.
func SplitSignature(t testing.TB, sig []byte) (v uint8, r, s [32]byte) {
	t.Helper()
	if len(sig) != 65 {
		t.Fatalf("testenv: signature is %d bytes, want 65", len(sig))
	}
	copy(r[:], sig[:32])
	copy(s[:], sig[32:64])
	return sig[64], r, s
}

// TransferWithAuthorizationVRS returns calldata of transferWithAuthorization(…, v, r, s)
// (selector 0xe3ee160e), the overload facilitators use for EOA payers.
func TransferWithAuthorizationVRS(t testing.TB, a Authorization, sig []byte) []byte {
	t.Helper()
	v, r, s := SplitSignature(t, sig)
	return packOrFatal(t, contracts.TokenABI, contracts.TransferWithAuthorizationVRS,
		a.From, a.To, a.Value, a.ValidAfter, a.ValidBefore, a.Nonce, v, r, s)
}

// TransferWithAuthorizationBytes returns calldata of transferWithAuthorization(…, bytes signature)
// (selector 0xcf092995), the overload for contract wallets (ERC-1271).
func TransferWithAuthorizationBytes(t testing.TB, a Authorization, sig []byte) []byte {
	t.Helper()
	return packOrFatal(t, contracts.TokenABI, contracts.TransferWithAuthorizationBytes,
		a.From, a.To, a.Value, a.ValidAfter, a.ValidBefore, a.Nonce, sig)
}

// ReceiveWithAuthorizationVRS returns calldata of receiveWithAuthorization(…, v, r, s); the
// transaction must be sent by a.To.
func ReceiveWithAuthorizationVRS(t testing.TB, a Authorization, sig []byte) []byte {
	t.Helper()
	v, r, s := SplitSignature(t, sig)
	return packOrFatal(t, contracts.TokenABI, contracts.ReceiveWithAuthorizationVRS,
		a.From, a.To, a.Value, a.ValidAfter, a.ValidBefore, a.Nonce, v, r, s)
}

// CancelAuthorizationVRS returns calldata of cancelAuthorization(authorizer, nonce, v, r, s).
func CancelAuthorizationVRS(t testing.TB, authorizer common.Address, nonce [32]byte, sig []byte) []byte {
	t.Helper()
	v, r, s := SplitSignature(t, sig)
	return packOrFatal(t, contracts.TokenABI, contracts.CancelAuthorizationVRS, authorizer, nonce, v, r, s)
}
