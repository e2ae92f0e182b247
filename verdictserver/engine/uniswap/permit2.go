package uniswap

import (
	"math/big"

	"github.com/ethereum/go-ethereum/common"

	"github.com/x402gate/x402gate/verdictserver/engine/actions"
	"github.com/x402gate/x402gate/verdictserver/engine/evmcall"
)

// Permit2 (docs/policy.md#permit2): the allowances it grants and the transfers it makes, read
// the same way whether the agent calls Permit2 itself or a Universal Router carries them.

const permit2ABIJSON = `[
{"type":"function","name":"approve","inputs":[{"name":"token","type":"address"},{"name":"spender","type":"address"},{"name":"amount","type":"uint160"},{"name":"expiration","type":"uint48"}]},
{"type":"function","name":"permit","inputs":[{"name":"owner","type":"address"},{"name":"permitSingle","type":"tuple","components":[{"name":"details","type":"tuple","components":[{"name":"token","type":"address"},{"name":"amount","type":"uint160"},{"name":"expiration","type":"uint48"},{"name":"nonce","type":"uint48"}]},{"name":"spender","type":"address"},{"name":"sigDeadline","type":"uint256"}]},{"name":"signature","type":"bytes"}]},
{"type":"function","name":"permit","inputs":[{"name":"owner","type":"address"},{"name":"permitBatch","type":"tuple","components":[{"name":"details","type":"tuple[]","components":[{"name":"token","type":"address"},{"name":"amount","type":"uint160"},{"name":"expiration","type":"uint48"},{"name":"nonce","type":"uint48"}]},{"name":"spender","type":"address"},{"name":"sigDeadline","type":"uint256"}]},{"name":"signature","type":"bytes"}]},
{"type":"function","name":"transferFrom","inputs":[{"name":"from","type":"address"},{"name":"to","type":"address"},{"name":"amount","type":"uint160"},{"name":"token","type":"address"}]},
{"type":"function","name":"transferFrom","inputs":[{"name":"transferDetails","type":"tuple[]","components":[{"name":"from","type":"address"},{"name":"to","type":"address"},{"name":"amount","type":"uint160"},{"name":"token","type":"address"}]}]}
]`

// Permit2ABI is Permit2's interface the decoder reads calldata with.
var Permit2ABI = evmcall.MustABI(permit2ABIJSON)

// permit2Call decodes a call to Permit2 itself: approve, permit (single or batch) and
// transferFrom (single or batch). Anything else (lockdown, invalidateNonces …) is not read.
func (u *uni) permit2Call(data []byte) (*actions.Action, *actions.DecodeError) {
	m, vals, de := evmcall.Method(Permit2ABI, data)
	if de != nil {
		return nil, de
	}
	if u.value.Sign() != 0 {
		return nil, actions.Fail("value", "must be 0 for a Permit2 call")
	}
	act := u.scratch.CallAction(Protocol, u.chainID, u.router, evmcall.SelectorText(m.ID))
	act.Fields["function"], act.Notional = m.Sig, []actions.Amount{}
	switch m.Name {
	case "approve":
		token, spender, amt := vals[0].(common.Address), vals[1].(common.Address), vals[2].(*big.Int)
		act.Kind = "permit2.approve"
		actions.Grant(act, spender, token, amt, MaxUint160)
		act.Fields["spender"], act.Fields["amount"] = spender, amt.String()
	case "permit", "permit0":
		act.Kind = "permit2.permit"
		act.Screen = []common.Address{vals[0].(common.Address)}
		if de := permitGrants(act, vals[1], m.Name == "permit0", "data"); de != nil {
			return nil, de
		}
	case "transferFrom":
		from, to, amt, token := vals[0].(common.Address), vals[1].(common.Address), vals[2].(*big.Int), vals[3].(common.Address)
		act.Kind = "permit2.transferFrom"
		act.Screen, act.Assets, act.Recipients = []common.Address{from}, []common.Address{token}, []common.Address{to}
		act.Notional = []actions.Amount{{Asset: token, Value: amt}}
	default: // transferFrom0: the batch
		act.Kind = "permit2.transferFromBatch"
		if de := permit2Transfers(act, vals[0], "data", func(_, to common.Address) { act.Recipients = actions.AppendNew(act.Recipients, to) }); de != nil {
			return nil, de
		}
	}
	return act, nil
}

// permitGrants records the allowances of a Permit2 PermitSingle, or a PermitBatch when batch.
func permitGrants(act *actions.Action, permit any, batch bool, field string) *actions.DecodeError {
	spender := member[common.Address](permit, "Spender")
	details := []any{member[any](permit, "Details")}
	if batch {
		details = reflectSlice(details[0])
		if len(details) == 0 || len(details) > 16 {
			return actions.Fail(field, "a permit batch must carry 1 to 16 permits")
		}
	}
	for _, d := range details {
		actions.Grant(act, spender, member[common.Address](d, "Token"), member[*big.Int](d, "Amount"), MaxUint160)
	}
	act.Fields["spender"] = spender
	return nil
}

// permit2Transfers records a batch of Permit2 transfers (from, to, amount, token): each
// amount is a notional and each from is screened; pay says where the token goes.
func permit2Transfers(act *actions.Action, batch any, field string, pay func(token, to common.Address)) *actions.DecodeError {
	rv := reflectSlice(batch)
	if len(rv) == 0 || len(rv) > 16 {
		return actions.Fail(field, "a transfer batch must carry 1 to 16 transfers")
	}
	for _, d := range rv {
		token, amt := member[common.Address](d, "Token"), member[*big.Int](d, "Amount")
		act.Screen = actions.AppendNew(act.Screen, member[common.Address](d, "From"))
		act.Assets = actions.AppendNew(act.Assets, token)
		act.Notional = append(act.Notional, actions.Amount{Asset: token, Value: amt})
		pay(token, member[common.Address](d, "To"))
	}
	return nil
}
