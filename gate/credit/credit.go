// Package credit is the gate's side of the payment ledger (docs/gate.md#payment-ledger),
// behind the store interface of gate/payledger: the keys that name a payment's record, the
// lease an attempt holds on it, the retry tokens that bind a payment's retry credits to
// the client that earned them (docs/gate.md#retry-credits), and the payment identifiers
// of the x402 v2 payment-identifier extension (docs/gate.md#payment-identifier). The
// gate's request flow decides when each is taken, granted or ended.
package credit

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/big"

	"github.com/x402gate/x402gate/x402"
)

// Key names the record of a payment: its x402.PaymentKey, hashed.
func Key(req *x402.Requirements, p *x402.Payment) string {
	sum := sha256.Sum256([]byte(x402.KeyOf(p, req).String()))
	return "pay:" + hex.EncodeToString(sum[:])
}

// Binding names the request that pays: the resource URL, the method and the request
// URI (path and query). A payment made by GET /r?a=1 is not served on POST /r or GET
// /r?a=2.
func Binding(resource, method, requestURI string) []byte {
	sum := sha256.Sum256([]byte(resource + "\n" + method + " " + requestURI))
	return sum[:]
}

// Fingerprint identifies a payment payload: what it pays (x402.PaymentKey), its
// time window and its signature. The same header sent again has the same fingerprint.
func Fingerprint(p *x402.Payment, req *x402.Requirements) []byte {
	a := p.Authorization
	sum := sha256.Sum256([]byte(x402.KeyOf(p, req).String() + "\n" + bigString(a.ValidAfter) + "\n" +
		bigString(a.ValidBefore) + "\n" + hex.EncodeToString(p.Signature)))
	return sum[:]
}

// NewOwner names one attempt: the owner of the lease it takes.
func NewOwner() (string, error) {
	raw := make([]byte, 16)
	if _, err := rand.Read(raw); err != nil {
		return "", fmt.Errorf("lease owner: %w", err)
	}
	return hex.EncodeToString(raw), nil
}

// bigString renders an amount; nil is "0".
func bigString(n *big.Int) string {
	if n == nil {
		return "0"
	}
	return n.String()
}
