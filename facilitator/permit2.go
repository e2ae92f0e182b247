package facilitator

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"strings"

	"github.com/ethereum/go-ethereum/accounts/abi"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/ethereum/go-ethereum/rpc"

	"github.com/x402gate/x402gate/facilitator/journal"
	"github.com/x402gate/x402gate/facilitator/txsender"
	"github.com/x402gate/x402gate/x402"
)

// permit2ABIJSON is what the facilitator calls for a Permit2 payment (docs/payments.md#permit2):
// the token's allowance, Permit2's nonceBitmap, and the settle of the x402 exact and upto
// proxies, whose tuples are the reference's.
const permit2ABIJSON = `[
{"type":"function","name":"allowance","stateMutability":"view","inputs":[
 {"name":"owner","type":"address"},{"name":"spender","type":"address"}],"outputs":[{"name":"","type":"uint256"}]},
{"type":"function","name":"nonceBitmap","stateMutability":"view","inputs":[
 {"name":"owner","type":"address"},{"name":"wordPos","type":"uint256"}],"outputs":[{"name":"","type":"uint256"}]}
]`

// permitTupleJSON is ISignatureTransfer.PermitTransferFrom.
const permitTupleJSON = `{"name":"permit","type":"tuple","components":[
 {"name":"permitted","type":"tuple","components":[{"name":"token","type":"address"},{"name":"amount","type":"uint256"}]},
 {"name":"nonce","type":"uint256"},{"name":"deadline","type":"uint256"}]}`

var (
	exactSettleJSON = `[{"type":"function","name":"settle","stateMutability":"nonpayable","outputs":[],"inputs":[` + permitTupleJSON + `,
 {"name":"owner","type":"address"},
 {"name":"witness","type":"tuple","components":[{"name":"to","type":"address"},{"name":"validAfter","type":"uint256"}]},
 {"name":"signature","type":"bytes"}]}]`
	uptoSettleJSON = `[{"type":"function","name":"settle","stateMutability":"nonpayable","outputs":[],"inputs":[` + permitTupleJSON + `,
 {"name":"amount","type":"uint256"},{"name":"owner","type":"address"},
 {"name":"witness","type":"tuple","components":[{"name":"to","type":"address"},{"name":"facilitator","type":"address"},{"name":"validAfter","type":"uint256"}]},
 {"name":"signature","type":"bytes"}]}]`
)

// permit2ABI holds the parsed Permit2 calls.
type permit2ABI struct {
	reads       abi.ABI
	exactSettle abi.Method
	uptoSettle  abi.Method
}

func parsePermit2ABI() (*permit2ABI, error) {
	reads, err := abi.JSON(strings.NewReader(permit2ABIJSON))
	if err != nil {
		return nil, fmt.Errorf("parse permit2 abi: %w", err)
	}
	exact, err := abi.JSON(strings.NewReader(exactSettleJSON))
	if err != nil {
		return nil, fmt.Errorf("parse exact proxy abi: %w", err)
	}
	upto, err := abi.JSON(strings.NewReader(uptoSettleJSON))
	if err != nil {
		return nil, fmt.Errorf("parse upto proxy abi: %w", err)
	}
	return &permit2ABI{reads: reads, exactSettle: exact.Methods["settle"], uptoSettle: upto.Methods["settle"]}, nil
}

// The tuples of the proxies' settle, as abi.Pack takes them.
type (
	tokenPermissions struct {
		Token  common.Address
		Amount *big.Int
	}
	permitTuple struct {
		Permitted tokenPermissions
		Nonce     *big.Int
		Deadline  *big.Int
	}
	exactWitness struct {
		To         common.Address
		ValidAfter *big.Int
	}
	uptoWitness struct {
		To          common.Address
		Facilitator common.Address
		ValidAfter  *big.Int
	}
)

// proxySettleCalldata packs the settle of a's proxy: the exact proxy moves the permitted
// amount, the upto proxy amount (at most the permitted one; the proxy refuses more).
func (t *tokenABI) proxySettleCalldata(a *x402.Permit2Authorization, amount *big.Int, sig []byte) ([]byte, error) {
	permit := permitTuple{Permitted: tokenPermissions{a.Token, a.Amount}, Nonce: a.Nonce, Deadline: a.Deadline}
	m, args := t.p2.exactSettle, []any{permit, a.From, exactWitness{a.To, a.ValidAfter}, sig}
	if a.Upto {
		m, args = t.p2.uptoSettle, []any{permit, amount, a.From, uptoWitness{a.To, a.Facilitator, a.ValidAfter}, sig}
	}
	packed, err := m.Inputs.Pack(args...)
	if err != nil {
		return nil, fmt.Errorf("pack proxy settle: %w", err)
	}
	return append(append([]byte{}, m.ID...), packed...), nil
}

