package facilitator

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"go.uber.org/zap"

	"github.com/x402gate/x402gate/facilitator/txsender"
	"github.com/x402gate/x402gate/x402"
)

// recoverSigner is x402.RecoverSigner, the one signature recovery of a paid request; a
// variable so that a test counts the recoveries per payment.
var recoverSigner = x402.RecoverSigner

// validBeforeSlack is the margin a authorization must still be valid for at verify time:
// "Pad 3 block to account for round tripping" (docs/facilitator.md#verify step 5 6).
const validBeforeSlack = 6

// failure is a logical verification failure: a reason code and a message for the
// response's invalidMessage/errorMessage. The message never carries an RPC URL or a key.
type failure struct {
	reason x402.Reason
	msg    string
}

func fail(r x402.Reason, format string, args ...any) *failure {
	return &failure{reason: r, msg: fmt.Sprintf(format, args...)}
}

// checked is a payment that passed the checks run so far, with everything settle needs.
type checked struct {
	chain *chain
	p     *x402.Payment
	// r is what is paid: its asset and amount are what moves (for upto at settle, the
	// metered amount, at most the signed maximum).
	r    *x402.Requirements
	auth x402.Authorization
	hash common.Hash // EIP-712 digest of the authorization under the configured domain (Permit2's for Permit2)
	sig  []byte      // the signature the token checks: the inner one of an ERC-6492 wrapper
	wrap *erc6492    // set while the signer is an ERC-6492 wallet that is not deployed yet
	eoa  bool        // ecrecover(hash, sig) == from
	key  x402.PaymentKey
	// proven: an in-process Verify proved the signature and the token's state of this
	// very payment (proof), so they are not checked again.
	proven bool
}

// payer is the payment's from address, or "" when the payment did not parse that far.
func payerOf(p *x402.Payment) string {
	if p == nil || p.Authorization.From == (common.Address{}) {
		return ""
	}
	return p.Authorization.From.Hex()
}

// versionOf is the x402 version a response to p is written in; 2 when p is nil.
func versionOf(p *x402.Payment) int {
	if p != nil && p.Version == x402.Version1 {
		return x402.Version1
	}
	return x402.Version2
}

// checkStatic runs, in order, every check that needs no RPC: the pins of network, asset
// and minimum amount, scheme, the exact match with r (checkMatch), the signed digest
// (EIP-3009's under the token's EIP-712 domain, or Permit2's), and the signature of an
// EOA. When the signature recovers to from, it also runs checkRest and the payment is
// fully checked but for chain state. Otherwise c.eoa is false and the caller must check
// the signature against the chain (checkContractSignature) and then run checkRest, which
// keeps the order of docs/protocol.md#headers. A proof pr that covers p paying r stands
// for every check but the time window (c.proven): Verify's checked goes on, and only
// checkRest runs.
func (e *Service) checkStatic(p *x402.Payment, r *x402.Requirements, now time.Time, pr *proof) (*checked, *failure) {
	if pr.covers(p, r) {
		c := pr.c
		c.p, c.r, c.auth, c.sig, c.key, c.proven = p, r, p.Authorization, p.Signature, x402.KeyOf(p, r), true
		if f := checkRest(c, now); f != nil {
			return nil, f
		}
		return c, nil
	}
	if p == nil {
		return nil, fail(x402.ReasonInvalidPayload, "payment payload is missing")
	}
	if r == nil {
		return nil, fail(x402.ReasonInvalidRequirements, "payment requirements are missing")
	}
	if p.Version != x402.Version1 && p.Version != x402.Version2 {
		return nil, fail(x402.ReasonInvalidVersion, "x402Version %d is not supported", p.Version)
	}
	c, f := e.pinned(p, r)
	if f != nil {
		return nil, f
	}
	a := p.Authorization
	if a.Value == nil || a.ValidAfter == nil || a.ValidBefore == nil || a.From == (common.Address{}) {
		return nil, fail(x402.ReasonInvalidPayload, "authorization is incomplete")
	}
	if f := checkMatch(p, r); f != nil {
		return nil, f
	}
	hash, f := e.digest(c, p, r)
	if f != nil {
		return nil, f
	}
	ck := &checked{chain: c, p: p, r: r, auth: a, hash: hash, sig: p.Signature, key: x402.KeyOf(p, r)}
	w, wrapped, err := parseERC6492(e.abi, p.Signature)
	if err != nil || (wrapped && p.Permit2 != nil) {
		return nil, fail(x402.ReasonInvalidSignature, "malformed ERC-6492 signature, or one for Permit2, which takes none")
	}
	if wrapped {
		ck.wrap, ck.sig = &w, w.Inner
	}
	if !wrapped && len(ck.sig) == 65 {
		if signer, err := recoverSigner(hash, ck.sig); err == nil && signer == a.From {
			ck.eoa = true
		}
	}
	if !ck.eoa {
		return ck, nil
	}
	if f := checkRest(ck, now); f != nil {
		return nil, f
	}
	return ck, nil
}

