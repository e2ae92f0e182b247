// Package erc20 decodes the policy engine's "evm" protocol (docs/policy.md#evm-actions): a
// plain EVM call that moves the native coin or a token: ERC-20, EIP-2612 permit, EIP-3009
// transfers with authorization, WETH deposit and withdraw.
package erc20

import (
	"math/big"

	"github.com/ethereum/go-ethereum/common"

	"github.com/x402gate/x402gate/verdictserver/engine/actions"
	"github.com/x402gate/x402gate/verdictserver/engine/evmcall"
)

// Protocol is the proposedTx.protocol this package decodes.
const Protocol = "evm"

// Decoder reads Protocol calls (docs/policy.md#evm-actions): the native coin, ERC-20
// transfer, approve, increaseAllowance and transferFrom, EIP-2612 permit, EIP-3009
// transferWithAuthorization and receiveWithAuthorization, and WETH deposit and withdraw.
type Decoder struct{}

// Protocol is "evm".
func (Decoder) Protocol() string { return Protocol }

// Decode reads tx as sent by no one in particular (WETH pays the zero address).
func (d Decoder) Decode(tx map[string]any) (*actions.Action, error) {
	return d.DecodeFor(tx, common.Address{})
}

// DecodeFor reads tx sent by sender: WETH's deposit and withdraw pay the sender.
func (d Decoder) DecodeFor(tx map[string]any, sender common.Address) (*actions.Action, error) {
	return d.DecodeInto(tx, sender, nil)
}

// DecodeInto is DecodeFor, building the action in s.
func (Decoder) DecodeInto(tx map[string]any, sender common.Address, s *actions.Scratch) (*actions.Action, error) {
	c, de := evmcall.ReadCall(tx, s)
	if de != nil {
		return nil, de
	}
	to := c.To
	act := s.CallAction(Protocol, c.ChainID, to, c.Selector())
	act.Fields["value"] = evmcall.ValueText(c.Value)
	if len(c.Data) == 0 {
		act.Kind = "evm.native"
		act.Recipients = []common.Address{to}
		act.Assets = []common.Address{actions.NativeAsset}
		act.Notional = []actions.Amount{{Asset: actions.NativeAsset, Value: c.Value}}
		return act, nil
	}
	m, vals, de := evmcall.Method(ABI, c.Data)
	if de != nil {
		return nil, de
	}
	if m.RawName == "deposit" || m.RawName == "withdraw" {
		// docs/policy.md#evm-actions: only the chain's own WETH is read; another contract's
		// deposit() could do anything.
		if w, known := evmcall.WrappedNative(c.ChainID); !known || w != to {
			return nil, actions.Fail("to", m.RawName+" is read only on the chain's WETH")
		}
		act.Assets, act.Recipients = []common.Address{actions.NativeAsset, to}, []common.Address{sender}
		if m.RawName == "deposit" {
			act.Kind, act.Notional = "weth.deposit", []actions.Amount{{Asset: actions.NativeAsset, Value: c.Value}}
			return act, nil
		}
		if c.Value.Sign() != 0 {
			return nil, actions.Fail("value", "must be 0 for withdraw")
		}
		wad := vals[0].(*big.Int)
		act.Kind, act.Notional = "weth.withdraw", []actions.Amount{{Asset: to, Value: wad}}
		act.Fields["amount"] = wad.String()
		return act, nil
	}
	if c.Value.Sign() != 0 {
		return nil, actions.Fail("value", "must be 0 for "+m.RawName+": a token call sends no native coin")
	}
	token := to
	act.Assets = []common.Address{token}
	switch m.Name {
	case "transfer":
		rcpt, v := vals[0].(common.Address), vals[1].(*big.Int)
		act.Kind = "erc20.transfer"
		act.Recipients, act.Notional = []common.Address{rcpt}, []actions.Amount{{Asset: token, Value: v}}
		act.Fields["recipient"], act.Fields["amount"] = rcpt, v.String()
	case "approve", "increaseAllowance", "permit":
		var sp common.Address
		var v *big.Int
		if m.Name == "permit" {
			owner := vals[0].(common.Address)
			sp, v = vals[1].(common.Address), vals[2].(*big.Int)
			act.Screen = []common.Address{owner}
			act.Fields["owner"] = owner
		} else {
			sp, v = vals[0].(common.Address), vals[1].(*big.Int)
		}
		act.Kind = "erc20." + m.Name
		if m.Name == "permit" {
			act.Kind = "eip2612.permit"
		}
		act.Notional = []actions.Amount{}
		actions.Grant(act, sp, token, v, actions.MaxUint256)
		act.Fields["spender"], act.Fields["amount"], act.Fields["unlimited"] = sp, v.String(), act.Allowances[0].Unlimited
	case "transferFrom":
		from, rcpt, v := vals[0].(common.Address), vals[1].(common.Address), vals[2].(*big.Int)
		act.Kind = "erc20.transferFrom"
		act.Recipients, act.Screen, act.Notional = []common.Address{rcpt}, []common.Address{from}, []actions.Amount{{Asset: token, Value: v}}
		act.Fields["from"], act.Fields["recipient"], act.Fields["amount"] = from, rcpt, v.String()
	case "transferWithAuthorization", "transferWithAuthorization0", "receiveWithAuthorization":
		from, rcpt, v := vals[0].(common.Address), vals[1].(common.Address), vals[2].(*big.Int)
		act.Kind = "eip3009." + m.RawName
		act.Recipients, act.Screen, act.Notional = []common.Address{rcpt}, []common.Address{from}, []actions.Amount{{Asset: token, Value: v}}
		act.Fields["from"], act.Fields["recipient"], act.Fields["amount"] = from, rcpt, v.String()
	default:
		return nil, actions.Fail("data", m.Sig+" is not one this decoder reads")
	}
	return act, nil
}

var (
	_ actions.ScratchDecoder = Decoder{}
	_ actions.SenderDecoder  = Decoder{}
)
