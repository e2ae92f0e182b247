package gate

import (
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/x402gate/x402gate/x402"
)

// TestPaywallAnswerIsLockedDown: the paywall asks a wallet to sign, so its answer carries
// a Content-Security-Policy that admits exactly its own inline script and style (by a
// nonce fresh on every page) and no other origin, forbids framing (frame-ancestors 'none',
// X-Frame-Options DENY), and nosniff.
func TestPaywallAnswerIsLockedDown(t *testing.T) {
	env := newTestEnv(t)
	srv := serve(t, env.gate(t, env.config(), Options{}), &upstream{})
	nonceOf := regexp.MustCompile(`'nonce-([A-Za-z0-9_-]{22})'`)
	seen := map[string]bool{}
	for _, path := range []string{"/article", "/article", "/%3Cimg%20src=x%20onerror=alert(1)%3E"} {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		req.Header = browserHeader()
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		page := string(readBody(t, res))
		if res.StatusCode != http.StatusPaymentRequired || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/html") {
			t.Fatalf("%s: %d %q", path, res.StatusCode, res.Header.Get("Content-Type"))
		}
		if got := res.Header.Get("X-Frame-Options"); got != "DENY" {
			t.Errorf("%s: X-Frame-Options %q, want DENY", path, got)
		}
		if got := res.Header.Get("X-Content-Type-Options"); got != "nosniff" {
			t.Errorf("%s: X-Content-Type-Options %q, want nosniff", path, got)
		}
		csp := res.Header.Get("Content-Security-Policy")
		m := nonceOf.FindStringSubmatch(csp)
		if m == nil {
			t.Fatalf("%s: Content-Security-Policy %q has no nonce", path, csp)
		}
		if seen[m[1]] {
			t.Errorf("%s: the nonce %s came twice", path, m[1])
		}
		seen[m[1]] = true
		n := "'nonce-" + m[1] + "'"
		for _, want := range []string{
			"default-src 'none'", "script-src 'self' " + n + ";", "style-src 'self' " + n + ";",
			"frame-ancestors 'none'", "base-uri 'none'", "connect-src 'self'",
		} {
			if !strings.Contains(csp, want) {
				t.Errorf("%s: Content-Security-Policy %q lacks %q", path, csp, want)
			}
		}
		if strings.Contains(csp, "unsafe-") || strings.Contains(csp, "*") || regexp.MustCompile(`https?:`).MatchString(csp) {
			t.Errorf("%s: Content-Security-Policy %q admits more than the page's own code", path, csp)
		}
		for _, el := range []string{"<script ", "<style "} {
			if strings.Count(page, el+`nonce="`+m[1]+`">`) != 1 {
				t.Errorf("%s: the page's %s element does not carry the nonce", path, el)
			}
		}
		if strings.Contains(page, "<img") {
			t.Errorf("%s: the path's markup reached the page as markup", path)
		}
	}
}

// TestPaywallWordsForEveryReason: each reason code the paywall can meet, x402's, the
// gate's own and a refused sign-in's, has plain words for a person, none of which is a code.
func TestPaywallWordsForEveryReason(t *testing.T) {
	reasons := []x402.Reason{
		x402.ReasonInvalidVersion, x402.ReasonInvalidPayload, x402.ReasonInvalidRequirements, x402.ReasonInvalidScheme,
		x402.ReasonInvalidNetwork, x402.ReasonNetworkMismatch, x402.ReasonAssetMismatch, x402.ReasonAmountBelowMinimum,
		x402.ReasonMissingEIP712Domain, x402.ReasonInvalidSignature, x402.ReasonUndeployedWallet, x402.ReasonFactoryNotAllowed,
		x402.ReasonRecipientMismatch, x402.ReasonValidBefore, x402.ReasonValidAfter, x402.ReasonValueMismatch,
		x402.ReasonInsufficientFunds, x402.ReasonNonceUsed, x402.ReasonVerdictNotApproved, x402.ReasonApprovalNotFound,
		x402.ReasonApprovalStoreDown, x402.ReasonChainUnavailable, x402.ReasonDuplicateSettlement, x402.ReasonTransactionFailed,
		x402.ReasonTransferEventMismatch, x402.ReasonSettlementPending, x402.ReasonUnexpectedVerify, x402.ReasonUnexpectedSettle,
		ReasonPricingUnavailable, ReasonRetryStoreUnavailable, ReasonRetryInProgress, ReasonFacilitatorUnavailable,
		x402.ReasonPermit2AllowanceRequired, x402.ReasonPermit2InsufficientBalance, x402.ReasonPermit2InvalidSignature,
		x402.ReasonPermit2DeadlineExpired, x402.ReasonPermit2NotYetValid, x402.ReasonPermit2InvalidNonce,
		x402.ReasonPermit2RecipientMismatch, x402.ReasonPermit2TokenMismatch, x402.ReasonPermit2AmountMismatch,
		x402.ReasonPermit2InvalidSpender, x402.ReasonUnsupportedPayloadType, x402.ReasonUptoFacilitatorMismatch,
		x402.ReasonUptoSettlementExceedsAmount, ReasonCostAboveMaximum, ReasonInvalidCost,
	}
	for _, r := range []PassRefusal{
		SIWXNoPass, SIWXSignature, SIWXMalformed, SIWXDomainMismatch, SIWXURIMismatch, SIWXNonce, SIWXChainID,
		SIWXIssuedAt, SIWXInFuture, SIWXNotYetValid, SIWXTooOld, SIWXExpired, PassStoreUnavailable,
	} {
		reasons = append(reasons, x402.Reason(r))
	}
	code := regexp.MustCompile(`[a-z0-9]+_[a-z0-9_]+`)
	for _, r := range reasons {
		w := paywallWords[string(r)]
		if w == "" {
			t.Errorf("%s has no words", r)
			continue
		}
		if code.MatchString(w) || !strings.HasSuffix(w, ".") {
			t.Errorf("%s: %q is not a plain sentence", r, w)
		}
	}
	if len(paywallWords) != len(reasons) {
		t.Errorf("%d words for %d reasons", len(paywallWords), len(reasons))
	}
	if w := paywallWords[string(x402.ReasonInsufficientFunds)]; !strings.Contains(w, "not enough {asset} on {network}") {
		t.Errorf("an empty wallet reads %q", w)
	}
}
