package verdict

import (
	"crypto/ecdsa"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"sync"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/ethereum/go-ethereum/signer/core/apitypes"
)

// Signed verdicts (docs/verdict-signing.md): a terminal verdict may carry, in its
// "signature" member (an extension of schemaVersion 1), an EIP-712 signature by the
// verdict service's key over the action it judged, the outcome and a short validity. The
// signing, the domain separator and the type hash are go-ethereum's (crypto, apitypes); the
// message's words are laid out here (Digest), and held to apitypes by a test.

// The EIP-712 domain and primary type of a signed verdict (docs/verdict-signing.md#typed-data).
const (
	SignatureDomainName    = "x402gate verdict"
	SignatureDomainVersion = "1"
	SignaturePrimaryType   = "Verdict"
)

// MaxSignatureTTL is the longest a verdict's signature stays valid after it is made
// (docs/verdict-signing.md#expiry).
const MaxSignatureTTL = 5 * time.Minute

// The signed outcome codes (docs/verdict-signing.md#typed-data).
const (
	SignedApproved uint8 = 1
	SignedRejected uint8 = 2
)

// ErrSignature is any signed verdict that does not hold: missing, malformed, by another
// key, about another action, expired. It is never an approval.
var ErrSignature = errors.New("verdict signature does not hold")

// SignatureError says which part of a signed verdict does not hold. It unwraps to
// ErrSignature and quotes no secret.
type SignatureError struct {
	// Field is the message member or part at fault ("signer", "message.to", "expiry", …).
	Field string
	// Problem names the rule it breaks.
	Problem string
}

// Error names the field and the rule.
func (e *SignatureError) Error() string {
	return "verdict signature: " + e.Field + ": " + e.Problem
}

// Unwrap returns ErrSignature.
func (e *SignatureError) Unwrap() error { return ErrSignature }

func sigErr(field, problem string) error { return &SignatureError{Field: field, Problem: problem} }

// Binding is the action a signed verdict is about (docs/verdict-signing.md#binding): the
// agent's wallet, the chain, and the call: its target, the keccak-256 of its call data
// (or of the canonical action when it is not an EVM call) and its value in wei.
type Binding struct {
	Wallet   common.Address
	ChainID  int64
	To       common.Address
	DataHash common.Hash
	Value    *big.Int
}

// CallBinding binds an EVM call of wallet on chainID: to, keccak256(data), value.
func CallBinding(wallet common.Address, chainID int64, to common.Address, data []byte, value *big.Int) Binding {
	if value == nil {
		value = new(big.Int)
	}
	return Binding{Wallet: wallet, ChainID: chainID, To: to, DataHash: crypto.Keccak256Hash(data), Value: value}
}

// transferSelector is ERC-20 transfer(address,uint256).
var transferSelector = []byte{0xa9, 0x05, 0x9c, 0xbb}

// PaymentBinding binds an x402 payment as the ERC-20 call that moves the same money
// (docs/verdict-signing.md#binding): asset.transfer(payTo, amount) from wallet, value 0.
func PaymentBinding(wallet common.Address, chainID int64, payTo, asset common.Address, amount *big.Int) Binding {
	data := make([]byte, 0, 4+64)
	data = append(data, transferSelector...)
	data = append(data, common.LeftPadBytes(payTo.Bytes(), 32)...)
	data = append(data, common.LeftPadBytes(amount.Bytes(), 32)...)
	return CallBinding(wallet, chainID, asset, data, nil)
}

// SignedVerdict is the EIP-712 message of a signed verdict (docs/verdict-signing.md#typed-data).
type SignedVerdict struct {
	Binding
	// PolicyVersion is the verdict's policyVersion; 0 when it has none.
	PolicyVersion int64
	// Outcome is SignedApproved or SignedRejected.
	Outcome uint8
	// Nonce makes the signature single-use; the service uses the record's requestHash.
	Nonce common.Hash
	// Expiry is the last second (Unix time) the signature is valid.
	Expiry int64
}

// SignatureTypes returns the EIP-712 types of a signed verdict, the EIP712Domain included.
func SignatureTypes() apitypes.Types {
	return apitypes.Types{
		"EIP712Domain": {
			{Name: "name", Type: "string"},
			{Name: "version", Type: "string"},
		},
		SignaturePrimaryType: {
			{Name: "wallet", Type: "address"},
			{Name: "chainId", Type: "uint256"},
			{Name: "to", Type: "address"},
			{Name: "dataHash", Type: "bytes32"},
			{Name: "value", Type: "uint256"},
			{Name: "policyVersion", Type: "uint64"},
			{Name: "outcome", Type: "uint8"},
			{Name: "nonce", Type: "bytes32"},
			{Name: "expiry", Type: "uint64"},
		},
	}
}

