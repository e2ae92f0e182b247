package sanctions

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/ethereum/go-ethereum/common"
)

// write100k writes a text list of 100,000 distinct addresses and returns its path.
func write100k(tb testing.TB) (string, []common.Address) {
	tb.Helper()
	path := filepath.Join(tb.TempDir(), "list100k.txt")
	f, err := os.Create(path)
	if err != nil {
		tb.Fatal(err)
	}
	w := bufio.NewWriter(f)
	fmt.Fprintln(w, "# generatedAt: 2026-11-20T00:00:00Z")
	addrs := make([]common.Address, 100_000)
	for i := range addrs {
		var a common.Address
		binary.BigEndian.PutUint64(a[12:], uint64(i)*0x9E3779B97F4A7C15)
		a[0], a[1] = byte(i), 0x5a
		addrs[i] = a
		fmt.Fprintln(w, a.Hex())
	}
	if err := w.Flush(); err != nil {
		tb.Fatal(err)
	}
	if err := f.Close(); err != nil {
		tb.Fatal(err)
	}
	return path, addrs
}

func TestLoad100k(t *testing.T) {
	path, addrs := write100k(t)
	l, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if l.Len() != len(addrs) || !l.Contains(addrs[0]) || !l.Contains(addrs[len(addrs)-1]) || l.Contains(common.Address{}) {
		t.Fatalf("loaded %d addresses", l.Len())
	}
}

// BenchmarkLoad100k loads a text list of 100,000 addresses (docs/policy.md#sanctions-list).
func BenchmarkLoad100k(b *testing.B) {
	path, _ := write100k(b)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := Load(path); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkContains is one lookup in a list of 100,000 addresses: a map probe.
func BenchmarkContains(b *testing.B) {
	path, addrs := write100k(b)
	l, err := Load(path)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if !l.Contains(addrs[i%len(addrs)]) {
			b.Fatal("missing")
		}
		i++
	}
}
