package paywall

import (
	"math/big"
	"strings"
	"testing"

	"github.com/ethereum/go-ethereum/common"

	"github.com/x402gate/x402gate/x402"
)

func testPage() Page {
	req := &x402.Requirements{
		Scheme: x402.SchemeExact, Network: x402.BaseSepolia.CAIP2, Amount: big.NewInt(10_000),
		Asset: x402.BaseSepolia.USDC.Address, PayTo: common.HexToAddress("0x209693Bc6afc0C5328bA36FaF03C514EF312287C"),
		MaxTimeoutSeconds: 60, Extra: map[string]any{"name": "USDC", "version": "2"},
		Resource: x402.ResourceInfo{URL: "https://a.example/premium", Description: `<img src=x onerror=alert(1)>`},
	}
	return Page{
		Requirement: req,
		Challenge:   &x402.PaymentRequiredV2{X402Version: 2, Accepts: []x402.RequirementsV2{req.V2()}},
		Ways:        []Way{{Price: "0.01", Symbol: "USDC", Network: "base-sepolia"}},
		Words:       map[string]string{"insufficient_funds": "There is not enough {asset}."},
	}
}

// TestRenderLocksThePageDown: each page has a fresh CSP nonce that its one script and one
// style carry, the requirement's text reaches it escaped, and a pass is said in words.
func TestRenderLocksThePageDown(t *testing.T) {
	p := testPage()
	page, policy, err := Render(p)
	if err != nil {
		t.Fatal(err)
	}
	_, again, err := Render(p)
	if err != nil {
		t.Fatal(err)
	}
	nonce := strings.TrimSuffix(strings.SplitN(strings.SplitN(policy, "'nonce-", 2)[1], "'", 2)[0], "'")
	if policy == again || nonce == "" {
		t.Errorf("two pages share the policy %q", policy)
	}
	for _, el := range []string{"<script ", "<style "} {
		if strings.Count(string(page), el+`nonce="`+nonce+`">`) != 1 {
			t.Errorf("the page's %s element does not carry the nonce %s", el, nonce)
		}
	}
	if strings.Contains(string(page), "<img") || !strings.Contains(string(page), "0.01 USDC") {
		t.Errorf("the page shows the description as markup, or not the price")
	}
	p.Pass = "24 hours of /premium/"
	page, _, err = Render(p)
	if err != nil || !strings.Contains(string(page), "every page under /premium/ for 24 hours") {
		t.Errorf("a pass is not said in words: %v", err)
	}
	if _, _, err := Render(Page{}); err == nil {
		t.Error("a page without a requirement rendered")
	}
}

// TestRenderSaysUpToForMeteredWays: a way to pay in the upto scheme shows its price as a
// maximum, on the page and in the choice, and says the cost is known after the answer;
// an exact way shows its price as it is. The script gets the canonical Permit2 contracts.
func TestRenderSaysUpToForMeteredWays(t *testing.T) {
	p := testPage()
	exact := p.Challenge.Accepts[0]
	upto := exact
	upto.Scheme = x402.SchemeUpto
	p.Challenge.Accepts = []x402.RequirementsV2{upto, exact}
	p.Ways = append(p.Ways, Way{Price: "0.02", Symbol: "USDC", Network: "base-sepolia"})
	page, _, err := Render(p)
	if err != nil {
		t.Fatal(err)
	}
	s := string(page)
	for _, want := range []string{`id="price">up to 0.01 USDC<`, `id="metered"`, ">up to 0.01 USDC on base-sepolia<", ">0.02 USDC on base-sepolia<",
		`"price":"up to 0.01 USDC"`, x402.Permit2Address.Hex(), x402.ExactPermit2ProxyAddress.Hex(), x402.UptoPermit2ProxyAddress.Hex()} {
		if !strings.Contains(s, want) {
			t.Errorf("the page lacks %s", want)
		}
	}
	page, _, err = Render(testPage())
	if err != nil || strings.Contains(string(page), "up to") || strings.Contains(string(page), `id="metered"`) {
		t.Errorf("an exact page speaks of a maximum (%v)", err)
	}
}
