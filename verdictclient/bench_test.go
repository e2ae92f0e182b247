package verdictclient

import (
	"testing"

	"github.com/x402gate/x402gate/internal/testenv"
	"github.com/x402gate/x402gate/verdict"
)

// BenchmarkGuardianResult measures turning a validated verdict into the GuardianResult a
// caller receives (copying and key-scrubbing the service's text).
func BenchmarkGuardianResult(b *testing.B) {
	env, err := verdict.ParseEnvelope([]byte(`{"verdict":`+testenv.VerdictJSON(testenv.ApprovedVerdict())+`}`), "0xabc")
	if err != nil {
		b.Fatal(err)
	}
	keys := []string{testKey}
	b.ReportAllocs()
	for b.Loop() {
		if r := fromVerdict(env.Verdict, "0xabc", keys); !r.Approved {
			b.Fatal("not approved")
		}
	}
}
