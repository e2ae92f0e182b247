package x402

import (
	"fmt"
	"math"
	"math/big"
	"unicode/utf8"

	"github.com/ethereum/go-ethereum/common"
)

// maxTimeoutLimit bounds maxTimeoutSeconds so it fits an int32 everywhere.
const maxTimeoutLimit = math.MaxInt32

// DecodeRequirementsJSON decodes one payment requirement (the paymentRequirements of a
// /verify or /settle body) in the shape of the given x402 version. Unknown keys are
// ignored, as zod's default object schemas do; known keys match exactly. A nil reg means
// the built-in networks. Every error is a *DecodeError.
func DecodeRequirementsJSON(raw []byte, version int, reg *Registry) (*Requirements, error) {
	if len(raw) > MaxRequirementsJSONBytes {
		return nil, &DecodeError{Reason: ReasonInvalidRequirements, Msg: fmt.Sprintf("requirements exceed %d bytes", MaxRequirementsJSONBytes), Err: ErrTooLarge}
	}
	if !utf8.Valid(raw) {
		return nil, errRequirements("", "requirements are not UTF-8")
	}
	o, err := parseObject(raw, "", ReasonInvalidRequirements)
	if err != nil {
		return nil, err
	}
	defer o.release()
	switch version {
	case Version1:
		return decodeRequirementsV1(o, registryOr(reg))
	case Version2:
		return decodeRequirementsV2(o, registryOr(reg))
	}
	return nil, &DecodeError{Reason: ReasonInvalidVersion, Field: "x402Version", Msg: fmt.Sprintf("version %d is not 1 or 2", version)}
}

// decodeRequirementsV1 reads the x402@1.2.0 PaymentRequirementsSchema. mimeType, required
// by that schema, is optional here because @x402/core's v1 schema makes it so.
func decodeRequirementsV1(o *object, reg *Registry) (*Requirements, error) {
	r := &Requirements{}
	var err error
	if r.Scheme, err = readScheme(o, Version1); err != nil {
		return nil, err
	}
	n, err := readNetwork(o, reg, Version1)
	if err != nil {
		return nil, err
	}
	r.Network = n.CAIP2
	if r.Amount, err = o.uint("maxAmountRequired", MaxIntegerDigits); err != nil {
		return nil, err
	}
	if r.Resource.URL, err = o.nonEmptyStr("resource"); err != nil {
		return nil, err
	}
	if r.Resource.Description, err = o.str("description"); err != nil {
		return nil, err
	}
	if r.Resource.MimeType, err = o.optStr("mimeType"); err != nil {
		return nil, err
	}
	if r.OutputSchema, err = o.optMap("outputSchema"); err != nil {
		return nil, err
	}
	if err := readCommon(o, r); err != nil {
		return nil, err
	}
	return r, nil
}

// decodeRequirementsV2 reads @x402/core's PaymentRequirementsV2Schema; it serves both a
// requirement on its own and a payload's "accepted" (where o.reason is invalid_payload).
func decodeRequirementsV2(o *object, reg *Registry) (*Requirements, error) {
	r := &Requirements{}
	var err error
	if r.Scheme, err = readScheme(o, Version2); err != nil {
		return nil, err
	}
	n, err := readNetwork(o, reg, Version2)
	if err != nil {
		return nil, err
	}
	r.Network = n.CAIP2
	if r.Amount, err = o.uint("amount", MaxIntegerDigits); err != nil {
		return nil, err
	}
	if err := readCommon(o, r); err != nil {
		return nil, err
	}
	return r, nil
}

// readCommon reads the fields v1 and v2 requirements share.
func readCommon(o *object, r *Requirements) error {
	var err error
	if r.PayTo, err = o.address("payTo"); err != nil {
		return err
	}
	if r.Asset, err = o.address("asset"); err != nil {
		return err
	}
	if r.MaxTimeoutSeconds, err = o.smallInt("maxTimeoutSeconds", 1, maxTimeoutLimit); err != nil {
		return err
	}
	r.Extra, err = o.optMap("extra")
	return err
}

