package facilitator

import (
	"bytes"
	"context"
	"reflect"
	"sync"
	"time"

	"github.com/x402gate/x402gate/x402"
)

// proofTTL is how long what Verify proved of a payment stands for its in-process Settle.
// A gate settles right after it verifies; a proof older than this gets the full checks.
const proofTTL = 30 * time.Second

// maxProofs bounds the proofs kept at once. A Verify that finds the cache full of fresh
// proofs keeps none, and its Settle runs the full checks.
const maxProofs = 4096

// proof is what an in-process Verify proved of one payment (docs/facilitator.md#settle-order):
// that its signature is its payer's (an EOA's, recovered; a contract wallet's, asked on
// chain), that it passed the pins and the match, and that the token's state let it pay
// (balance, unused nonce, the code of from). The in-process Settle of the very same
// payment and requirements values reuses it instead of hashing and recovering the
// signature, pinning, matching and reading the token's state again: it compares the
// values with Verify's copy of them (covers) and checks the time window, the one check
// whose answer changes with time; the token's simulation before the broadcast decides on
// the state of the moment.
type proof struct {
	c    *checked // Verify's checks of the payment; its Settle goes on from them
	seen seen     // a copy of the values Verify's checks read
	sig  []byte   // a copy of the payment's signature bytes as Verify saw them
	at   time.Time
}

// covers reports whether pr proves p paying r: its signature bytes and every value the
// checks read are the ones Verify checked, but for an upto requirement's amount, which
// may be less than the verified maximum (standsFor).
func (pr *proof) covers(p *x402.Payment, r *x402.Requirements) bool {
	if pr == nil || p == nil || r == nil || !bytes.Equal(pr.sig, p.Signature) {
		return false
	}
	s := seenOf(p, r)
	if s.req.scheme == x402.SchemeUpto && s.req.amount.atMost(pr.seen.req.amount) {
		s.req.amount = pr.seen.req.amount
	}
	return s == pr.seen
}

// standsFor reports whether pr, proved of the payment paying pr.c.r, stands for its settle
// against r: the very same requirements, or, for upto, a copy of them whose amount is at
// most the proved one (the gate settles the metered cost in a copy, docs/gate.md#metering).
// The signature does not sign the settled amount, and a balance and allowance proved for
// the maximum cover any amount below it; the simulation still decides on the moment's state.
func (pr *proof) standsFor(r *x402.Requirements) bool {
	if pr.c.r == r {
		return true
	}
	if r == nil || r.Scheme != x402.SchemeUpto || r.Amount == nil || pr.c.r.Amount == nil || r.Amount.Cmp(pr.c.r.Amount) > 0 {
		return false
	}
	same := *r
	same.Amount = pr.c.r.Amount
	return reflect.DeepEqual(&same, pr.c.r)
}

// proofs holds the proofs of in-process Verify calls until their Settle takes them. It is
// keyed by the payment value itself: only a caller that hands Settle the very payment it
// verified finds one, never a remote /settle, whose payment is decoded anew.
type proofs struct {
	mu sync.Mutex
	m  map[*x402.Payment]*proof
}

// put keeps the proof of c, proved at now. The proof of an ERC-6492 wrapped signature is
// not kept: a wallet not deployed yet is deployed by its settle, and whether another
// deployed it meanwhile is for the chain to say again; the settle of a deployed one
// unwraps it again (c.sig is only the inner signature).
func (ps *proofs) put(c *checked, now time.Time) {
	if c.wrap != nil || len(c.sig) != len(c.p.Signature) {
		return
	}
	s := seenOf(c.p, c.r)
	if s.tooBig {
		return
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.m == nil {
		ps.m = map[*x402.Payment]*proof{}
	}
	if len(ps.m) >= maxProofs {
		for p, pr := range ps.m {
			if now.Sub(pr.at) > proofTTL {
				delete(ps.m, p)
			}
		}
		if len(ps.m) >= maxProofs {
			return
		}
	}
	ps.m[c.p] = &proof{c: c, seen: s, sig: bytes.Clone(c.p.Signature), at: now}
}

// drop forgets the proof of p, if any.
func (ps *proofs) drop(p *x402.Payment) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	delete(ps.m, p)
}

// take removes and returns the proof of p paying r, or nil when there is none for these
// values, or it is older than proofTTL (or from the future: a clock that went back).
func (ps *proofs) take(p *x402.Payment, r *x402.Requirements, now time.Time) *proof {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	pr, ok := ps.m[p]
	if !ok {
		return nil
	}
	delete(ps.m, p)
	if age := now.Sub(pr.at); !pr.standsFor(r) || age < 0 || age > proofTTL {
		return nil
	}
	return pr
}

// InProcess is a Service as a gate in the same process uses it (docs/facilitator.md#settle-order):
// its Verify keeps what it proved of a valid payment, and its Settle of the very same
// payment and requirements values reuses that proof. Reuse is opt-in: Service's own Verify
// and Settle, which the facilitator API serves to remote gates, keep no proof and run every
// check, whatever wraps them.
type InProcess struct{ *Service }

// InProcess returns e as the bundled gate uses it.
func (e *Service) InProcess() InProcess { return InProcess{e} }

// Verify is Service.Verify, keeping a valid payment's proof for its Settle.
func (b InProcess) Verify(ctx context.Context, in x402.VerifyInput) (x402.VerifyResponse, error) {
	return b.verify(ctx, in, true)
}

// Settle is Service.Settle, reusing what Verify proved of the very same payment and
// requirements values.
func (b InProcess) Settle(ctx context.Context, p *x402.Payment, r *x402.Requirements) (x402.SettleResponse, error) {
	res, err := b.settle(ctx, p, r, true, b.proofs.take(p, r, b.now()))
	return res.resp, err
}
