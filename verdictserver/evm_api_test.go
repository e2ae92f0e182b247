package verdictserver

import (
	"encoding/hex"
	"math/big"
	"net/http"
	"testing"

	"github.com/ethereum/go-ethereum/accounts/abi"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"

	"github.com/x402gate/x402gate/verdict"
	"github.com/x402gate/x402gate/x402"
)

// calldata is sig's selector and vals abi-encoded as types.
func calldata(t *testing.T, sig string, types []string, vals ...any) string {
	t.Helper()
	var as abi.Arguments
	for _, s := range types {
		ty, err := abi.NewType(s, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		as = append(as, abi.Argument{Type: ty})
	}
	enc, err := as.Pack(vals...)
	if err != nil {
		t.Fatal(err)
	}
	return "0x" + hex.EncodeToString(append(crypto.Keccak256([]byte(sig))[:4], enc...))
}

func encodeArgs(t *testing.T, types []string, vals ...any) []byte {
	t.Helper()
	b, err := hex.DecodeString(calldata(t, "x()", types, vals...)[10:])
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestEVMActionsThroughTheAPI: an agent submits EVM calls through the HTTP API
// (docs/policy.md#evm-actions): an ERC-20 transfer within the policy is approved and priced,
// a Universal Router plan whose unwrap pays a stranger is rejected on that nested leg, and
// calldata with an unknown selector is a decode failure. Every answer is held to the OpenAPI
// document by the env.
func TestEVMActionsThroughTheAPI(t *testing.T) {
	e := newEnv(t, sqliteStore(t), nil)
	wallet := common.HexToAddress("0xA11CE00000000000000000000000000000000002")
	payee := common.HexToAddress("0x209693Bc6afc0C5328bA36FaF03C514EF312287C")
	stranger := common.HexToAddress("0x3333333333333333333333333333333333333333")
	usdc := x402.BaseSepolia.USDC.Address
	weth := common.HexToAddress("0x4200000000000000000000000000000000000006")
	router := common.HexToAddress("0x8B844f885672f333Bc0042cB669255f93a4C1E6b") // Universal Router 2.1.1, Base Sepolia
	a := e.agent("evm", wallet, `{"venues": {"allowed": ["evm", "uniswap"]}, "chains": {"allowed": [84532]},
		"recipients": {"allowed": ["self", "0x209693Bc6afc0C5328bA36FaF03C514EF312287C"]}, "swaps": {"requireMinOut": true}, "limits": {"perTxUsd": 5000}}`)
	call := func(protocol string, to common.Address, data string) map[string]any {
		return map[string]any{"escrowAddress": wallet.Hex(), "prompt": "pay or swap", "arbiter": "policy",
			"proposedTx": map[string]any{"protocol": protocol, "chainId": 84532, "to": to.Hex(), "data": data, "value": "0"}}
	}
	path := append(append(append([]byte{}, usdc.Bytes()...), 0x00, 0x01, 0xf4), weth.Bytes()...)
	swap := encodeArgs(t, []string{"address", "uint256", "uint256", "bytes", "bool", "uint256[]"},
		common.BytesToAddress([]byte{2}), big.NewInt(3000e6), big.NewInt(995e15), path, true, []*big.Int{})
	unwrap := encodeArgs(t, []string{"address", "uint256"}, stranger, big.NewInt(995e15))
	plan := calldata(t, "execute(bytes,bytes[],uint256)", []string{"bytes", "bytes[]", "uint256"}, []byte{0x00, 0x0c}, [][]byte{swap, unwrap}, big.NewInt(1_900_000_000))
	usd := func(v float64) *float64 { return &v }
	for _, tc := range []struct {
		name     string
		body     map[string]any
		reason   verdict.ReasonCode
		notional *float64
		legs     int
	}{
		{"an ERC-20 transfer to the payee", call("evm", usdc, calldata(t, "transfer(address,uint256)", []string{"address", "uint256"}, payee, big.NewInt(5e6))),
			verdict.ReasonAllowed, usd(5), 0},
		{"a Universal Router plan unwrapping to a stranger", call("uniswap", router, plan), verdict.ReasonRecipientNotAllowed, usd(3000), 2},
		{"an unknown selector", call("evm", usdc, "0xdeadbeef"), verdict.ReasonDecodeFailure, nil, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sub := e.submit(a.Key, tc.body)
			if sub.status != http.StatusCreated {
				t.Fatalf("submit = %d %s", sub.status, sub.raw)
			}
			v := e.await(a.Key, sub.body["requestHash"].(string))
			if v.ReasonCode != tc.reason {
				t.Fatalf("verdict %s %s (%s), want %s", v.Outcome, v.ReasonCode, v.HumanReason, tc.reason)
			}
			if (tc.notional == nil) != (v.USDNotional == nil) || (tc.notional != nil && *tc.notional != *v.USDNotional) {
				t.Errorf("usdNotional %v, want %v", v.USDNotional, tc.notional)
			}
			if legs, _ := v.Evidence.DecodedAction["legs"].([]any); len(legs) != tc.legs {
				t.Errorf("decodedAction legs %v, want %d", v.Evidence.DecodedAction["legs"], tc.legs)
			}
		})
	}
}
