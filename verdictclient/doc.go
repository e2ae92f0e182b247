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
// To check an x402 payment (what a facilitator does before it records an approval):
//
//	g, err := verdictclient.NewGuardian(verdictclient.GuardianConfig{
//		BaseURL: "https://verdicts.example",
//		APIKey:  os.Getenv("VERDICT_API_KEY"),
//	})
//	if err != nil { … }
//	res, err := g.VerifyPayment(ctx, payment, requirements, verdictclient.PollOptions{})
//	if !res.Approved {
//		// refuse: res.Status is rejected, timeout or error; res.Reason says why
//	}
//
// To wrap an existing x402 verifier so that a valid payment stays valid only when the
// verdict approves it, use WithGuardian (or Guardian.Wrap, or WithVerdicts with any
// Verdicts implementation).
//
// For any other action, use the low-level Client:
//
//	c, err := verdictclient.New(verdictclient.Config{BaseURL: url, APIKey: key})
//	tx, err := c.Submit(ctx, verdictclient.SubmitRequest{
//		EscrowAddress: wallet, Prompt: "swap 100 USDC for ETH", ProposedTx: action,
//	})
//	v, err := c.Await(ctx, tx.RequestHash, verdictclient.PollOptions{})
//	if err == nil && v.Approved() { /* execute */ }
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
//     *ValidationError naming the requestHash and the field; status "error";
//   - a service that stays unavailable (429, 5xx or network failures on every attempt):
//     *PollBoundError with Last set; status "error";
//   - 400, 401, 403, 404: a *StatusError at once, no retry (spec §7); status "error";
//   - a redirect, an answer over MaxResponseBytes, or a success without a JSON content
//     type: an error at once; status "error".
//
// Error messages never quote the service's text or the API key; they name the
// operation, the HTTP status or broken rule, and the requestHash (or trace id).
//
// # HTTP status handling (spec §7)
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
// POST /transactions has no idempotency key (spec §4.1 rule 4), so Submit sends once and
// never retries. When the outcome is unknown (429, 5xx, a network failure, the context
// ending mid-request, an unreadable 201) it returns *UncertainSubmitError. To make that
// recoverable, every submit carries a client-chosen trace id in metadata.traceId
// (SubmitRequest.TraceID, default 128 random bits; metadata is for "trace identifiers",
// spec §4.1, and the id is not a secret). To reconcile:
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
// MaxAttempts GETs (default 20; spec §8). Missing, null and pending verdicts and
// transient failures (429, 5xx, network) use up attempts alike. The context governs every
// request and every wait. See PollOptions.Delay for the exact schedule. Each attempt is
// exactly one HTTP request: the transport opts out of net/http's silent resend of an
// idempotent request on a broken keep-alive connection, so MaxAttempts is also the
// number of requests the service sees. A POST is never resent by anything.
//
// # Validation
//
// Answers are parsed more strictly than encoding/json would: object keys must match
// exactly (no case folding), a key may not repeat within an object, nothing may follow
// the value, and nesting is bounded, so that a verdict cannot mean one thing to this
// client and another to a different reader. Unknown extra members are allowed.
//
// The approval-status envelope is a JSON object whose "verdict" is absent, null or a
// verdict object. A verdict must satisfy all of these (spec §2.3, §2.4):
//
//   - schemaVersion is the JSON integer 1 (not "1", not 1.0);
//   - outcome is pending, approved or rejected;
//   - reasonCode and every check code match [a-z][a-z0-9_]* (at most 64 bytes);
//   - humanReason and timestamp (RFC 3339) are strings; triggeringPolicyField is a
//     string or null;
//   - checks is an array of objects whose checkId is one of the twelve checks and whose
//     status is passed, failed or not_checked, with string humanReason and optional
//     string-or-null code and triggeringPolicyField;
//   - only a failed check carries a code; a failed check's code, when it is a code this
//     package knows, is its own check's failure code (per_tx_cap: per_tx_cap_exceeded or
//     data_unavailable) or a cross-cutting one (decode_failure, data_unavailable);
//   - evidence is an object with decodedAction (an object with a non-empty string
//     protocol and a positive integer chainId), observations (object) and sources (array);
//   - policyVersion is an integer or null, and null while pending;
//   - latencyMs is an integer >= 0; usdNotional is a number >= 0 or null;
//   - dataFreshness.overall is fresh, cached or mixed, and each dataFreshness.sources
//     item is an object with status fresh or cached;
//   - trust.level is high, medium or low; trust.notes is a string or null;
//   - redaction.redacted is a boolean and redaction.fields an array of strings;
//   - rule 1: approved has reasonCode allowed, and no failed check;
//   - rule 2: pending has reasonCode pending;
//   - rule 3: rejected has a violation code, anything but allowed and pending;
//   - rule 4: unless that code is decode_failure or data_unavailable, some failed check
//     has it: as its code, or, when the check's code is null, as its check's failure
//     code in the spec's table.
//
// Nullable members may be absent; every other member is required.
//
// # Unknown reason codes
//
// GuardianVerdict passes unknown reasonCode values through (spec §2.5), while rule 3
// demands a violation code. They fit together like this: an unknown code is accepted only
// on a rejected verdict, and only when rule 4 holds for it literally, that is, a failed
// check carries exactly that code. It is a new violation code that a newer service
// reports for a check this client knows. An unknown code on an approved or pending
// verdict breaks rules 1 and 2, and an unknown code that no failed check backs breaks
// rule 4; both are invalid verdicts. So an unknown code can never approve anything. It
// can only explain a rejection that the checks already show. An unknown checkId, outcome
// or status is always invalid.
//
// # Secrets
//
// The API key travels only in the x-api-key header (spec §5). It is never put in a
// URL, body, metadata, error or log entry. The package logs only through Config.Logger
// (default none): one debug entry per request with the operation, method, status,
// requestHash and error, and a warning per uncertain submit with its trace id. The
// transport refuses to send a request whose URL or body contains the key, whatever the
// caller put in the prompt, metadata or context logs. This is why keys must have at
// least MinAPIKeyLength characters. Base URLs with user info, a query or a fragment are refused. Text the
// service sends back is kept out of error messages, and the call's keys are removed
// from every string a GuardianResult passes on (reason, humanReason, checks, evidence).
//
// The spec's GuardianConfig.apiKey is a fallback for "a payer key" carried with the
// payment (§2.5, §5.7). This package deliberately does not read a key from the payment
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
//
// # Payment actions
//
// NewPaymentAction copies fields into the proposedTx (spec §2.5): protocol "payment",
// rail "x402", chainId 8453 or 84532 from the requirements' network (CAIP-2 or v1 name),
// payTo from authorization.to, asset from the requirements, amount from
// authorization.value, and resource from the requirements (or the v2 payload's resource).
// escrowAddress is authorization.from. The prompt is DefaultPrompt ("Pay 0.01 USDC to
// 0x… for https://…") unless GuardianConfig.AllowPromptOverride is set and the input
// carries an arbiterUserPrompt (PaymentInput.ArbiterUserPrompt, or the v2 payload
// extension guardian.arbiterUserPrompt via PromptFromPayment).
package verdictclient