// pinned checks what the facilitator serves (docs/facilitator.md#verify): the network,
// the asset (the network's asset, or a Permit2 token through Permit2), a positive amount
// (upto may settle 0), the payee, the optional minimum (of upto's signed maximum) and the
// scheme, exact or upto, the same on both sides. It returns r's chain.
func (e *Service) pinned(p *x402.Payment, r *x402.Requirements) (*chain, *failure) {
	c, ok := e.chainFor(r.Network)
	if !ok {
		return nil, fail(x402.ReasonInvalidNetwork, "network %q is not served by this facilitator", r.Network)
	}
	if p.Network != r.Network {
		return nil, fail(x402.ReasonNetworkMismatch, "payment network %q differs from the requirement's %q", p.Network, r.Network)
	}
	if !c.accepts(r) {
		return nil, fail(x402.ReasonAssetMismatch, "asset %s is not settled on %s by %s", r.Asset.Hex(), r.Network, r.Transfer())
	}
	upto := r.Scheme == x402.SchemeUpto
	if r.Amount == nil || r.Amount.Sign() < 0 || (r.Amount.Sign() == 0 && !upto) {
		return nil, fail(x402.ReasonInvalidRequirements, "requirement amount must be positive")
	}
	if r.PayTo == (common.Address{}) {
		return nil, fail(x402.ReasonInvalidRequirements, "requirement payTo is empty")
	}
	least := r.Amount
	if upto {
		least = p.Authorization.Value
	}
	if m := c.minAmount; m != nil && least != nil && least.Cmp(m) < 0 {
		return nil, fail(x402.ReasonAmountBelowMinimum, "amount %s is below the minimum %s", least, m)
	}
	if p.Scheme != r.Scheme || (r.Scheme != x402.SchemeExact && !upto) {
		return nil, fail(x402.ReasonInvalidScheme, "scheme must be %q or %q on both sides", x402.SchemeExact, x402.SchemeUpto)
	}
	return c, nil
}

// digest is the EIP-712 digest p's payer signed. EIP-3009 (docs/facilitator.md#verify step
// 2): extra.name and extra.version are required, no fallback, and they must be the
// configured token's domain, or the signature cannot hold on chain. Permit2
// (docs/payments.md#permit2): Permit2's domain on r's chain; upto's witness must name this
// facilitator, the only account its proxy lets settle.
func (e *Service) digest(c *chain, p *x402.Payment, r *x402.Requirements) (common.Hash, *failure) {
	missing := len(p.Signature) == 0
	if a := p.Permit2; a != nil {
		if missing {
			return common.Hash{}, fail(x402.ReasonInvalidPayload, "signature is missing")
		}
		if a.Upto && a.Facilitator != e.address {
			return common.Hash{}, fail(x402.ReasonUptoFacilitatorMismatch, "the witness names facilitator %s, not this one (%s)", a.Facilitator.Hex(), e.address.Hex())
		}
		if a.Amount.Sign() <= 0 {
			return common.Hash{}, fail(x402.ReasonInvalidPayload, "the permitted amount must be positive")
		}
		hash, err := x402.Permit2Hash(c.net.ChainID, a)
		if err != nil {
			return common.Hash{}, fail(x402.ReasonInvalidPayload, "authorization does not hash: %v", err)
		}
		return hash, nil
	}
	name, version, ok := r.Domain()
	if !ok {
		return common.Hash{}, fail(x402.ReasonMissingEIP712Domain, "requirement extra.name and extra.version are required")
	}
	if name != c.net.USDC.Name || version != c.net.USDC.Version {
		return common.Hash{}, fail(x402.ReasonInvalidRequirements, "extra.name/version %q/%q is not the asset's EIP-712 domain", name, version)
	}
	if missing {
		return common.Hash{}, fail(x402.ReasonInvalidPayload, "signature is missing")
	}
	hash, err := x402.TransferWithAuthorizationHash(c.net.ChainID, c.net.USDC.Address, c.net.USDC.Name, c.net.USDC.Version, p.Authorization)
	if err != nil {
		return common.Hash{}, fail(x402.ReasonInvalidPayload, "authorization does not hash: %v", err)
	}
	return hash, nil
}

