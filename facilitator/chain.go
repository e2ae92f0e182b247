package facilitator

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/big"
	"strings"
	"sync"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/accounts/abi"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/rpc"

	"github.com/x402gate/x402gate/facilitator/txsender"
	"github.com/x402gate/x402gate/x402"
)

// tokenABIJSON is the minimal ABI of the EIP-3009 token functions the engine calls, and of
// ERC-1271 isValidSignature. The product carries its own copy so it never depends on test
// artifacts (docs/protocol.md#eip-712-and-eip-3009 lists the selectors).
const tokenABIJSON = `[
{"type":"function","name":"transferWithAuthorization","stateMutability":"nonpayable","outputs":[],"inputs":[
 {"name":"from","type":"address"},{"name":"to","type":"address"},{"name":"value","type":"uint256"},
 {"name":"validAfter","type":"uint256"},{"name":"validBefore","type":"uint256"},{"name":"nonce","type":"bytes32"},
 {"name":"v","type":"uint8"},{"name":"r","type":"bytes32"},{"name":"s","type":"bytes32"}]},
{"type":"function","name":"transferWithAuthorization","stateMutability":"nonpayable","outputs":[],"inputs":[
 {"name":"from","type":"address"},{"name":"to","type":"address"},{"name":"value","type":"uint256"},
 {"name":"validAfter","type":"uint256"},{"name":"validBefore","type":"uint256"},{"name":"nonce","type":"bytes32"},
 {"name":"signature","type":"bytes"}]},
{"type":"function","name":"authorizationState","stateMutability":"view","inputs":[
 {"name":"authorizer","type":"address"},{"name":"nonce","type":"bytes32"}],"outputs":[{"name":"","type":"bool"}]},
{"type":"function","name":"balanceOf","stateMutability":"view","inputs":[{"name":"account","type":"address"}],
 "outputs":[{"name":"","type":"uint256"}]},
{"type":"function","name":"name","stateMutability":"view","inputs":[],"outputs":[{"name":"","type":"string"}]},
{"type":"function","name":"version","stateMutability":"view","inputs":[],"outputs":[{"name":"","type":"string"}]},
{"type":"function","name":"isValidSignature","stateMutability":"view","inputs":[
 {"name":"hash","type":"bytes32"},{"name":"signature","type":"bytes"}],"outputs":[{"name":"","type":"bytes4"}]},
{"type":"event","name":"Transfer","anonymous":false,"inputs":[
 {"name":"from","type":"address","indexed":true},{"name":"to","type":"address","indexed":true},
 {"name":"value","type":"uint256","indexed":false}]}
]`

// Canonical signatures of the two transferWithAuthorization overloads.
const (
	sigTransferVRS   = "transferWithAuthorization(address,address,uint256,uint256,uint256,bytes32,uint8,bytes32,bytes32)"
	sigTransferBytes = "transferWithAuthorization(address,address,uint256,uint256,uint256,bytes32,bytes)"
)

// erc1271Magic is the value isValidSignature returns for a valid signature (ERC-1271).
var erc1271Magic = [4]byte{0x16, 0x26, 0xba, 0x7e}

// erc6492Suffix ends every ERC-6492 wrapped signature (docs/protocol.md#eip-712-and-eip-3009).
var erc6492Suffix = common.FromHex("0x6492649264926492649264926492649264926492649264926492649264926492")

// tokenABI holds the parsed ABI and the methods the engine packs.
type tokenABI struct {
	abi           abi.ABI
	transferVRS   abi.Method
	transferBytes abi.Method
	transferTopic common.Hash
	erc6492Args   abi.Arguments
	p2            *permit2ABI
}

var loadTokenABI = sync.OnceValues(func() (*tokenABI, error) {
	parsed, err := abi.JSON(strings.NewReader(tokenABIJSON))
	if err != nil {
		return nil, fmt.Errorf("parse token abi: %w", err)
	}
	t := &tokenABI{abi: parsed, transferTopic: parsed.Events["Transfer"].ID}
	for _, m := range parsed.Methods {
		switch m.Sig {
		case sigTransferVRS:
			t.transferVRS = m
		case sigTransferBytes:
			t.transferBytes = m
		}
	}
	if t.transferVRS.Name == "" || t.transferBytes.Name == "" {
		return nil, errors.New("token abi lacks a transferWithAuthorization overload")
	}
	addrT, _ := abi.NewType("address", "", nil)
	bytesT, _ := abi.NewType("bytes", "", nil)
	t.erc6492Args = abi.Arguments{{Type: addrT}, {Type: bytesT}, {Type: bytesT}}
	if t.p2, err = parsePermit2ABI(); err != nil {
		return nil, err
	}
	return t, nil
})

