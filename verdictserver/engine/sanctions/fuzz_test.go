package sanctions

import (
	"bytes"
	"os"
	"testing"
	"time"
)

// FuzzParse: neither parser panics on any file, and what they accept is a dated list.
func FuzzParse(f *testing.F) {
	for _, p := range []string{"testdata/sdn_advanced.xml", "testdata/list.txt"} {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("<Sanctions><DateOfIssue><Year>2026</Year><Month>13</Month><Day>1</Day></DateOfIssue></Sanctions>"))
	f.Fuzz(func(t *testing.T, b []byte) {
		mt := time.Unix(1e9, 0)
		for _, parse := range []func() (*List, error){
			func() (*List, error) { return ParseText(bytes.NewReader(b), "t", mt) },
			func() (*List, error) { return ParseSDN(bytes.NewReader(b), "x", mt) },
		} {
			l, err := parse()
			if err == nil && (l == nil || l.AsOf().IsZero()) {
				t.Fatalf("accepted without a date: %v", l)
			}
		}
	})
}
