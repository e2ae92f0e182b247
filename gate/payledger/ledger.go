// Package payledger is the gate's payment ledger (docs/gate.md#payment-ledger): one record
// per payment identity (x402.PaymentKey) holding the payment's state, its credits, its
// retry token's hash, the payment identifiers it was sent under and at most one lease,
// owned by one request attempt. Every way a paid request can be served again (a retry
// token, a payment identifier, a pending settlement's redemption, the bare header of a
// payment whose answer was lost) goes through it, so one payment buys one good answer.
//
// The package holds the contract and the in-process Memory ledger; gate/redisretry holds
// the Redis one, shared by several instances. It imports only the standard library, so a
// store in any package implements Ledger without importing the gate.
package payledger

import (
	"context"
	"errors"
	"time"
)

// ErrUnavailable is wrapped by every failure to reach a ledger. The gate fails closed on
// it: nothing is paid, served or granted.
var ErrUnavailable = errors.New("payment ledger unavailable")

// State is where a record's payment stands.
type State = int

// Record states.
const (
	// Reserved: an attempt verifies and settles the payment, or did and its outcome is
	// unknown without a pending token. Written before the broadcast.
	Reserved State = 1
	// Pending: the settlement's outcome is unknown; the retry token redeems it once the
	// facilitator reports it confirmed.
	Pending State = 2
	// Settled: the payment moved and its first run is owed: running under the lease, or
	// lost with a dead instance.
	Settled State = 3
	// Failed: the first run failed; the credits and the retry token let it run again.
	Failed State = 4
	// Answered: a good answer was given; the payment buys no other.
	Answered State = 5
)

// Status is what Begin found and did.
type Status = int

// Begin outcomes. The first five hand the caller the lease. The zero Status is none of
// them: an Entry a store did not fill in is refused (fail closed).
const (
	// New: no record existed; it is written Reserved, and the caller pays.
	New Status = iota + 1
	// Resume: the record is Reserved and its lease lapsed (its attempt died or ended
	// without an outcome); the caller pays again, and a refusal as already settled is
	// checked with the facilitator.
	Resume
	// Redeem: the record is Pending and the presenter may redeem it; the caller asks the
	// facilitator for the outcome.
	Redeem
	// Serve: the record is Settled and its lease lapsed: the first run was lost; the
	// caller serves it (Data is the settlement).
	Serve
	// Retry: the record is Failed; one credit was taken; the caller serves it again.
	Retry
	// Busy: another attempt holds the lease; nothing was taken.
	Busy
	// Conflict: the record holds another fingerprint (another signature under the same
	// nonce), or the payment identifier names another payment; nothing was taken.
	Conflict
	// Mismatch: the record was paid by another request (resource, method or URI).
	Mismatch
	// Spent: the payment was answered, or its credits are used up or expired.
	Spent
	// Refused: the presenter may not redeem the record: a retry token was issued and it
	// presents neither it nor a payment identifier the record knows.
	Refused
)

// End outcomes.
const (
	// Release ends the lease and changes nothing else.
	Release = iota
	// Answer: a good answer was given; the record is Answered and its credits are gone.
	Answer
	// Fail: the run failed. A first run (Settled) makes the record Failed with its
	// credits and token; a retry (Failed) only ends the lease.
	Fail
)

// Claim is one attempt to pay or redeem a payment.
type Claim struct {
	// Key is the record's key: a hash of the payment's x402.PaymentKey.
	Key string
	// ID is the key of the payment identifier's index entry; "" when the payment carries
	// none. An id names one record: a claim under an id that names another live record is
	// a Conflict.
	ID string
	// Fingerprint identifies the signed payload (the PaymentKey, the window and the
	// signature).
	Fingerprint []byte
	// Binding identifies the request that paid: resource URL, method and request URI.
	Binding []byte
	// Token is the SHA-256 of the retry token presented; nil when none is.
	Token []byte
	// Owner names the attempt (random per attempt); only it renews, settles, ends or
	// forgets the lease it takes.
	Owner string
	// Lease is how long the lease lasts unless renewed.
	Lease time.Duration
	// TTL is how long a new record lives.
	TTL time.Duration
}

// Entry is Begin's answer.
type Entry struct {
	Status Status
	// Data is the settlement kept by Settle (Serve, Retry, Spent) or Pend (Redeem).
	Data []byte
	// KnownID is true when the claim's payment identifier was recorded on this record
	// before: its repeats are told apart from strangers' (409 used, not 402).
	KnownID bool
}

// Ledger keeps the records. Every method is atomic across every process that shares the
// ledger. Every method but Begin takes the owner id of the lease and changes nothing,
// reporting false, unless that owner holds the lease.
type Ledger interface {
	// Begin looks the claim's record up and takes the lease when it may (see Status).
	Begin(ctx context.Context, c Claim) (Entry, error)
	// Renew extends the lease by lease from now.
	Renew(ctx context.Context, key, owner string, lease time.Duration) (bool, error)
	// Settle records that the payment moved: a Reserved or Pending record becomes
	// Settled with data, the settlement; the lease stays held.
	Settle(ctx context.Context, key, owner string, data []byte) (bool, error)
	// Pend records an unknown outcome: a Reserved record becomes Pending with data and
	// the retry token's hash; the lease ends.
	Pend(ctx context.Context, key, owner string, token, data []byte) (bool, error)
	// End ends the lease with an outcome (Release, Answer, Fail). For Fail of a first
	// run, token and credits become the record's and the credits lapse after ttl;
	// granted reports that they did.
	End(ctx context.Context, key, owner string, outcome int, token []byte, credits int, ttl time.Duration) (granted bool, err error)
	// Forget deletes a Reserved or Pending record: nothing moved.
	Forget(ctx context.Context, key, owner string) (bool, error)
}
