// Package verdictclient is the client of the policy verdict service: it submits a
// proposed action, waits for the verdict, validates it strictly, and fails closed in
// every case that is not a clean approval. The facilitator and the resource gate use it,
// and so can any Go agent that wants a verdict before it executes an action.
//
// The service is advisory. It never signs or submits anything; the caller runs the
// action itself, and only when the verdict's outcome is "approved".
//
// # Quick start
//
// The examples run against a local stand-in for the service:
//   - ExampleGuardian_VerifyPayment checks an x402 payment, as a facilitator does before
//     it records an approval;
//   - ExampleWithGuardian wraps an existing x402 verifier, so that a valid payment stays
//     valid only when the verdict approves it (also Guardian.Wrap);
//   - ExampleClient_Await submits any other action with the low-level Client and waits
//     for its verdict;
//   - ExampleGuardian_VerifyPayment_unreachable shows a service that cannot be reached
//     refusing the payment.
//
// # Failing closed
//
// Only a *Verdict with Outcome approved, from Await or Status, is an approval. Everything
// else is not, and the API makes that hard to get wrong: Verdict.Approved is false for a
// nil verdict, and GuardianResult.Approved is false unless a terminal verdict approved.
// These all end as "not approved":
//
//   - a verdict still pending (or missing) when the polling bound is used up: Await
//     returns *PollBoundError with Last nil; GuardianResult status "timeout";
//   - the caller's context deadline: status "timeout"; cancellation: "error";
//   - a rejected verdict: status "rejected", with the verdict attached;
//   - malformed JSON, an unknown outcome, inconsistent fields (see Validation): a
//     *verdict.ValidationError naming the requestHash and the field; status "error";
//   - a service that stays unavailable (429, 5xx or network failures on every attempt):
//     *PollBoundError with Last set; status "error";
//   - 400, 401, 403, 404: a *StatusError at once, no retry (docs/verdict.md#fail-closed); status "error";
//   - a redirect, an answer over MaxResponseBytes, or a success without a JSON content
//     type: an error at once; status "error".
//
// Error messages never quote the service's text or the API key; they name the
// operation, the HTTP status or broken rule, and the requestHash (or trace id).
//
// # HTTP status handling (docs/verdict.md#fail-closed)
//
//	status   Submit (POST)                         Status / Await (GET)
//	200      uncertain (201 expected)              validate envelope and verdict; poll on missing/null/pending
//	201      validate, keep requestHash            —
//	3xx      uncertain (redirect refused)          stop: ErrRedirect
//	400      stop: ErrBadRequest                   stop: ErrBadRequest
//	401      stop: ErrUnauthorized                 stop: ErrUnauthorized
//	403      stop: ErrForbidden                    stop: ErrForbidden
//	404      stop: ErrNotFound                     stop: ErrNotFound
//	409      stop: ErrConflict (trace id exists)   stop: ErrConflict
//	429      uncertain, reconcile                  retry within the bound (Retry-After honoured up to MaxDelay)
//	5xx      uncertain, reconcile                  retry within the bound
//	network  uncertain, reconcile                  retry within the bound
//
// # Submits are never repeated; reconcile instead
//
// POST /transactions has no idempotency key (docs/verdict.md#fail-closed 4), so Submit sends once and
// never retries. When the outcome is unknown (429, 5xx, a network failure, the context
// ending mid-request, an unreadable 201) it returns *UncertainSubmitError. To make that
// recoverable, every submit carries a client-chosen trace id in metadata.traceId
// (SubmitRequest.TraceID, default 128 random bits; metadata is for "trace identifiers",
// docs/verdict.md#envelope, and the id is not a secret). To reconcile:
//
//  1. Call Client.Reconcile(ctx, traceID). It reads GET /transactions?traceId=… with the
//     same key and expects {"transactions": [...]}, the caller's transactions with that
//     trace id. Reads are safe to retry; Guardian.Verify retries this one within its
//     PollOptions.
//  2. One record found: the submit went through. Continue with Await on its requestHash.
//  3. ErrNotCreated: nothing was created. The action may be submitted again; reuse the
//     same TraceID, so that a service that enforces unique trace ids (x402gate's does,
//     answering 409, which Submit reports as ErrConflict) turns a late-arriving original
//     into a conflict instead of a second transaction. If the original request might
//     still be in flight (a client-side timeout), wait at least the service's request
//     timeout before trusting ErrNotCreated.
//  4. ErrReconcileUnsupported (a service without the lookup route) or a lookup that
//     keeps failing: keep the action paused and ask an operator. Never resubmit blindly.
//
// The high-level helpers do steps 1–2 themselves and otherwise fail closed; they never
// submit twice. The lookup route is x402gate's extension of the spec.
//
// # Polling
//
// Await sends the first GET at once, then waits with bounded exponential backoff: the
// interval (PollOptions.IntervalMs, default 1000 ms) doubles after each attempt up to
// MaxDelay (default 5 s), and each wait is spread over [d/2, d) by jitter. It stops after
// MaxAttempts GETs (default 20; docs/verdict.md#fail-closed). Missing, null and pending verdicts and
// transient failures (429, 5xx, network) use up attempts alike. The context governs every
// request and every wait. See PollOptions.Delay for the exact schedule. Each attempt is
// exactly one HTTP request: the transport opts out of net/http's silent resend of an
// idempotent request on a broken keep-alive connection, so MaxAttempts is also the
// number of requests the service sees. A POST is never resent by anything.
//
// # Validation
//
// Answers are validated by package verdict (ParseEnvelope, ParseVerdict,
// ParseTransaction); see its documentation for the rules. A broken rule is a
// *verdict.ValidationError, which unwraps to ErrInvalidResponse and is never an approval.
//
// # Secrets
//
// The API key travels only in the x-api-key header (docs/verdict.md#secrets). It is never put in a
// URL, body, metadata, error or log entry. The package logs only through Config.Logger
// (default none): one debug entry per request with the operation, method, status,
// requestHash and error, and a warning per uncertain submit with its trace id. The
// transport refuses to send a request whose URL or body contains the key, whatever the
// caller put in the prompt, metadata or context logs. This is why keys must have at
// least MinAPIKeyLength characters. Base URLs with user info, a query or a fragment are refused. Text the
// service sends back is kept out of error messages, and the call's keys are removed
// from every string a GuardianResult passes on (reason, humanReason, checks, evidence).
//
// The spec's GuardianConfig.apiKey (GuardianOptions.APIKey) is a fallback for "a payer key" carried with the
// payment (docs/verdict.md#secrets). This package deliberately does not read a key from the payment
// payload: the payload passes through merchants, proxies and their logs, and a secret
// there is already leaked. A payer's own key is given by the caller in
// PaymentInput.APIKey (or Client.WithAPIKey), and it is subject to the same rules.
//
// # Shared JSON transport
//
// Every request, including FetchVerificationRequirements, goes through one transport. It
// never follows redirects (3xx is an error). It reads at most MaxResponseBytes (1 MiB)
// and rejects larger answers. It requires application/json (or application/*+json,
// charset utf-8 if given) on success. It bounds each request by Config.Timeout (default
// 10 s) inside the caller's context.
package verdictclient
