package verdictclient

import (
	"math/big"
	"strings"
	"unicode/utf8"

	"github.com/ethereum/go-ethereum/common"
	"github.com/x402gate/x402gate/x402"
)

// PaymentAction is the proposedTx of an x402 payment (spec §2.5). It is built by copying
// fields, not by a canonical decode: the verdict is about where the signed authorization
// sends money, which token and how much.
type PaymentAction struct {
	// Protocol is always "payment" (a preview value, spec §9.5).
	Protocol string `json:"protocol"`
	// Rail is always "x402".
	Rail string `json:"rail"`
	// ChainID is 8453 (Base) or 84532 (Base Sepolia), from the requirements' network.
	ChainID int64 `json:"chainId"`
	// PayTo is the authorization's "to", EIP-55 checksummed.
	PayTo string `json:"payTo"`
	// Asset is the requirements' token contract, EIP-55 checksummed.
	Asset string `json:"asset"`
	// Amount is the authorization's value in token base units, as a decimal string.
	Amount string `json:"amount"`
	// Resource is the paid resource's URL, omitted when unknown.
	Resource string `json:"resource,omitempty"`
}

// Payment action constants (spec §2.5).
const (
	ProtocolPayment = "payment"
	RailX402        = "x402"
)

// chainIDs maps the networks a PaymentAction may name, in CAIP-2 and v1 spelling, to
// their chain ids (spec §2.5: 8453 or 84532).
var chainIDs = map[string]int64{
	x402.Base.CAIP2: 8453, x402.Base.Name: 8453,
	x402.BaseSepolia.CAIP2: 84532, x402.BaseSepolia.Name: 84532,
}

// NewPaymentAction copies a normalised payment and its requirements into a PaymentAction
// (spec §2.5) and also returns the escrow address, which is authorization.from (spec
// §4.3 verifyPayment). Every problem is an *InputError.
func NewPaymentAction(p *x402.Payment, r *x402.Requirements) (PaymentAction, common.Address, error) {
	var zero common.Address
	if p == nil {
		return PaymentAction{}, zero, &InputError{Field: "paymentPayload", Problem: "is required"}
	}
	if r == nil {
		return PaymentAction{}, zero, &InputError{Field: "paymentRequirements", Problem: "is required"}
	}
	chainID, ok := chainIDs[r.Network]
	if !ok {
		return PaymentAction{}, zero, &InputError{Field: "paymentRequirements.network", Problem: "must be eip155:8453 or eip155:84532"}
	}
	if p.Network != "" {
		if pc, ok := chainIDs[p.Network]; !ok || pc != chainID {
			return PaymentAction{}, zero, &InputError{Field: "paymentPayload.network", Problem: "does not match the requirements' network"}
		}
	}
	a := p.Authorization
	switch {
	case a.From == zero:
		return PaymentAction{}, zero, &InputError{Field: "paymentPayload.payload.authorization.from", Problem: "is required"}
	case a.To == zero:
		return PaymentAction{}, zero, &InputError{Field: "paymentPayload.payload.authorization.to", Problem: "is required"}
	case a.Value == nil || a.Value.Sign() <= 0:
		return PaymentAction{}, zero, &InputError{Field: "paymentPayload.payload.authorization.value", Problem: "must be a positive integer"}
	case r.Asset == zero:
		return PaymentAction{}, zero, &InputError{Field: "paymentRequirements.asset", Problem: "is required"}
	}
	act := PaymentAction{
		Protocol: ProtocolPayment,
		Rail:     RailX402,
		ChainID:  chainID,
		PayTo:    a.To.Hex(),
		Asset:    r.Asset.Hex(),
		Amount:   a.Value.String(),
		Resource: r.Resource.URL,
	}
	if act.Resource == "" && p.Resource != nil {
		act.Resource = p.Resource.URL // v2 carries the resource beside the requirements
	}
	return act, a.From, nil
}

// maxPromptBytes bounds an arbiterUserPrompt override.
const maxPromptBytes = 2000

// DefaultPrompt derives the prompt from a payment action, e.g.
// "Pay 0.01 USDC to 0x… for https://…". The amount is shown in whole tokens when the
// asset is the registered USDC of the action's chain (reg may be nil for the built-in
// networks), and in base units of the token address otherwise.
func DefaultPrompt(a PaymentAction, reg *x402.Registry) string {
	if reg == nil {
		reg = defaultRegistry
	}
	amount := a.Amount + " base units of token " + a.Asset
	if n, ok := reg.Lookup(big.NewInt(a.ChainID).String()); ok && strings.EqualFold(n.USDC.Address.Hex(), a.Asset) {
		if v, ok := new(big.Int).SetString(a.Amount, 10); ok {
			sym := n.USDC.Symbol
			if sym == "" {
				sym = n.USDC.Name
			}
			amount = formatUnits(v, n.USDC.Decimals) + " " + sym
		}
	}
	s := "Pay " + amount + " to " + a.PayTo
	if a.Resource != "" {
		s += " for " + a.Resource
	}
	return s
}

var defaultRegistry = x402.NewRegistry()

// formatUnits renders v / 10^dec without trailing zeros: 10000, 6 -> "0.01".
func formatUnits(v *big.Int, dec int) string {
	s := v.String()
	if dec <= 0 {
		return s
	}
	if len(s) <= dec {
		s = strings.Repeat("0", dec-len(s)+1) + s
	}
	whole, frac := s[:len(s)-dec], strings.TrimRight(s[len(s)-dec:], "0")
	if frac == "" {
		return whole
	}
	return whole + "." + frac
}

// promptFor chooses the prompt: the caller's override when allowed and present (spec
// §2.5 allowPromptOverride), else the derived one.
func promptFor(a PaymentAction, override string, allow bool, reg *x402.Registry) (string, error) {
	o := strings.TrimSpace(override)
	if !allow || o == "" {
		return DefaultPrompt(a, reg), nil
	}
	if len(o) > maxPromptBytes || !utf8.ValidString(o) {
		return "", &InputError{Field: "arbiterUserPrompt", Problem: "must be valid utf-8 of at most 2000 bytes"}
	}
	return o, nil
}

// PromptFromPayment returns the unsigned arbiterUserPrompt a payer may attach to an x402
// v2 payload as extensions.guardian.arbiterUserPrompt, or "". It is used only when
// GuardianConfig.AllowPromptOverride is set: the text is not covered by the payment
// signature, so anyone relaying the payload can change it.
func PromptFromPayment(p *x402.Payment) string {
	if p == nil {
		return ""
	}
	g, _ := p.Extensions["guardian"].(map[string]any)
	s, _ := g["arbiterUserPrompt"].(string)
	return s
}
