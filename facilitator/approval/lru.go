package approval

// lru is a bounded least-recently-used table: the MemoryStore's approvals, claims and
// verdicts. Its entries live by value in a slab and are chained by index, so an entry
// costs its key, its value and two uint32s beside one map slot, where golang-lru's
// simplelru spends a list element (three pointers and an expiry) and a pointer map slot.
// Only Add makes an entry the most recently used; Peek does not. It is not safe for
// concurrent use: the MemoryStore's mutex guards it.
type lru[K comparable, V any] struct {
	size  int
	index map[K]uint32
	nodes []lruNode[K, V] // nodes[0] is the sentinel of the ring: next is the newest
	free  []uint32
}

type lruNode[K comparable, V any] struct {
	key        K
	value      V
	prev, next uint32
}

// newLRU returns an empty table of at most size entries (size > 0).
func newLRU[K comparable, V any](size int) *lru[K, V] {
	return &lru[K, V]{size: size, index: map[K]uint32{}, nodes: make([]lruNode[K, V], 1)}
}

// Len is the number of entries.
func (l *lru[K, V]) Len() int { return len(l.index) }

// Peek returns the value of k, leaving its place alone.
func (l *lru[K, V]) Peek(k K) (V, bool) {
	i, ok := l.index[k]
	if !ok {
		var zero V
		return zero, false
	}
	return l.nodes[i].value, true
}

// Add sets the value of k and makes it the newest entry, evicting the oldest one when the
// table is full.
func (l *lru[K, V]) Add(k K, v V) {
	if i, ok := l.index[k]; ok {
		l.nodes[i].value = v
		l.unlink(i)
		l.push(i)
		return
	}
	if len(l.index) >= l.size {
		l.Remove(l.nodes[l.nodes[0].prev].key)
	}
	var i uint32
	if n := len(l.free); n > 0 {
		i, l.free = l.free[n-1], l.free[:n-1]
	} else {
		l.nodes = append(l.nodes, lruNode[K, V]{})
		i = uint32(len(l.nodes) - 1)
	}
	l.nodes[i].key, l.nodes[i].value = k, v
	l.index[k] = i
	l.push(i)
}

// Remove deletes k's entry, if any.
func (l *lru[K, V]) Remove(k K) {
	i, ok := l.index[k]
	if !ok {
		return
	}
	l.unlink(i)
	delete(l.index, k)
	l.nodes[i] = lruNode[K, V]{}
	l.free = append(l.free, i)
}

// Keys returns the keys from the oldest entry to the newest.
func (l *lru[K, V]) Keys() []K {
	keys := make([]K, 0, len(l.index))
	for i := l.nodes[0].prev; i != 0; i = l.nodes[i].prev {
		keys = append(keys, l.nodes[i].key)
	}
	return keys
}

// Purge deletes every entry.
func (l *lru[K, V]) Purge() {
	*l = *newLRU[K, V](l.size)
}

// push links node i as the newest.
func (l *lru[K, V]) push(i uint32) {
	first := l.nodes[0].next
	l.nodes[i].prev, l.nodes[i].next = 0, first
	l.nodes[first].prev = i
	l.nodes[0].next = i
}

// unlink takes node i out of the ring.
func (l *lru[K, V]) unlink(i uint32) {
	p, n := l.nodes[i].prev, l.nodes[i].next
	l.nodes[p].next, l.nodes[n].prev = n, p
}
