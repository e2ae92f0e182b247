package engine

import "testing"

// BenchmarkEvaluatePayment is one approved x402 payment through every check: decode, the
// allow-lists, screening against the OFAC fixture, sinks, pricing and the cap, evidence,
// freshness, trust and redaction.
func BenchmarkEvaluatePayment(b *testing.B) {
	in := Input{Escrow: escrow, ProposedTx: payment(), Policy: mustPolicy(b, 3, basePolicy),
		Metadata: map[string]any{"traceId": "t-1", "apiKey": "k"}}
	benchEvaluate(b, Deps{}, in)
}
