package verdictclient

import (
	"math/big"
	"strings"
	"unicode/utf8"

	"github.com/x402gate/x402gate/verdict"
	"github.com/x402gate/x402gate/x402"
)

// maxPromptBytes bounds an arbiterUserPrompt override.
const maxPromptBytes = 2000

// DefaultPrompt derives the prompt from a payment action, e.g.
// "Pay 0.01 USDC to 0x… for https://…". The amount is shown in whole tokens when the
// asset is the registered USDC of the action's chain (reg may be nil for the built-in
// networks), and in base units of the token address otherwise.
func DefaultPrompt(a verdict.PaymentAction, reg *x402.Registry) string {
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

// promptFor chooses the prompt: the caller's override when allowed and present (docs/verdict.md#paymentaction),
// else the derived one.
func promptFor(a verdict.PaymentAction, override string, allow bool, reg *x402.Registry) (string, error) {
	o := strings.TrimSpace(override)
	if !allow || o == "" {
		return DefaultPrompt(a, reg), nil
	}
	if len(o) > maxPromptBytes || !utf8.ValidString(o) {
		return "", &verdict.InputError{Field: "arbiterUserPrompt", Problem: "must be valid utf-8 of at most 2000 bytes"}
	}
	return o, nil
}

// PromptFromPayment returns the unsigned arbiterUserPrompt a payer may attach to an x402
// v2 payload as extensions.guardian.arbiterUserPrompt, or "". It is used only when
// GuardianOptions.AllowPromptOverride is set: the text is not covered by the payment
// signature, so anyone relaying the payload can change it.
func PromptFromPayment(p *x402.Payment) string {
	if p == nil {
		return ""
	}
	g, _ := p.Extensions["guardian"].(map[string]any)
	s, _ := g["arbiterUserPrompt"].(string)
	return s
}