// V1 renders r as a v1 accepts entry that passes x402-fetch 1.2.0's zod schema: the v1
// network name from reg (nil means the built-in networks), checksummed addresses (the
// client string-compares asset with its USDC table), mimeType always a string, and
// outputSchema omitted when there is none (null fails zod). docs/protocol.md#requirements
func (r *Requirements) V1(reg *Registry) (RequirementsV1, error) {
	n, ok := registryOr(reg).Lookup(r.Network)
	if !ok {
		return RequirementsV1{}, &DecodeError{Reason: ReasonInvalidNetwork, Field: "network", Msg: fmt.Sprintf("network %q has no v1 name", r.Network)}
	}
	return RequirementsV1{
		Scheme:            r.Scheme,
		Network:           n.Name,
		MaxAmountRequired: bigString(r.Amount),
		Resource:          r.Resource.URL,
		Description:       r.Resource.Description,
		MimeType:          r.Resource.MimeType,
		OutputSchema:      r.OutputSchema,
		PayTo:             r.PayTo.Hex(),
		MaxTimeoutSeconds: r.MaxTimeoutSeconds,
		Asset:             r.Asset.Hex(),
		Extra:             r.Extra,
	}, nil
}

// V2 renders r as a v2 accepts entry. The resource travels beside it, in
// PaymentRequiredV2.Resource.
func (r *Requirements) V2() RequirementsV2 {
	return RequirementsV2{
		Scheme:            r.Scheme,
		Network:           r.Network,
		Amount:            bigString(r.Amount),
		Asset:             r.Asset.Hex(),
		PayTo:             r.PayTo.Hex(),
		MaxTimeoutSeconds: r.MaxTimeoutSeconds,
		Extra:             r.Extra,
	}
}

// Domain returns the EIP-712 domain name and version from Extra ({"name", "version"}).
// ok is false unless both are non-empty strings; v2 facilitators then refuse with
// ReasonMissingEIP712Domain (docs/facilitator.md#verify step 2).
func (r *Requirements) Domain() (name, version string, ok bool) {
	name, _ = r.Extra["name"].(string)
	version, _ = r.Extra["version"].(string)
	return name, version, name != "" && version != ""
}

// Matches checks that p pays r: scheme, network, asset (v2), recipient and amount. Addresses
// compare as 20-byte values, so case does not matter; the amount must be equal, as v2's
// "exact" requires (docs/protocol.md#headers). It returns nil or the
// *MismatchError of the first difference, in the facilitator's check order.
func (r *Requirements) Matches(p *Payment) error {
	if p == nil {
		return &MismatchError{Reason: ReasonInvalidPayload, Field: "payment", Want: "a payment", Got: "none"}
	}
	if p.Scheme != r.Scheme {
		return &MismatchError{Reason: ReasonInvalidScheme, Field: "scheme", Want: r.Scheme, Got: p.Scheme}
	}
	if p.Network != r.Network {
		return &MismatchError{Reason: ReasonNetworkMismatch, Field: "network", Want: r.Network, Got: p.Network}
	}
	if p.Transfer() != r.Transfer() {
		return &MismatchError{Reason: ReasonUnsupportedPayloadType, Field: "payload", Want: r.Transfer(), Got: p.Transfer()}
	}
	if a := p.Accepted; a != nil {
		if a.Scheme != r.Scheme {
			return &MismatchError{Reason: ReasonInvalidScheme, Field: "accepted.scheme", Want: r.Scheme, Got: a.Scheme}
		}
		if a.Network != r.Network {
			return &MismatchError{Reason: ReasonNetworkMismatch, Field: "accepted.network", Want: r.Network, Got: a.Network}
		}
		if a.Asset != r.Asset {
			return mismatchAddr(ReasonAssetMismatch, "accepted.asset", r.Asset, a.Asset)
		}
		if a.PayTo != r.PayTo {
			return mismatchAddr(ReasonRecipientMismatch, "accepted.payTo", r.PayTo, a.PayTo)
		}
		// upto: the client accepted, and signed, the maximum; r.Amount is at most it.
		want := r.Amount
		if r.Scheme == SchemeUpto {
			want = p.Authorization.Value
		}
		if !bigEqual(a.Amount, want) {
			return &MismatchError{Reason: ReasonValueMismatch, Field: "accepted.amount", Want: bigString(want), Got: bigString(a.Amount)}
		}
	}
	if p.Permit2 != nil {
		return r.matchPermit2(p.Permit2)
	}
	if p.Authorization.To != r.PayTo {
		return mismatchAddr(ReasonRecipientMismatch, "payload.authorization.to", r.PayTo, p.Authorization.To)
	}
	if !bigEqual(p.Authorization.Value, r.Amount) {
		return &MismatchError{Reason: ReasonValueMismatch, Field: "payload.authorization.value", Want: bigString(r.Amount), Got: bigString(p.Authorization.Value)}
	}
	return nil
}

