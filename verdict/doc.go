// Package verdict is the vocabulary of the policy verdict service
// (docs/verdict.md#verdict): the Verdict and everything it is made of, the
// approval-status envelope and the transaction record, the result a payment check
// reports (GuardianResult), the PaymentAction an x402 payment becomes, and the strict
// parsing that turns an answer of the service into these types. It does no I/O;
// package verdictclient talks to the service.
//
// # Validation
//
// Answers are parsed more strictly than encoding/json would: object keys must match
// exactly (no case folding), a key may not repeat within an object, nothing may follow
// the value, and nesting is bounded, so that a verdict cannot mean one thing to this
// client and another to a different reader. Unknown extra members are allowed; the
// signature member of a signed verdict is held to its shape (docs/verdict-signing.md).
//
// The approval-status envelope is a JSON object whose "verdict" is absent, null or a
// verdict object. A verdict must satisfy all of these (docs/verdict.md#verdict):
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
// Verdict.Validate applies the same rules to a verdict made in process, without encoding or
// parsing it: a producer validates what it is about to encode.
//
// Two optional members extend schemaVersion 1 (docs/verdict-api.md#modes): mode, which is
// enforce, warn or audit (absent: enforce), and wouldFail, an array of checks shaped like
// checks' items. Only a warn or audit verdict has wouldFail items; each is a failed check
// with a code that its mode lets through (never sanctioned_address, decode_failure or
// data_unavailable), and the same check is not failed in checks.
//
// # Unknown reason codes
//
// GuardianVerdict passes unknown reasonCode values through (docs/verdict.md#paymentaction), while rule 3
// demands a violation code. They fit together like this: an unknown code is accepted only
// on a rejected verdict, and only when rule 4 holds for it literally, that is, a failed
// check carries exactly that code. It is a new violation code that a newer service
// reports for a check this client knows. An unknown code on an approved or pending
// verdict breaks rules 1 and 2, and an unknown code that no failed check backs breaks
// rule 4; both are invalid verdicts. So an unknown code can never approve anything. It
// can only explain a rejection that the checks already show. An unknown checkId (an
// extension) passes through the same way: it has no codes of its own, so it backs a
// rejection only with the code it carries, and an approval with any failed check is
// invalid. An unknown outcome or status is always invalid.
//
// # Payment actions
//
// NewPaymentAction copies fields into the proposedTx (docs/verdict.md#paymentaction): protocol "payment",
// rail "x402", chainId 8453 or 84532 from the requirements' network (CAIP-2 or v1 name),
// payTo from authorization.to, asset from the requirements, amount from
// authorization.value, and resource from the requirements (or the v2 payload's resource).
// escrowAddress is authorization.from. The prompt is DefaultPrompt ("Pay 0.01 USDC to
// 0x… for https://…") unless GuardianConfig.AllowPromptOverride is set and the input
// carries an arbiterUserPrompt (PaymentInput.ArbiterUserPrompt, or the v2 payload
// extension guardian.arbiterUserPrompt via PromptFromPayment).
package verdict
