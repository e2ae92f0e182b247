package facilitator

import (
	"bytes"
	"math/big"

	"github.com/ethereum/go-ethereum/common"

	"github.com/x402gate/x402gate/x402"
)

// seen is a copy of every value of a payment and its requirements that Verify's static
// checks read (docs/facilitator.md#settle-order): the signed fields of the authorization,
// EIP-3009's and Permit2's, and the terms they were pinned and matched against. Equal
// values mean an equal digest, pins and match, so Settle compares them instead of
// hashing the payment again. It holds no pointer into the payment: a value changed in
// place after Verify differs from its copy.
type seen struct {
	version         int
	scheme, network string
	auth            authSeen
	permit2         permit2Seen
	isPermit2       bool
	accepted        terms // the v2 accepted requirement; zero when it is nil
	hasAccepted     bool
	req             terms
	// tooBig: an integer does not fit 256 bits. No verified payment has one (its digest
	// does not hash), so no proof is kept with it, and no copy with it equals a proof's.
	tooBig bool
}

// authSeen is a copy of the EIP-3009 authorization's fields (for a Permit2 payment, the
// same facts of Permit2, which the payment key and the settle read).
type authSeen struct {
	from, to                       common.Address
	value, validAfter, validBefore word
	nonce                          [32]byte
}

// permit2Seen is a copy of the Permit2 authorization's fields, its witness included.
type permit2Seen struct {
	from, token, spender, to, facilitator common.Address
	amount, nonce, deadline, validAfter   word
	upto                                  bool
}

// terms is a copy of what the pins and the match read of a requirement.
type terms struct {
	scheme, network, transfer, name, version string
	asset, payTo                             common.Address
	amount                                   word
}

// word is an integer field as a comparable value: unset for nil, else its sign and its
// 256-bit magnitude.
type word struct {
	abs      [32]byte
	neg, set bool
}

// atMost reports whether w and max are set, not negative, and w ≤ max.
func (w word) atMost(max word) bool {
	return w.set && max.set && !w.neg && !max.neg && bytes.Compare(w.abs[:], max.abs[:]) <= 0
}

// seenOf copies what the checks read of p paying r.
func seenOf(p *x402.Payment, r *x402.Requirements) seen {
	a := p.Authorization
	s := seen{version: p.Version, scheme: p.Scheme, network: p.Network}
	s.auth = authSeen{from: a.From, to: a.To, value: s.word(a.Value), validAfter: s.word(a.ValidAfter),
		validBefore: s.word(a.ValidBefore), nonce: a.Nonce}
	if m := p.Permit2; m != nil {
		s.isPermit2 = true
		s.permit2 = permit2Seen{from: m.From, token: m.Token, spender: m.Spender, to: m.To, facilitator: m.Facilitator,
			amount: s.word(m.Amount), nonce: s.word(m.Nonce), deadline: s.word(m.Deadline), validAfter: s.word(m.ValidAfter), upto: m.Upto}
	}
	if p.Accepted != nil {
		s.hasAccepted, s.accepted = true, s.terms(p.Accepted)
	}
	s.req = s.terms(r)
	return s
}

// terms copies what the checks read of r.
func (s *seen) terms(r *x402.Requirements) terms {
	name, version, _ := r.Domain()
	return terms{scheme: r.Scheme, network: r.Network, transfer: r.Transfer(), name: name, version: version,
		asset: r.Asset, payTo: r.PayTo, amount: s.word(r.Amount)}
}

// word is x as a word; one that does not fit 256 bits marks s tooBig.
func (s *seen) word(x *big.Int) word {
	var w word
	switch {
	case x == nil:
	case x.BitLen() > 256:
		s.tooBig = true
	default:
		x.FillBytes(w.abs[:])
		w.neg, w.set = x.Sign() < 0, true
	}
	return w
}
