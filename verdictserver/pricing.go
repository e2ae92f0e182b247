package verdictserver

import (
	"encoding/json"
	"math/big"
	"net/http"

	"github.com/ethereum/go-ethereum/common"

	"github.com/x402gate/x402gate/verdict"
	"github.com/x402gate/x402gate/x402"
)

// FeeSchedule prices the verification fee of a merchant payment for POST /pricing/quote
// (docs/verdict-api.md#pricing): either a flat fee, or basis points of the merchant
// amount with a minimum, paid in Asset to PayTo on Network. Config.FeeSchedule builds it
// from the config's fee, whose rules FeeConfig.Validate holds.
type FeeSchedule struct {
	// Network is the CAIP-2 id of the network fees are paid on; a resource on any other
	// network has no fee.
	Network string
	// Asset is the fee token's contract.
	Asset common.Address
	// PayTo receives the fee; a resource paying PayTo itself has no fee.
	PayTo common.Address
	// Flat is the fee in Asset's base units, positive; nil with BPS.
	Flat *big.Int
	// BPS is the fee in basis points (1/10000) of the merchant amount, rounded up; it
	// applies only to resources paid in Asset. Zero with Flat.
	BPS int64
	// Min is the smallest fee with BPS, in base units, or nil.
	Min *big.Int
	// Extra is the fee requirement's extra: the EIP-712 domain {"name", "version"} of the
	// network's USDC when Asset is that USDC, which v2 facilitators need; else nil.
	Extra map[string]any
}

// Quote returns the fee requirement for a merchant requirement, nil when no fee applies:
// another network, a merchant paid to the fee payee, a basis-point fee on another asset,
// or a fee of zero.
func (f *FeeSchedule) Quote(merchant *x402.Requirements) *x402.Requirements {
	if f == nil || merchant == nil || merchant.Network != f.Network || merchant.PayTo == f.PayTo {
		return nil
	}
	var amount *big.Int
	if f.Flat != nil {
		amount = new(big.Int).Set(f.Flat)
	} else {
		if merchant.Asset != f.Asset || merchant.Amount == nil {
			return nil
		}
		amount = new(big.Int).Mul(merchant.Amount, big.NewInt(f.BPS))
		amount.Add(amount, big.NewInt(9_999)).Quo(amount, big.NewInt(10_000))
		if f.Min != nil && amount.Cmp(f.Min) < 0 {
			amount.Set(f.Min)
		}
	}
	if amount.Sign() <= 0 {
		return nil
	}
	return &x402.Requirements{
		Scheme: "exact", Network: f.Network, Amount: amount, Asset: f.Asset, PayTo: f.PayTo,
		MaxTimeoutSeconds: merchant.MaxTimeoutSeconds, Extra: f.Extra,
		Resource: x402.ResourceInfo{URL: merchant.Resource.URL, Description: "verification fee", MimeType: "application/json"},
	}
}

// serveQuote answers POST /pricing/quote: {resource: PaymentRequirements} in, and
// {requirements: PaymentRequirements or null} out, in the resource's x402 version
// (docs/verdict-api.md#pricing).
func (s *Server) serveQuote(w http.ResponseWriter, r *http.Request, _ *principal) {
	body, ok := s.readBody(w, r)
	if !ok {
		return
	}
	tree, err := verdict.ParseJSON(body)
	if err != nil {
		writeFieldError(w, &fieldError{code: codeMalformedJSON, message: "body is not valid json: " + err.Error()})
		return
	}
	obj, _ := tree.(map[string]any)
	res, ok := obj["resource"].(map[string]any)
	if !ok {
		writeFieldError(w, badField("resource", "is required and must be a payment requirements object"))
		return
	}
	for k := range obj {
		if k != "resource" {
			writeFieldError(w, &fieldError{code: codeUnknownField, field: k, message: "unknown field"})
			return
		}
	}
	version := x402.Version2
	if _, v1 := res["maxAmountRequired"]; v1 {
		version = x402.Version1
	}
	raw, _ := json.Marshal(res)
	merchant, err := x402.DecodeRequirementsJSON(raw, version, nil)
	if err != nil {
		writeFieldError(w, badField("resource", "is not valid payment requirements: "+err.Error()))
		return
	}
	fee := s.fees.Quote(merchant)
	if fee == nil {
		writeJSON(w, http.StatusOK, map[string]any{"requirements": nil})
		return
	}
	var out any = fee.V2()
	if version == x402.Version1 {
		if out, err = fee.V1(nil); err != nil {
			writeCode(w, codeInternal, "fee network has no v1 name")
			return
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"requirements": out})
}
