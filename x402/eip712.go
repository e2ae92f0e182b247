package x402

import (
	"errors"
	"fmt"
	"math/big"
	"sync"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"
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

// TransferWithAuthorizationHash returns the EIP-712 digest a payer signs for a: domain
// {name, version, chainId, verifyingContract: asset}, primary type
// TransferWithAuthorization. name and version come from the requirement's extra
// (Requirements.Domain). Errors are *DecodeError with ReasonInvalidPayload or
// ReasonMissingEIP712Domain.
//
// Both structs have only static fields, so each hashes as keccak256 of its type hash and
// its 32-byte words (EIP-712 encodeData), without reflection; a token's domain separator
// is kept once computed (docs/protocol.md#eip-712-and-eip-3009).
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
	if chainID.BitLen() > 256 {
		return common.Hash{}, &DecodeError{Reason: ReasonInvalidPayload, Msg: "hash typed data", Err: errors.New("chainId is larger than uint256")}
	}
	k := keccakPool.Get().(*keccakScratch)
	defer keccakPool.Put(k)
	// keccak256(0x1901 ‖ domain separator ‖ hashStruct(message))
	k.msg[0], k.msg[1] = 0x19, 0x01
	domainSeparator(k, chainID, asset, name, version)
	w := &k.words
	clear(w[:])
	copy(w[0:32], TransferWithAuthorizationTypeHash[:])
	copy(w[32+12:64], a.From[:])
	copy(w[64+12:96], a.To[:])
	a.Value.FillBytes(w[96:128])
	a.ValidAfter.FillBytes(w[128:160])
	a.ValidBefore.FillBytes(w[160:192])
	copy(w[192:224], a.Nonce[:])
	k.sum(k.msg[34:66], w[:])
	k.sum(k.out[:], k.msg[:])
	return common.Hash(k.out), nil
}

// keccakScratch is a Keccak-256 state with the buffers one digest needs. Passing a buffer
// to the state's Write moves it to the heap, so the buffers travel with the state, in a
// pool.
type keccakScratch struct {
	h     crypto.KeccakState
	msg   [2 + 32 + 32]byte
	words [7 * 32]byte
	out   [32]byte
}

var keccakPool = sync.Pool{New: func() any { return &keccakScratch{h: crypto.NewKeccakState()} }}

// sum writes keccak256(data) into out[:32].
func (k *keccakScratch) sum(out, data []byte) {
	k.h.Reset()
	_, _ = k.h.Write(data)
	_, _ = k.h.Read(out[:32])
}

// domainKey names one token's EIP-712 domain.
type domainKey struct {
	chainID       uint64
	asset         common.Address
	name, version string
}

// maxDomains bounds the kept domain separators: a facilitator or a gate knows a handful of
// tokens; past the bound, a domain is hashed each time.
const maxDomains = 256

var domains struct {
	sync.RWMutex
	m map[domainKey]common.Hash
}

// domainSeparator writes hashStruct(EIP712Domain) of the token into k.msg[2:34].
func domainSeparator(k *keccakScratch, chainID *big.Int, asset common.Address, name, version string) {
	out := k.msg[2:34]
	key := domainKey{asset: asset, name: name, version: version}
	kept := chainID.IsUint64()
	if kept {
		key.chainID = chainID.Uint64()
		domains.RLock()
		d, ok := domains.m[key]
		domains.RUnlock()
		if ok {
			copy(out, d[:])
			return
		}
	}
	w := k.words[:5*32]
	clear(w)
	copy(w[0:32], EIP712DomainTypeHash[:])
	k.sum(w[32:64], []byte(name))
	k.sum(w[64:96], []byte(version))
	chainID.FillBytes(w[96:128])
	copy(w[128+12:160], asset[:])
	k.sum(out, w)
	if kept {
		domains.Lock()
		if domains.m == nil {
			domains.m = make(map[domainKey]common.Hash)
		}
		if len(domains.m) < maxDomains {
			domains.m[key] = common.Hash(out)
		}
		domains.Unlock()
	}
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
	// The address is the last 20 bytes of keccak256 of the uncompressed key without its
	// 0x04 prefix, as crypto.PubkeyToAddress takes it, without unmarshalling the key.
	pub, err := crypto.Ecrecover(hash[:], rsv[:])
	if err != nil || len(pub) != 65 || pub[0] != 4 {
		return common.Address{}, sigErr("recover public key", ErrSignatureInvalid)
	}
	k := keccakPool.Get().(*keccakScratch)
	defer keccakPool.Put(k)
	k.sum(k.out[:], pub[1:])
	return common.BytesToAddress(k.out[12:]), nil
}

func sigErr(msg string, cause error) *DecodeError {
	return &DecodeError{Reason: ReasonInvalidSignature, Field: "payload.signature", Msg: msg, Err: cause}
}
