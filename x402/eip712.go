package x402

import (
	"fmt"
	"math/big"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/math"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/ethereum/go-ethereum/signer/core/apitypes"
)

// EIP-712 type hashes of EIP-3009 (docs/protocol.md#eip-712-and-eip-3009).
var (
	// TransferWithAuthorizationTypeHash is keccak256 of
	// "TransferWithAuthorization(address from,address to,uint256 value,uint256 validAfter,uint256 validBefore,bytes32 nonce)".
	TransferWithAuthorizationTypeHash = common.HexToHash("0x7c7c6cdb67a18743f49ec6fa9b35f50d52ed05cbed4cc592e13b44501c1a2267")
	// EIP712DomainTypeHash is keccak256 of
	// "EIP712Domain(string name,string version,uint256 chainId,address verifyingContract)".
	EIP712DomainTypeHash = common.HexToHash("0x8b73c3c69bb8fe3d512ecc4cf759cc79239f7b179b0ffacaa9a75d522b39400f")
)

// transferWithAuthorizationTypes are the EIP-712 types every x402 client signs
// (x402 legacy/x402/src/types/shared/evm/eip3009.ts, docs/protocol.md#eip-712-and-eip-3009).
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

// TransferWithAuthorizationHash returns the EIP-712 digest a payer signs for a: domain
// {name, version, chainId, verifyingContract: asset}, primary type
// TransferWithAuthorization. name and version come from the requirement's extra
// (Requirements.Domain). Errors are *DecodeError with ReasonInvalidPayload or
// ReasonMissingEIP712Domain.
func TransferWithAuthorizationHash(chainID *big.Int, asset common.Address, name, version string, a Authorization) (common.Hash, error) {
	if chainID == nil || chainID.Sign() <= 0 {
		return common.Hash{}, &DecodeError{Reason: ReasonInvalidNetwork, Field: "chainId", Msg: "must be positive"}
	}
	if name == "" || version == "" {
		return common.Hash{}, &DecodeError{Reason: ReasonMissingEIP712Domain, Field: "extra", Msg: "EIP-712 name and version are required"}
	}
	for _, f := range []struct {
		name string
		v    *big.Int
	}{{"value", a.Value}, {"validAfter", a.ValidAfter}, {"validBefore", a.ValidBefore}} {
		if f.v == nil || f.v.Sign() < 0 || f.v.BitLen() > 256 {
			return common.Hash{}, errPayload("payload.authorization."+f.name, "must be a uint256")
		}
	}
	td := apitypes.TypedData{
		Types:       transferWithAuthorizationTypes,
		PrimaryType: "TransferWithAuthorization",
		Domain: apitypes.TypedDataDomain{
			Name:              name,
			Version:           version,
			ChainId:           (*math.HexOrDecimal256)(new(big.Int).Set(chainID)),
			VerifyingContract: asset.Hex(),
		},
		Message: apitypes.TypedDataMessage{
			"from":        a.From.Hex(),
			"to":          a.To.Hex(),
			"value":       new(big.Int).Set(a.Value),
			"validAfter":  new(big.Int).Set(a.ValidAfter),
			"validBefore": new(big.Int).Set(a.ValidBefore),
			"nonce":       a.Nonce,
		},
	}
	digest, _, err := apitypes.TypedDataAndHash(td)
	if err != nil {
		return common.Hash{}, &DecodeError{Reason: ReasonInvalidPayload, Msg: "hash typed data", Err: err}
	}
	return common.BytesToHash(digest), nil
}

// SplitSignature splits a 65-byte ECDSA signature r‖s‖v into the arguments of the
// (v, r, s) overload of transferWithAuthorization, with v normalised to 27 or 28 (clients
// and wallets emit either 0/1 or 27/28; Go x402 splitSignatureParts does the same). It
// refuses what ecrecover-based verification would refuse: a wrong length
// (ErrSignatureLength), v outside {0,1,27,28}, r or s zero or not below the curve order
// (ErrSignatureInvalid), and s in the upper half order (ErrSignatureMalleable), as
// OpenZeppelin's ECDSA.tryRecover does. Errors are *DecodeError with
// ReasonInvalidSignature.
func SplitSignature(sig []byte) (v uint8, r, s [32]byte, err error) {
	if len(sig) != crypto.SignatureLength {
		return 0, r, s, sigErr(fmt.Sprintf("signature is %d bytes", len(sig)), ErrSignatureLength)
	}
	copy(r[:], sig[:32])
	copy(s[:], sig[32:64])
	v = sig[64]
	switch v {
	case 0, 1:
		v += 27
	case 27, 28:
	default:
		return 0, r, s, sigErr(fmt.Sprintf("v is %d", sig[64]), ErrSignatureInvalid)
	}
	rb, sb := new(big.Int).SetBytes(r[:]), new(big.Int).SetBytes(s[:])
	if !crypto.ValidateSignatureValues(v-27, rb, sb, false) {
		return 0, r, s, sigErr("r or s out of range", ErrSignatureInvalid)
	}
	if !crypto.ValidateSignatureValues(v-27, rb, sb, true) {
		return 0, r, s, sigErr("s is in the upper half order", ErrSignatureMalleable)
	}
	return v, r, s, nil
}

// RecoverSigner returns the address whose key made the 65-byte ECDSA signature sig over
// hash. Anything SplitSignature refuses is refused. It does not handle ERC-1271 or
// ERC-6492 signatures; errors.Is(err, ErrSignatureLength) tells a caller to try those.
func RecoverSigner(hash common.Hash, sig []byte) (common.Address, error) {
	v, r, s, err := SplitSignature(sig)
	if err != nil {
		return common.Address{}, err
	}
	var rsv [crypto.SignatureLength]byte
	copy(rsv[:32], r[:])
	copy(rsv[32:64], s[:])
	rsv[64] = v - 27
	pub, err := crypto.SigToPub(hash[:], rsv[:])
	if err != nil {
		return common.Address{}, sigErr("recover public key", ErrSignatureInvalid)
	}
	return crypto.PubkeyToAddress(*pub), nil
}

func sigErr(msg string, cause error) *DecodeError {
	return &DecodeError{Reason: ReasonInvalidSignature, Field: "payload.signature", Msg: msg, Err: cause}
}
