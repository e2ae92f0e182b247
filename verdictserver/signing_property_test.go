package verdictserver

import (
	"encoding/hex"
	"encoding/json"
	"math/rand/v2"
	"strconv"

	"github.com/ethereum/go-ethereum/common"
)

// signGen draws random actions, well formed or not, of every protocol the engine decodes.
type signGen struct{ r *rand.Rand }

var signAddrs = []common.Address{allowedPay, strangerPay, testAsset, {}, common.HexToAddress("0x000000000000000000000000000000000000dEaD")}

func (g signGen) addr() string { return signAddrs[g.r.IntN(len(signAddrs))].Hex() }

func (g signGen) amount() string {
	return []string{"0", "1", "10000", "01", "-5", "115792089237316195423570985008687907853269984665640564039457584007913129639935"}[g.r.IntN(6)]
}

func (g signGen) tx() map[string]any {
	chain := []any{json64(84532), json64(8453), json64(1337), "84532"}[g.r.IntN(4)]
	switch g.r.IntN(5) {
	case 4: // a payment allowPolicy allows, but for its amount
		return map[string]any{"protocol": "payment", "rail": "x402", "chainId": json64(84532), "payTo": allowedPay.Hex(), "asset": testAsset.Hex(), "amount": g.amount()}
	case 0:
		return map[string]any{"protocol": "payment", "rail": "x402", "chainId": chain, "payTo": g.addr(), "asset": g.addr(), "amount": g.amount()}
	case 1:
		data := make([]byte, g.r.IntN(3)*34)
		for i := range data {
			data[i] = byte(g.r.IntN(256))
		}
		if len(data) >= 4 && g.r.IntN(2) == 0 {
			copy(data, []byte{0xa9, 0x05, 0x9c, 0xbb}) // transfer
		}
		return map[string]any{"protocol": []string{"evm", "uniswap"}[g.r.IntN(2)], "chainId": chain, "to": g.addr(),
			"data": "0x" + hex.EncodeToString(data), "value": g.amount()}
	case 2:
		return map[string]any{"protocol": "hyperliquid", "chainId": chain, "nonce": json64(1763640000000),
			"action": map[string]any{"type": "cancel", "cancels": []any{map[string]any{"a": json64(0), "o": json64(int64(g.r.IntN(9)))}}}}
	}
	return map[string]any{"protocol": "mystery", "chainId": chain}
}

// json64 is n as a decoded JSON number.
func json64(n int64) any { return json.Number(strconv.FormatInt(n, 10)) }
