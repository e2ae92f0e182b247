package facilitator

import (
	"fmt"
	"math/big"
	"strings"

	"github.com/ethereum/go-ethereum/common"
)

// PaymentKey identifies exactly one payment: the spec's "exact payer, payee, amount, asset,
// network and signed nonce" (spec §3, gateway approval record). Two keys are equal only when
// every field is; addresses are compared as 20-byte values, so case never matters.
type PaymentKey struct {
	Network string // CAIP-2
	Asset   common.Address
	Payer   common.Address
	PayTo   common.Address
	Amount  *big.Int
	Nonce   [32]byte
}

// String is the canonical, lower-case form of k, used as a Redis key suffix and a
// journal column. It carries no secret.
func (k PaymentKey) String() string {
	amount := "0"
	if k.Amount != nil {
		amount = k.Amount.String()
	}
	return strings.ToLower(fmt.Sprintf("%s:%s:%s:%s:%s:0x%x",
		k.Network, k.Asset.Hex(), k.Payer.Hex(), k.PayTo.Hex(), amount, k.Nonce[:]))
}

// AuthorizationKey identifies one EIP-3009 authorization on chain, whatever it pays:
// the token contract enforces single use per (asset, payer, nonce).
func (k PaymentKey) AuthorizationKey() string {
	return strings.ToLower(fmt.Sprintf("%s:%s:%s:0x%x", k.Network, k.Asset.Hex(), k.Payer.Hex(), k.Nonce[:]))
}
