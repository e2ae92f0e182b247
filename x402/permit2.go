package x402

import (
	"math/big"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/crypto"
)

// SchemeUpto is the metered scheme: the payer signs a Permit2 authorization for a
// maximum and the server settles what the answer cost, at most that (docs/protocol.md#permit2).
const SchemeUpto = "upto"

// Keys of a requirement's extra that say how it is paid (docs/protocol.md#permit2).
const (
	// ExtraAssetTransferMethod selects how an exact payment moves the token:
	// TransferEIP3009 (also when absent) or TransferPermit2.
	ExtraAssetTransferMethod = "assetTransferMethod"
	// ExtraFacilitatorAddress is, for upto, the account the payer's witness names as the
	// only one allowed to settle (the facilitator's /supported advertises it).
	ExtraFacilitatorAddress = "facilitatorAddress"
	// ExtraPaymentFlow names a payment flow other than the scheme's default
	// ("authorization", "upfront").
	ExtraPaymentFlow = "paymentFlow"
)

// Values of ExtraAssetTransferMethod.
const (
	TransferEIP3009 = "eip3009"
	TransferPermit2 = "permit2"
)

// Canonical addresses, the same on every EVM chain: Uniswap's Permit2 and the x402
// Permit2 proxies, the spenders the reference clients sign for.
var (
	Permit2Address           = common.HexToAddress("0x000000000022D473030F116dDEE9F6B43aC78BA3")
	ExactPermit2ProxyAddress = common.HexToAddress("0x402085c248EeA27D92E8b30b2C58ed07f9E20001")
	UptoPermit2ProxyAddress  = common.HexToAddress("0x4020A4f3b7b90ccA423B9fabCc0CE57C6C240002")
)

// The witness type strings the x402 proxies hand to Permit2's permitWitnessTransferFrom:
// the end of the PermitWitnessTransferFrom type after its stub, with the referenced types
// in EIP-712's alphabetical order. They are the types @x402/evm 2.27 signs.
const (
	ExactWitnessTypeString = "Witness witness)TokenPermissions(address token,uint256 amount)Witness(address to,uint256 validAfter)"
	UptoWitnessTypeString  = "Witness witness)TokenPermissions(address token,uint256 amount)Witness(address to,address facilitator,uint256 validAfter)"
	// permitWitnessStub is Permit2's PERMIT_WITNESS_TRANSFER_FROM_TYPEHASH_STUB.
	permitWitnessStub = "PermitWitnessTransferFrom(TokenPermissions permitted,address spender,uint256 nonce,uint256 deadline,"
)

// EIP-712 type hashes of Permit2's SignatureTransfer with the x402 witnesses.
var (
	// Permit2DomainTypeHash: Permit2's domain has a name and no version.
	Permit2DomainTypeHash    = crypto.Keccak256Hash([]byte("EIP712Domain(string name,uint256 chainId,address verifyingContract)"))
	tokenPermissionsTypeHash = crypto.Keccak256Hash([]byte("TokenPermissions(address token,uint256 amount)"))
	exactWitnessTypeHash     = crypto.Keccak256Hash([]byte("Witness(address to,uint256 validAfter)"))
	uptoWitnessTypeHash      = crypto.Keccak256Hash([]byte("Witness(address to,address facilitator,uint256 validAfter)"))
	exactPermitTypeHash      = crypto.Keccak256Hash([]byte(permitWitnessStub + ExactWitnessTypeString))
	uptoPermitTypeHash       = crypto.Keccak256Hash([]byte(permitWitnessStub + UptoWitnessTypeString))
	permit2NameHash          = crypto.Keccak256Hash([]byte("Permit2"))
)

// Permit2Authorization is a parsed permit2Authorization: a Permit2 PermitWitnessTransferFrom
// of Amount of Token to Spender, with the x402 witness {to, validAfter} (exact) or
// {to, facilitator, validAfter} (upto).
type Permit2Authorization struct {
	From        common.Address
	Token       common.Address
	Amount      *big.Int
	Spender     common.Address
	Nonce       *big.Int
	Deadline    *big.Int
	To          common.Address
	Facilitator common.Address // the upto witness's facilitator
	ValidAfter  *big.Int
	Upto        bool // the witness is upto's, with Facilitator
}

// TokenPermissionsJSON is the wire form of Permit2's TokenPermissions.
type TokenPermissionsJSON struct {
	Token  string `json:"token"`
	Amount string `json:"amount"`
}

