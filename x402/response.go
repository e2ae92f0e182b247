package x402

import (
	"encoding/json"
	"fmt"
	"strings"
)

// maxAccepts bounds the accepts list of a PAYMENT-REQUIRED header.
const maxAccepts = 64

// EncodePaymentRequired encodes the PAYMENT-REQUIRED header value. It refuses a value
// larger than MaxHeaderBytes, which a Node client could not read.
func EncodePaymentRequired(pr *PaymentRequiredV2) (string, error) {
	return encodeCapped(pr, "payment required")
}

// EncodeSettleResponse encodes the X-PAYMENT-RESPONSE or PAYMENT-RESPONSE header value.
func EncodeSettleResponse(sr *SettleResponse) (string, error) {
	return encodeCapped(sr, "settle response")
}

func encodeCapped(v any, what string) (string, error) {
	s, err := EncodeHeader(v)
	if err != nil {
		return "", err
	}
	if len(s) > MaxHeaderBytes {
		return "", fmt.Errorf("encode %s: %d bytes exceed %d: %w", what, len(s), MaxHeaderBytes, ErrTooLarge)
	}
	return s, nil
}

// DecodePaymentRequired decodes and checks a PAYMENT-REQUIRED header value with
// @x402/core's PaymentRequiredV2Schema: x402Version 2, a resource with a url, and at
// least one accepts entry. Entries on eip155 networks must carry 20-byte addresses and a
// canonical integer amount; entries of other chains are checked for shape only, so a
// multi-chain answer decodes. Errors are *DecodeError with ReasonInvalidRequirements
// (ReasonInvalidVersion for a wrong version).
func DecodePaymentRequired(value string) (*PaymentRequiredV2, error) {
	raw, err := decodeBase64JSON(value, MaxHeaderBytes, ReasonInvalidRequirements)
	if err != nil {
		return nil, err
	}
	o, err := parseObject(raw, "", ReasonInvalidRequirements)
	if err != nil {
		return nil, err
	}
	v, err := readVersion(o)
	if err != nil {
		return nil, err
	}
	if v != Version2 {
		return nil, &DecodeError{Reason: ReasonInvalidVersion, Field: "x402Version", Msg: "PAYMENT-REQUIRED carries version 2 only"}
	}
	if err := o.only("x402Version", "error", "resource", "accepts", "extensions"); err != nil {
		return nil, err
	}
	pr := &PaymentRequiredV2{X402Version: Version2}
	if pr.Error, err = o.optStr("error"); err != nil {
		return nil, err
	}
	res, err := o.resource("resource")
	if err != nil {
		return nil, err
	}
	pr.Resource = &res
	items, err := o.array("accepts")
	if err != nil {
		return nil, err
	}
	if len(items) == 0 || len(items) > maxAccepts {
		return nil, o.fail("accepts", fmt.Sprintf("must hold 1 to %d entries", maxAccepts))
	}
	for i, item := range items {
		eo, err := parseObject(item, fmt.Sprintf("accepts[%d]", i), ReasonInvalidRequirements)
		if err != nil {
			return nil, err
		}
		e, err := decodeAcceptsEntry(eo)
		if err != nil {
			return nil, err
		}
		pr.Accepts = append(pr.Accepts, e)
	}
	if pr.Extensions, err = o.optMap("extensions"); err != nil {
		return nil, err
	}
	return pr, nil
}

// decodeAcceptsEntry checks one PaymentRequirementsV2Schema entry without a registry.
func decodeAcceptsEntry(o *object) (RequirementsV2, error) {
	var e RequirementsV2
	var err error
	if e.Scheme, err = o.nonEmptyStr("scheme"); err != nil {
		return e, err
	}
	if e.Network, err = o.nonEmptyStr("network"); err != nil {
		return e, err
	}
	if len(e.Network) < 3 || !strings.Contains(e.Network, ":") {
		return e, &DecodeError{Reason: ReasonInvalidNetwork, Field: o.field("network"), Msg: "must be a CAIP-2 id"}
	}
	if e.Amount, err = o.nonEmptyStr("amount"); err != nil {
		return e, err
	}
	if e.Asset, err = o.nonEmptyStr("asset"); err != nil {
		return e, err
	}
	if e.PayTo, err = o.nonEmptyStr("payTo"); err != nil {
		return e, err
	}
	if strings.HasPrefix(e.Network, "eip155:") {
		if _, msg := parseUint(e.Amount, MaxIntegerDigits); msg != "" {
			return e, o.fail("amount", msg)
		}
		if !isHexN(e.Asset, 40) {
			return e, o.fail("asset", "must be a 20-byte 0x-hex address")
		}
		if !isHexN(e.PayTo, 40) {
			return e, o.fail("payTo", "must be a 20-byte 0x-hex address")
		}
	}
	if e.MaxTimeoutSeconds, err = o.smallInt("maxTimeoutSeconds", 1, maxTimeoutLimit); err != nil {
		return e, err
	}
	e.Extra, err = o.optMap("extra")
	return e, err
}

