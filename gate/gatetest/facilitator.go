// Package gatetest provides a fake gate.Facilitator for tests, in the manner of
// net/http/httptest: a gate's own rules (the challenge, retry credits, passes, matching a
// payment to the route's accepts) and the facilitator API's HTTP layer can be tested
// without a chain.
//
// It is a test double. It checks no signature, reads no balance and sends no
// transaction: tests of the real parts (the facilitator's verify and settle, the chain, a
// payment that moves money) stay end to end, on anvil with our token
// (docs/gate.md#facilitator).
package gatetest

import (
	"context"
	"sync"

	"github.com/ethereum/go-ethereum/crypto"

	"github.com/x402gate/x402gate/gate"
	"github.com/x402gate/x402gate/x402"
)

// The methods of gate.Facilitator, as Call.Method names them.
const (
	MethodVerify           = "Verify"
	MethodSettle           = "Settle"
	MethodSupported        = "Supported"
	MethodSettlementStatus = "SettlementStatus"
)

// Call is one call a Facilitator received.
type Call struct {
	// Method is MethodVerify, MethodSettle, MethodSupported or MethodSettlementStatus.
	Method string
	// Input is what Verify was given; zero for the other methods.
	Input x402.VerifyInput
	// Payment and Requirements are what the call was about; nil for Supported.
	Payment      *x402.Payment
	Requirements *x402.Requirements
}

// Facilitator is a gate.Facilitator whose answers a test scripts. It also satisfies
// facilitator/httpapi.Backend. It is safe for concurrent use.
//
// Unscripted, it answers as an honest facilitator whose every payment is good: Verify
// approves a payment that matches its requirements, Settle settles an authorization once
// (a second Settle of it is refused as a used nonce, and so is a Verify after it),
// Supported lists "exact" in x402 v1 and v2 and "upto" in v2 (with Signer as its
// facilitatorAddress) on its networks, and SettlementStatus reports
// a settled authorization's settlement, and settlement_pending for any other.
type Facilitator struct {
	mu       sync.Mutex
	networks []x402.Network
	scripts  scripts
	calls    []Call
	settled  map[string]x402.SettleResponse // by x402.PaymentKey.String()
}

// scripts are the answers a test scripted; a nil one is the default.
type scripts struct {
	verify    func(context.Context, x402.VerifyInput) (x402.VerifyResponse, error)
	settle    func(context.Context, *x402.Payment, *x402.Requirements) (x402.SettleResponse, error)
	supported func(context.Context) (x402.SupportedResponse, error)
	status    func(context.Context, *x402.Payment, *x402.Requirements) (x402.SettleResponse, error)
}

var _ gate.Facilitator = (*Facilitator)(nil)

// NewFacilitator returns a Facilitator that settles on networks; none means Base Sepolia
// (x402.BaseSepolia).
func NewFacilitator(networks ...x402.Network) *Facilitator {
	if len(networks) == 0 {
		networks = []x402.Network{x402.BaseSepolia}
	}
	return &Facilitator{networks: networks, settled: map[string]x402.SettleResponse{}}
}

// OnVerify makes fn answer every later Verify; nil restores the default.
func (f *Facilitator) OnVerify(fn func(context.Context, x402.VerifyInput) (x402.VerifyResponse, error)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.scripts.verify = fn
}

// OnSettle makes fn answer every later Settle; nil restores the default. A settlement fn
// reports as successful counts as settled for the default Verify and SettlementStatus.
func (f *Facilitator) OnSettle(fn func(context.Context, *x402.Payment, *x402.Requirements) (x402.SettleResponse, error)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.scripts.settle = fn
}

// OnSupported makes fn answer every later Supported; nil restores the default.
func (f *Facilitator) OnSupported(fn func(context.Context) (x402.SupportedResponse, error)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.scripts.supported = fn
}

// OnSettlementStatus makes fn answer every later SettlementStatus; nil restores the
// default. A facilitator that cannot report a status returns an error wrapping
// errors.ErrUnsupported, as a remote one does.
func (f *Facilitator) OnSettlementStatus(fn func(context.Context, *x402.Payment, *x402.Requirements) (x402.SettleResponse, error)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.scripts.status = fn
}

// Calls returns the calls received so far, in order.
func (f *Facilitator) Calls() []Call {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Call(nil), f.calls...)
}

// Count is how many calls of method were received.
func (f *Facilitator) Count(method string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, c := range f.calls {
		if c.Method == method {
			n++
		}
	}
	return n
}

