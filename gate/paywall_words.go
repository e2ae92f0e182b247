package gate

import (
	"github.com/x402gate/x402gate/x402"
)

// paywallWords says each reason code the paywall can meet (a refused payment's, a refused
// sign-in's) in plain words, for a person
// who is paying (docs/gate.md#paywall). {asset}, {network} and {price} stand for the
// chosen way to pay. The page shows a verdict's own reason before these words, and the
// server's message, then the code, for a code not listed here.
var paywallWords = map[string]string{
	string(x402.ReasonInsufficientFunds):     "There is not enough {asset} on {network} in this wallet to pay {price}.",
	string(x402.ReasonVerdictNotApproved):    "The site's spending policy refused this payment.",
	string(x402.ReasonApprovalNotFound):      "The site's spending policy has no approval for this payment. Pay again.",
	string(x402.ReasonApprovalStoreDown):     "The site's spending policy cannot be checked right now. Nothing was charged; try again in a minute.",
	string(x402.ReasonInvalidSignature):      "The wallet's signature did not check out. Nothing was charged; try again or use another wallet.",
	string(x402.ReasonUndeployedWallet):      "This smart wallet is not deployed on {network} yet, so it cannot pay.",
	string(x402.ReasonFactoryNotAllowed):     "This smart wallet's kind is not accepted here.",
	string(x402.ReasonNetworkMismatch):       "The payment was signed for another network than {network}. Reload the page and pay again.",
	string(x402.ReasonAssetMismatch):         "The payment was signed for another token than {asset}. Reload the page and pay again.",
	string(x402.ReasonAmountBelowMinimum):    "The payment is less than the price, {price}. Reload the page and pay again.",
	string(x402.ReasonValueMismatch):         "The payment's amount is not the price, {price}. Reload the page and pay again.",
	string(x402.ReasonRecipientMismatch):     "The payment names another recipient than this site. Reload the page and pay again.",
	string(x402.ReasonValidBefore):           "The payment's authorization has expired. Nothing was charged; pay again.",
	string(x402.ReasonValidAfter):            "The payment's authorization is not valid yet: check your computer's clock, then pay again.",
	string(x402.ReasonNonceUsed):             "This payment's authorization was used already. Pay again.",
	string(x402.ReasonMissingEIP712Domain):   "The site's token settings lack the token's signing domain; the site must fix its configuration.",
	string(x402.ReasonInvalidVersion):        "This page and the server disagree on the payment's form. Reload the page and pay again.",
	string(x402.ReasonInvalidPayload):        "This page and the server disagree on the payment's form. Reload the page and pay again.",
	string(x402.ReasonInvalidRequirements):   "This page and the server disagree on the payment's form. Reload the page and pay again.",
	string(x402.ReasonInvalidScheme):         "This page and the server disagree on the payment's form. Reload the page and pay again.",
	string(x402.ReasonInvalidNetwork):        "The site does not accept payments on this network. Reload the page and pay again.",
	string(x402.ReasonChainUnavailable):      "{network} cannot be reached right now. Nothing was charged; try again in a minute.",
	string(x402.ReasonDuplicateSettlement):   "This payment was settled already. Pay again to load the page once more.",
	string(x402.ReasonTransactionFailed):     "The transfer failed on {network}, so nothing was charged. Pay again.",
	string(x402.ReasonTransferEventMismatch): "The transfer on {network} did not move what was agreed. Ask the site for help.",
	string(x402.ReasonSettlementPending):     "Your payment was sent on {network} and is not confirmed yet. Wait a minute before paying again.",
	string(x402.ReasonUnexpectedVerify):      "The payment could not be checked right now. Nothing was charged; try again in a minute.",
	string(x402.ReasonUnexpectedSettle):      "The payment could not be completed right now. Wait a minute before paying again.",
	string(ReasonPricingUnavailable):         "The site cannot price its policy check right now. Nothing was charged; try again in a minute.",
	string(ReasonRetryStoreUnavailable):      "The site cannot check this payment right now. Try again in a minute.",
	string(ReasonRetryInProgress):            "This payment is being used by another request right now. Try again in a few seconds.",
	string(ReasonFacilitatorUnavailable):     "The site's payment service is unavailable right now. Nothing was charged; try again in a minute.",
	// Permit2 and metered payments (docs/gate.md#permit2, docs/gate.md#metering).
	string(x402.ReasonPermit2AllowanceRequired):    "This wallet has not approved Permit2 for {asset} yet. Pay again to approve it first.",
	string(x402.ReasonPermit2InsufficientBalance):  "There is not enough {asset} on {network} in this wallet to pay {price}.",
	string(x402.ReasonPermit2InvalidSignature):     "The wallet's signature did not check out. Nothing was charged; try again or use another wallet.",
	string(x402.ReasonPermit2DeadlineExpired):      "The payment's authorization has expired. Nothing was charged; pay again.",
	string(x402.ReasonPermit2NotYetValid):          "The payment's authorization is not valid yet: check your computer's clock, then pay again.",
	string(x402.ReasonPermit2InvalidNonce):         "This payment's authorization was used already. Pay again.",
	string(x402.ReasonPermit2RecipientMismatch):    "The payment names another recipient than this site. Reload the page and pay again.",
	string(x402.ReasonPermit2TokenMismatch):        "The payment was signed for another token than {asset}. Reload the page and pay again.",
	string(x402.ReasonPermit2AmountMismatch):       "The payment's amount is not the price, {price}. Reload the page and pay again.",
	string(x402.ReasonPermit2InvalidSpender):       "This page and the server disagree on the payment's form. Reload the page and pay again.",
	string(x402.ReasonUnsupportedPayloadType):      "This page and the server disagree on the payment's form. Reload the page and pay again.",
	string(x402.ReasonUptoFacilitatorMismatch):     "This page and the server disagree on the payment's form. Reload the page and pay again.",
	string(x402.ReasonUptoSettlementExceedsAmount): "The site asked for more than you allowed, so nothing was charged.",
	string(ReasonCostAboveMaximum):                 "The site asked for more than you allowed, so nothing was charged.",
	string(ReasonInvalidCost):                      "The site could not say what this costs, so nothing was charged. Try again later.",
	// Sign-in-with-x refusals (docs/gate.md#sign-in-with-x).
	string(SIWXNoPass):           "This wallet holds no live pass for this page. Pay to get one.",
	string(SIWXSignature):        "The wallet's sign-in signature did not check out. Sign in again.",
	string(SIWXMalformed):        "The sign-in did not match this page's challenge. Reload the page and sign in again.",
	string(SIWXDomainMismatch):   "The sign-in did not match this page's challenge. Reload the page and sign in again.",
	string(SIWXURIMismatch):      "The sign-in did not match this page's challenge. Reload the page and sign in again.",
	string(SIWXNonce):            "The sign-in did not match this page's challenge. Reload the page and sign in again.",
	string(SIWXChainID):          "The sign-in names another network than this page's. Reload the page and sign in again.",
	string(SIWXIssuedAt):         "The sign-in's time is off: check your computer's clock, then sign in again.",
	string(SIWXInFuture):         "The sign-in's time is off: check your computer's clock, then sign in again.",
	string(SIWXNotYetValid):      "The sign-in's time is off: check your computer's clock, then sign in again.",
	string(SIWXTooOld):           "The sign-in took too long. Sign in again.",
	string(SIWXExpired):          "The sign-in took too long. Sign in again.",
	string(PassStoreUnavailable): "Passes cannot be checked right now. Try again in a minute.",
}
