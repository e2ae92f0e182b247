package engine

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"math/big"
	"slices"
	"strings"
	"testing"

	"github.com/ethereum/go-ethereum/accounts/abi"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"

	"github.com/x402gate/x402gate/verdict"
	"github.com/x402gate/x402gate/verdictserver/engine/evmcall"
	"github.com/x402gate/x402gate/verdictserver/engine/uniswap"
)

// Addresses of the golden table: the real router deployments, and tokens on Base Sepolia.
var (
	v2Router   = common.HexToAddress("0x4752ba5dbc23f44d87826276bf6fd6b1c372ad24") // Uniswap V2 Router02 (Base)
	swapRouter = common.HexToAddress("0xE592427A0AEce92De3Edee1F18E0157C05861564") // V3 SwapRouter
	router02   = common.HexToAddress("0x2626664c2603336E57B271c5C0b26F421741e481") // SwapRouter02 (Base)
	urV21      = common.HexToAddress("0x8B844f885672f333Bc0042cB669255f93a4C1E6b") // Universal Router 2.1.1 (Base Sepolia)
	urV20      = common.HexToAddress("0x95273d871c8156636e114b63797d78D7E1720d81") // Universal Router 2.0 (Base Sepolia)
	urV12      = common.HexToAddress("0x3fC91A3afd70395Cd496C647d5a6CC9D4B2b7FAD") // Universal Router 1.2 (Base)
	urOther    = common.HexToAddress("0x7777777777777777777777777777777777777777") // a router the decoder does not know
	tkn        = common.HexToAddress("0x7070707070707070707070707070707070707070") // a token outside the universe
	dead       = common.HexToAddress("0x000000000000000000000000000000000000dEaD")
)

// testContracts are the routers the tests call on Base Sepolia at their Base and Ethereum
// addresses, added to the registry the way the config adds contracts (Deps.Contracts);
// urOther is not added.
var testContracts = []KnownContract{
	{ChainID: 84532, Address: v2Router, Kind: uniswap.ContractV2Router}, {ChainID: 84532, Address: swapRouter, Kind: uniswap.ContractSwapRouter}, {ChainID: 84532, Address: router02, Kind: uniswap.ContractSwapRouter02},
}

// testUniswap is the uniswap decoder of newEngine's evaluators, for the tests that decode
// alone.
var testUniswap = func() uniswap.Decoder {
	d, err := uniswap.NewDecoder(testContracts)
	if err != nil {
		panic(err)
	}
	return d
}()

func e18(n int64) *big.Int { return new(big.Int).Mul(big.NewInt(n), big.NewInt(1e18)) }
func e6(n int64) *big.Int  { return new(big.Int).Mul(big.NewInt(n), big.NewInt(1e6)) }
func milli18(n int64) *big.Int {
	return new(big.Int).Mul(big.NewInt(n), big.NewInt(1e15))
}

// pack is calldata for the method of a whose canonical signature is sig.
func pack(t testing.TB, a *evmcall.ABI, sig string, args ...any) []byte {
	t.Helper()
	for _, m := range a.Methods {
		if m.Sig == sig {
			enc, err := m.Inputs.Pack(args...)
			if err != nil {
				t.Fatalf("pack %s: %v", sig, err)
			}
			return append(crypto.Keccak256([]byte(sig))[:4], enc...)
		}
	}
	t.Fatalf("no method %s", sig)
	return nil
}

// encode abi-encodes values of the given types (a Universal Router command's input),
// independently of the decoder's own argument lists.
func encode(t testing.TB, types []string, vals ...any) []byte {
	t.Helper()
	var as abi.Arguments
	for _, s := range types {
		var ty abi.Type
		var err error
		switch s {
		case "permitSingle", "permitBatch":
			details := abi.ArgumentMarshaling{Name: "details", Type: "tuple", Components: []abi.ArgumentMarshaling{
				{Name: "token", Type: "address"}, {Name: "amount", Type: "uint160"}, {Name: "expiration", Type: "uint48"}, {Name: "nonce", Type: "uint48"}}}
			if s == "permitBatch" {
				details.Type = "tuple[]"
			}
			ty, err = abi.NewType("tuple", "", []abi.ArgumentMarshaling{details, {Name: "spender", Type: "address"}, {Name: "sigDeadline", Type: "uint256"}})
		default:
			ty, err = abi.NewType(s, "", nil)
		}
		if err != nil {
			t.Fatal(err)
		}
		as = append(as, abi.Argument{Type: ty})
	}
	b, err := as.Pack(vals...)
	if err != nil {
		t.Fatalf("encode %v: %v", types, err)
	}
	return b
}

