package policy

import (
	"os"
	"strings"
	"testing"
)

// BenchmarkParse is the page's example document through the strict parser, the schema and
// the semantic rules: the cost the verdict service pays to resolve a policy version.
func BenchmarkParse(b *testing.B) {
	page, err := os.ReadFile("../../docs/policy.md")
	if err != nil {
		b.Fatal(err)
	}
	_, rest, _ := strings.Cut(string(page), "```json\n")
	example, _, _ := strings.Cut(rest, "```")
	raw := []byte(example)
	if _, err := Parse(raw); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(raw); err != nil {
			b.Fatal(err)
		}
	}
}