// SignatureDomain is the EIP-712 domain of signed verdicts: a name and a version only.
// The chain and the wallet are in the message, so that one signature names the one
// account and chain it is good for.
func SignatureDomain() apitypes.TypedDataDomain {
	return apitypes.TypedDataDomain{Name: SignatureDomainName, Version: SignatureDomainVersion}
}

// TypedData is m as EIP-712 typed data, what eth_signTypedData_v4 and a verifier take.
func (m *SignedVerdict) TypedData() apitypes.TypedData {
	value := m.Value
	if value == nil {
		value = new(big.Int)
	}
	return apitypes.TypedData{
		Types:       SignatureTypes(),
		PrimaryType: SignaturePrimaryType,
		Domain:      SignatureDomain(),
		Message: apitypes.TypedDataMessage{
			"wallet":        m.Wallet.Hex(),
			"chainId":       big.NewInt(m.ChainID),
			"to":            m.To.Hex(),
			"dataHash":      m.DataHash.Hex(),
			"value":         value,
			"policyVersion": big.NewInt(m.PolicyVersion),
			"outcome":       big.NewInt(int64(m.Outcome)),
			"nonce":         m.Nonce.Hex(),
			"expiry":        big.NewInt(m.Expiry),
		},
	}
}

// Digest is the EIP-712 digest of m, the hash that is signed: keccak256(0x1901 ‖ the
// domain separator ‖ hashStruct(m)). Every member of the message is one 32-byte word, so
// hashStruct(m) is keccak256 of the message's type hash and its words in the order of
// SignatureTypes; the domain separator and the type hash are go-ethereum's (apitypes),
// computed once. TestDigestIsGoEthereums holds it to apitypes.TypedDataAndHash of
// m.TypedData(), what a wallet signs: the same digest, and an error for the same messages (a
// negative unsigned integer, a value beyond 256 bits).
func (m *SignedVerdict) Digest() (common.Hash, error) {
	value := orZero(m.Value)
	switch {
	case m.ChainID < 0 || m.PolicyVersion < 0 || m.Expiry < 0:
		return common.Hash{}, errors.New("verdict typed data: an unsigned integer is negative")
	case value.Sign() < 0 || value.BitLen() > 256:
		return common.Hash{}, errors.New("verdict typed data: value is not a uint256")
	}
	d := digests.Get().(*digestState)
	defer digests.Put(d)
	m.words(&d.words, value)
	d.h.Reset()
	for i := range d.words {
		d.h.Write(d.words[i][:])
	}
	d.prefix = [66]byte{0x19, 0x01}
	copy(d.prefix[2:], domainSeparator[:])
	_, _ = d.h.Read(d.prefix[34:])
	d.h.Reset()
	d.h.Write(d.prefix[:])
	_, _ = d.h.Read(d.out[:])
	return d.out, nil
}

// words lays out the type hash of m and its members, with value for its value, as
// EIP-712's encodeData does: each in one 32-byte word, integers big-endian, addresses
// left-padded.
func (m *SignedVerdict) words(w *[10][32]byte, value *big.Int) {
	*w = [10][32]byte{verdictTypeHash}
	copy(w[1][12:], m.Wallet[:])
	binary.BigEndian.PutUint64(w[2][24:], uint64(m.ChainID))
	copy(w[3][12:], m.To[:])
	w[4] = m.DataHash
	value.FillBytes(w[5][:])
	binary.BigEndian.PutUint64(w[6][24:], uint64(m.PolicyVersion))
	w[7][31] = m.Outcome
	w[8] = m.Nonce
	binary.BigEndian.PutUint64(w[9][24:], uint64(m.Expiry))
}

// digestState is Digest's hash state and buffers, recycled (digests): what a hash state's
// methods are handed escapes to the heap.
type digestState struct {
	h      crypto.KeccakState
	words  [10][32]byte // the message's type hash and members
	prefix [66]byte     // 0x1901, the domain separator, hashStruct
	out    common.Hash
}

var digests = sync.Pool{New: func() any { return &digestState{h: crypto.NewKeccakState()} }}

// domainSeparator and verdictTypeHash are the EIP-712 domain separator of signed verdicts
// and the type hash of their message, as go-ethereum computes them.
var domainSeparator, verdictTypeHash = func() (common.Hash, common.Hash) {
	td := apitypes.TypedData{Types: SignatureTypes(), PrimaryType: SignaturePrimaryType, Domain: SignatureDomain()}
	ds, err := td.HashStruct("EIP712Domain", td.Domain.Map())
	if err != nil {
		panic("verdict: the EIP-712 domain does not hash: " + err.Error())
	}
	return common.BytesToHash(ds), common.BytesToHash(td.TypeHash(SignaturePrimaryType))
}()