type permitDetail struct {
	Token      common.Address
	Amount     *big.Int
	Expiration *big.Int
	Nonce      *big.Int
}
type permitSingle struct {
	Details     permitDetail
	Spender     common.Address
	SigDeadline *big.Int
}
type permitBatch struct {
	Details     []permitDetail
	Spender     common.Address
	SigDeadline *big.Int
}

// permit2Single is a PERMIT2_PERMIT input: amount of token to spender, and a signature.
func permit2Single(t testing.TB, token common.Address, amount *big.Int, spender common.Address) []byte {
	return encode(t, []string{"permitSingle", "bytes"}, permitSingle{permitDetail{token, amount, big.NewInt(1_900_000_000), big.NewInt(0)}, spender, deadline}, make([]byte, 65))
}

// Universal Router command inputs.
func urV3In(t testing.TB, rcpt common.Address, amtIn, minOut *big.Int, path []byte, payerIsUser, hop bool) []byte {
	if hop {
		return urV3InHops(t, rcpt, amtIn, minOut, path, payerIsUser, []*big.Int{})
	}
	return encode(t, []string{"address", "uint256", "uint256", "bytes", "bool"}, rcpt, amtIn, minOut, path, payerIsUser)
}

// urV3InHops is a 2.1.1 V3 swap input with its minHopPriceX36.
func urV3InHops(t testing.TB, rcpt common.Address, amtIn, minOut *big.Int, path []byte, payerIsUser bool, hops []*big.Int) []byte {
	return encode(t, []string{"address", "uint256", "uint256", "bytes", "bool", "uint256[]"}, rcpt, amtIn, minOut, path, payerIsUser, hops)
}
func urV2In(t testing.TB, rcpt common.Address, a1, a2 *big.Int, path []common.Address, payerIsUser bool) []byte {
	return encode(t, []string{"address", "uint256", "uint256", "address[]", "bool"}, rcpt, a1, a2, path, payerIsUser)
}
func urTokenTo(t testing.TB, token, rcpt common.Address, v *big.Int) []byte {
	return encode(t, []string{"address", "address", "uint256"}, token, rcpt, v)
}
func urToAmount(t testing.TB, rcpt common.Address, v *big.Int) []byte {
	return encode(t, []string{"address", "uint256"}, rcpt, v)
}

func execute(t testing.TB, cmds []byte, inputs ...[]byte) []byte {
	return pack(t, uniswap.RouterABI, "execute(bytes,bytes[],uint256)", cmds, inputs, big.NewInt(1_900_000_000))
}

// v3path writes a V3 path: token (fee token)+.
func v3path(tokens ...common.Address) []byte {
	var p []byte
	for i, a := range tokens {
		if i > 0 {
			p = append(p, 0x00, 0x01, 0xf4) // fee 500
		}
		p = append(p, a.Bytes()...)
	}
	return p
}

type single struct {
	TokenIn, TokenOut common.Address
	Fee               *big.Int
	Recipient         common.Address
	Deadline          *big.Int
	AmountIn          *big.Int
	AmountOutMinimum  *big.Int
	SqrtPriceLimitX96 *big.Int
}
type single02 struct {
	TokenIn, TokenOut common.Address
	Fee               *big.Int
	Recipient         common.Address
	AmountIn          *big.Int
	AmountOutMinimum  *big.Int
	SqrtPriceLimitX96 *big.Int
}
type singleOut02 struct {
	TokenIn, TokenOut common.Address
	Fee               *big.Int
	Recipient         common.Address
	AmountOut         *big.Int
	AmountInMaximum   *big.Int
	SqrtPriceLimitX96 *big.Int
}
type multi struct {
	Path             []byte
	Recipient        common.Address
	Deadline         *big.Int
	AmountIn         *big.Int
	AmountOutMinimum *big.Int
}
type multiOut02 struct {
	Path            []byte
	Recipient       common.Address
	AmountOut       *big.Int
	AmountInMaximum *big.Int
}

var deadline = big.NewInt(1_900_000_000)

func evmTx(protocol string, chain int64, to common.Address, data []byte, value *big.Int) map[string]any {
	tx := map[string]any{"protocol": protocol, "chainId": json.Number(big.NewInt(chain).String()), "to": to.Hex(), "data": "0x" + hex.EncodeToString(data)}
	if value != nil {
		tx["value"] = value.String()
	}
	return tx
}

func with(tx map[string]any, k string, v any) map[string]any { tx[k] = v; return tx }

