package verdictserver

import (
	"encoding/json"
	"errors"
	"math/big"
	"net/http"

	"github.com/ethereum/go-ethereum/common"

	"github.com/x402gate/x402gate/verdict"
	"github.com/x402gate/x402gate/x402"
)

// FeeSchedule prices the verification fee of a merchant payment for POST /pricing/quote
// (docs/verdict-api.md#pricing): either a flat fee, or basis points of the merchant
// amount with a minimum, paid in Asset to PayTo on Network.
type FeeSchedule struct {
	// Network is the CAIP-2 id or v1 name of the network fees are paid on; a resource on
	// any other network has no fee. Required.
	Network string
	// Asset is the fee token's contract. Required.
	Asset common.Address
	// PayTo receives the fee. Required; a resource paying PayTo itself has no fee.
	PayTo common.Address
	// Flat is the fee in Asset's base units. Exactly one of Flat and BPS is set.
	Flat *big.Int
	// BPS is the fee in basis points (1/10000) of the merchant amount, rounded up; it
	// applies only to resources paid in Asset.
	BPS int64
	// Min is the smallest fee with BPS, in base units. Default: none.
	Min *big.Int
	// MaxTimeoutSeconds is the fee requirement's maxTimeoutSeconds. Default: the
	// resource's.
	MaxTimeoutSeconds int
	// Extra is the fee requirement's extra, e.g. the EIP-712 domain {"name", "version"}
	// of Asset, which v2 facilitators need. Default: the network's USDC domain when
	// Asset is that USDC.
	Extra map[string]any
	// Registry resolves networks. Default: the built-in networks (Base, Base Sepolia).
	Registry *x402.Registry
}

// validate checks f and fills its defaults.
func (f *FeeSchedule) validate() error {
	if f.Registry == nil {
		f.Registry = x402.NewRegistry()
	}
	n, ok := f.Registry.Lookup(f.Network)
	switch {
	case f.Network == "" || !ok:
		return errors.New("fees: network is required and must be a known network")
	case f.Asset == (common.Address{}):
		return errors.New("fees: asset is required")
	case f.PayTo == (common.Address{}):
		return errors.New("fees: payTo is required")
	case (f.Flat != nil) == (f.BPS != 0):
		return errors.New("fees: set exactly one of a flat fee and basis points")
	case f.Flat != nil && f.Flat.Sign() <= 0:
		return errors.New("fees: the flat fee must be positive")
	case f.BPS < 0 || f.BPS > 10_000:
		return errors.New("fees: basis points must be 1 to 10000")
	case f.Min != nil && f.Min.Sign() < 0:
		return errors.New("fees: the minimum must not be negative")
	case f.MaxTimeoutSeconds < 0:
		return errors.New("fees: maxTimeoutSeconds must not be negative")
	}
	f.Network = n.CAIP2
	if f.Extra == nil && f.Asset == n.USDC.Address && n.USDC.Name != "" {
		f.Extra = map[string]any{"name": n.USDC.Name, "version": n.USDC.Version}
	}
	return nil
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
	timeout := f.MaxTimeoutSeconds
	if timeout == 0 {
		timeout = merchant.MaxTimeoutSeconds
	}
	return &x402.Requirements{
		Scheme: "exact", Network: f.Network, Amount: amount, Asset: f.Asset, PayTo: f.PayTo,
		MaxTimeoutSeconds: timeout, Extra: f.Extra,
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
	var reg *x402.Registry
	if s.fees != nil {
		reg = s.fees.Registry
	}
	merchant, err := x402.DecodeRequirementsJSON(raw, version, reg)
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
		if out, err = fee.V1(reg); err != nil {
			writeCode(w, codeInternal, "fee network has no v1 name")
			return
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"requirements": out})
}
