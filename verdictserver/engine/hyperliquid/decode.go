// Package hyperliquid decodes Hyperliquid exchange actions (proposedTx.protocol
// "hyperliquid") into the policy engine's action model (docs/policy.md#hyperliquid-actions).
package hyperliquid

import (
	"math/big"
	"slices"
	"strconv"

	"github.com/ethereum/go-ethereum/common"

	"github.com/x402gate/x402gate/verdictserver/engine/actions"
	"github.com/x402gate/x402gate/verdictserver/engine/internal/intern"
)

// Protocol is the proposedTx.protocol of a Hyperliquid exchange action
// (docs/policy.md#hyperliquid-actions).
const Protocol = "hyperliquid"

// ChainID is the proposedTx.chainId of every Hyperliquid action: 1337, the
// chainId of the EIP-712 domain Hyperliquid's L1 actions are signed in. Hyperliquid is not
// an EVM chain; user-signed actions (usdSend, withdraw3, spotSend) run on the same L1 and
// take the same id, whatever signatureChainId the wallet signs with.
const ChainID = 1337

// The kinds of a decoded Hyperliquid action: "hyperliquid." and the action's type. An
// order action's orders are legs of kind KindOrder too.
const (
	KindOrder          = "hyperliquid.order"
	KindUpdateLeverage = "hyperliquid.updateLeverage"
	KindCancel         = "hyperliquid.cancel"
	KindCancelByCloid  = "hyperliquid.cancelByCloid"
	KindUsdSend        = "hyperliquid.usdSend"
	KindWithdraw       = "hyperliquid.withdraw3"
	KindSpotSend       = "hyperliquid.spotSend"
)

// CoinUSDC is Hyperliquid's USDC: the perps' margin and quote, counted at 1 USD.
const CoinUSDC = "USDC"

// DefaultPerps is the perp coin table the built-in decoder uses: asset index in
// mainnet's meta.universe → coin. Only long-listed coins whose index is settled are in it
// (index 3, once MATIC, is left out: its name may have changed with the POL migration);
// an index it lacks is a decode failure. Testnet indexes differ: an operator on testnet,
// or one who trades other coins, registers Decoder{Perps: …} built from the
// info endpoint's meta (docs/policy.md#hyperliquid-actions).
var DefaultPerps = map[int64]string{
	0: "BTC", 1: "ETH", 2: "ATOM", 4: "DYDX", 5: "SOL", 6: "AVAX", 7: "BNB",
	8: "APE", 11: "ARB", 12: "DOGE", 13: "INJ", 14: "SUI", 18: "LINK",
}

// Bounds on what one action may carry, so that decoding stays cheap.
const (
	maxOrders   = 64
	maxCancels  = 256
	maxDecimal  = 40     // characters of a decimal string ("50000.0")
	maxLeverage = 10_000 // an integer leverage above it is not a leverage
	spotBase    = 10_000 // spot asset = 10000 + index in spotMeta.universe
	builderBase = 100_000
)

// Decoder reads Hyperliquid exchange actions (docs/policy.md#hyperliquid-actions):
// orders, updateLeverage, cancel, cancelByCloid, usdSend, withdraw3 and spotSend. Any other
// action type, member or value is a decode failure. It never calls the network.
type Decoder struct {
	// Perps maps a perp asset index to its coin name; nil is DefaultPerps.
	Perps map[int64]string
}

// Protocol is "hyperliquid".
func (Decoder) Protocol() string { return Protocol }

var txMembers = map[string]bool{
	"protocol": true, "chainId": true, "action": true, "nonce": true, "vaultAddress": true,
	"expiresAfter": true, "leverage": true,
}

// Decode reads proposedTx = {protocol, chainId: 1337, action: {type, …}, nonce?,
// vaultAddress?, expiresAfter?, leverage?}.
func (d Decoder) Decode(tx map[string]any) (*actions.Action, error) {
	return d.DecodeInto(tx, common.Address{}, nil)
}