// The policies of the golden table.
const (
	evmPolicy = `{"venues": {"allowed": ["evm"]}, "chains": {"allowed": [84532]},
		"assets": {"universe": {"84532": ["0x036CbD53842c5426634e7929541eC2318f3dCF7e", "0x4200000000000000000000000000000000000006", "0xEeeeeEeeeEeEeeEeEeEeeEEEeeeeEeeeeeeeEEeE", "0x5a1e000000000000000000000000000000000001"]}},
		"recipients": {"allowed": ["self", "0x209693Bc6afc0C5328bA36FaF03C514EF312287C"]},
		"limits": {"perTxUsd": 5000}}`
	evmContracts = `{"venues": {"allowed": ["evm"]}, "chains": {"allowed": [84532]},
		"contracts": {"84532": {"0x036CbD53842c5426634e7929541eC2318f3dCF7e": ["0xa9059cbb", "0x095ea7b3"]}}}`
	uniPolicy = `{"venues": {"allowed": ["uniswap"]}, "chains": {"allowed": [84532, 8453]},
		"assets": {"universe": {"84532": ["0x036CbD53842c5426634e7929541eC2318f3dCF7e", "0x4200000000000000000000000000000000000006", "0xEeeeeEeeeEeEeeEeEeEeeEEEeeeeEeeeeeeeEEeE"]}},
		"recipients": {"allowed": ["self", "0x209693Bc6afc0C5328bA36FaF03C514EF312287C"]},
		"trading": {"sides": ["buy", "sell"]},
		"swaps": {"requireMinOut": true, "maxSlippageBps": 100},
		"limits": {"perTxUsd": 10000}}`
	uniBuyOnly   = `{"venues": {"allowed": ["uniswap"]}, "chains": {"allowed": [84532]}, "trading": {"sides": ["buy"]}}`
	uniContracts = `{"venues": {"allowed": ["uniswap"]}, "chains": {"allowed": [84532]},
		"contracts": {"84532": {"0x2626664c2603336E57B271c5C0b26F421741e481": ["0x5ae401dc"]}}}`
	uniOpen = `{"venues": {"allowed": ["uniswap"]}, "chains": {"allowed": [84532, 8453]}}`
)

// golden is one row: an action, a policy, and the verdict's outcome.
type golden struct {
	name   string
	policy string
	tx     map[string]any
	reason verdict.ReasonCode
	field  string            // the verdict's triggeringPolicyField; "" is null
	failed []verdict.CheckID // exactly the failed checks
	status map[verdict.CheckID]verdict.CheckStatus
	kind   string // evidence.decodedAction.kind, when asserted
}

type st = map[verdict.CheckID]verdict.CheckStatus

const (
	cP = verdict.CheckPassed
	cF = verdict.CheckFailed
	cN = verdict.CheckNotChecked
)

func runGolden(t *testing.T, e *Evaluator, rows []golden) {
	t.Helper()
	for _, g := range rows {
		t.Run(g.name, func(t *testing.T) {
			v := e.Evaluate(context.Background(), Input{Escrow: escrow, ProposedTx: g.tx, Policy: mustPolicy(t, 4, g.policy)})
			body := mustBeValid(t, v)
			field := ""
			if v.TriggeringPolicyField != nil {
				field = *v.TriggeringPolicyField
			}
			if testing.Verbose() && v.ReasonCode == verdict.ReasonDecodeFailure {
				t.Log(v.HumanReason)
			}
			if v.ReasonCode != g.reason || field != g.field {
				t.Fatalf("%s %q, want %s %q: %s\n%s", v.ReasonCode, field, g.reason, g.field, v.HumanReason, body)
			}
			var failed []verdict.CheckID
			for _, c := range v.Checks {
				if c.Status == verdict.CheckFailed {
					failed = append(failed, c.CheckID)
				}
			}
			if !slices.Equal(failed, g.failed) {
				t.Errorf("failed checks %v, want %v\n%s", failed, g.failed, body)
			}
			for id, s := range g.status {
				if c := checkOf(v, id); c.Status != s {
					t.Errorf("%s: %s (%s), want %s", id, c.Status, c.HumanReason, s)
				}
			}
			if g.kind != "" && v.Evidence.DecodedAction["kind"] != g.kind {
				t.Errorf("kind %v, want %s", v.Evidence.DecodedAction["kind"], g.kind)
			}
			if (v.Outcome == verdict.OutcomeApproved) != (g.reason == verdict.ReasonAllowed) {
				t.Errorf("outcome %s", v.Outcome)
			}
		})
	}
}

func ids(s ...verdict.CheckID) []verdict.CheckID { return s }

func strs(a ...common.Address) []string {
	out := make([]string, len(a))
	for i, x := range a {
		out[i] = strings.ToLower(x.Hex())
	}
	return out
}

func evaluate(t *testing.T, e *Evaluator, g golden) *verdict.Verdict {
	t.Helper()
	return e.Evaluate(context.Background(), Input{Escrow: escrow, ProposedTx: g.tx, Policy: mustPolicy(t, 4, g.policy)})
}
