package payledger

import (
	"context"
	"crypto/subtle"
	"fmt"
	"math"
	"sync"
	"time"
)

// DefaultMemoryEntries bounds a Memory made with NewMemory(0, nil).
const DefaultMemoryEntries = 100_000

// Memory is the in-process Ledger of one instance. It is safe for concurrent use. Its
// records die with the process.
type Memory struct {
	mu  sync.Mutex
	m   map[string]*record
	ids map[string]idEntry
	max int
	now func() time.Time
}

// record is one payment as Memory holds it. Times are the clock's.
type record struct {
	state   State
	fp      []byte
	binding []byte
	data    []byte
	token   []byte // SHA-256 of the retry token; nil: none issued
	credits int
	creditsUntil,
	exp time.Time
	owner string
	lease time.Time
}

// idEntry names the record of a payment identifier.
type idEntry struct {
	key string
	exp time.Time
}

// NewMemory returns an empty ledger holding at most maxEntries records (0 means
// DefaultMemoryEntries) on the clock now (nil means time.Now). When it is full of live
// records, Begin fails with ErrUnavailable rather than forget a payment silently.
func NewMemory(maxEntries int, now func() time.Time) *Memory {
	if maxEntries <= 0 {
		maxEntries = DefaultMemoryEntries
	}
	if now == nil {
		now = time.Now
	}
	return &Memory{m: map[string]*record{}, ids: map[string]idEntry{}, max: maxEntries, now: now}
}

// same compares two hashes in constant time.
func same(a, b []byte) bool {
	return len(a) > 0 && len(a) == len(b) && subtle.ConstantTimeCompare(a, b) == 1
}

// live returns the unexpired record of key.
func (s *Memory) live(key string, now time.Time) *record {
	r, ok := s.m[key]
	if ok && !now.Before(r.exp) {
		delete(s.m, key)
		return nil
	}
	return r
}

// Begin implements Ledger.
func (s *Memory) Begin(_ context.Context, c Claim) (Entry, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	known := false
	if c.ID != "" {
		if e, ok := s.ids[c.ID]; ok && now.Before(e.exp) {
			if e.key != c.Key && s.live(e.key, now) != nil {
				return Entry{Status: Conflict}, nil
			}
			known = e.key == c.Key
		}
	}
	r := s.live(c.Key, now)
	if r == nil {
		if err := s.room(now); err != nil {
			return Entry{}, err
		}
		r = &record{state: Reserved, fp: clone(c.Fingerprint), binding: clone(c.Binding), exp: now.Add(c.TTL)}
		s.m[c.Key] = r
		return s.take(r, c, now, New, known), nil
	}
	st := judge(r, c, known, now)
	if st == Retry {
		r.credits--
	}
	if st <= Retry {
		return s.take(r, c, now, st, known), nil
	}
	e := Entry{Status: st, KnownID: known}
	if st == Spent {
		e.Data = clone(r.data)
	}
	return e, nil
}

// judge decides a claim on an existing record, as the Redis script does.
func judge(r *record, c Claim, known bool, now time.Time) Status {
	switch {
	case !same(r.fp, c.Fingerprint):
		return Conflict
	case !same(r.binding, c.Binding):
		return Mismatch
	case r.state == Answered:
		return Spent
	case now.Before(r.lease):
		return Busy
	}
	may := r.token == nil || same(r.token, c.Token) || known
	switch {
	case r.state == Reserved:
		return Resume
	case !may:
		return Refused
	case r.state == Pending:
		return Redeem
	case r.state == Settled:
		return Serve
	case r.credits > 0 && now.Before(r.creditsUntil):
		return Retry
	}
	return Spent
}

// take gives c the lease of r and records its payment identifier.
func (s *Memory) take(r *record, c Claim, now time.Time, st Status, known bool) Entry {
	r.owner, r.lease = c.Owner, now.Add(c.Lease)
	if c.ID != "" && !known {
		s.ids[c.ID] = idEntry{key: c.Key, exp: r.exp}
	}
	return Entry{Status: st, Data: clone(r.data), KnownID: known}
}

// room makes room for a record, dropping expired ones, or fails.
func (s *Memory) room(now time.Time) error {
	if len(s.m) < s.max {
		return nil
	}
	for k, r := range s.m {
		if !now.Before(r.exp) {
			delete(s.m, k)
		}
	}
	for k, e := range s.ids {
		if !now.Before(e.exp) {
			delete(s.ids, k)
		}
	}
	if len(s.m) >= s.max {
		return fmt.Errorf("memory ledger holds %d payments: %w", s.max, ErrUnavailable)
	}
	return nil
}

// owned runs f on the record of key when owner holds its lease.
func (s *Memory) owned(key, owner string, f func(r *record, now time.Time) bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	r := s.live(key, now)
	if r == nil || r.owner != owner || !now.Before(r.lease) {
		return false
	}
	return f(r, now)
}

// Renew implements Ledger.
func (s *Memory) Renew(_ context.Context, key, owner string, lease time.Duration) (bool, error) {
	return s.owned(key, owner, func(r *record, now time.Time) bool {
		r.lease = now.Add(lease)
		return true
	}), nil
}

// Settle implements Ledger.
func (s *Memory) Settle(_ context.Context, key, owner string, data []byte) (bool, error) {
	return s.owned(key, owner, func(r *record, _ time.Time) bool {
		if r.state != Reserved && r.state != Pending {
			return false
		}
		r.state, r.data = Settled, clone(data)
		return true
	}), nil
}

// Pend implements Ledger.
func (s *Memory) Pend(_ context.Context, key, owner string, token, data []byte) (bool, error) {
	return s.owned(key, owner, func(r *record, _ time.Time) bool {
		if r.state != Reserved {
			return false
		}
		r.state, r.token, r.data, r.lease = Pending, clone(token), clone(data), time.Time{}
		return true
	}), nil
}

// End implements Ledger.
func (s *Memory) End(_ context.Context, key, owner string, outcome int, token []byte, credits int, ttl time.Duration) (bool, error) {
	granted := false
	s.owned(key, owner, func(r *record, now time.Time) bool {
		r.lease = time.Time{}
		switch {
		case outcome == Answer:
			r.state, r.credits = Answered, 0
		case outcome == Fail && r.state == Settled:
			r.state, r.credits, r.creditsUntil = Failed, min(max(credits, 0), math.MaxInt32), now.Add(ttl)
			if granted = r.credits > 0 && len(token) > 0; granted {
				r.token = clone(token)
			}
		}
		return true
	})
	return granted, nil
}

// Forget implements Ledger.
func (s *Memory) Forget(_ context.Context, key, owner string) (bool, error) {
	return s.owned(key, owner, func(r *record, _ time.Time) bool {
		if r.state != Reserved && r.state != Pending {
			return false
		}
		delete(s.m, key)
		return true
	}), nil
}

func clone(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append([]byte{}, b...)
}