// checkMatch checks that p pays exactly r by x402's one match rule (Requirements.Matches:
// the accepted requirement, the recipient and the value); a v2 payment must carry the
// accepted requirement, which v1 payments never do.
func checkMatch(p *x402.Payment, r *x402.Requirements) *failure {
	if p.Version == x402.Version2 && p.Accepted == nil {
		return fail(x402.ReasonInvalidPayload, "v2 payment lacks the accepted requirement")
	}
	if err := r.Matches(p); err != nil {
		return fail(x402.ReasonOf(err), "%v", err)
	}
	return nil
}

// checkRest runs the check that follows the signature: the time window
// (docs/facilitator.md#verify; recipient and value matched before, in checkMatch).
func checkRest(c *checked, now time.Time) *failure {
	a := c.auth
	sec := big.NewInt(now.Unix())
	if a.ValidBefore.Cmp(new(big.Int).Add(sec, big.NewInt(validBeforeSlack))) < 0 {
		return fail(x402.ReasonValidBefore, "authorization expires at %s, too soon", a.ValidBefore)
	}
	if a.ValidAfter.Cmp(sec) > 0 {
		return fail(x402.ReasonValidAfter, "authorization is valid only after %s", a.ValidAfter)
	}
	return nil
}

// checkContractSignature decides a signature that is not a plain EOA signature of from:
// ERC-1271 when from has code (the token does the same: strict ERC-1271, no ecrecover
// fallback), else an ERC-6492 wrapper from an allow-listed factory, else invalid.
//
// An ERC-6492 signature of a wallet that is not deployed yet is checked only when its
// factory is allow-listed, by simulation (chain.simulate6492): one eth_call deploys the
// wallet through the factory and runs the token's transferWithAuthorization, whose
// ERC-1271 check of the inner signature decides; nothing is deployed or sent. Settle
// later deploys the wallet for real, and the token checks the signature again.
func (e *Service) checkContractSignature(ctx context.Context, c *checked) *failure {
	from := c.auth.From
	code, err := c.chain.hasCode(ctx, from)
	if err != nil {
		e.logChainErr("verify signature", c.chain, err)
		return fail(x402.ReasonChainUnavailable, "rpc unavailable")
	}
	if code {
		ok, err := c.chain.isValidSignature1271(ctx, from, c.hash, c.sig)
		if err != nil {
			e.logChainErr("verify signature", c.chain, err)
			return fail(x402.ReasonChainUnavailable, "rpc unavailable")
		}
		if !ok {
			return fail(x402.ReasonInvalidSignature, "wallet %s rejects the signature (ERC-1271)", from.Hex())
		}
		c.wrap = nil // deployed: settle needs no factory call
		return nil
	}
	switch {
	case c.wrap != nil && !e.factories[c.wrap.Factory]:
		return fail(x402.ReasonFactoryNotAllowed, "ERC-6492 factory %s is not allow-listed", c.wrap.Factory.Hex())
	case c.wrap != nil:
		return e.check6492(ctx, c)
	case len(c.sig) == 65:
		return fail(x402.ReasonInvalidSignature, "signature does not recover to %s", from.Hex())
	default:
		return fail(x402.ReasonUndeployedWallet, "%s has no code and the signature is not ERC-6492 wrapped", from.Hex())
	}
}

