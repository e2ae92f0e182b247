package hyperliquid

import (
	"github.com/ethereum/go-ethereum/common"

	"github.com/x402gate/x402gate/verdictserver/engine/actions"
)

// send reads usdSend and withdraw3 {destination, amount, time?,
// signatureChainId?, hyperliquidChain?} and spotSend (the same and token).
func send(typ string, action map[string]any) (*actions.Action, *actions.DecodeError) {
	members := []string{"type", "destination", "amount", "time", "signatureChainId", "hyperliquidChain"}
	if typ == "spotSend" {
		members = append(members, "token")
	}
	if de := exactly(action, "action", members...); de != nil {
		return nil, de
	}
	dest, de := actions.AddressMember(action, "destination")
	if de != nil {
		return nil, actions.Fail("action.destination", de.Problem)
	}
	amountStr, _ := action["amount"].(string)
	amount, ok := decimal(amountStr)
	if !ok || amount.Sign() == 0 {
		return nil, actions.Fail("action.amount", `must be a decimal string > 0 ("1.5"), in whole units`)
	}
	fields := map[string]any{"destination": dest.Hex(), "amount": amountStr}
	if v, present := action["time"]; present {
		n, ok := actions.Int(v, 1, 1<<62)
		if !ok {
			return nil, actions.Fail("action.time", "must be a positive integer (milliseconds)")
		}
		fields["time"] = n
	}
	if v, present := action["signatureChainId"]; present {
		s, ok := v.(string)
		if !ok || !isHexQuantity(s) {
			return nil, actions.Fail("action.signatureChainId", `must be a hex chain id ("0xa4b1")`)
		}
		fields["signatureChainId"] = s
	}
	if v, present := action["hyperliquidChain"]; present {
		s, _ := v.(string)
		if s != "Mainnet" && s != "Testnet" {
			return nil, actions.Fail("action.hyperliquidChain", `must be "Mainnet" or "Testnet"`)
		}
		fields["hyperliquidChain"] = s
	}
	coin := CoinUSDC
	kind := KindUsdSend
	switch typ {
	case "withdraw3":
		kind = KindWithdraw
	case "spotSend":
		kind = KindSpotSend
		token, _ := action["token"].(string)
		name, ok := spotToken(token)
		if !ok {
			return nil, actions.Fail("action.token", `must be "NAME:0x" and 32 hex digits (the token's name and id)`)
		}
		coin = name
		fields["token"] = token
	}
	act := newAction(kind)
	act.Fields = fields
	act.Recipients = []common.Address{dest}
	act.Coins = []string{coin}
	act.CoinAmounts = []actions.CoinAmount{{Coin: coin, Amount: amount}}
	return act, nil
}

// spotToken reads a spot token "NAME:0x<32 hex>" and returns NAME.
func spotToken(s string) (string, bool) {
	for i := 0; i < len(s); i++ {
		if s[i] != ':' {
			continue
		}
		name := s[:i]
		if name == "" || len(name) > 32 || !isCoinName(name) || !isHex(s[i+1:], 32) {
			return "", false
		}
		return name, true
	}
	return "", false
}