// DecodeSettleResponse decodes and checks an X-PAYMENT-RESPONSE or PAYMENT-RESPONSE
// header value (@x402/core settleResponseSchema): success and network required,
// transaction required and a 32-byte hash or "" (it must be a hash when success is true,
// unless amount is "0": an upto payment metered at nothing),
// payer a 20-byte address when present. Errors are *DecodeError with
// ReasonUnexpectedSettle: the server answered something no facilitator produces.
func DecodeSettleResponse(value string) (*SettleResponse, error) {
	raw, err := decodeBase64JSON(value, MaxHeaderBytes, ReasonUnexpectedSettle)
	if err != nil {
		return nil, err
	}
	o, err := parseObject(raw, "", ReasonUnexpectedSettle)
	if err != nil {
		return nil, err
	}
	if err := o.only("success", "errorReason", "errorMessage", "payer", "transaction", "txHash",
		"network", "amount", "extensions", "extra"); err != nil {
		return nil, err
	}
	sr := &SettleResponse{}
	if sr.Success, err = o.boolean("success"); err != nil {
		return nil, err
	}
	if sr.Transaction, err = o.str("transaction"); err != nil {
		return nil, err
	}
	if sr.Transaction != "" && !isHexN(sr.Transaction, 64) {
		return nil, o.fail("transaction", "must be a 32-byte 0x-hex hash or empty")
	}

	if sr.TxHash, err = o.optStr("txHash"); err != nil {
		return nil, err
	}
	if sr.TxHash != "" && !isHexN(sr.TxHash, 64) {
		return nil, o.fail("txHash", "must be a 32-byte 0x-hex hash")
	}
	if sr.Network, err = o.nonEmptyStr("network"); err != nil {
		return nil, err
	}
	if sr.Payer, err = o.optStr("payer"); err != nil {
		return nil, err
	}
	if sr.Payer != "" && !isHexN(sr.Payer, 40) {
		return nil, o.fail("payer", "must be a 20-byte 0x-hex address")
	}
	if sr.Amount, err = o.optStr("amount"); err != nil {
		return nil, err
	}
	if sr.Amount != "" {
		if _, msg := parseUint(sr.Amount, MaxIntegerDigits); msg != "" {
			return nil, o.fail("amount", msg)
		}
	}
	if sr.Success && sr.Transaction == "" && sr.Amount != "0" {
		// An upto payment metered at 0 is settled without a transaction, as @x402/evm
		// writes it: success, transaction "", amount "0".
		return nil, o.fail("transaction", "is empty on success")
	}
	if sr.ErrorReason, err = o.optStr("errorReason"); err != nil {
		return nil, err
	}
	if sr.ErrorMessage, err = o.optStr("errorMessage"); err != nil {
		return nil, err
	}
	for _, k := range []string{"extensions", "extra"} {
		if _, err := o.optMap(k); err != nil {
			return nil, err
		}
	}
	return sr, nil
}

// array reads a JSON array's elements.
func (o *object) array(key string) ([]json.RawMessage, error) {
	m, ok := o.get(key)
	if !ok {
		return nil, o.fail(key, "missing")
	}
	v := []byte(m.val)
	if len(v) == 0 || v[0] != '[' {
		return nil, o.fail(key, "must be an array")
	}
	var items []json.RawMessage
	if err := json.Unmarshal(v, &items); err != nil {
		return nil, o.fail(key, "bad array")
	}
	return items, nil
}