// erc6492 is the decoded wrapper of an ERC-6492 signature:
// abi.encode(address factory, bytes factoryCalldata, bytes innerSig) ‖ magic suffix.
type erc6492 struct {
	Factory  common.Address
	Calldata []byte
	Inner    []byte
}

// parseERC6492 unwraps sig when it carries the ERC-6492 suffix. ok is false for a plain
// signature; err is set when the suffix is present but the wrapper does not decode.
func parseERC6492(t *tokenABI, sig []byte) (w erc6492, ok bool, err error) {
	if len(sig) < len(erc6492Suffix) || !bytes.Equal(sig[len(sig)-len(erc6492Suffix):], erc6492Suffix) {
		return erc6492{}, false, nil
	}
	vals, err := t.erc6492Args.Unpack(sig[:len(sig)-len(erc6492Suffix)])
	if err != nil || len(vals) != 3 {
		return erc6492{}, true, fmt.Errorf("decode erc-6492 wrapper: %w", errOr(err, "wrong arity"))
	}
	factory, ok1 := vals[0].(common.Address)
	calldata, ok2 := vals[1].([]byte)
	inner, ok3 := vals[2].([]byte)
	if !ok1 || !ok2 || !ok3 {
		return erc6492{}, true, errors.New("decode erc-6492 wrapper: unexpected types")
	}
	return erc6492{Factory: factory, Calldata: calldata, Inner: inner}, true, nil
}

func errOr(err error, msg string) error {
	if err != nil {
		return err
	}
	return errors.New(msg)
}

// chain is one configured network: its settings, its RPC node and its sender.
type chain struct {
	*txsender.Node
	minAmount *big.Int // NetworkConfig.MinAmount; nil: no minimum
	net       x402.Network
	// permit2Tokens are the tokens settled through Permit2 only (NetworkConfig.Permit2Tokens).
	permit2Tokens map[common.Address]bool
	abi           *tokenABI
	sender        txSender // the primary lane's sender: simulations, reads, resends
	pool          *pool    // the signer lanes that send settlements
	balanceMu     sync.Mutex
	balance       *big.Int // cached native balance of the signer
	assetBalance  *big.Int // cached asset balance of the signer
	balanceAt     int64    // unix nanos of the cached read
	// state is the network's readiness (Service.Ready).
	state netState
}

// call runs eth_call of data against the token. A node reply (revert) comes back as
// txsender.ErrCallReverted; anything else as a chainError.
func (c *chain) call(ctx context.Context, to common.Address, data []byte, op string) ([]byte, error) {
	out, err := c.Client.CallContract(ctx, ethereum.CallMsg{To: &to, Data: data}, nil)
	if err != nil {
		if txsender.IsRPCReply(err) {
			return nil, fmt.Errorf("%s: %w: %s", op, txsender.ErrCallReverted, c.Redact(err))
		}
		return nil, c.Unavailable(op, err)
	}
	return out, nil
}

// codeAt reports whether addr has contract code.
func (c *chain) hasCode(ctx context.Context, addr common.Address) (bool, error) {
	code, err := c.Client.CodeAt(ctx, addr, nil)
	if err != nil {
		return false, c.Unavailable("eth_getCode", err)
	}
	return len(code) > 0, nil
}

// isValidSignature1271 asks the wallet at addr whether sig signs hash (ERC-1271). A revert
// or any value other than the magic is "invalid", not an error.
func (c *chain) isValidSignature1271(ctx context.Context, addr common.Address, hash common.Hash, sig []byte) (bool, error) {
	data, err := c.abi.abi.Pack("isValidSignature", hash, sig)
	if err != nil {
		return false, fmt.Errorf("pack isValidSignature: %w", err)
	}
	out, err := c.call(ctx, addr, data, "isValidSignature")
	if errors.Is(err, txsender.ErrCallReverted) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return len(out) >= 4 && [4]byte(out[:4]) == erc1271Magic, nil
}

