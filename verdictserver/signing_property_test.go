package verdictserver

import (
	"encoding/hex"
	"encoding/json"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"

	"github.com/x402gate/x402gate/verdict"
	"github.com/x402gate/x402gate/verdictserver/engine"
	"github.com/x402gate/x402gate/verdictserver/policy"
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

// TestEverySignedVerdictPassesTheValidator: whatever the action (well formed or not, of
// any protocol) and the policy (none, allowing, refusing), the verdict a signing service
// stores passes the verdict package's validator, and its signature holds for the
// action's binding, by the service's address, unexpired.
func TestEverySignedVerdictPassesTheValidator(t *testing.T) {
	eng, err := engine.New(engine.Config{}, engine.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	sg, err := (&SigningConfig{SignerKey: testSignerKey}).newSigner()
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	s := &Server{signer: sg, now: func() time.Time { return now }}
	allow, err := policy.Parse([]byte(allowPolicy))
	if err != nil {
		t.Fatal(err)
	}
	deny, err := policy.Parse([]byte(`{"venues": {"allowed": []}}`))
	if err != nil {
		t.Fatal(err)
	}
	policies := []*policy.Policy{nil, {Version: 4, Doc: allow}, {Version: 9, Doc: deny}}
	g := signGen{r: rand.New(rand.NewPCG(24, 2))}
	escrow := common.HexToAddress("0xA11CE00000000000000000000000000000000001")
	outcomes := map[verdict.Outcome]int{}
	for i := range 500 {
		tx := g.tx()
		in := engine.Input{ProposedTx: tx, Escrow: escrow, Policy: policies[g.r.IntN(len(policies))]}
		hash := "0x" + hex.EncodeToString(common.LeftPadBytes([]byte{byte(i), byte(i >> 8)}, 32))
		raw, err := s.encodeVerdict(eng.Evaluate(t.Context(), in), in, hash)
		if err != nil {
			t.Fatalf("#%d %v: %v", i, tx, err)
		}
		v, err := verdict.ParseVerdict(raw, hash)
		if err != nil {
			t.Fatalf("#%d %v: the signed verdict fails the validator: %v\n%s", i, tx, err, raw)
		}
		if err := verdict.CheckSignature(v, sg.addr, bindingOf(tx, escrow), now); err != nil {
			t.Fatalf("#%d %v: %v", i, tx, err)
		}
		outcomes[v.Outcome]++
	}
	if outcomes[verdict.OutcomeApproved] == 0 || outcomes[verdict.OutcomeRejected] == 0 {
		t.Fatalf("outcomes %v: the draw never reached both", outcomes)
	}
}