// Signature is the "signature" member of a signed verdict (docs/verdict-signing.md#the-signature-member):
// who signed, what, and the 65-byte signature r || s || v with v 27 or 28.
type Signature struct {
	// Signer is the address the service publishes at /.well-known/x402gate-verdict-signer.
	Signer common.Address
	// Message is the signed message.
	Message SignedVerdict
	// Sig is the signature r || s || v.
	Sig []byte
}

// SignVerdict signs m with key.
func SignVerdict(key *ecdsa.PrivateKey, m SignedVerdict) (*Signature, error) {
	s := new(Signature)
	if err := SignVerdictInto(s, key, m); err != nil {
		return nil, err
	}
	return s, nil
}

// SignVerdictInto is SignVerdict into s, memory of the caller's (a verdict that is signed,
// encoded and dropped need not allocate its signature); s is unchanged on an error.
func SignVerdictInto(s *Signature, key *ecdsa.PrivateKey, m SignedVerdict) error {
	d, err := m.Digest()
	if err != nil {
		return err
	}
	sig, err := crypto.Sign(d[:], key)
	if err != nil {
		return fmt.Errorf("sign verdict: %w", err)
	}
	sig[64] += 27
	*s = Signature{Signer: crypto.PubkeyToAddress(key.PublicKey), Message: m, Sig: sig}
	return nil
}

// Recover returns the address whose key made s.Sig over s.Message. A signature that is
// not 65 bytes, has a v other than 27 or 28, or an s in the upper half of the curve
// order (a malleated copy) is refused, as the guarded account refuses it.
func (s *Signature) Recover() (common.Address, error) {
	if len(s.Sig) != 65 {
		return common.Address{}, sigErr("signature", "must be 65 bytes")
	}
	v := s.Sig[64]
	r, sv := new(big.Int).SetBytes(s.Sig[:32]), new(big.Int).SetBytes(s.Sig[32:64])
	if (v != 27 && v != 28) || !crypto.ValidateSignatureValues(v-27, r, sv, true) {
		return common.Address{}, sigErr("signature", "is not a canonical secp256k1 signature")
	}
	d, err := s.Message.Digest()
	if err != nil {
		return common.Address{}, sigErr("message", err.Error())
	}
	sig := append([]byte(nil), s.Sig...)
	sig[64] -= 27
	pub, err := crypto.SigToPub(d[:], sig)
	if err != nil {
		return common.Address{}, sigErr("signature", "does not recover a key")
	}
	return crypto.PubkeyToAddress(*pub), nil
}

// CheckSignature is the gate's check of a signed verdict (docs/verdict-signing.md#checking-at-the-gate):
// v carries a signature by signer over want, its own outcome and policyVersion, that has
// not expired at now. Any failure is a *SignatureError: fail closed.
func CheckSignature(v *Verdict, signer common.Address, want Binding, now time.Time) error {
	if v == nil || v.Signature == nil {
		return sigErr("signature", "is missing; a verdict_signer is configured, so every verdict must be signed")
	}
	s := v.Signature
	got, err := s.Recover()
	if err != nil {
		return err
	}
	if got != signer || s.Signer != signer {
		return sigErr("signer", "is not the verdict service's configured signer")
	}
	m := &s.Message
	switch {
	case m.Wallet != want.Wallet:
		return sigErr("message.wallet", "is not the payer's wallet")
	case m.ChainID != want.ChainID:
		return sigErr("message.chainId", "is not the action's chain")
	case m.To != want.To:
		return sigErr("message.to", "is not the action's target")
	case m.DataHash != want.DataHash:
		return sigErr("message.dataHash", "is not the hash of the action's call data")
	case orZero(m.Value).Cmp(orZero(want.Value)) != 0:
		return sigErr("message.value", "is not the action's value")
	}
	if err := s.consistent(v); err != nil {
		return err
	}
	if now.Unix() > m.Expiry {
		return sigErr("message.expiry", "has passed")
	}
	return nil
}

func orZero(x *big.Int) *big.Int {
	if x == nil {
		return new(big.Int)
	}
	return x
}