// tokenState reads balanceOf(from) and authorizationState(from, nonce), and whether from
// has code, in one JSON-RPC batch, so a verify costs one round trip to the node.
func (c *chain) tokenState(ctx context.Context, from common.Address, nonce [32]byte) (bal *big.Int, used, code bool, err error) {
	balData, err := c.abi.abi.Pack("balanceOf", from)
	if err != nil {
		return nil, false, false, fmt.Errorf("pack balanceOf: %w", err)
	}
	stateData, err := c.abi.abi.Pack("authorizationState", from, nonce)
	if err != nil {
		return nil, false, false, fmt.Errorf("pack authorizationState: %w", err)
	}
	asset := c.net.USDC.Address
	var balOut, stateOut, codeOut hexutil.Bytes
	batch := []rpc.BatchElem{
		{Method: "eth_call", Args: []any{callArg(asset, balData), "latest"}, Result: &balOut},
		{Method: "eth_call", Args: []any{callArg(asset, stateData), "latest"}, Result: &stateOut},
		{Method: "eth_getCode", Args: []any{from, "latest"}, Result: &codeOut},
	}
	if err := c.BatchCall(ctx, batch); err != nil {
		return nil, false, false, c.Unavailable("token state", err)
	}
	for _, el := range batch {
		if el.Error != nil {
			if txsender.IsRPCReply(el.Error) {
				return nil, false, false, fmt.Errorf("token state: %w: %s", txsender.ErrCallReverted, c.Redact(el.Error))
			}
			return nil, false, false, c.Unavailable("token state", el.Error)
		}
	}
	balVals, err := c.abi.abi.Unpack("balanceOf", balOut)
	if err != nil || len(balVals) != 1 {
		return nil, false, false, fmt.Errorf("decode balanceOf: %w", errOr(err, "empty result"))
	}
	usedOut, err := c.abi.abi.Unpack("authorizationState", stateOut)
	if err != nil || len(usedOut) != 1 {
		return nil, false, false, fmt.Errorf("decode authorizationState: %w", errOr(err, "empty result"))
	}
	b, ok1 := balVals[0].(*big.Int)
	u, ok2 := usedOut[0].(bool)
	if !ok1 || !ok2 {
		return nil, false, false, errors.New("decode token state: unexpected types")
	}
	return b, u, len(codeOut) > 0, nil
}

// signerBalances reads addr's native balance and its balance of the asset in one
// JSON-RPC batch.
func (c *chain) signerBalances(ctx context.Context, addr common.Address) (*big.Int, *big.Int, error) {
	data, err := c.abi.abi.Pack("balanceOf", addr)
	if err != nil {
		return nil, nil, fmt.Errorf("pack balanceOf: %w", err)
	}
	var native hexutil.Big
	var assetOut hexutil.Bytes
	batch := []rpc.BatchElem{
		{Method: "eth_getBalance", Args: []any{addr, "latest"}, Result: &native},
		{Method: "eth_call", Args: []any{callArg(c.net.USDC.Address, data), "latest"}, Result: &assetOut},
	}
	if err := c.BatchCall(ctx, batch); err != nil {
		return nil, nil, c.Unavailable("signer balances", err)
	}
	for _, el := range batch {
		if el.Error != nil {
			return nil, nil, c.Unavailable("signer balances", el.Error)
		}
	}
	vals, err := c.abi.abi.Unpack("balanceOf", assetOut)
	if err != nil || len(vals) != 1 {
		return nil, nil, fmt.Errorf("decode balanceOf: %w", errOr(err, "empty result"))
	}
	asset, ok := vals[0].(*big.Int)
	if !ok {
		return nil, nil, errors.New("decode balanceOf: not a uint256")
	}
	return native.ToInt(), asset, nil
}

// authorizationUsed reads authorizationState(from, nonce).
func (c *chain) authorizationUsed(ctx context.Context, from common.Address, nonce [32]byte) (bool, error) {
	data, err := c.abi.abi.Pack("authorizationState", from, nonce)
	if err != nil {
		return false, fmt.Errorf("pack authorizationState: %w", err)
	}
	out, err := c.call(ctx, c.net.USDC.Address, data, "authorizationState")
	if err != nil {
		return false, err
	}
	vals, err := c.abi.abi.Unpack("authorizationState", out)
	if err != nil || len(vals) != 1 {
		return false, fmt.Errorf("decode authorizationState: %w", errOr(err, "empty result"))
	}
	used, ok := vals[0].(bool)
	if !ok {
		return false, errors.New("decode authorizationState: not a bool")
	}
	return used, nil
}

// callArg is the eth_call transaction object for a plain call of data at to.
func callArg(to common.Address, data []byte) map[string]any {
	return map[string]any{"to": to, "input": hexutil.Bytes(data)}
}

// transferCalldata packs transferWithAuthorization for a: the (v,r,s) overload for an EOA
// signature (vrs), the bytes overload for a contract wallet's signature of any length
// (docs/facilitator.md#verify: EOAs use v,r,s for tokens that lack the bytes overload).
func (c *chain) transferCalldata(a x402.Authorization, sig []byte, vrs bool) ([]byte, error) {
	m := c.abi.transferBytes
	args := []any{a.From, a.To, a.Value, a.ValidAfter, a.ValidBefore, a.Nonce}
	if vrs {
		v, r, s, err := x402.SplitSignature(sig)
		if err != nil {
			return nil, fmt.Errorf("split signature: %w", err)
		}
		m = c.abi.transferVRS
		args = append(args, v, r, s)
	} else {
		args = append(args, sig)
	}
	packed, err := m.Inputs.Pack(args...)
	if err != nil {
		return nil, fmt.Errorf("pack %s: %w", m.Sig, err)
	}
	return append(append([]byte{}, m.ID...), packed...), nil
}

