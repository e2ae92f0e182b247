package payledger

import (
	"crypto/subtle"
	"math"
	"time"
)

// Record is one payment as a store holds it; Memory keeps it in a map, a SQL store in a
// row. Its methods are the ledger's transitions, the same for every store that loads a
// record, applies one and saves it atomically (the Redis store runs them as Lua scripts).
// Times are the store's clock.
type Record struct {
	State        State
	Fingerprint  []byte
	Binding      []byte
	Data         []byte
	Token        []byte // SHA-256 of the retry token; nil: none issued
	Credits      int
	CreditsUntil time.Time
	Expires      time.Time
	Owner        string
	Lease        time.Time
}

// NewRecord is the Reserved record a New claim writes, its lease held by the claim.
func NewRecord(c Claim, now time.Time) *Record {
	return &Record{State: Reserved, Fingerprint: clone(c.Fingerprint), Binding: clone(c.Binding), Expires: now.Add(c.TTL),
		Owner: c.Owner, Lease: now.Add(c.Lease)}
}

// same compares two hashes in constant time.
func same(a, b []byte) bool {
	return len(a) > 0 && len(a) == len(b) && subtle.ConstantTimeCompare(a, b) == 1
}

// Judge decides a claim on an existing record (known: the claim's payment identifier is
// recorded on it) and applies it: a Retry takes a credit, and a status up to Retry takes
// the lease. The caller records a new payment identifier when the status is up to Retry.
func (r *Record) Judge(c Claim, known bool, now time.Time) Entry {
	st := r.judge(c, known, now)
	e := Entry{Status: st, KnownID: known}
	if st == Retry {
		r.Credits--
	}
	if st <= Retry {
		r.Owner, r.Lease = c.Owner, now.Add(c.Lease)
	}
	if st <= Retry || st == Spent {
		e.Data = clone(r.Data)
	}
	return e
}

func (r *Record) judge(c Claim, known bool, now time.Time) Status {
	switch {
	case !same(r.Fingerprint, c.Fingerprint):
		return Conflict
	case !same(r.Binding, c.Binding):
		return Mismatch
	case r.State == Answered:
		return Spent
	case now.Before(r.Lease):
		return Busy
	}
	may := r.Token == nil || same(r.Token, c.Token) || known
	switch {
	case r.State == Reserved:
		return Resume
	case !may:
		return Refused
	case r.State == Pending:
		return Redeem
	case r.State == Settled:
		return Serve
	case r.Credits > 0 && now.Before(r.CreditsUntil):
		return Retry
	}
	return Spent
}

// Held reports whether owner holds the record's live lease: only then may it renew,
// settle, pend, end or forget.
func (r *Record) Held(owner string, now time.Time) bool {
	return r.Owner == owner && now.Before(r.Lease)
}

// Renew extends the lease (the caller checked Held).
func (r *Record) Renew(lease time.Duration, now time.Time) bool {
	r.Lease = now.Add(lease)
	return true
}

// Settle is Ledger.Settle on a held record.
func (r *Record) Settle(data []byte) bool {
	if r.State != Reserved && r.State != Pending {
		return false
	}
	r.State, r.Data = Settled, clone(data)
	return true
}

// Pend is Ledger.Pend on a held record.
func (r *Record) Pend(token, data []byte) bool {
	if r.State != Reserved {
		return false
	}
	r.State, r.Token, r.Data, r.Owner, r.Lease = Pending, clone(token), clone(data), "", time.Time{}
	return true
}

// End is Ledger.End on a held record; it reports whether credits were granted.
func (r *Record) End(outcome int, token []byte, credits int, ttl time.Duration, now time.Time) (granted bool) {
	r.Owner, r.Lease = "", time.Time{}
	switch {
	case outcome == Answer:
		r.State, r.Credits = Answered, 0
	case outcome == Fail && r.State == Settled:
		r.State, r.Credits, r.CreditsUntil = Failed, min(max(credits, 0), math.MaxInt32), now.Add(ttl)
		if granted = r.Credits > 0 && len(token) > 0; granted {
			r.Token = clone(token)
		}
	}
	return granted
}

// Forgettable reports whether Forget may delete the held record: nothing moved.
func (r *Record) Forgettable() bool { return r.State == Reserved || r.State == Pending }

func clone(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append([]byte{}, b...)
}
