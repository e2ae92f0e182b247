package engine

import (
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/big"
	"strconv"
	"strings"

	"github.com/ethereum/go-ethereum/accounts/abi"
	"github.com/ethereum/go-ethereum/common"
	"github.com/x402gate/x402gate/verdictserver/engine/actions"
)

// The EVM protocols (docs/policy.md#evm-actions). Both read the same proposedTx: an EVM call
// {protocol, chainId, to, data, value, nonce?}.
const (
	// ProtocolEVM is plain transfers: native coin, ERC-20 transfer, approve, transferFrom,
	// and EIP-3009 transferWithAuthorization.
	ProtocolEVM = "evm"
	// ProtocolUniswap is calls to Uniswap's routers: V2 Router02, V3 SwapRouter,
	// SwapRouter02 (with multicall) and the Universal Router.
	ProtocolUniswap = "uniswap"
)

// maxCalldata bounds proposedTx.data (128 KiB of bytes).
const maxCalldata = 128 << 10

// evmCall is a decoded EVM call.
type evmCall struct {
	chainID int64
	to      common.Address
	data    []byte
	value   *big.Int
}

var evmMembers = map[string]bool{"protocol": true, "chainId": true, "to": true, "data": true, "value": true, "nonce": true}

// readCall reads the members of an EVM call strictly: to is required (a contract creation
// is not an action we judge), data is 0x-prefixed hex (absent: none), value a decimal string
// of base units (absent: 0), nonce a JSON integer >= 0 or a decimal string.
//
// The call data goes into scratch's buffer when scratch is not nil (actions.Scratch.calldata).
func readCall(tx map[string]any, scratch *actions.Scratch) (evmCall, *DecodeError) {
	var c evmCall
	for k := range tx {
		if !evmMembers[k] {
			return c, actions.Fail(k, "is not a member of an EVM call")
		}
	}
	id, ok := actions.ChainID(tx["chainId"])
	if !ok {
		return c, actions.Fail("chainId", "must be a positive integer")
	}
	c.chainID = id
	to, de := actions.AddressMember(tx, "to")
	if de != nil {
		return c, de
	}
	c.to = to
	if raw, present := tx["data"]; present {
		s, ok := raw.(string)
		if !ok || !strings.HasPrefix(s, "0x") || len(s)%2 != 0 || len(s) > 2+2*maxCalldata {
			return c, actions.Fail("data", "must be 0x-prefixed hex of whole bytes, at most 128 KiB")
		}
		b, err := actions.HexBytes(s[2:], scratch)
		if err != nil {
			return c, actions.Fail("data", "must be 0x-prefixed hex of whole bytes, at most 128 KiB")
		}
		c.data = b
	}
	c.value = new(big.Int)
	if raw, present := tx["value"]; present {
		s, ok := raw.(string)
		switch {
		case ok && s == "0":
		case ok:
			v, good := actions.BaseUnits(s)
			if !good {
				return c, actions.Fail("value", "must be a decimal string of base units below 2^256, without sign or leading zero")
			}
			c.value = v
		default:
			return c, actions.Fail("value", "must be a decimal string of base units")
		}
	}
	if raw, present := tx["nonce"]; present && !nonceOK(raw) {
		return c, actions.Fail("nonce", "must be an integer from 0 to 2^64-1, as a JSON number or a decimal string")
	}
	return c, nil
}

func nonceOK(v any) bool {
	switch x := v.(type) {
	case json.Number:
		_, err := strconv.ParseUint(x.String(), 10, 64)
		return err == nil
	case int64:
		return x >= 0
	case int:
		return x >= 0
	case string:
		if x == "0" {
			return true
		}
		n, ok := actions.BaseUnits(x)
		return ok && n.IsUint64()
	}
	return false
}

func (c evmCall) selector() string {
	if len(c.data) < 4 {
		return "0x"
	}
	return selectorText(c.data[:4])
}

// selectorText is "0x" and the 8 hex digits of a 4-byte selector, cached.
func selectorText(sel []byte) string {
	return reasonText(reasonKey{kind: rSelector, n: int64(binary.BigEndian.Uint32(sel))}, func(k reasonKey) string {
		var b [4]byte
		binary.BigEndian.PutUint32(b[:], uint32(k.n))
		return "0x" + hex.EncodeToString(b[:])
	}).Val
}

// valueText is v in decimal; "0" without allocating.
func valueText(v *big.Int) string {
	if v.Sign() == 0 {
		return "0"
	}
	return v.String()
}

// unpack decodes args from enc strictly: the encoding must be the canonical one (packing
// the values again gives the same bytes: canonical checks that in place), so dirty address
// words, odd offsets and trailing bytes are refused as the contract would not read them the
// same way.
func unpack(args abi.Arguments, enc []byte) ([]any, error) {
	vals, err := unpackAny(args, enc)
	if err != nil {
		return nil, err
	}
	if !canonical(args, enc) {
		return nil, fmt.Errorf("not the canonical abi encoding")
	}
	return vals, nil
}

// unpackAny decodes args from enc as go-ethereum reads them, canonical or not; a panic of the
// unpacking is a malformed encoding.
func unpackAny(args abi.Arguments, enc []byte) (out []any, err error) {
	defer func() {
		if r := recover(); r != nil {
			out, err = nil, fmt.Errorf("malformed abi encoding")
		}
	}()
	vals, err := args.Unpack(enc)
	if err != nil {
		return nil, fmt.Errorf("malformed abi encoding")
	}
	return vals, nil
}

// method finds the method of a with the call's selector and unpacks its arguments.
func method(a *abi.ABI, data []byte) (*abi.Method, []any, *DecodeError) {
	m, de := methodOf(a, data)
	if de != nil {
		return nil, nil, de
	}
	vals, de := methodArgs(m, data)
	if de != nil {
		return nil, nil, de
	}
	return m, vals, nil
}

// methodOf finds the method of a with the call's selector.
func methodOf(a *abi.ABI, data []byte) (*abi.Method, *DecodeError) {
	if len(data) < 4 {
		return nil, actions.Fail("data", "has no 4-byte selector")
	}
	m := methodByID(a, data[:4])
	if m == nil {
		return nil, actions.Fail("data", "selector 0x"+hex.EncodeToString(data[:4])+" is not one this decoder reads")
	}
	return m, nil
}

// methodArgs unpacks the arguments of the call data to m.
func methodArgs(m *abi.Method, data []byte) ([]any, *DecodeError) {
	vals, err := unpack(m.Inputs, data[4:])
	if err != nil {
		return nil, actions.Fail("data", m.Sig+": "+err.Error())
	}
	return vals, nil
}