// EVM opcodes of the ERC-6492 simulation program.
const (
	opIsZero         = 0x15
	opCodeCopy       = 0x39
	opReturnDataSize = 0x3d
	opReturnDataCopy = 0x3e
	opMStore         = 0x52
	opJumpI          = 0x57
	opGas            = 0x5a
	opJumpDest       = 0x5b
	opPush1          = 0x60
	opPush4          = 0x63
	opPush20         = 0x73
	opCall           = 0xf1
	opReturn         = 0xf3
	opRevert         = 0xfd
)

// Results of the ERC-6492 simulation program.
const (
	sim6492OK           = 1 // the factory call and the transfer both succeeded
	sim6492DeployFailed = 2 // the factory call reverted
)

// erc6492SimCode assembles the init code of a throw-away contract that, run by eth_call
// without a recipient (nothing is deployed or sent), calls factory with factoryData, then
// token with transferData, and returns one word: sim6492OK, or sim6492DeployFailed when
// the factory call fails. When the transfer fails it reverts with the token's revert data,
// so the node's error names the token's reason. This is the check of an ERC-6492
// signature of a wallet not deployed yet: deploy, then let the token run its own
// ERC-1271 check, in one simulated call (docs/facilitator.md#verify step 10 does the same with
// Multicall3, which a chain need not have).
func erc6492SimCode(factory, token common.Address, factoryData, transferData []byte) []byte {
	// build assembles the program for the given data offsets and jump targets, and
	// reports where its two exits and its end are. The layout does not depend on the
	// operands (fixed-width pushes), so a first pass with zeros finds the positions.
	build := func(off1, off2, transferFail, deployFail uint32) (p []byte, tf, df uint32) {
		push1 := func(v byte) { p = append(p, opPush1, v) }
		push4 := func(v uint32) { p = append(p, opPush4, byte(v>>24), byte(v>>16), byte(v>>8), byte(v)) }
		// call copies n bytes of code at off to memory 0 and calls to with them; when the
		// call fails it jumps to fail.
		call := func(to common.Address, off, n, fail uint32) {
			push4(n)
			push4(off)
			push1(0)
			p = append(p, opCodeCopy) // memory[0:n] = code[off:off+n]
			push1(0)                  // retSize
			push1(0)                  // retOffset
			push4(n)                  // argsSize
			push1(0)                  // argsOffset
			push1(0)                  // value
			p = append(p, opPush20)
			p = append(p, to[:]...)
			p = append(p, opGas, opCall, opIsZero)
			push4(fail)
			p = append(p, opJumpI)
		}
		word := func(v byte) { // return the 32-byte word v
			push1(v)
			push1(0)
			p = append(p, opMStore)
			push1(32)
			push1(0)
			p = append(p, opReturn)
		}
		call(factory, off1, uint32(len(factoryData)), deployFail)
		call(token, off2, uint32(len(transferData)), transferFail)
		word(sim6492OK)
		tf = uint32(len(p))
		p = append(p, opJumpDest, opReturnDataSize) // revert with the token's revert data
		push1(0)
		push1(0)
		p = append(p, opReturnDataCopy, opReturnDataSize)
		push1(0)
		p = append(p, opRevert)
		df = uint32(len(p))
		p = append(p, opJumpDest)
		word(sim6492DeployFailed)
		return p, tf, df
	}
	probe, tf, df := build(0, 0, 0, 0)
	off1 := uint32(len(probe))
	off2 := off1 + uint32(len(factoryData))
	code, _, _ := build(off1, off2, tf, df)
	code = append(code, factoryData...)
	return append(code, transferData...)
}

// simulate6492 runs the ERC-6492 simulation of w's wallet deployment and transferData
// against the asset. It returns sim6492OK or sim6492DeployFailed; a transfer the token
// refuses comes back wrapped in txsender.ErrCallReverted with the token's message, a transport
// failure as a chainError.
func (c *chain) simulate6492(ctx context.Context, w *erc6492, transferData []byte) (int, error) {
	code := erc6492SimCode(w.Factory, c.net.USDC.Address, w.Calldata, transferData)
	var out hexutil.Bytes
	err := c.Client.Client().CallContext(ctx, &out, "eth_call", map[string]any{"input": hexutil.Bytes(code)}, "latest")
	if err != nil {
		if txsender.IsRPCReply(err) {
			return 0, fmt.Errorf("erc-6492 simulation: %w: %s", txsender.ErrCallReverted, c.Redact(err))
		}
		return 0, c.Unavailable("erc-6492 simulation", err)
	}
	if len(out) != 32 {
		return 0, fmt.Errorf("erc-6492 simulation: %w: answer of %d bytes", txsender.ErrCallReverted, len(out))
	}
	return int(out[31]), nil
}
