package payledger

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// DefaultMemoryEntries bounds a Memory made with NewMemory(0, nil).
const DefaultMemoryEntries = 100_000

// Memory is the in-process Ledger of one instance. It is safe for concurrent use. Its
// records die with the process.
type Memory struct {
	mu  sync.Mutex
	m   map[string]*Record
	ids map[string]idEntry
	max int
	now func() time.Time
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
	return &Memory{m: map[string]*Record{}, ids: map[string]idEntry{}, max: maxEntries, now: now}
}

// live returns the unexpired record of key.
func (s *Memory) live(key string, now time.Time) *Record {
	r, ok := s.m[key]
	if ok && !now.Before(r.Expires) {
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
	var e Entry
	if r == nil {
		if err := s.room(now); err != nil {
			return Entry{}, err
		}
		r = NewRecord(c, now)
		s.m[c.Key] = r
		e = Entry{Status: New, KnownID: known}
	} else {
		e = r.Judge(c, known, now)
	}
	if e.Status <= Retry && c.ID != "" && !known {
		s.ids[c.ID] = idEntry{key: c.Key, exp: r.Expires}
	}
	return e, nil
}

// room makes room for a record, dropping expired ones, or fails.
func (s *Memory) room(now time.Time) error {
	if len(s.m) < s.max {
		return nil
	}
	for k, r := range s.m {
		if !now.Before(r.Expires) {
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
func (s *Memory) owned(key, owner string, f func(r *Record, now time.Time) bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	r := s.live(key, now)
	if r == nil || !r.Held(owner, now) {
		return false
	}
	return f(r, now)
}

// Renew implements Ledger.
func (s *Memory) Renew(_ context.Context, key, owner string, lease time.Duration) (bool, error) {
	return s.owned(key, owner, func(r *Record, now time.Time) bool { return r.Renew(lease, now) }), nil
}

// Settle implements Ledger.
func (s *Memory) Settle(_ context.Context, key, owner string, data []byte) (bool, error) {
	return s.owned(key, owner, func(r *Record, _ time.Time) bool { return r.Settle(data) }), nil
}

// Pend implements Ledger.
func (s *Memory) Pend(_ context.Context, key, owner string, token, data []byte) (bool, error) {
	return s.owned(key, owner, func(r *Record, _ time.Time) bool { return r.Pend(token, data) }), nil
}

// End implements Ledger.
func (s *Memory) End(_ context.Context, key, owner string, outcome int, token []byte, credits int, ttl time.Duration) (bool, error) {
	granted := false
	s.owned(key, owner, func(r *Record, now time.Time) bool {
		granted = r.End(outcome, token, credits, ttl, now)
		return true
	})
	return granted, nil
}

// Forget implements Ledger.
func (s *Memory) Forget(_ context.Context, key, owner string) (bool, error) {
	return s.owned(key, owner, func(r *Record, _ time.Time) bool {
		if !r.Forgettable() {
			return false
		}
		delete(s.m, key)
		return true
	}), nil
}