// check6492 simulates the deployment of c's ERC-6492 wallet through its allow-listed
// factory followed by the transfer, so a wrapper whose inner signature the wallet will not
// accept is refused at verify, before settle spends gas on deploying it.
func (e *Service) check6492(ctx context.Context, c *checked) *failure {
	data, err := c.chain.transferCalldata(c.auth, c.sig, false)
	if err != nil {
		return fail(x402.ReasonInvalidSignature, "signature cannot be encoded for the token")
	}
	res, err := c.chain.simulate6492(ctx, c.wrap, data)
	switch {
	case errors.Is(err, txsender.ErrRPCUnavailable):
		e.logChainErr("verify erc-6492 signature", c.chain, err)
		return fail(x402.ReasonChainUnavailable, "rpc unavailable")
	case err != nil:
		e.logChainErr("verify erc-6492 signature", c.chain, err)
		r := revertReason(err)
		if r == x402.ReasonTransactionFailed {
			r = x402.ReasonInvalidSignature
		}
		return fail(r, "the token refuses the transfer signed for the undeployed wallet %s", c.auth.From.Hex())
	case res == sim6492DeployFailed:
		return fail(x402.ReasonUndeployedWallet, "the ERC-6492 factory call fails")
	case res != sim6492OK:
		return fail(x402.ReasonUnexpectedVerify, "the ERC-6492 simulation gave an unexpected answer")
	}
	return nil
}

// verifyPayment runs the whole x402 verification of p against r, without the verdict
// check: the static checks, the signature against the chain when needed, then chain state
// (authorizationState and balanceOf, in one RPC batch). A failure to reach the chain is a
// logical failure with ReasonChainUnavailable.
//
// An upto payment is verified for its maximum: r.Amount must be the permitted amount, as
// @x402/evm's verify wants; its settle then takes any amount up to it.
func (e *Service) verifyPayment(ctx context.Context, p *x402.Payment, r *x402.Requirements) (*checked, *failure) {
	c, f := e.checkSigned(ctx, p, r, nil)
	if f != nil {
		return nil, f
	}
	if a := p.Permit2; a != nil && a.Upto && r.Amount.Cmp(a.Amount) != 0 {
		return nil, fail(x402.ReasonPermit2AmountMismatch, "an upto payment is verified for its maximum: the requirement's amount %s is not the permitted %s", r.Amount, a.Amount)
	}
	if f := e.checkTokenState(ctx, c); f != nil {
		return nil, f
	}
	return c, nil
}

// checkSigned runs every check of verifyPayment but the token's state: the pins, the
// exact match with r, the signature (a contract wallet's through the chain, unless pr
// proves it) and the time window. A payment that passes was signed by its payer for
// exactly r.
func (e *Service) checkSigned(ctx context.Context, p *x402.Payment, r *x402.Requirements, pr *proof) (*checked, *failure) {
	now := e.now()
	c, f := e.checkStatic(p, r, now, pr)
	if f != nil {
		return nil, f
	}
	if f := notReady(c.chain); f != nil {
		return nil, f
	}
	if !c.eoa && !c.proven {
		if f := e.checkContractSignature(ctx, c); f != nil {
			return nil, f
		}
		if f := checkRest(c, now); f != nil {
			return nil, f
		}
	}
	return c, nil
}

// checkTokenState checks the payer's balance and that the nonce is unused, and asks an
// EOA signer that has code (EIP-7702) to accept the signature as the token would.
// A Permit2 payment's state is Permit2's and the token's (checkPermit2State).
func (e *Service) checkTokenState(ctx context.Context, c *checked) *failure {
	if c.p.Permit2 != nil {
		return e.checkPermit2State(ctx, c)
	}
	bal, used, code, err := c.chain.tokenState(ctx, c.auth.From, c.auth.Nonce)
	if err != nil {
		return e.stateFailure(c, err)
	}
	if f := e.checkCodeSigner(ctx, c, code); f != nil {
		return f
	}
	if used {
		return fail(x402.ReasonNonceUsed, "authorization nonce is already used on chain")
	}
	if bal.Cmp(c.auth.Value) < 0 {
		return fail(x402.ReasonInsufficientFunds, "payer balance is below the authorized value")
	}
	return nil
}

