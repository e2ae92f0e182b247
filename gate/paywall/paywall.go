// Package paywall renders the browser paywall (docs/gate.md#paywall): the page a browser
// gets with a 402, which asks the person's wallet to sign the payment and fetches the
// page again with it. It has no state and no I/O; the gate decides when a 402 goes to a
// browser and hands it a Page.
package paywall

import (
	"bytes"
	"crypto/rand"
	_ "embed"
	"encoding/base64"
	"errors"
	"html/template"
	"net/http"

	"github.com/x402gate/x402gate/x402"
)

// The paywall is one self-contained page: a few lines of CSS and hand-written JavaScript
// that use the browser wallet (EIP-1193 window.ethereum) to sign the EIP-3009
// authorization, or the Permit2 PermitWitnessTransferFrom (after the one-time ERC-20
// approval of Permit2 when the wallet lacks it), with eth_signTypedData_v4, then fetch the page again with
// PAYMENT-SIGNATURE and replace the document with the answer, as the reference paywalls
// do (docs/gate.md#paywall). It embeds no wallet bundle. html/template escapes every value,
// and the requirement reaches the script as JSON in a data block.

//go:embed paywall.html
var paywallHTML string

var paywallTmpl = template.Must(template.New("paywall").Parse(paywallHTML))

// csp is the paywall's Content-Security-Policy: its own inline script and style by
// a nonce fresh on every page, and nothing from another origin. The page asks a wallet to
// sign, so no page may frame it. Without a pass the paid answer replaces the page in place
// and keeps this policy, so same-origin files stay allowed and the script hands the nonce
// to the answer's own script and style elements (docs/gate.md#paywall).
func csp(nonce string) string {
	n := "'nonce-" + nonce + "'"
	return "default-src 'none'; script-src 'self' " + n + "; style-src 'self' " + n +
		"; img-src 'self' data:; font-src 'self'; media-src 'self'; connect-src 'self'" +
		"; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
}

// newNonce is a CSP nonce: 128 random bits, base64url, which no escaping changes.
func newNonce() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// SetHeaders sets the security headers of the paywall page: its Content-Security-Policy
// (Render's), and X-Frame-Options and nosniff for browsers that predate frame-ancestors.
func SetHeaders(h http.Header, csp string) {
	h.Set("Content-Security-Policy", csp)
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
}

// paywallView is what the template shows.
type paywallView struct {
	Description string
	Price       string
	Symbol      string
	UpTo        bool // the first way meters: its price is a maximum (docs/gate.md#metering)
	PayTo       string
	Network     string // v1 name
	NetworkID   string // CAIP-2
	Asset       string
	Resource    string
	// Offers are the ways to pay, shown as a choice when there are several
	// (docs/gate.md#several-ways-to-pay).
	Offers []paywallOffer
	Pass   string // what one payment buys: "every page under /premium/ for 24 hours"; "" without passes
	Nonce  string // the CSP nonce of the page's script and style
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

// paywallData is what the script needs: the v2 PaymentRequired (as in PAYMENT-REQUIRED),
// each way to pay as a person reads it, and the words of the reasons.
type paywallData struct {
	PaymentRequired *x402.PaymentRequiredV2 `json:"paymentRequired"`
	// Ways are the accepts entries as a person reads them, in their order.
	Ways []paywallWay `json:"ways"`
	// Words are the plain words of each reason code (Page.Words).
	Words map[string]string `json:"words"`
	// Reload: a pass came with the payment, so the page is loaded again as a navigation
	// and its stylesheets and images come under the pass.
	Reload bool `json:"reload"`
	// Permit2 are the canonical contracts a Permit2 payment names (docs/gate.md#permit2).
	Permit2 permit2Contracts `json:"permit2"`
}

// permit2Contracts are Permit2 and the x402 proxies that spend through it.
type permit2Contracts struct {
	Address    string `json:"address"`
	ExactProxy string `json:"exactProxy"`
	UptoProxy  string `json:"uptoProxy"`
}

// canonicalPermit2 are the canonical addresses, as every chain x402 pays on has them.
var canonicalPermit2 = permit2Contracts{Address: x402.Permit2Address.Hex(),
	ExactProxy: x402.ExactPermit2ProxyAddress.Hex(), UptoProxy: x402.UptoPermit2ProxyAddress.Hex()}

// paywallWay is one accepts entry for the script: its price, token and network names,
// and how to add its chain to a wallet (nil when the page knows no RPC endpoint for it).
type paywallWay struct {
	Price    string    `json:"price"`
	Asset    string    `json:"asset"`
	Network  string    `json:"network"`
	ChainID  int64     `json:"chainId"`
	AddChain *addChain `json:"addChain"`
}

// Page is what one paywall page shows.
type Page struct {
	// Requirement is the first way to pay; Challenge is the v2 PaymentRequired of the 402
	// (as in its PAYMENT-REQUIRED header), whose accepts the page offers. Required.
	Requirement *x402.Requirements
	Challenge   *x402.PaymentRequiredV2
	// Ways say each accepts entry of Challenge as a person reads it, in its order.
	// Required: one at least.
	Ways []Way
	// Pass is what one payment buys with passes on, as the gate describes it ("24 hours
	// of /premium/"); empty without passes.
	Pass string
	// Words are the plain words of each reason code the page may meet, by code; {asset},
	// {network} and {price} in them stand for the chosen way to pay.
	Words map[string]string
}

// Way is one way to pay as a person reads it.
type Way struct {
	Price   string // "0.01"
	Symbol  string // "USDC", or "base units"
	Network string // the network's v1 name, "base-sepolia"
}

// Render renders p and returns the page and its Content-Security-Policy, for SetHeaders.
func Render(p Page) (page []byte, policy string, err error) {
	req := p.Requirement
	if req == nil || p.Challenge == nil || len(p.Ways) == 0 {
		return nil, "", errors.New("paywall: no requirement")
	}
	nonce, err := newNonce()
	if err != nil {
		return nil, "", err
	}
	first := p.Ways[0]
	v := paywallView{
		Nonce:       nonce,
		Description: req.Resource.Description,
		Price:       first.Price,
		Symbol:      first.Symbol,
		PayTo:       req.PayTo.Hex(),
		Network:     first.Network,
		NetworkID:   req.Network,
		Asset:       req.Asset.Hex(),
		Resource:    req.Resource.URL,
		Data: paywallData{
			Reload:          p.Pass != "",
			PaymentRequired: p.Challenge,
			Words:           p.Words,
			Permit2:         canonicalPermit2,
		},
	}
	if p.Pass != "" {
		v.Pass = passWords(p.Pass)
	}
	for i, d := range p.Ways {
		if i >= len(p.Challenge.Accepts) {
			break
		}
		a := p.Challenge.Accepts[i]
		n, err := chainIDOf(a.Network)
		if err != nil {
			return nil, "", err
		}
		price := d.Price + " " + d.Symbol
		if a.Scheme == x402.SchemeUpto {
			price = "up to " + price
			v.UpTo = v.UpTo || i == 0
		}
		v.Offers = append(v.Offers, paywallOffer{Index: i, Label: price + " on " + d.Network, Network: a.Network, Asset: a.Asset, PayTo: a.PayTo})
		v.Data.Ways = append(v.Data.Ways, paywallWay{
			Price: price, Asset: d.Symbol, Network: d.Network, ChainID: n, AddChain: chainToAdd(n),
		})
	}
	var b bytes.Buffer
	b.Grow(12 << 10)
	if err := paywallTmpl.Execute(&b, v); err != nil {
		return nil, "", err
	}
	return b.Bytes(), csp(nonce), nil
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