// Permit2WitnessJSON is the wire form of the x402 witness; Facilitator is upto's.
type Permit2WitnessJSON struct {
	To          string `json:"to"`
	Facilitator string `json:"facilitator,omitempty"`
	ValidAfter  string `json:"validAfter"`
}

// Permit2AuthorizationJSON is the wire form of a Permit2Authorization: addresses as
// 0x-hex, integers (the nonce too) as decimal strings.
type Permit2AuthorizationJSON struct {
	From      string               `json:"from"`
	Permitted TokenPermissionsJSON `json:"permitted"`
	Spender   string               `json:"spender"`
	Nonce     string               `json:"nonce"`
	Deadline  string               `json:"deadline"`
	Witness   Permit2WitnessJSON   `json:"witness"`
}

// JSON renders a as its wire form, with checksummed addresses.
func (a *Permit2Authorization) JSON() *Permit2AuthorizationJSON {
	w := Permit2WitnessJSON{To: a.To.Hex(), ValidAfter: bigString(a.ValidAfter)}
	if a.Upto {
		w.Facilitator = a.Facilitator.Hex()
	}
	return &Permit2AuthorizationJSON{
		From:      a.From.Hex(),
		Permitted: TokenPermissionsJSON{Token: a.Token.Hex(), Amount: bigString(a.Amount)},
		Spender:   a.Spender.Hex(),
		Nonce:     bigString(a.Nonce),
		Deadline:  bigString(a.Deadline),
		Witness:   w,
	}
}

// Proxy is the x402 proxy a's witness type belongs to: the spender it must name.
func (a *Permit2Authorization) Proxy() common.Address {
	if a.Upto {
		return UptoPermit2ProxyAddress
	}
	return ExactPermit2ProxyAddress
}

// mirror is the EIP-3009-shaped view of a that Payment.Authorization carries: payer,
// payee, the permitted amount, validAfter, the deadline as validBefore and the nonce as
// 32 bytes, so that a payment's identity (KeyOf) and its time window read alike for both
// transfer methods.
func (a *Permit2Authorization) mirror() Authorization {
	m := Authorization{From: a.From, To: a.To, Value: a.Amount, ValidAfter: a.ValidAfter, ValidBefore: a.Deadline}
	a.Nonce.FillBytes(m.Nonce[:])
	return m
}

// readPermit2Payload reads payload {signature, permit2Authorization} (@x402/evm 2.27's
// ExactPermit2Payload and UptoPermit2Payload). Unknown keys are refused, as for EIP-3009;
// the witness carries facilitator exactly when the scheme is upto. The amount may have up
// to 78 digits: Permit2 moves any ERC-20, 18-decimal ones too.
func readPermit2Payload(o *object, p *Payment) error {
	if err := o.only("signature", "permit2Authorization"); err != nil {
		return err
	}
	if err := readSignature(o, p); err != nil {
		return err
	}
	ao, err := o.obj("permit2Authorization")
	if err != nil {
		return err
	}
	if err := ao.only("from", "permitted", "spender", "nonce", "deadline", "witness"); err != nil {
		return err
	}
	a := &Permit2Authorization{Upto: p.Scheme == SchemeUpto}
	if a.From, err = ao.address("from"); err != nil {
		return err
	}
	if err := readPermitted(ao, a); err != nil {
		return err
	}
	if a.Spender, err = ao.address("spender"); err != nil {
		return err
	}
	if a.Nonce, err = ao.uint("nonce", MaxIntegerDigits); err != nil {
		return err
	}
	if a.Deadline, err = ao.uint("deadline", MaxIntegerDigits); err != nil {
		return err
	}
	if err := readWitness(ao, a); err != nil {
		return err
	}
	p.Permit2, p.Authorization = a, a.mirror()
	return nil
}

func readPermitted(ao *object, a *Permit2Authorization) error {
	po, err := ao.obj("permitted")
	if err != nil {
		return err
	}
	if err := po.only("token", "amount"); err != nil {
		return err
	}
	if a.Token, err = po.address("token"); err != nil {
		return err
	}
	a.Amount, err = po.uint("amount", MaxIntegerDigits)
	return err
}

