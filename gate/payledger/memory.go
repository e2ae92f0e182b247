package payledger

import (
	"context"
	"crypto/sha256"
	"fmt"
	"math"
	"sync"
	"time"
)

// DefaultMemoryEntries bounds a Memory made with NewMemory(0, nil).
const DefaultMemoryEntries = 100_000

// Memory is the in-process Ledger of one instance. It is safe for concurrent use. Its
// records die with the process.
//
// It keeps each record compact (bench/verdict.md, MemoryLedgerHeap): in a slab of
// fixed-size slots indexed by the SHA-256 of the record's key, its hashes as 32-byte
// arrays (a hash of another length is kept as its SHA-256, on both sides of every
// comparison), its times as offsets on the ledger's clock, its settlement deflated
// against the first one the ledger kept, and its lease, held only while an attempt runs,
// in a map of its own.
type Memory struct {
	mu     sync.Mutex
	index  map[digest]uint32 // record key -> slot
	slots  []slot
	free   []uint32 // slots of deleted records, reused first
	leases map[uint32]lease
	ids    map[digest]idEntry
	max    int
	now    func() time.Time
	base   time.Time // the origin of the slots' times
	codec  codec
}

// digest is a key or a hash as Memory keeps it.
type digest = [32]byte

// slot is one record: Record, compact.
type slot struct {
	fingerprint, binding, token digest
	data                        string // the settlement, as codec.encode gives it
	expires, creditsUntil       int64  // offsets from Memory.base (Memory.offset)
	credits                     int32
	state                       uint8
	// kinds of fingerprint, binding and token (hashKind)
	fpKind, bindKind, tokenKind uint8
}

// Kinds of a kept hash: nil, empty, or 32 bytes.
const (
	hashNil uint8 = iota
	hashEmpty
	hashFull
)

// lease is a record's lease while an attempt holds it.
type lease struct {
	owner string
	until int64
}

// idEntry names the record of a payment identifier.
type idEntry struct {
	key digest
	exp int64
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
	return &Memory{index: map[digest]uint32{}, leases: map[uint32]lease{}, ids: map[digest]idEntry{},
		max: maxEntries, now: now, base: now()}
}

// zeroOffset is the offset of the zero time.Time.
const zeroOffset = math.MinInt64

// offset is t on the slots' clock; at reverses it, monotonic reading included when the
// clock has one, so that comparisons with now come out as they would on t itself.
func (s *Memory) offset(t time.Time) int64 {
	if t.IsZero() {
		return zeroOffset
	}
	return int64(t.Sub(s.base))
}

func (s *Memory) at(off int64) time.Time {
	if off == zeroOffset {
		return time.Time{}
	}
	return s.base.Add(time.Duration(off))
}

// normal is a hash as Memory compares it: nil, empty, 32 bytes as they are, and any other
// length as its SHA-256.
func normal(b []byte) []byte {
	if b == nil || len(b) == 0 || len(b) == len(digest{}) {
		return b
	}
	sum := sha256.Sum256(b)
	return sum[:]
}

func keep(b []byte) (digest, uint8) {
	var d digest
	switch {
	case b == nil:
		return d, hashNil
	case len(b) == 0:
		return d, hashEmpty
	}
	copy(d[:], normal(b))
	return d, hashFull
}

// unkeep is the hash d of kind, its bytes in d itself.
func unkeep(d *digest, kind uint8) []byte {
	switch kind {
	case hashNil:
		return nil
	case hashEmpty:
		return []byte{}
	}
	return d[:]
}

// loaded is a record loaded from a slot, with the arrays its hashes point into: one
// allocation.
type loaded struct {
	Record
	hashes [3]digest
}

// load is the record in slot i, its settlement decoded when withData.
func (s *Memory) load(i uint32, withData bool) (*Record, error) {
	sl := &s.slots[i]
	l := &loaded{hashes: [3]digest{sl.fingerprint, sl.binding, sl.token}}
	r := &l.Record
	*r = Record{State: State(sl.state), Fingerprint: unkeep(&l.hashes[0], sl.fpKind),
		Binding: unkeep(&l.hashes[1], sl.bindKind), Token: unkeep(&l.hashes[2], sl.tokenKind),
		Credits: int(sl.credits), CreditsUntil: s.at(sl.creditsUntil), Expires: s.at(sl.expires)}
	if l, ok := s.leases[i]; ok {
		r.Owner, r.Lease = l.owner, s.at(l.until)
	}
	if withData {
		data, err := s.codec.decode(sl.data)
		if err != nil {
			return nil, err
		}
		r.Data = data
	}
	return r, nil
}

// save writes r into slot i with data, its settlement encoded.
func (s *Memory) save(i uint32, r *Record, data string) {
	sl := slot{data: data, expires: s.offset(r.Expires), creditsUntil: s.offset(r.CreditsUntil),
		credits: int32(min(max(r.Credits, math.MinInt32), math.MaxInt32)), state: uint8(r.State)}
	sl.fingerprint, sl.fpKind = keep(r.Fingerprint)
	sl.binding, sl.bindKind = keep(r.Binding)
	sl.token, sl.tokenKind = keep(r.Token)
	s.slots[i] = sl
	if r.Owner == "" && r.Lease.IsZero() {
		delete(s.leases, i)
	} else {
		s.leases[i] = lease{owner: r.Owner, until: s.offset(r.Lease)}
	}
}

