package facilitator

import (
	"bytes"
	"context"
	"sync"
	"time"

	"github.com/ethereum/go-ethereum/common"

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
// chain) and that the token's state let it pay (balance, unused nonce, the code of from).
// The in-process Settle of the very same payment and requirements values reuses it
// instead of recovering the signature and reading the token's state again; it still
// runs every check that needs neither, and the token's simulation before the broadcast
// decides on the state of the moment.
type proof struct {
	r    *x402.Requirements
	hash common.Hash // the EIP-712 digest Verify checked the signature against
	sig  []byte      // a copy of the payment's signature bytes as Verify saw them
	eoa  bool        // checked.eoa after Verify: an EOA signature the token checks by ecrecover
	at   time.Time
}

// covers reports whether pr proves the signature sig of digest hash: the payment has not
// changed since Verify, since the digest covers every signed field of the authorization.
func (pr *proof) covers(hash common.Hash, sig []byte) bool {
	return pr != nil && pr.hash == hash && bytes.Equal(pr.sig, sig)
}

// proofs holds the proofs of in-process Verify calls until their Settle takes them. It is
// keyed by the payment value itself: only a caller that hands Settle the very payment it
// verified finds one, never a remote /settle, whose payment is decoded anew.
type proofs struct {
	mu sync.Mutex
	m  map[*x402.Payment]proof
}

// put keeps the proof of c, proved at now. The proof of an ERC-6492 wallet that is not
// deployed yet is not kept: its settle deploys the wallet, and whether another deployed
// it meanwhile is for the chain to say again.
func (ps *proofs) put(c *checked, now time.Time) {
	if c.wrap != nil {
		return
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.m == nil {
		ps.m = map[*x402.Payment]proof{}
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
	ps.m[c.p] = proof{r: c.r, hash: c.hash, sig: bytes.Clone(c.p.Signature), eoa: c.eoa, at: now}
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
	if age := now.Sub(pr.at); pr.r != r || age < 0 || age > proofTTL {
		return nil
	}
	return &pr
}

// Remote is a Service as the facilitator API serves it to remote gates
// (docs/facilitator.md#settle-order): its Verify keeps no proof and its Settle runs every
// check, whatever an earlier /verify proved. httpapi.NewHandler serves a Service through it.
type Remote struct{ s *Service }

// Remote returns e as the facilitator API serves it.
func (e *Service) Remote() *Remote { return &Remote{s: e} }

// Verify is Service.Verify, keeping no proof for a Settle.
func (r *Remote) Verify(ctx context.Context, in x402.VerifyInput) (x402.VerifyResponse, error) {
	return r.s.verify(ctx, in, false)
}

// Settle is Service.Settle with every check run.
func (r *Remote) Settle(ctx context.Context, p *x402.Payment, req *x402.Requirements) (x402.SettleResponse, error) {
	res, err := r.s.settle(ctx, p, req, true, nil)
	return res.resp, err
}

// Supported is Service.Supported.
func (r *Remote) Supported(ctx context.Context) (x402.SupportedResponse, error) {
	return r.s.Supported(ctx)
}
