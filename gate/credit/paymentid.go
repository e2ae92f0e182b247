package credit

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/x402gate/x402gate/x402"
)

// The x402 v2 payment-identifier extension (docs/gate.md#payment-identifier) lets a client
// name a payment with an id of its own; an id names its payment's record in the ledger.

// PaymentIDExtension is the key of the extension in a PaymentRequired's and a
// payment's extensions.
const PaymentIDExtension = "payment-identifier"

// The modes of a route that advertises the extension.
const (
	// PaymentIDOptional advertises the extension; a payment may carry an id.
	PaymentIDOptional = "optional"
	// PaymentIDRequired advertises it as required; a payment without an id is refused.
	PaymentIDRequired = "required"
)

// Bounds of an id, as @x402/extensions checks it (isValidPaymentId): 16 to 128 of
// [A-Za-z0-9_-].
const (
	PaymentIDMinLength = 16
	PaymentIDMaxLength = 128
)

// schemaDraft2020 is the $schema of the extension schemas the gate declares.
const schemaDraft2020 = "https://json-schema.org/draft/2020-12/schema"

// PaymentIDDeclaration is the extension as declarePaymentIDExtension builds it.
func PaymentIDDeclaration(required bool) map[string]any {
	return map[string]any{
		"info": map[string]any{"required": required},
		"schema": map[string]any{
			"$schema": schemaDraft2020,
			"type":    "object",
			"properties": map[string]any{
				"required": map[string]any{"type": "boolean"},
				"id": map[string]any{
					"type": "string", "minLength": PaymentIDMinLength, "maxLength": PaymentIDMaxLength,
					"pattern": "^[a-zA-Z0-9_-]+$",
				},
			},
			"required": []any{"required"},
		},
	}
}

// PaymentIDOf reads the id a v2 payment carries in extensions["payment-identifier"].info.id;
// "" when it carries none. A malformed one is an error.
func PaymentIDOf(p *x402.Payment) (string, error) {
	ext, ok := p.Extensions[PaymentIDExtension]
	if !ok || ext == nil {
		return "", nil
	}
	m, ok := ext.(map[string]any)
	if !ok {
		return "", errors.New("payment-identifier is not an object")
	}
	info, ok := m["info"].(map[string]any)
	if !ok {
		return "", errors.New("payment-identifier has no info object")
	}
	v, ok := info["id"]
	if !ok || v == nil {
		return "", nil
	}
	id, ok := v.(string)
	if !ok || !validPaymentID(id) {
		return "", fmt.Errorf("payment-identifier id must be %d to %d characters of A-Z, a-z, 0-9, _ and -", PaymentIDMinLength, PaymentIDMaxLength)
	}
	return id, nil
}

func validPaymentID(id string) bool {
	if len(id) < PaymentIDMinLength || len(id) > PaymentIDMaxLength {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// IDKey names the index entry of a payer's id: an id names one payment of its
// payer (docs/gate.md#payment-ledger).
func IDKey(p *x402.Payment, id string) string {
	sum := sha256.Sum256([]byte("payment-id\n" + p.Authorization.From.Hex() + "\n" + id))
	return "payid:" + hex.EncodeToString(sum[:])
}
