package verdict

import (
	"testing"

	"github.com/x402gate/x402gate/internal/testenv"
)

// BenchmarkValidateVerdict measures strict parsing and validation of one approval-status
// answer: an envelope holding a verdict with all twelve checks, evidence, freshness
// sources and redaction (about 2.6 KB), the answer Await reads on every poll.
func BenchmarkValidateVerdict(b *testing.B) {
	cases := []struct {
		name string
		body []byte
	}{
		{"approved", []byte(`{"status":"PENDING","verdict":` + testenv.VerdictJSON(testenv.ApprovedVerdict()) + `}`)},
		{"rejected", []byte(`{"verdict":` + testenv.VerdictJSON(testenv.RejectedVerdict(CheckSanctions, ReasonSanctionedAddress)) + `}`)},
		{"pending", []byte(`{"verdict":` + testenv.VerdictJSON(testenv.PendingVerdict()) + `}`)},
		{"no verdict yet", []byte(`{"verdict":null}`)},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			if _, err := ParseEnvelope(tc.body, "0xabc"); err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(tc.body)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := ParseEnvelope(tc.body, "0xabc"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkValidateVerdictInvalid measures how fast a broken verdict is refused: an
// approved verdict whose reasonCode breaks rule 1, found only after the whole document
// has been parsed.
func BenchmarkValidateVerdictInvalid(b *testing.B) {
	v := testenv.ApprovedVerdict()
	v["reasonCode"] = "venue_not_allowed"
	body := []byte(`{"verdict":` + testenv.VerdictJSON(v) + `}`)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseEnvelope(body, "0xabc"); err == nil {
			b.Fatal("accepted")
		}
	}
}