// nonceWord splits a Permit2 nonce into its word position and bit (Permit2's bitmapPositions).
func nonceWord(nonce *big.Int) (wordPos *big.Int, bit uint) {
	return new(big.Int).Rsh(nonce, 8), uint(new(big.Int).And(nonce, big.NewInt(0xff)).Uint64())
}

// permit2State reads, in one JSON-RPC batch, the payer's balance of token and its
// allowance to Permit2, whether Permit2 has spent the nonce, and whether from has code.
func (c *chain) permit2State(ctx context.Context, from, token common.Address, nonce *big.Int) (bal, allowance *big.Int, used, code bool, err error) {
	wordPos, bit := nonceWord(nonce)
	var balOut, allowOut, wordOut, codeOut hexutil.Bytes
	batch := []rpc.BatchElem{
		c.viewCall(token, &balOut, c.abi.abi, "balanceOf", from),
		c.viewCall(token, &allowOut, c.abi.p2.reads, "allowance", from, x402.Permit2Address),
		c.viewCall(x402.Permit2Address, &wordOut, c.abi.p2.reads, "nonceBitmap", from, wordPos),
		{Method: "eth_getCode", Args: []any{from, "latest"}, Result: &codeOut},
	}
	if err := c.batch(ctx, "permit2 state", batch); err != nil {
		return nil, nil, false, false, err
	}
	words := make([]*big.Int, 3)
	for i, out := range []hexutil.Bytes{balOut, allowOut, wordOut} {
		if words[i], err = uint256Of(out); err != nil {
			return nil, nil, false, false, fmt.Errorf("decode permit2 state: %w", err)
		}
	}
	return words[0], words[1], words[2].Bit(int(bit)) == 1, len(codeOut) > 0, nil
}

// viewCall is the batch element of an eth_call of method at to, or one whose Args hold the
// packing error so that batch fails it.
func (c *chain) viewCall(to common.Address, out *hexutil.Bytes, parsed abi.ABI, method string, args ...any) rpc.BatchElem {
	data, err := parsed.Pack(method, args...)
	if err != nil {
		return rpc.BatchElem{Method: "eth_call", Error: fmt.Errorf("pack %s: %w", method, err)}
	}
	return rpc.BatchElem{Method: "eth_call", Args: []any{callArg(to, data), "latest"}, Result: out}
}

// batch sends elems in one JSON-RPC batch: a node's error reply is ErrCallReverted, a
// transport failure a chainError.
func (c *chain) batch(ctx context.Context, op string, elems []rpc.BatchElem) error {
	for _, el := range elems {
		if el.Error != nil {
			return el.Error
		}
	}
	if err := c.BatchCall(ctx, elems); err != nil {
		return c.Unavailable(op, err)
	}
	for _, el := range elems {
		if el.Error != nil {
			if txsender.IsRPCReply(el.Error) {
				return fmt.Errorf("%s: %w: %s", op, txsender.ErrCallReverted, c.Redact(el.Error))
			}
			return c.Unavailable(op, el.Error)
		}
	}
	return nil
}

// uint256Of decodes one ABI word.
func uint256Of(out []byte) (*big.Int, error) {
	if len(out) != 32 {
		return nil, fmt.Errorf("answer of %d bytes, want one word", len(out))
	}
	return new(big.Int).SetBytes(out), nil
}

// permit2NonceUsed reads whether Permit2 has spent from's nonce (32 bytes, big-endian).
func (c *chain) permit2NonceUsed(ctx context.Context, from common.Address, nonce [32]byte) (bool, error) {
	wordPos, bit := nonceWord(new(big.Int).SetBytes(nonce[:]))
	data, err := c.abi.p2.reads.Pack("nonceBitmap", from, wordPos)
	if err != nil {
		return false, fmt.Errorf("pack nonceBitmap: %w", err)
	}
	out, err := c.call(ctx, x402.Permit2Address, data, "nonceBitmap")
	if err != nil {
		return false, err
	}
	word, err := uint256Of(out)
	if err != nil {
		return false, fmt.Errorf("decode nonceBitmap: %w", err)
	}
	return word.Bit(int(bit)) == 1, nil
}

// accepts reports whether c settles r's asset: the network's asset by either transfer
// method, a Permit2 token of the network's configuration only through Permit2.
func (c *chain) accepts(r *x402.Requirements) bool {
	return r.Asset == c.net.USDC.Address || (r.Transfer() == x402.TransferPermit2 && c.permit2Tokens[r.Asset])
}

