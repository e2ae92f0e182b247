package x402

import (
	"math/big"
	"math/rand/v2"
	"testing"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/math"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/ethereum/go-ethereum/signer/core/apitypes"
)

// transferWithAuthorizationTypes are the EIP-712 types every x402 client signs
// (docs/protocol.md#eip-712-and-eip-3009), for go-ethereum's generic typed-data hasher,
// the reference the direct hashing is held to.
var transferWithAuthorizationTypes = apitypes.Types{
	"EIP712Domain": {
		{Name: "name", Type: "string"},
		{Name: "version", Type: "string"},
		{Name: "chainId", Type: "uint256"},
		{Name: "verifyingContract", Type: "address"},
	},
	"TransferWithAuthorization": {
		{Name: "from", Type: "address"},
		{Name: "to", Type: "address"},
		{Name: "value", Type: "uint256"},
		{Name: "validAfter", Type: "uint256"},
		{Name: "validBefore", Type: "uint256"},
		{Name: "nonce", Type: "bytes32"},
	},
}

// referenceHash is the digest by go-ethereum's apitypes.TypedDataAndHash.
func referenceHash(t *testing.T, chainID *big.Int, asset common.Address, name, version string, a Authorization) common.Hash {
	t.Helper()
	td := apitypes.TypedData{
		Types:       transferWithAuthorizationTypes,
		PrimaryType: "TransferWithAuthorization",
		Domain: apitypes.TypedDataDomain{
			Name: name, Version: version, ChainId: (*math.HexOrDecimal256)(new(big.Int).Set(chainID)), VerifyingContract: asset.Hex(),
		},
		Message: apitypes.TypedDataMessage{
			"from": a.From.Hex(), "to": a.To.Hex(), "value": new(big.Int).Set(a.Value),
			"validAfter": new(big.Int).Set(a.ValidAfter), "validBefore": new(big.Int).Set(a.ValidBefore), "nonce": a.Nonce,
		},
	}
	digest, _, err := apitypes.TypedDataAndHash(td)
	if err != nil {
		t.Fatalf("apitypes: %v", err)
	}
	return common.BytesToHash(digest)
}

// TestTransferWithAuthorizationHashIsAPITypes: the direct hash equals go-ethereum's
// generic EIP-712 hasher for random domains (chain ids beyond 64 bits, unicode names) and
// random authorizations (values up to 2^256-1), the first time and from the kept domain.
func TestTransferWithAuthorizationHashIsAPITypes(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 9))
	word := func(bits int) *big.Int {
		var b [32]byte
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		n := new(big.Int).SetBytes(b[:])
		return n.Rsh(n, uint(256-bits))
	}
	names := []string{"USDC", "USD Coin", "Bridged USDC (Stargate)", "é\u2028\U0001F600", "x"}
	chains := []*big.Int{big.NewInt(1), big.NewInt(84532), new(big.Int).SetUint64(1<<64 - 1), new(big.Int).Lsh(big.NewInt(1), 64), new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 256), big.NewInt(1))}
	for i := range 400 {
		var a Authorization
		var asset common.Address
		for j := range 20 {
			a.From[j], a.To[j], asset[j] = byte(rng.Uint32()), byte(rng.Uint32()), byte(rng.Uint32()%4)
		}
		for j := range a.Nonce {
			a.Nonce[j] = byte(rng.Uint32())
		}
		a.Value, a.ValidAfter, a.ValidBefore = word(1+rng.IntN(256)), word(1+rng.IntN(256)), word(1+rng.IntN(256))
		chainID := chains[i%len(chains)]
		name, version := names[rng.IntN(len(names))], names[rng.IntN(len(names))]
		want := referenceHash(t, chainID, asset, name, version, a)
		for round := range 2 {
			got, err := TransferWithAuthorizationHash(chainID, asset, name, version, a)
			if err != nil || got != want {
				t.Fatalf("case %d round %d: %s, %v; want %s", i, round, got, err, want)
			}
		}
	}
}

// TestRecoverSignerIsSigToPub: the signer RecoverSigner finds is the address of the key
// crypto.SigToPub recovers, for random keys and digests.
func TestRecoverSignerIsSigToPub(t *testing.T) {
	for i := range 50 {
		key, err := crypto.GenerateKey()
		if err != nil {
			t.Fatal(err)
		}
		h := crypto.Keccak256Hash([]byte{byte(i)})
		sig, err := crypto.Sign(h[:], key)
		if err != nil {
			t.Fatal(err)
		}
		pub, err := crypto.SigToPub(h[:], sig)
		if err != nil {
			t.Fatal(err)
		}
		got, err := RecoverSigner(h, sig)
		if err != nil || got != crypto.PubkeyToAddress(*pub) || got != crypto.PubkeyToAddress(key.PublicKey) {
			t.Fatalf("recovered %s, %v; want %s", got.Hex(), err, crypto.PubkeyToAddress(key.PublicKey).Hex())
		}
	}
}
