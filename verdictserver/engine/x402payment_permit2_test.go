package engine

import (
	"context"
	"testing"

	"github.com/x402gate/x402gate/verdict"
	"github.com/x402gate/x402gate/verdictserver/engine/uniswap"
	"github.com/x402gate/x402gate/x402"
)

// TestPermit2AndUptoPaymentsAreJudgedAtTheirMaximum: the action of an upto payment carries
// its signed maximum as amount (docs/policy.md#payment-actions), so per_tx_cap judges the
// most that can move: a maximum over the cap is refused whatever the answer later costs.
// scheme and transfer are read strictly and reach the evidence, with Permit2's address.
func TestPermit2AndUptoPaymentsAreJudgedAtTheirMaximum(t *testing.T) {
	upto := func(amount string) map[string]any {
		return payment(set("scheme", x402.SchemeUpto), set("transfer", x402.TransferPermit2), set("amount", amount))
	}
	for _, tc := range []struct {
		name    string
		tx      map[string]any
		outcome verdict.Outcome
		reason  verdict.ReasonCode
	}{
		{"an upto maximum at the cap passes", upto("5000000"), verdict.OutcomeApproved, verdict.ReasonAllowed},
		{"an upto maximum over the cap is refused", upto("5000001"), verdict.OutcomeRejected, verdict.ReasonPerTxCapExceeded},
		{"exact over Permit2", payment(set("scheme", x402.SchemeExact), set("transfer", x402.TransferPermit2)), verdict.OutcomeApproved, verdict.ReasonAllowed},
		{"exact over EIP-3009 said out loud", payment(set("scheme", x402.SchemeExact), set("transfer", x402.TransferEIP3009)), verdict.OutcomeApproved, verdict.ReasonAllowed},
		{"an unknown scheme", payment(set("scheme", "escrow")), verdict.OutcomeRejected, verdict.ReasonDecodeFailure},
		{"an unknown transfer", payment(set("transfer", "erc7710")), verdict.OutcomeRejected, verdict.ReasonDecodeFailure},
		{"upto over EIP-3009", payment(set("scheme", x402.SchemeUpto), set("transfer", x402.TransferEIP3009)), verdict.OutcomeRejected, verdict.ReasonDecodeFailure},
		{"upto without a transfer", payment(set("scheme", x402.SchemeUpto)), verdict.OutcomeRejected, verdict.ReasonDecodeFailure},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEngine(t, Config{}, Deps{})
			v := e.Evaluate(context.Background(), Input{Escrow: escrow, ProposedTx: tc.tx, Policy: mustPolicy(t, 3, basePolicy)})
			body := mustBeValid(t, v)
			if v.Outcome != tc.outcome || v.ReasonCode != tc.reason {
				t.Fatalf("outcome %s %s, want %s %s\n%s", v.Outcome, v.ReasonCode, tc.outcome, tc.reason, body)
			}
		})
	}
	e := newEngine(t, Config{}, Deps{})
	v := e.Evaluate(context.Background(), Input{Escrow: escrow, ProposedTx: upto("4000000"), Policy: mustPolicy(t, 3, basePolicy)})
	mustBeValid(t, v)
	da := v.Evidence.DecodedAction
	if da["scheme"] != x402.SchemeUpto || da["transfer"] != x402.TransferPermit2 || da["via"] != uniswap.Permit2.Hex() || da["amount"] != "4000000" {
		t.Fatalf("decodedAction = %v", da)
	}
}
