package gate

import (
	"bytes"
	_ "embed"
	"errors"
	"html/template"
	"strconv"

	"github.com/x402gate/x402gate/x402"
)

// The paywall is one self-contained page: a few lines of CSS and hand-written JavaScript
// that use the browser wallet (EIP-1193 window.ethereum) to sign the EIP-3009
// authorization with eth_signTypedData_v4, then fetch the page again with
// PAYMENT-SIGNATURE and replace the document with the answer, as the reference paywalls
// do (docs/gate.md#paywall). It embeds no wallet bundle. html/template escapes every value,
// and the requirement reaches the script as JSON in a script context.

//go:embed paywall.html
var paywallHTML string

var paywallTmpl = template.Must(template.New("paywall").Parse(paywallHTML))

// paywallView is what the template shows.
type paywallView struct {
	Description string
	Price       string
	Symbol      string
	PayTo       string
	Network     string // v1 name
	NetworkID   string // CAIP-2
	Asset       string
	Resource    string
	// Offers are the ways to pay, shown as a choice when there are several
	// (docs/gate.md#several-ways-to-pay).
	Offers []paywallOffer
	Pass   string // what one payment buys: "24 hours of /premium/"; "" without passes
	Data   paywallData
}

// paywallOffer is one way to pay, as a person reads it.
type paywallOffer struct {
	Index   int
	Label   string
	Network string
	Asset   string
	PayTo   string
}

// paywallData is what the script needs: the v2 PaymentRequired (as in PAYMENT-REQUIRED)
// and the chain id.
type paywallData struct {
	PaymentRequired *x402.PaymentRequiredV2 `json:"paymentRequired"`
	ChainID         int64                   `json:"chainId"`
	ChainIDHex      string                  `json:"chainIdHex"`
	Display         string                  `json:"display"`
	// Displays is the price of each accepts entry, in its order.
	Displays []string `json:"displays"`
	// Reload: a pass came with the payment, so the page is loaded again as a navigation
	// and its stylesheets and images come under the pass.
	Reload bool `json:"reload"`
}

// renderPaywall renders the page of a payment-required result.
func renderPaywall(r *Result) ([]byte, error) {
	req := r.Requirements
	if req == nil || r.challenge == nil {
		return nil, errors.New("paywall: no requirement")
	}
	n, err := chainIDOf(req.Network)
	if err != nil {
		return nil, err
	}
	v := paywallView{
		Description: req.Resource.Description,
		Price:       r.display.price,
		Symbol:      r.display.symbol,
		PayTo:       req.PayTo.Hex(),
		Network:     r.display.network,
		NetworkID:   req.Network,
		Asset:       req.Asset.Hex(),
		Resource:    req.Resource.URL,
		Pass:        r.display.pass,
		Data: paywallData{
			Reload:          r.display.pass != "",
			PaymentRequired: r.challenge,
			ChainID:         n,
			ChainIDHex:      "0x" + strconv.FormatInt(n, 16),
			Display:         r.display.price + " " + r.display.symbol,
		},
	}
	for i, d := range r.displays {
		if i >= len(r.challenge.Accepts) {
			break
		}
		a := r.challenge.Accepts[i]
		label := d.price + " " + d.symbol + " on " + d.network
		v.Offers = append(v.Offers, paywallOffer{Index: i, Label: label, Network: a.Network, Asset: a.Asset, PayTo: a.PayTo})
		v.Data.Displays = append(v.Data.Displays, d.price+" "+d.symbol)
	}
	var b bytes.Buffer
	b.Grow(12 << 10)
	if err := paywallTmpl.Execute(&b, v); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// chainIDOf reads the chain id of a CAIP-2 eip155 network id.
func chainIDOf(caip2 string) (int64, error) {
	const prefix = "eip155:"
	if len(caip2) <= len(prefix) || caip2[:len(prefix)] != prefix {
		return 0, errors.New("paywall: not an eip155 network")
	}
	var n int64
	for _, c := range caip2[len(prefix):] {
		if c < '0' || c > '9' || n > (1<<62)/10 {
			return 0, errors.New("paywall: bad chain id")
		}
		n = n*10 + int64(c-'0')
	}
	return n, nil
}