// stateFailure is the refusal of a payment whose chain state could not be read.
func (e *Service) stateFailure(c *checked, err error) *failure {
	e.logChainErr("verify token state", c.chain, err)
	if errors.Is(err, txsender.ErrRPCUnavailable) {
		return fail(x402.ReasonChainUnavailable, "rpc unavailable")
	}
	return fail(x402.ReasonUnexpectedVerify, "token state could not be read")
}

// checkCodeSigner runs when the signature recovers to from but from has code (an EIP-7702
// delegated account, or a contract at a key's address): the token, like Permit2, asks
// from's isValidSignature (ERC-1271) whenever from has code, so verify must too.
func (e *Service) checkCodeSigner(ctx context.Context, c *checked, code bool) *failure {
	if !c.eoa || !code {
		return nil
	}
	ok, err := c.chain.isValidSignature1271(ctx, c.auth.From, c.hash, c.sig)
	if err != nil {
		e.logChainErr("verify signature", c.chain, err)
		return fail(x402.ReasonChainUnavailable, "rpc unavailable")
	}
	if !ok {
		return fail(x402.ReasonInvalidSignature, "%s has code and rejects the signature (ERC-1271)", c.auth.From.Hex())
	}
	c.eoa = false // settle must use the bytes overload, as for any contract signer
	return nil
}

// logChainErr logs a chain failure with the RPC URL removed.
func (e *Service) logChainErr(op string, c *chain, err error) {
	detail := c.Redact(err)
	var ce *txsender.ChainError
	if errors.As(err, &ce) {
		detail = ce.Detail()
	}
	e.log.Warn(op, zap.String("network", c.net.CAIP2), zap.String("error", detail))
}

// invalid is the /verify answer for f, in the payment's version.
func invalid(p *x402.Payment, f *failure) x402.VerifyResponse {
	return x402.VerifyResponse{
		IsValid:        false,
		InvalidReason:  reasonFor(p, f.reason).For(versionOf(p)),
		InvalidMessage: f.msg,
		Payer:          payerOf(p),
	}
}

// Verify runs x402 verification of in.Payment against in.Requirements (docs/facilitator.md#api
// /verify), then the verdict check when GUARDIAN_MODE applies to the request, which
// records an approval for the exact payment, and settles the verification fee on a
// terminal verdict. It never settles the merchant payment.
//
// On the wire the fee authorization travels as `verificationPayment` in the /verify body
// (x402.VerifyRequest.VerificationPayment), beside `verificationRequirements`.
//
// Logical failures come back as IsValid false with a reason in the payment's x402
// version; the RPC endpoint being down is ReasonChainUnavailable. The error return is
// reserved for failures that are not the payment's fault.
//
// It keeps no proof for a Settle: the facilitator API serves it as it is. The bundled gate
// uses InProcess, whose Settle reuses what its Verify proved (docs/facilitator.md#settle-order).
func (e *Service) Verify(ctx context.Context, in x402.VerifyInput) (x402.VerifyResponse, error) {
	return e.verify(ctx, in, false)
}

// verify runs Verify; keep says whether a valid payment's proof is kept for Settle.
//
// A proof stands only for the Verify that made it: a later Verify of the same payment drops
// it first (whatever that Verify finds), and a proof is dated when its checks began, not
// after the verdict, so its age bounds how old the checks Settle skips are.
func (e *Service) verify(ctx context.Context, in x402.VerifyInput, keep bool) (x402.VerifyResponse, error) {
	checkedAt := e.now()
	if keep {
		e.proofs.drop(in.Payment)
	}
	c, f := e.verifyPayment(ctx, in.Payment, in.Requirements)
	if f != nil {
		e.log.Debug("verify refused", zap.String("payer", payerOf(in.Payment)), zap.String("reason", string(f.reason)))
		return invalid(in.Payment, f), nil
	}
	resp := x402.VerifyResponse{IsValid: true, Payer: c.auth.From.Hex()}
	if e.verdictApplies(in) {
		resp = e.verdictCheck(ctx, c, in, resp)
	}
	if keep && resp.IsValid {
		e.proofs.put(c, checkedAt)
	}
	return resp, nil
}