// consistent checks that s signs v's own outcome and policyVersion: a terminal verdict's
// signature never says anything else than the verdict does.
func (s *Signature) consistent(v *Verdict) error {
	want := SignedRejected
	if v.Outcome == OutcomeApproved {
		want = SignedApproved
	}
	if !v.Terminal() || s.Message.Outcome != want {
		return sigErr("message.outcome", "is not the verdict's outcome")
	}
	pv := int64(0)
	if v.PolicyVersion != nil {
		pv = *v.PolicyVersion
	}
	if s.Message.PolicyVersion != pv {
		return sigErr("message.policyVersion", "is not the verdict's policyVersion")
	}
	return nil
}

// signature reads a verdict's optional "signature" member strictly: absent or null is
// none; otherwise every member is required and of its type, only a terminal verdict may
// carry one, and it signs the verdict's own outcome and policyVersion. It does not
// recover the signer: CheckSignature does, where a signer is configured.
func (v validator) signature(obj map[string]any, path string, vd *Verdict) (*Signature, error) {
	raw, present := obj["signature"]
	if !present || raw == nil {
		return nil, nil
	}
	p := path + ".signature"
	so, ok := raw.(map[string]any)
	if !ok {
		return nil, v.fail(p, "must be an object or null")
	}
	s := &Signature{}
	var err error
	if s.Signer, err = v.address(so, "signer", p); err != nil {
		return nil, err
	}
	hx, _ := so["signature"].(string)
	if s.Sig, err = hexutil.Decode(hx); err != nil || len(s.Sig) != 65 {
		return nil, v.fail(p+".signature", "must be 0x and 130 hex digits")
	}
	mo, mp, err := v.object(so, "message", p)
	if err != nil {
		return nil, err
	}
	if s.Message, err = v.signedMessage(mo, mp); err != nil {
		return nil, err
	}
	var se *SignatureError
	if errors.As(s.consistent(vd), &se) {
		return nil, v.fail(p+"."+se.Field, se.Problem)
	}
	return s, nil
}

// signedMessage reads the members of a signature's message.
func (v validator) signedMessage(mo map[string]any, p string) (SignedVerdict, error) {
	var m SignedVerdict
	var err error
	if m.Wallet, err = v.address(mo, "wallet", p); err != nil {
		return m, err
	}
	if m.To, err = v.address(mo, "to", p); err != nil {
		return m, err
	}
	if m.DataHash, err = v.hash32(mo, "dataHash", p); err != nil {
		return m, err
	}
	if m.Nonce, err = v.hash32(mo, "nonce", p); err != nil {
		return m, err
	}
	var ints [len(signedInts)]int64
	for i, f := range signedInts {
		n, ok := mo[f.key].(json.Number)
		x, perr := strconv.ParseInt(n.String(), 10, 64)
		if !ok || perr != nil || x < f.min || x > f.max {
			return m, v.fail(p+"."+f.key, f.problem())
		}
		ints[i] = x
	}
	m.ChainID, m.PolicyVersion, m.Outcome, m.Expiry = ints[0], ints[1], uint8(ints[2]), ints[3]
	val, ok := mo["value"].(string)
	n, good := new(big.Int).SetString(val, 10)
	if !ok || !good || n.Sign() < 0 || n.BitLen() > 256 || n.String() != val {
		return m, v.fail(p+".value", "must be a decimal string of a uint256")
	}
	m.Value = n
	return m, nil
}

// signedInt is an integer member of a signature's message and its range.
type signedInt struct {
	key      string
	min, max int64
}

// signedInts are the integer members of a signature's message, in the order they are read:
// chainId, policyVersion, outcome, expiry.
var signedInts = [...]signedInt{
	{"chainId", 0, math.MaxInt64},
	{"policyVersion", 0, math.MaxInt64},
	{"outcome", int64(SignedApproved), int64(SignedRejected)},
	{"expiry", 1, math.MaxInt64},
}

// problem names the rule of f.
func (f signedInt) problem() string {
	return "must be an integer from " + strconv.FormatInt(f.min, 10) + " to " + strconv.FormatInt(f.max, 10)
}

// address reads a required 0x-hex address member.
func (v validator) address(obj map[string]any, key, path string) (common.Address, error) {
	s, ok := obj[key].(string)
	if !ok || len(s) != 42 || !common.IsHexAddress(s) {
		return common.Address{}, v.fail(path+"."+key, "must be an address: 0x and 40 hex digits")
	}
	return common.HexToAddress(s), nil
}

// hash32 reads a required 0x-hex 32-byte member.
func (v validator) hash32(obj map[string]any, key, path string) (common.Hash, error) {
	s, _ := obj[key].(string)
	b, err := hexutil.Decode(s)
	if err != nil || len(b) != 32 {
		return common.Hash{}, v.fail(path+"."+key, "must be 0x and 64 hex digits")
	}
	return common.BytesToHash(b), nil
}
