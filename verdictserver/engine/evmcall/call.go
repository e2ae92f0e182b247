// Package evmcall reads the EVM call that every EVM protocol's proposedTx is
// (docs/policy.md#evm-actions), strictly: its members, its call data against a built-in ABI
// in the canonical encoding only, and what the decoders know of each chain's assets.
package evmcall

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
	"github.com/x402gate/x402gate/verdictserver/engine/internal/intern"
)

// maxCalldata bounds proposedTx.data (128 KiB of bytes).
const maxCalldata = 128 << 10

// Call is a decoded EVM call: the proposedTx of every EVM protocol (docs/policy.md#evm-actions),
// {protocol, chainId, to, data, value, nonce?}.
type Call struct {
	ChainID int64
	To      common.Address
	// Data is the call data; it may be the buffer of the scratch ReadCall was given.
	Data  []byte
	Value *big.Int
}

var evmMembers = map[string]bool{"protocol": true, "chainId": true, "to": true, "data": true, "value": true, "nonce": true}

// ReadCall reads the members of an EVM call strictly: to is required (a contract creation
// is not an action we judge), data is 0x-prefixed hex (absent: none), value a decimal string
// of base units (absent: 0), nonce a JSON integer >= 0 or a decimal string.
//
// The call data goes into scratch's buffer when scratch is not nil (actions.Scratch).
func ReadCall(tx map[string]any, scratch *actions.Scratch) (Call, *actions.DecodeError) {
	var c Call
	for k := range tx {
		if !evmMembers[k] {
			return c, actions.Fail(k, "is not a member of an EVM call")
		}
	}
	id, ok := actions.ChainID(tx["chainId"])
	if !ok {
		return c, actions.Fail("chainId", "must be a positive integer")
	}
	c.ChainID = id
	to, de := actions.AddressMember(tx, "to")
	if de != nil {
		return c, de
	}
	c.To = to
	if raw, present := tx["data"]; present {
		s, ok := raw.(string)
		if !ok || !strings.HasPrefix(s, "0x") || len(s)%2 != 0 || len(s) > 2+2*maxCalldata {
			return c, actions.Fail("data", "must be 0x-prefixed hex of whole bytes, at most 128 KiB")
		}
		b, err := actions.HexBytes(s[2:], scratch)
		if err != nil {
			return c, actions.Fail("data", "must be 0x-prefixed hex of whole bytes, at most 128 KiB")
		}
		c.Data = b
	}
	c.Value = new(big.Int)
	if raw, present := tx["value"]; present {
		s, ok := raw.(string)
		switch {
		case ok && s == "0":
		case ok:
			v, good := actions.BaseUnits(s)
			if !good {
				return c, actions.Fail("value", "must be a decimal string of base units below 2^256, without sign or leading zero")
			}
			c.Value = v
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

// Selector is the call's 4-byte selector, "0x" and 8 hex digits; "0x" for none.
func (c Call) Selector() string {
	if len(c.Data) < 4 {
		return "0x"
	}
	return SelectorText(c.Data[:4])
}

// selectors caches SelectorText.
var selectors intern.Memo[uint32, string]

// SelectorText is "0x" and the 8 hex digits of a 4-byte selector, cached.
func SelectorText(sel []byte) string {
	n := binary.BigEndian.Uint32(sel)
	return selectors.Get(n, intern.Mix(uint64(n)), func(n uint32) string {
		var b [4]byte
		binary.BigEndian.PutUint32(b[:], n)
		return "0x" + hex.EncodeToString(b[:])
	}).Val
}

// ValueText is v in decimal; "0" without allocating.
func ValueText(v *big.Int) string {
	if v.Sign() == 0 {
		return "0"
	}
	return v.String()
}

// Unpack decodes args from enc strictly: the encoding must be the canonical one (packing
// the values again gives the same bytes: Canonical checks that in place), so dirty address
// words, odd offsets and trailing bytes are refused as the contract would not read them the
// same way.
func Unpack(args abi.Arguments, enc []byte) ([]any, error) {
	vals, err := UnpackAny(args, enc)
	if err != nil {
		return nil, err
	}
	if !Canonical(args, enc) {
		return nil, fmt.Errorf("not the canonical abi encoding")
	}
	return vals, nil
}

// UnpackAny decodes args from enc as go-ethereum reads them, canonical or not; a panic of the
// unpacking is a malformed encoding.
func UnpackAny(args abi.Arguments, enc []byte) (out []any, err error) {
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

// Method finds the method of a with the call's selector and unpacks its arguments.
func Method(a *ABI, data []byte) (*abi.Method, []any, *actions.DecodeError) {
	m, de := MethodOf(a, data)
	if de != nil {
		return nil, nil, de
	}
	vals, de := MethodArgs(m, data)
	if de != nil {
		return nil, nil, de
	}
	return m, vals, nil
}

// MethodOf finds the method of a with the call's selector.
func MethodOf(a *ABI, data []byte) (*abi.Method, *actions.DecodeError) {
	if len(data) < 4 {
		return nil, actions.Fail("data", "has no 4-byte selector")
	}
	m := a.MethodByID(data[:4])
	if m == nil {
		return nil, actions.Fail("data", "selector 0x"+hex.EncodeToString(data[:4])+" is not one this decoder reads")
	}
	return m, nil
}

// MethodArgs unpacks the arguments of the call data to m.
func MethodArgs(m *abi.Method, data []byte) ([]any, *actions.DecodeError) {
	vals, err := Unpack(m.Inputs, data[4:])
	if err != nil {
		return nil, actions.Fail("data", m.Sig+": "+err.Error())
	}
	return vals, nil
}
