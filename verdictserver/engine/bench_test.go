package engine

import (
	"context"
	"testing"

	"github.com/x402gate/x402gate/verdict"
)

// BenchmarkEvaluatePayment is one approved x402 payment through every check: decode, the
// allow-lists, screening against the OFAC fixture, sinks, pricing and the cap, evidence,
// freshness, trust and redaction.
func BenchmarkEvaluatePayment(b *testing.B) {
	e := newEngine(b, Options{})
	in := Input{Escrow: escrow, ProposedTx: payment(), Policy: mustPolicy(b, 3, basePolicy),
		Metadata: map[string]any{"traceId": "t-1", "apiKey": "k"}}
	ctx := context.Background()
	if v := e.Evaluate(ctx, in); v.Outcome != verdict.OutcomeApproved {
		b.Fatalf("outcome %s %s", v.Outcome, v.ReasonCode)
	}
	b.ReportAllocs()
	for b.Loop() {
		e.Evaluate(ctx, in)
	}
}