// Verify records the call and answers as scripted (see Facilitator).
func (f *Facilitator) Verify(ctx context.Context, in x402.VerifyInput) (x402.VerifyResponse, error) {
	fn := f.record(Call{Method: MethodVerify, Input: in, Payment: in.Payment, Requirements: in.Requirements}).verify
	if fn != nil {
		return fn(ctx, in)
	}
	p, r := in.Payment, in.Requirements
	if err := r.Matches(p); err != nil {
		return x402.VerifyResponse{InvalidReason: x402.ReasonOf(err).For(p.Version), InvalidMessage: err.Error()}, nil
	}
	if f.settlement(p, r) != nil {
		return x402.VerifyResponse{InvalidReason: x402.ReasonNonceUsed.For(p.Version), Payer: payer(p)}, nil
	}
	return x402.VerifyResponse{IsValid: true, Payer: payer(p)}, nil
}

// Settle records the call and answers as scripted (see Facilitator).
func (f *Facilitator) Settle(ctx context.Context, p *x402.Payment, r *x402.Requirements) (x402.SettleResponse, error) {
	fn := f.record(Call{Method: MethodSettle, Payment: p, Requirements: r}).settle
	if fn == nil {
		fn = f.settleOnce
	}
	sr, err := fn(ctx, p, r)
	if err == nil && sr.Success {
		f.mu.Lock()
		f.settled[x402.KeyOf(p, r).String()] = sr
		f.mu.Unlock()
	}
	return sr, err
}

// settleOnce is the default Settle: the first settles, every later one is refused as a
// used nonce, even when they race.
func (f *Facilitator) settleOnce(_ context.Context, p *x402.Payment, r *x402.Requirements) (x402.SettleResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	key := x402.KeyOf(p, r).String()
	if _, ok := f.settled[key]; ok {
		return x402.SettleResponse{ErrorReason: x402.ReasonNonceUsed.For(p.Version), Payer: payer(p), Network: f.networkName(p)}, nil
	}
	sr := f.Settled(p, r)
	f.settled[key] = sr
	return sr, nil
}

// Supported records the call and answers as scripted (see Facilitator).
func (f *Facilitator) Supported(ctx context.Context) (x402.SupportedResponse, error) {
	fn := f.record(Call{Method: MethodSupported}).supported
	if fn != nil {
		return fn(ctx)
	}
	out := x402.SupportedResponse{Extensions: []string{}, Signers: map[string][]string{"eip155:*": {Signer}}}
	for _, n := range f.networks {
		out.Kinds = append(out.Kinds,
			x402.SupportedKind{X402Version: x402.Version1, Scheme: x402.SchemeExact, Network: n.Name},
			x402.SupportedKind{X402Version: x402.Version2, Scheme: x402.SchemeExact, Network: n.CAIP2},
			x402.SupportedKind{X402Version: x402.Version2, Scheme: "upto", Network: n.CAIP2, Extra: map[string]any{"facilitatorAddress": Signer}})
	}
	return out, nil
}

// SettlementStatus records the call and answers as scripted (see Facilitator).
func (f *Facilitator) SettlementStatus(ctx context.Context, p *x402.Payment, r *x402.Requirements) (x402.SettleResponse, error) {
	fn := f.record(Call{Method: MethodSettlementStatus, Payment: p, Requirements: r}).status
	if fn != nil {
		return fn(ctx, p, r)
	}
	if sr := f.settlement(p, r); sr != nil {
		return *sr, nil
	}
	return x402.SettleResponse{ErrorReason: x402.ReasonSettlementPending.For(p.Version), Payer: payer(p), Network: f.networkName(p)}, nil
}

// Signer is the address Supported names as the facilitator's signer.
const Signer = "0x0000000000000000000000000000000000000402"

// Settled is the successful settlement of p, as the default Settle answers it: its
// transaction hash is the keccak256 of the payment's key, so the same authorization
// always settles in the same transaction, and its network is named in p's x402 version.
func (f *Facilitator) Settled(p *x402.Payment, r *x402.Requirements) x402.SettleResponse {
	tx := crypto.Keccak256Hash([]byte(x402.KeyOf(p, r).String())).Hex()
	return x402.SettleResponse{Success: true, Payer: payer(p), Transaction: tx, Network: f.networkName(p), Amount: r.Amount.String()}
}

// networkName names p's network as p's x402 version does: the v1 name or the CAIP-2 id.
func (f *Facilitator) networkName(p *x402.Payment) string {
	if p.Version == x402.Version1 {
		for _, n := range f.networks {
			if n.CAIP2 == p.Network {
				return n.Name
			}
		}
	}
	return p.Network
}

// record appends c and returns f's scripts as they are at the call.
func (f *Facilitator) record(c Call) scripts {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, c)
	return f.scripts
}

// settlement is the recorded settlement of p, nil when it has none.
func (f *Facilitator) settlement(p *x402.Payment, r *x402.Requirements) *x402.SettleResponse {
	f.mu.Lock()
	defer f.mu.Unlock()
	if sr, ok := f.settled[x402.KeyOf(p, r).String()]; ok {
		return &sr
	}
	return nil
}

func payer(p *x402.Payment) string { return p.Authorization.From.Hex() }
