package approval

import (
	"slices"
	"testing"
)

// TestLRUEvictsTheOldest: a full table evicts the entry added least recently (Peek does
// not refresh one, Add does), Keys runs from the oldest to the newest, and freed slots
// are reused.
func TestLRUEvictsTheOldest(t *testing.T) {
	l := newLRU[int, string](3)
	for i, v := range []string{"a", "b", "c"} {
		l.Add(i, v)
	}
	l.Peek(0)
	l.Add(1, "B") // 1 becomes the newest
	l.Add(3, "d") // evicts 0, the oldest
	if _, ok := l.Peek(0); ok {
		t.Error("0 was not evicted")
	}
	if got := l.Keys(); !slices.Equal(got, []int{2, 1, 3}) {
		t.Errorf("Keys() = %v, want [2 1 3]", got)
	}
	if v, ok := l.Peek(1); !ok || v != "B" {
		t.Errorf("Peek(1) = %q %v, want B", v, ok)
	}
	l.Remove(2)
	l.Remove(2)
	l.Add(4, "e")
	if l.Len() != 3 || len(l.nodes) != 4 {
		t.Errorf("Len %d, %d nodes; want 3 and 4 (the sentinel and 3 reused slots)", l.Len(), len(l.nodes))
	}
	if got := l.Keys(); !slices.Equal(got, []int{1, 3, 4}) {
		t.Errorf("Keys() = %v, want [1 3 4]", got)
	}
	l.Purge()
	if l.Len() != 0 || len(l.Keys()) != 0 {
		t.Errorf("after Purge: Len %d, Keys %v", l.Len(), l.Keys())
	}
	l.Add(5, "f")
	if v, _ := l.Peek(5); v != "f" {
		t.Errorf("after Purge, Peek(5) = %q", v)
	}
}