// DecodeInto is Decode with memory for the actions (actions.Scratch); a Hyperliquid action
// does not depend on its sender.
func (d Decoder) DecodeInto(tx map[string]any, _ common.Address, s *actions.Scratch) (*actions.Action, error) {
	for k := range tx {
		if !txMembers[k] {
			return nil, actions.Fail(k, "is not a member of a Hyperliquid action")
		}
	}
	chainID, ok := actions.ChainID(tx["chainId"])
	if !ok || chainID != ChainID {
		return nil, actions.Fail("chainId", "must be 1337, the chain id of Hyperliquid actions")
	}
	// The members of the request itself, added to the action's fields at the end (where the
	// action's own member of the same name, if any, wins).
	var top [4]struct {
		k string
		v any
	}
	nTop := 0
	field := func(k string, v any) { top[nTop].k, top[nTop].v = k, v; nTop++ }
	if v, present := tx["nonce"]; present {
		n, ok := actions.Int(v, 1, 1<<62)
		if !ok {
			return nil, actions.Fail("nonce", "must be a positive integer (milliseconds)")
		}
		field("nonce", n)
	}
	if v, present := tx["expiresAfter"]; present && v != nil {
		n, ok := actions.Int(v, 1, 1<<62)
		if !ok {
			return nil, actions.Fail("expiresAfter", "must be null or a positive integer (milliseconds)")
		}
		field("expiresAfter", n)
	}
	var vault *common.Address
	if v, present := tx["vaultAddress"]; present && v != nil {
		a, de := actions.AddressMember(tx, "vaultAddress")
		if de != nil {
			return nil, de
		}
		vault = &a
		field("vaultAddress", a.Hex())
	}
	action, ok := tx["action"].(map[string]any)
	if !ok {
		return nil, actions.Fail("action", "must be an object")
	}
	typ, _ := action["type"].(string)
	field("type", typ)
	var act *actions.Action
	var de *actions.DecodeError
	switch typ {
	case "order":
		act, de = d.order(action, tx, s)
	case "updateLeverage":
		act, de = d.updateLeverage(action)
	case "cancel", "cancelByCloid":
		act, de = d.cancel(typ, action)
	case "usdSend", "withdraw3", "spotSend":
		if vault != nil {
			return nil, actions.Fail("vaultAddress", "applies to L1 actions only, not to a "+typ)
		}
		act, de = send(typ, action)
	default:
		return nil, actions.Fail("action.type", "must be one of order, updateLeverage, cancel, cancelByCloid, usdSend, withdraw3, spotSend")
	}
	if de != nil {
		return nil, de
	}
	if _, present := tx["leverage"]; present && typ != "order" {
		return nil, actions.Fail("leverage", "applies to an order action only")
	}
	if act.Fields == nil {
		act.Fields = make(map[string]any, nTop)
	}
	for _, f := range top[:nTop] {
		if _, own := act.Fields[f.k]; !own {
			act.Fields[f.k] = f.v
		}
	}
	if vault != nil {
		act.Screen = append(act.Screen, *vault)
	}
	return act, nil
}

// newAction is an actions.Action of this protocol on chain 1337.
func newAction(kind string) *actions.Action {
	return &actions.Action{Protocol: Protocol, ChainID: ChainID, Kind: kind}
}

// scratchAction is an actions.Action of this protocol on chain 1337 with an empty Fields map, in s's
// memory (actions.Scratch).
func scratchAction(s *actions.Scratch, kind string) *actions.Action {
	act, _ := s.Action()
	act.Protocol, act.ChainID, act.Kind = Protocol, ChainID, kind
	return act
}

// exactly refuses a member of obj (at path) that members does not name.
func exactly(obj map[string]any, path string, members ...string) *actions.DecodeError {
	for k := range obj {
		if !slices.Contains(members, k) {
			return actions.Fail(path+"."+k, "is not a member of this object")
		}
	}
	return nil
}

// coin names a Hyperliquid asset index: a perp from the table, a spot pair as "@<index>"
// ("PURR/USDC" for index 0); builder-deployed perps and outcomes are not decoded.
func (d Decoder) coin(asset int64, path string) (string, bool, *actions.DecodeError) {
	switch {
	case asset < spotBase:
		perps := d.Perps
		if perps == nil {
			perps = DefaultPerps
		}
		c, ok := perps[asset]
		if !ok || c == "" {
			return "", false, actions.Fail(path, "perp asset index "+strconv.FormatInt(asset, 10)+" is not in the decoder's coin table")
		}
		return c, false, nil
	case asset < builderBase:
		if asset == spotBase {
			return "PURR/USDC", true, nil
		}
		return "@" + strconv.FormatInt(asset-spotBase, 10), true, nil
	}
	return "", false, actions.Fail(path, "builder-deployed perps and outcome assets (index ≥ 100000) are not decoded")
}

// isCoinName reports whether s is a coin name assets.hyperliquid can hold, without ':'.
func isCoinName(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '@' || c == '/' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// isHex reports whether s is 0x and exactly n hex digits.
func isHex(s string, n int) bool {
	return len(s) == 2+n && s[0] == '0' && (s[1] == 'x' || s[1] == 'X') && hexDigits(s[2:])
}

// isHexQuantity reports whether s is 0x and 1 to 16 hex digits.
func isHexQuantity(s string) bool {
	return len(s) >= 3 && len(s) <= 18 && s[:2] == "0x" && hexDigits(s[2:])
}

// hexDigits reports whether s is hex digits only.
func hexDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if _, ok := intern.Unhex(s[i]); !ok {
			return false
		}
	}
	return true
}

// decimal reads Hyperliquid's decimal strings: digits, optionally a point and
// more digits ("50000", "0.01", "50000.0"); no sign, no exponent, at most 40 characters.
func decimal(s string) (*big.Rat, bool) {
	if s == "" || len(s) > maxDecimal {
		return nil, false
	}
	point := -1
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c >= '0' && c <= '9':
		case c == '.' && point < 0 && i > 0 && i < len(s)-1:
			point = i
		default:
			return nil, false
		}
	}
	r, ok := new(big.Rat).SetString(s)
	return r, ok
}

var (
	_ actions.ScratchDecoder = Decoder{}
	_ actions.Decoder        = Decoder{}
)
