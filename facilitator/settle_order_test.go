package facilitator

import (
	"context"
	"testing"

	"github.com/x402gate/x402gate/x402"
)

// TestForgedSettleLeavesTheApproval: a /settle whose authorization is unsigned or
// forged, but names the exact payer, payee, amount, asset, network and nonce of an
// approved payment, is refused before the approval is touched; the genuine settle that
// follows still finds its approval and settles (docs/facilitator.md#settle-order).
func TestForgedSettleLeavesTheApproval(t *testing.T) {
	env := newTestEnv(t)
	cfg := env.config(t)
	cfg.VerdictMode, cfg.Verdicts = VerdictRequired, approvedVerdict()
	e := env.engine(t, cfg)
	ctx := context.Background()
	payer, payee := env.chain.Accounts[1], env.chain.Accounts[2]
	p, r := env.pay(t, x402.Version2, payer, payee.Address)
	if ver, err := e.Verify(ctx, x402.VerifyInput{Payment: p, Requirements: r}); err != nil || !ver.IsValid {
		t.Fatalf("verify = %+v, %v; want valid, with an approval recorded", ver, err)
	}
	forgeries := map[string][]byte{
		"unsigned":        nil,
		"a flipped bit":   flipped(p.Signature, 7),
		"another signer":  env.sign(t, env.chain.Accounts[3].Key, p.Authorization),
		"a short garbage": []byte{1, 2, 3},
	}
	for name, sig := range forgeries {
		forged := *p
		forged.Signature = sig
		res, err := e.Settle(ctx, &forged, r)
		if err != nil || res.Success {
			t.Fatalf("%s: settle = %+v, %v; want a refusal", name, res, err)
		}
		if got := x402.ReasonFromWire(res.ErrorReason); got == x402.ReasonApprovalNotFound {
			t.Fatalf("%s: refused with %s: the forgery reached the approval", name, got)
		}
	}
	res, err := e.Settle(ctx, p, r)
	if err != nil || !res.Success {
		t.Fatalf("genuine settle after the forgeries = %+v, %v; want success with the approval still there", res, err)
	}
}

func flipped(b []byte, i int) []byte {
	c := append([]byte(nil), b...)
	c[i] ^= 0x01
	return c
}