// matchPermit2 checks a Permit2 authorization against r in the reference facilitator's
// order: the spender is the proxy of the scheme, the witness pays r.PayTo, the token is
// r.Asset, and the permitted amount is r.Amount (exact) or at least it (upto, whose r.Amount
// at settlement is the metered amount).
func (r *Requirements) matchPermit2(a *Permit2Authorization) error {
	const field = "payload.permit2Authorization."
	if a.Spender != a.Proxy() {
		return mismatchAddr(ReasonPermit2InvalidSpender, field+"spender", a.Proxy(), a.Spender)
	}
	if a.To != r.PayTo {
		return mismatchAddr(ReasonPermit2RecipientMismatch, field+"witness.to", r.PayTo, a.To)
	}
	if a.Token != r.Asset {
		return mismatchAddr(ReasonPermit2TokenMismatch, field+"permitted.token", r.Asset, a.Token)
	}
	if r.Amount == nil || a.Amount == nil {
		return &MismatchError{Reason: ReasonPermit2AmountMismatch, Field: field + "permitted.amount", Want: bigString(r.Amount), Got: bigString(a.Amount)}
	}
	if a.Upto && r.Amount.Cmp(a.Amount) > 0 {
		return &MismatchError{Reason: ReasonUptoSettlementExceedsAmount, Field: field + "permitted.amount", Want: "at least " + r.Amount.String(), Got: a.Amount.String()}
	}
	if !a.Upto && r.Amount.Cmp(a.Amount) != 0 {
		return &MismatchError{Reason: ReasonPermit2AmountMismatch, Field: field + "permitted.amount", Want: r.Amount.String(), Got: a.Amount.String()}
	}
	return nil
}

// Transfer is how a payment for r moves the token: extra.assetTransferMethod when set,
// else TransferPermit2 for upto (Permit2 only) and TransferEIP3009 for exact. A method
// this package does not know is returned as it is, and no payment matches it.
func (r *Requirements) Transfer() string {
	if m, ok := r.Extra[ExtraAssetTransferMethod].(string); ok && m != "" {
		return m
	}
	if r.Scheme == SchemeUpto {
		return TransferPermit2
	}
	return TransferEIP3009
}

// FacilitatorAddress is extra.facilitatorAddress, the account an upto payer lets settle;
// ok is false when it is absent or not an address.
func (r *Requirements) FacilitatorAddress() (common.Address, bool) {
	s, _ := r.Extra[ExtraFacilitatorAddress].(string)
	a, err := ParseAddress(s)
	return a, err == nil
}

func mismatchAddr(reason Reason, field string, want, got common.Address) *MismatchError {
	return &MismatchError{Reason: reason, Field: field, Want: want.Hex(), Got: got.Hex()}
}

// bigEqual compares two amounts; a missing one never matches (fail closed).
func bigEqual(a, b *big.Int) bool { return a != nil && b != nil && a.Cmp(b) == 0 }