func readWitness(ao *object, a *Permit2Authorization) error {
	wo, err := ao.obj("witness")
	if err != nil {
		return err
	}
	if a.Upto {
		err = wo.only("to", "facilitator", "validAfter")
	} else {
		err = wo.only("to", "validAfter")
	}
	if err != nil {
		return err
	}
	if a.To, err = wo.address("to"); err != nil {
		return err
	}
	if a.Upto {
		if a.Facilitator, err = wo.address("facilitator"); err != nil {
			return err
		}
	}
	a.ValidAfter, err = wo.uint("validAfter", MaxIntegerDigits)
	return err
}

// Permit2Hash returns the EIP-712 digest a payer signs for a: domain {name "Permit2",
// chainId, verifyingContract Permit2Address} (no version), primary type
// PermitWitnessTransferFrom with the x402 witness of a's scheme, a.Spender as the spender.
// It is the digest Permit2's permitWitnessTransferFrom checks when the proxy calls it
// (docs/protocol.md#permit2). Errors are *DecodeError.
func Permit2Hash(chainID *big.Int, a *Permit2Authorization) (common.Hash, error) {
	if chainID == nil || chainID.Sign() <= 0 || chainID.BitLen() > 256 {
		return common.Hash{}, &DecodeError{Reason: ReasonInvalidNetwork, Field: "chainId", Msg: "must be a positive uint256"}
	}
	for _, f := range []struct {
		name string
		v    *big.Int
	}{{"permitted.amount", a.Amount}, {"nonce", a.Nonce}, {"deadline", a.Deadline}, {"witness.validAfter", a.ValidAfter}} {
		if f.v == nil || f.v.Sign() < 0 || f.v.BitLen() > 256 {
			return common.Hash{}, errPayload("payload.permit2Authorization."+f.name, "must be a uint256")
		}
	}
	k := keccakPool.Get().(*keccakScratch)
	defer keccakPool.Put(k)
	k.msg[0], k.msg[1] = 0x19, 0x01
	permit2Domain(k, chainID)
	w := &k.words
	// hashStruct(TokenPermissions) into words[32:64], the witness hash into words[160:192].
	clear(w[:])
	copy(w[0:32], tokenPermissionsTypeHash[:])
	copy(w[32+12:64], a.Token[:])
	a.Amount.FillBytes(w[64:96])
	k.sum(w[96:128], w[:96])
	var tokenHash [32]byte
	copy(tokenHash[:], w[96:128])
	witnessHash := witnessHash(k, a)
	// hashStruct(PermitWitnessTransferFrom): typeHash, permitted, spender, nonce, deadline, witness.
	clear(w[:])
	typeHash := exactPermitTypeHash
	if a.Upto {
		typeHash = uptoPermitTypeHash
	}
	copy(w[0:32], typeHash[:])
	copy(w[32:64], tokenHash[:])
	copy(w[64+12:96], a.Spender[:])
	a.Nonce.FillBytes(w[96:128])
	a.Deadline.FillBytes(w[128:160])
	copy(w[160:192], witnessHash[:])
	k.sum(k.msg[34:66], w[:192])
	k.sum(k.out[:], k.msg[:])
	return common.Hash(k.out), nil
}

// witnessHash is hashStruct of a's witness, as the proxy computes it.
func witnessHash(k *keccakScratch, a *Permit2Authorization) [32]byte {
	w := &k.words
	clear(w[:])
	n := 96
	if a.Upto {
		copy(w[0:32], uptoWitnessTypeHash[:])
		copy(w[32+12:64], a.To[:])
		copy(w[64+12:96], a.Facilitator[:])
		a.ValidAfter.FillBytes(w[96:128])
		n = 128
	} else {
		copy(w[0:32], exactWitnessTypeHash[:])
		copy(w[32+12:64], a.To[:])
		a.ValidAfter.FillBytes(w[64:96])
	}
	var out [32]byte
	k.sum(out[:], w[:n])
	return out
}

// permit2Domain writes Permit2's domain separator on chainID into k.msg[2:34].
func permit2Domain(k *keccakScratch, chainID *big.Int) {
	w := k.words[:4*32]
	clear(w)
	copy(w[0:32], Permit2DomainTypeHash[:])
	copy(w[32:64], permit2NameHash[:])
	chainID.FillBytes(w[64:96])
	copy(w[96+12:128], Permit2Address[:])
	k.sum(k.msg[2:34], w)
}

// permit2Payload is the wire payload of a Permit2 payment.
func (p *Payment) permit2Payload() ExactEVMPayload {
	return ExactEVMPayload{Signature: hexutil.Encode(p.Signature), Permit2Authorization: p.Permit2.JSON()}
}