// checkPermit2State checks, for a Permit2 payment, that Permit2 has not spent its nonce,
// that the payer holds the amount and has approved Permit2 for at least it (else
// permit2_allowance_required, which a gate answers 412), and asks an EOA signer that has
// code to accept the signature as Permit2 would.
func (e *Service) checkPermit2State(ctx context.Context, c *checked) *failure {
	bal, allowance, used, code, err := c.chain.permit2State(ctx, c.auth.From, c.r.Asset, c.p.Permit2.Nonce)
	if err != nil {
		return e.stateFailure(c, err)
	}
	if f := e.checkCodeSigner(ctx, c, code); f != nil {
		return f
	}
	switch {
	case used:
		return fail(x402.ReasonNonceUsed, "the Permit2 nonce is already used on chain")
	case bal.Cmp(c.r.Amount) < 0:
		return fail(x402.ReasonInsufficientFunds, "payer balance is below the amount")
	case allowance.Cmp(c.r.Amount) < 0:
		return fail(x402.ReasonPermit2AllowanceRequired, "the payer's allowance to Permit2 is below the amount: the payer must approve Permit2 (%s) for this token once", x402.Permit2Address.Hex())
	}
	return nil
}

// permit2Reasons are the @x402/evm names of the checks a Permit2 payment fails, where
// they differ from EIP-3009's.
var permit2Reasons = map[x402.Reason]x402.Reason{
	x402.ReasonInvalidSignature:  x402.ReasonPermit2InvalidSignature,
	x402.ReasonValidBefore:       x402.ReasonPermit2DeadlineExpired,
	x402.ReasonValidAfter:        x402.ReasonPermit2NotYetValid,
	x402.ReasonNonceUsed:         x402.ReasonPermit2InvalidNonce,
	x402.ReasonInsufficientFunds: x402.ReasonPermit2InsufficientBalance,
}

// reasonFor is r as a refusal of p names it: its Permit2 name for a Permit2 payment.
func reasonFor(p *x402.Payment, r x402.Reason) x402.Reason {
	if p != nil && p.Permit2 != nil {
		if pr, ok := permit2Reasons[r]; ok {
			return pr
		}
	}
	return r
}

// permit2Reverts maps the custom errors of Permit2 and of the x402 proxies to reasons.
var permit2Reverts = func() map[string]x402.Reason {
	m := map[string]x402.Reason{}
	for sig, r := range map[string]x402.Reason{
		"InvalidNonce()":                 x402.ReasonNonceUsed,
		"SignatureExpired(uint256)":      x402.ReasonValidBefore,
		"InvalidSigner()":                x402.ReasonInvalidSignature,
		"InvalidSignature()":             x402.ReasonInvalidSignature,
		"InvalidSignatureLength()":       x402.ReasonInvalidSignature,
		"InvalidContractSignature()":     x402.ReasonInvalidSignature,
		"InvalidAmount(uint256)":         x402.ReasonPermit2AmountMismatch,
		"PaymentTooEarly()":              x402.ReasonValidAfter,
		"AmountExceedsPermitted()":       x402.ReasonUptoSettlementExceedsAmount,
		"UnauthorizedFacilitator()":      x402.ReasonUptoFacilitatorMismatch,
		"InvalidAmount()":                x402.ReasonPermit2AmountMismatch,
		"InvalidDestination()":           x402.ReasonPermit2RecipientMismatch,
		"InvalidOwner()":                 x402.ReasonInvalidPayload,
		"Permit2612AmountMismatch()":     x402.ReasonPermit2AmountMismatch,
		"ReentrancyGuardReentrantCall()": x402.ReasonTransactionFailed,
	} {
		m[hexutil.Encode(crypto.Keccak256([]byte(sig))[:4])] = r
	}
	return m
}()

// permit2RevertReason maps a revert of a proxy's settle to a reason by the custom error's
// selector in the node's message (anvil and reth write "custom error 0x…"); a message
// without a known one is a failed transaction.
func permit2RevertReason(err error) x402.Reason {
	if !errors.Is(err, txsender.ErrCallReverted) {
		return x402.ReasonTransactionFailed
	}
	m := strings.ToLower(err.Error())
	for i := strings.Index(m, "0x"); i >= 0 && i+10 <= len(m); {
		if r, ok := permit2Reverts[m[i:i+10]]; ok {
			return r
		}
		next := strings.Index(m[i+2:], "0x")
		if next < 0 {
			break
		}
		i += 2 + next
	}
	return revertReason(err)
}

// authorizationSpent reads whether the authorization of a journal row is spent on chain:
// the bit of its nonce in Permit2's nonceBitmap for a Permit2 payment, the token's
// authorizationState otherwise.
func (c *chain) authorizationSpent(ctx context.Context, row journal.Settlement) (bool, error) {
	if x402.IsPermit2Key(row.PaymentKey) {
		return c.permit2NonceUsed(ctx, row.Payer, row.Nonce)
	}
	return c.authorizationUsed(ctx, row.Payer, row.Nonce)
}