// alloc is a free slot for a new record.
func (s *Memory) alloc() uint32 {
	if n := len(s.free); n > 0 {
		i := s.free[n-1]
		s.free = s.free[:n-1]
		return i
	}
	s.slots = append(s.slots, slot{})
	return uint32(len(s.slots) - 1)
}

// drop deletes the record of key in slot i.
func (s *Memory) drop(key digest, i uint32) {
	delete(s.index, key)
	delete(s.leases, i)
	s.slots[i] = slot{}
	s.free = append(s.free, i)
}

// live returns the slot of the unexpired record of key.
func (s *Memory) live(key digest, now time.Time) (uint32, bool) {
	i, ok := s.index[key]
	if ok && !now.Before(s.at(s.slots[i].expires)) {
		s.drop(key, i)
		return 0, false
	}
	return i, ok
}

// alive reports whether key has an unexpired record.
func (s *Memory) alive(key digest, now time.Time) bool {
	_, ok := s.live(key, now)
	return ok
}

// Begin implements Ledger.
func (s *Memory) Begin(_ context.Context, c Claim) (Entry, error) {
	c.Fingerprint, c.Binding, c.Token = normal(c.Fingerprint), normal(c.Binding), normal(c.Token)
	key, id := sha256.Sum256([]byte(c.Key)), digest{}
	if c.ID != "" {
		id = sha256.Sum256([]byte(c.ID))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	known := false
	if c.ID != "" {
		if e, ok := s.ids[id]; ok && now.Before(s.at(e.exp)) {
			if e.key != key && s.alive(e.key, now) {
				return Entry{Status: Conflict}, nil
			}
			known = e.key == key
		}
	}
	i, ok := s.live(key, now)
	var e Entry
	var r *Record
	if !ok {
		if err := s.room(now); err != nil {
			return Entry{}, err
		}
		r, i = NewRecord(c, now), s.alloc()
		s.index[key] = i
		e = Entry{Status: New, KnownID: known}
	} else {
		var err error
		if r, err = s.load(i, true); err != nil {
			return Entry{}, err
		}
		e = r.Judge(c, known, now)
	}
	s.save(i, r, s.slots[i].data)
	if e.Status <= Retry && c.ID != "" && !known {
		s.ids[id] = idEntry{key: key, exp: s.offset(r.Expires)}
	}
	return e, nil
}

// room makes room for a record, dropping expired ones, or fails.
func (s *Memory) room(now time.Time) error {
	if len(s.index) < s.max {
		return nil
	}
	for k, i := range s.index {
		if !now.Before(s.at(s.slots[i].expires)) {
			s.drop(k, i)
		}
	}
	for k, e := range s.ids {
		if !now.Before(s.at(e.exp)) {
			delete(s.ids, k)
		}
	}
	if len(s.index) >= s.max {
		return fmt.Errorf("memory ledger holds %d payments: %w", s.max, ErrUnavailable)
	}
	return nil
}

// held returns the slot and the record (its settlement not loaded) of key when owner holds
// its lease.
func (s *Memory) held(key digest, owner string, now time.Time) (uint32, *Record, bool) {
	i, ok := s.live(key, now)
	if !ok {
		return 0, nil, false
	}
	r, _ := s.load(i, false) // load fails only decoding a settlement, not loaded here
	return i, r, r.Held(owner, now)
}

// owned runs f on the record of key when owner holds its lease, and saves it; data, when
// not nil, is the record's new settlement, kept when f reports true.
func (s *Memory) owned(key, owner string, data *string, f func(r *Record, now time.Time) bool) bool {
	k := sha256.Sum256([]byte(key))
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	i, r, ok := s.held(k, owner, now)
	if !ok {
		return false
	}
	done := f(r, now)
	keptData := s.slots[i].data
	if done && data != nil {
		keptData = *data
	}
	s.save(i, r, keptData)
	return done
}

// Renew implements Ledger.
func (s *Memory) Renew(_ context.Context, key, owner string, lease time.Duration) (bool, error) {
	return s.owned(key, owner, nil, func(r *Record, now time.Time) bool { return r.Renew(lease, now) }), nil
}

// Settle implements Ledger.
func (s *Memory) Settle(_ context.Context, key, owner string, data []byte) (bool, error) {
	enc := s.codec.encode(data)
	return s.owned(key, owner, &enc, func(r *Record, _ time.Time) bool { return r.Settle(nil) }), nil
}

// Pend implements Ledger.
func (s *Memory) Pend(_ context.Context, key, owner string, token, data []byte) (bool, error) {
	enc, token := s.codec.encode(data), normal(token)
	return s.owned(key, owner, &enc, func(r *Record, _ time.Time) bool { return r.Pend(token, nil) }), nil
}

// End implements Ledger.
func (s *Memory) End(_ context.Context, key, owner string, outcome int, token []byte, credits int, ttl time.Duration) (bool, error) {
	granted, token := false, normal(token)
	s.owned(key, owner, nil, func(r *Record, now time.Time) bool {
		granted = r.End(outcome, token, credits, ttl, now)
		return true
	})
	return granted, nil
}

// Forget implements Ledger.
func (s *Memory) Forget(_ context.Context, key, owner string) (bool, error) {
	k := sha256.Sum256([]byte(key))
	s.mu.Lock()
	defer s.mu.Unlock()
	i, r, ok := s.held(k, owner, s.now())
	if !ok || !r.Forgettable() {
		return false, nil
	}
	s.drop(k, i)
	return true, nil
}
