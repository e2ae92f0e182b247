package engine

import (
	"math/big"
	"testing"

	"github.com/ethereum/go-ethereum/common"

	"github.com/x402gate/x402gate/verdict"
	"github.com/x402gate/x402gate/verdictserver/engine/actions"
	"github.com/x402gate/x402gate/verdictserver/engine/erc20"
	"github.com/x402gate/x402gate/verdictserver/engine/uniswap"
)

// TestEVMGolden is the golden table of EVM actions (docs/policy.md#evm-actions): calldata
// packed with go-ethereum's abi package from the routers' and tokens' ABIs, a policy per
// row, and the verdict each must get.
func TestEVMGolden(t *testing.T) {
	e := newEngine(t, Config{}, Deps{})
	const chain = 84532
	tok := func(data []byte) map[string]any { return evmTx("evm", chain, usdc, data, nil) }
	transfer := func(to common.Address, v *big.Int) []byte {
		return pack(t, erc20.ABI, "transfer(address,uint256)", to, v)
	}
	approve := func(sp common.Address, v *big.Int) []byte {
		return pack(t, erc20.ABI, "approve(address,uint256)", sp, v)
	}
	nonce := [32]byte{1}
	r, s := [32]byte{2}, [32]byte{3}
	twa := pack(t, erc20.ABI, "transferWithAuthorization(address,address,uint256,uint256,uint256,bytes32,uint8,bytes32,bytes32)",
		escrow, payee, e6(2), big.NewInt(0), deadline, nonce, uint8(27), r, s)
	twaBytes := pack(t, erc20.ABI, "transferWithAuthorization(address,address,uint256,uint256,uint256,bytes32,bytes)",
		escrow, stranger, e6(2), big.NewInt(0), deadline, nonce, make([]byte, 65))

	v2 := func(sig string, args ...any) []byte { return pack(t, uniswap.RouterABI, sig, args...) }
	v3single := func(in, out, rcpt common.Address, amt, min *big.Int) []byte {
		return pack(t, uniswap.RouterABI, "exactInputSingle((address,address,uint24,address,uint256,uint256,uint256,uint160))",
			single{in, out, big.NewInt(500), rcpt, deadline, amt, min, new(big.Int)})
	}
	s02single := func(in, out, rcpt common.Address, amt, min *big.Int) []byte {
		return pack(t, uniswap.RouterABI, "exactInputSingle((address,address,uint24,address,uint256,uint256,uint160))",
			single02{in, out, big.NewInt(500), rcpt, amt, min, new(big.Int)})
	}
	mc := func(calls ...[]byte) []byte {
		return pack(t, uniswap.RouterABI, "multicall(uint256,bytes[])", deadline, calls)
	}
	unwrap := func(min *big.Int, to common.Address) []byte {
		return pack(t, uniswap.RouterABI, "unwrapWETH9(uint256,address)", min, to)
	}
	sweep := func(token common.Address, min *big.Int, to common.Address) []byte {
		return pack(t, uniswap.RouterABI, "sweepToken(address,uint256,address)", token, min, to)
	}
	uni := func(to common.Address, data []byte, value *big.Int) map[string]any {
		return evmTx("uniswap", chain, to, data, value)
	}
	one := big.NewInt(1)
	maxU := new(big.Int).Set(actions.MaxUint256)
	maxUint160m1 := new(big.Int).Sub(uniswap.MaxUint160, one)
	sqrtLimit := new(big.Int).Lsh(big.NewInt(1), 96) // a price of 1: inside the pool's bounds
	v3limited := func(min, sqrt *big.Int) []byte {
		return pack(t, uniswap.RouterABI, "exactInputSingle((address,address,uint24,address,uint256,uint256,uint256,uint160))",
			single{usdc, weth, big.NewInt(500), escrow, deadline, e6(3000), min, sqrt})
	}
	const (
		// selfCapped is the audit's policy: recipients self only, a $100 cap.
		selfCapped = `{"venues": {"allowed": ["uniswap", "evm"]}, "chains": {"allowed": [84532]}, "recipients": {"allowed": ["self"]}, "limits": {"perTxUsd": 100}}`
		// uniPriceLimit is uniPolicy requiring a swap's own price limit.
		uniPriceLimit = `{"venues": {"allowed": ["uniswap"]}, "chains": {"allowed": [84532]}, "recipients": {"allowed": ["self", "0x209693Bc6afc0C5328bA36FaF03C514EF312287C"]},
			"swaps": {"requireMinOut": true, "requirePriceLimit": true}, "limits": {"perTxUsd": 10000}}`
	)

	rows := []golden{
		// Native transfers and token calls (protocol evm).
		{"a native transfer to an allowed payee within the cap", evmPolicy, evmTx("evm", chain, payee, nil, milli18(100)),
			verdict.ReasonAllowed, "", nil, st{"contract_selector": cN, "asset": cP, "recipient": cP, "per_tx_cap": cP, "side": cN}, "evm.native"},
		{"a native transfer to a stranger", evmPolicy, evmTx("evm", chain, stranger, nil, milli18(100)),
			verdict.ReasonRecipientNotAllowed, "recipients.allowed", ids("recipient"), nil, ""},
		{"a native transfer to 0x…dEaD is a sink", `{"venues": {"allowed": ["evm"]}, "chains": {"allowed": [84532]}}`, evmTx("evm", chain, dead, nil, one),
			verdict.ReasonSinkRecipient, "", ids("sink_recipient"), nil, ""},
		{"a native transfer over the cap, priced through WETH", evmPolicy, evmTx("evm", chain, payee, nil, e18(2)),
			verdict.ReasonPerTxCapExceeded, "limits.perTxUsd", ids("per_tx_cap"), nil, ""},
		{"an ERC-20 transfer with its selector allowed", evmContracts, tok(transfer(payee, e6(5))),
			verdict.ReasonAllowed, "", nil, st{"contract_selector": cP, "asset": cN, "recipient": cN, "sink_recipient": cP}, "erc20.transfer"},
		{"an ERC-20 transfer to the token contract itself is a sink", evmContracts, tok(transfer(usdc, e6(5))),
			verdict.ReasonSinkRecipient, "", ids("sink_recipient"), nil, ""},
		{"an ERC-20 transfer of a token outside the universe", evmPolicy, evmTx("evm", chain, tkn, transfer(payee, one), nil),
			verdict.ReasonAssetNotInUniverse, "assets.universe.84532", ids("asset", "per_tx_cap"), nil, ""},
		{"transferFrom is not an allowed selector", evmContracts, tok(pack(t, erc20.ABI, "transferFrom(address,address,uint256)", escrow, payee, one)),
			verdict.ReasonContractOrSelector, "contracts.84532.0x036CbD53842c5426634e7929541eC2318f3dCF7e", ids("contract_selector"), nil, ""},
		{"a limited approval to an allowed spender", evmPolicy, tok(approve(payee, e6(100))),
			verdict.ReasonAllowed, "", nil, st{"recipient": cP, "per_tx_cap": cP}, "erc20.approve"},
		{"an unlimited approval exceeds the cap", evmPolicy, tok(approve(payee, maxU)),
			verdict.ReasonPerTxCapExceeded, "limits.perTxUsd", ids("per_tx_cap"), nil, ""},
		{"an unlimited approval to a stranger", evmPolicy, tok(approve(stranger, maxU)),
			verdict.ReasonRecipientNotAllowed, "recipients.allowed", ids("recipient", "per_tx_cap"), nil, ""},
		{"transferFrom a sanctioned owner", `{"venues": {"allowed": ["evm"]}, "chains": {"allowed": [84532]}}`, tok(pack(t, erc20.ABI, "transferFrom(address,address,uint256)", listed, payee, one)),
			verdict.ReasonSanctionedAddress, "", ids("sanctions"), nil, "erc20.transferFrom"},
		{"an EIP-3009 transferWithAuthorization to the payee", evmPolicy, tok(twa),
			verdict.ReasonAllowed, "", nil, st{"recipient": cP, "per_tx_cap": cP}, "eip3009.transferWithAuthorization"},
		{"an EIP-3009 transferWithAuthorization (bytes signature) to a stranger", evmPolicy, tok(twaBytes),
			verdict.ReasonRecipientNotAllowed, "recipients.allowed", ids("recipient"), nil, ""},
		{"an unknown selector on a token is a decode failure", evmPolicy, tok(append([]byte{0x40, 0xc1, 0x0f, 0x19}, make([]byte, 64)...)),
			verdict.ReasonDecodeFailure, "", nil, st{"venue": cP, "chain": cP, "recipient": cN}, "undecoded"},
		{"an EIP-2612 permit of an unlimited allowance exceeds the cap", evmPolicy, tok(pack(t, erc20.ABI, "permit(address,address,uint256,uint256,uint8,bytes32,bytes32)", escrow, payee, maxU, deadline, uint8(27), r, s)),
			verdict.ReasonPerTxCapExceeded, "limits.perTxUsd", ids("per_tx_cap"), nil, "eip2612.permit"},
		{"increaseAllowance by a limited amount", evmPolicy, tok(pack(t, erc20.ABI, "increaseAllowance(address,uint256)", payee, e6(10))),
			verdict.ReasonAllowed, "", nil, st{"recipient": cP, "per_tx_cap": cP}, "erc20.increaseAllowance"},
		{"an EIP-3009 receiveWithAuthorization to the payee", evmPolicy, tok(pack(t, erc20.ABI, "receiveWithAuthorization(address,address,uint256,uint256,uint256,bytes32,uint8,bytes32,bytes32)",
			escrow, payee, e6(2), big.NewInt(0), deadline, nonce, uint8(27), r, s)),
			verdict.ReasonAllowed, "", nil, st{"recipient": cP}, "eip3009.receiveWithAuthorization"},
		{"wrapping ETH in the chain's WETH pays the agent", evmPolicy, evmTx("evm", chain, weth, pack(t, erc20.ABI, "deposit()"), milli18(100)),
			verdict.ReasonAllowed, "", nil, st{"recipient": cP, "per_tx_cap": cP, "asset": cP}, "weth.deposit"},
		{"unwrapping WETH pays the agent", evmPolicy, evmTx("evm", chain, weth, pack(t, erc20.ABI, "withdraw(uint256)", milli18(100)), nil),
			verdict.ReasonAllowed, "", nil, st{"recipient": cP, "per_tx_cap": cP}, "weth.withdraw"},
		{"deposit() on a contract that is not the chain's WETH is a decode failure", evmPolicy, evmTx("evm", chain, usdc, pack(t, erc20.ABI, "deposit()"), milli18(100)),
			verdict.ReasonDecodeFailure, "", nil, nil, ""},
		{"a token call carrying value is a decode failure", evmPolicy, evmTx("evm", chain, usdc, transfer(payee, one), one),
			verdict.ReasonDecodeFailure, "", nil, nil, ""},
		{"an unknown member of an EVM call is a decode failure", evmPolicy, with(tok(transfer(payee, one)), "gasPrice", "1"),
			verdict.ReasonDecodeFailure, "", nil, nil, ""},
		{"dirty high bits in an address word are a decode failure", evmPolicy, tok(func() []byte { b := transfer(payee, one); b[4] = 0xff; return b }()),
			verdict.ReasonDecodeFailure, "", nil, nil, ""},
		{"a capped transfer of an unpriced token is data_unavailable", `{"venues": {"allowed": ["evm"]}, "chains": {"allowed": [84532]}, "limits": {"perTxUsd": 1}}`,
			evmTx("evm", chain, tkn, transfer(payee, one), nil), verdict.ReasonDataUnavailable, "limits.perTxUsd", ids("per_tx_cap"), nil, ""},

		// Uniswap V2 Router02 and SwapRouter02's V2 functions.
		{"a V2 buy of WETH for USDC within 50 bps", uniPolicy, uni(v2Router, v2("swapExactTokensForTokens(uint256,uint256,address[],address,uint256)", e6(3000), milli18(995), []common.Address{usdc, weth}, escrow, deadline), nil),
			verdict.ReasonAllowed, "", nil, st{"side": cP, "slippage_guard": cP, "execution_price_bound": cN, "leverage": cN, "per_tx_cap": cP}, "uniswap.v2.swapExactTokensForTokens"},
		{"a V2 swap with zero minimum out", uniPolicy, uni(v2Router, v2("swapExactTokensForTokens(uint256,uint256,address[],address,uint256)", e6(3000), new(big.Int), []common.Address{usdc, weth}, escrow, deadline), nil),
			verdict.ReasonNoSlippageGuard, "swaps.requireMinOut", ids("slippage_guard"), nil, ""},
		{"a V2 sale of ETH against buy-only", uniBuyOnly, uni(v2Router, v2("swapExactETHForTokens(uint256,address[],address,uint256)", e6(2990), []common.Address{weth, usdc}, escrow, deadline), e18(1)),
			verdict.ReasonSideNotAllowed, "trading.sides", ids("side"), nil, "uniswap.v2.swapExactETHForTokens"},
		{"a V2 exact-output ETH buy paying up to 5% more", uniPolicy, uni(v2Router, v2("swapTokensForExactETH(uint256,uint256,address[],address,uint256)", e18(1), e6(3150), []common.Address{usdc, weth}, escrow, deadline), nil),
			verdict.ReasonNoSlippageGuard, "swaps.maxSlippageBps", ids("slippage_guard"), nil, ""},
		{"a V2 sale for ETH sent to a stranger", uniPolicy, uni(v2Router, v2("swapExactTokensForETH(uint256,uint256,address[],address,uint256)", e6(3000), milli18(995), []common.Address{usdc, weth}, stranger, deadline), nil),
			verdict.ReasonRecipientNotAllowed, "recipients.allowed", ids("recipient"), nil, ""},
		{"a V2 path through a token outside the universe", uniPolicy, uni(v2Router, v2("swapExactTokensForTokens(uint256,uint256,address[],address,uint256)", e6(3000), milli18(995), []common.Address{usdc, tkn, weth}, escrow, deadline), nil),
			verdict.ReasonAssetNotInUniverse, "assets.universe.84532", ids("asset"), nil, ""},
		{"SwapRouter02's V2 swap to address(1) pays the agent", uniPolicy, uni(router02, v2("swapExactTokensForTokens(uint256,uint256,address[],address)", e6(3000), milli18(995), []common.Address{usdc, weth}, uniswap.MsgSender), nil),
			verdict.ReasonAllowed, "", nil, st{"recipient": cP, "sink_recipient": cP}, ""},

		// Uniswap V3 SwapRouter and SwapRouter02.
		{"a V3 exactInputSingle within the bound", uniPolicy, uni(swapRouter, v3single(usdc, weth, escrow, e6(3000), milli18(995)), nil),
			verdict.ReasonAllowed, "", nil, st{"slippage_guard": cP, "side": cP}, "uniswap.v3.exactInputSingle"},
		{"a V3 exactInputSingle with zero minimum out", uniPolicy, uni(swapRouter, v3single(usdc, weth, escrow, e6(3000), new(big.Int)), nil),
			verdict.ReasonNoSlippageGuard, "swaps.requireMinOut", ids("slippage_guard"), nil, ""},
		{"a V3 exactInput through a token outside the universe", uniPolicy, uni(swapRouter, pack(t, uniswap.RouterABI, "exactInput((bytes,address,uint256,uint256,uint256))",
			multi{v3path(usdc, tkn, weth), escrow, deadline, e6(3000), milli18(995)}), nil),
			verdict.ReasonAssetNotInUniverse, "assets.universe.84532", ids("asset"), nil, "uniswap.v3.exactInput"},
		{"a SwapRouter02 exactOutputSingle within the bound", uniPolicy, uni(router02, pack(t, uniswap.RouterABI, "exactOutputSingle((address,address,uint24,address,uint256,uint256,uint160))",
			singleOut02{usdc, weth, big.NewInt(500), uniswap.MsgSender, e18(1), e6(3020), new(big.Int)}), nil),
			verdict.ReasonAllowed, "", nil, st{"slippage_guard": cP, "side": cP}, "uniswap.v3.exactOutputSingle"},
		{"a SwapRouter02 exactOutput reads its path backwards: a WETH sale priced from WETH", uniBuyOnly, uni(router02, pack(t, uniswap.RouterABI, "exactOutput((bytes,address,uint256,uint256))",
			multiOut02{v3path(usdc, weth), uniswap.MsgSender, e6(3000), milli18(1010)}), nil),
			verdict.ReasonSideNotAllowed, "trading.sides", ids("side"), nil, "uniswap.v3.exactOutput"},
		{"a SwapRouter swap to address(0) strands the output in the router", uniPolicy, uni(swapRouter, v3single(usdc, weth, common.Address{}, e6(3000), milli18(995)), nil),
			verdict.ReasonSinkRecipient, "", ids("sink_recipient"), nil, ""},
		{"a multicall swapping to the router then unwrapping to the agent", uniPolicy, uni(router02, mc(s02single(usdc, weth, uniswap.AddressThis, e6(3000), milli18(995)), unwrap(milli18(995), escrow)), nil),
			verdict.ReasonAllowed, "", nil, st{"recipient": cP, "slippage_guard": cP, "sink_recipient": cP}, "uniswap.multicall"},
		{"a multicall swapping to the router with no sweep strands the output", uniPolicy, uni(router02, mc(s02single(usdc, weth, uniswap.AddressThis, e6(3000), milli18(995))), nil),
			verdict.ReasonSinkRecipient, "", ids("sink_recipient"), nil, ""},
		{"a multicall whose inner selector the policy does not list", uniContracts, uni(router02, mc(s02single(usdc, weth, uniswap.MsgSender, e6(3000), milli18(995))), nil),
			verdict.ReasonContractOrSelector, "contracts.84532.0x2626664c2603336E57B271c5C0b26F421741e481", ids("contract_selector"), nil, ""},
		{"a multicall's second swap has zero minimum out", uniPolicy, uni(router02, mc(s02single(usdc, weth, uniswap.MsgSender, e6(1000), milli18(332)), s02single(usdc, weth, uniswap.MsgSender, e6(1000), new(big.Int))), nil),
			verdict.ReasonNoSlippageGuard, "swaps.requireMinOut", ids("slippage_guard"), nil, ""},
		{"a multicall sweeping to a sanctioned address", uniOpen, uni(router02, mc(s02single(usdc, weth, uniswap.AddressThis, e6(3000), milli18(995)), sweep(weth, milli18(995), listed)), nil),
			verdict.ReasonSanctionedAddress, "", ids("sanctions"), nil, ""},
		{"a multicall with a call the decoder does not read", uniPolicy, uni(router02, mc(s02single(usdc, weth, uniswap.MsgSender, e6(3000), milli18(995)), []byte{0xde, 0xad, 0xbe, 0xef}), nil),
			verdict.ReasonDecodeFailure, "", nil, nil, ""},
		{"a multicall's second swap spends the router's balance: counted once, and its slippage cannot be measured (data_unavailable)", uniPolicy, uni(router02, mc(
			s02single(usdc, weth, uniswap.AddressThis, e6(3000), milli18(995)), s02single(weth, usdc, uniswap.MsgSender, new(big.Int), e6(2985))), nil),
			verdict.ReasonDataUnavailable, "swaps.maxSlippageBps", ids("slippage_guard"), st{"per_tx_cap": cP, "sink_recipient": cP, "side": cP}, ""},
		{"a V3 swap over the cap", uniPolicy, uni(swapRouter, v3single(weth, usdc, escrow, e18(4), e6(11950)), nil),
			verdict.ReasonPerTxCapExceeded, "limits.perTxUsd", ids("per_tx_cap"), nil, ""},

		// The Universal Router.
		{"UR 2.1.1: a V3 swap paid by the agent to msg.sender", uniPolicy, uni(urV21, execute(t, []byte{uniswap.CmdV3SwapExactIn}, urV3In(t, uniswap.MsgSender, e6(3000), milli18(995), v3path(usdc, weth), true, true)), nil),
			verdict.ReasonAllowed, "", nil, st{"recipient": cP, "slippage_guard": cP, "per_tx_cap": cP}, "uniswap.ur.execute"},
		{"UR 2.0: wrap ETH, swap from the router to the agent", uniPolicy, uni(urV20, execute(t, []byte{uniswap.CmdWrapETH, uniswap.CmdV2SwapExactIn},
			urToAmount(t, uniswap.AddressThis, e18(1)), urV2In(t, uniswap.MsgSender, e18(1), e6(2990), []common.Address{weth, usdc}, false)), e18(1)),
			verdict.ReasonAllowed, "", nil, st{"side": cP, "slippage_guard": cP, "per_tx_cap": cP, "recipient": cP}, ""},
		{"UR: a swap to the router unwrapped to a sanctioned address", uniOpen, uni(urV21, execute(t, []byte{uniswap.CmdV3SwapExactIn, uniswap.CmdUnwrapWETH},
			urV3In(t, uniswap.AddressThis, e6(3000), milli18(995), v3path(usdc, weth), true, true), urToAmount(t, listed, milli18(995))), nil),
			verdict.ReasonSanctionedAddress, "", ids("sanctions"), nil, ""},
		{"UR: a swap to the router with nothing paid out strands it", uniPolicy, uni(urV21, execute(t, []byte{uniswap.CmdV3SwapExactIn},
			urV3In(t, uniswap.AddressThis, e6(3000), milli18(995), v3path(usdc, weth), true, true)), nil),
			verdict.ReasonSinkRecipient, "", ids("sink_recipient"), nil, ""},
		{"UR 2.0: a V4_SWAP whose input is not (bytes, bytes[]) is undecodable", uniPolicy, uni(urV20, execute(t, []byte{0x10}, []byte{}), nil),
			verdict.ReasonDecodeFailure, "", nil, nil, ""},
		{"an unknown router: a sub-plan byte means different things per version, so it is undecodable", uniOpen, uni(urOther, execute(t, []byte{uniswap.CmdExecuteSubPlan},
			encode(t, []string{"bytes", "bytes[]"}, []byte{uniswap.CmdTransfer}, [][]byte{urTokenTo(t, usdc, payee, one)})), nil),
			verdict.ReasonDecodeFailure, "", nil, nil, ""},
		{"UR 2.0: a sanctioned recipient inside a sub-plan is found", uniOpen, uni(urV20, execute(t, []byte{uniswap.CmdExecuteSubPlan},
			encode(t, []string{"bytes", "bytes[]"}, []byte{uniswap.CmdTransfer}, [][]byte{urTokenTo(t, usdc, listed, one)})), nil),
			verdict.ReasonSanctionedAddress, "", ids("sanctions"), nil, ""},
		{"UR: an unlimited Permit2 allowance to the router exceeds the cap, and the router is a recipient", uniPolicy, uni(urV21, execute(t, []byte{uniswap.CmdPermit2Permit, uniswap.CmdV3SwapExactIn},
			permit2Single(t, usdc, uniswap.MaxUint160, urV21), urV3In(t, uniswap.MsgSender, e6(3000), milli18(995), v3path(usdc, weth), true, true)), nil),
			verdict.ReasonRecipientNotAllowed, "recipients.allowed", ids("recipient", "per_tx_cap"), nil, ""},
		{"UR: a fee paid to a recipient the policy lacks", uniPolicy, uni(urV21, execute(t, []byte{uniswap.CmdV3SwapExactIn, uniswap.CmdPayPortion, uniswap.CmdSweep},
			urV3In(t, uniswap.AddressThis, e6(3000), milli18(995), v3path(usdc, weth), true, true), urTokenTo(t, weth, stranger, big.NewInt(25)), urTokenTo(t, weth, uniswap.MsgSender, milli18(990))), nil),
			verdict.ReasonRecipientNotAllowed, "recipients.allowed", ids("recipient"), nil, ""},
		{"UR: the allow-revert flag keeps the command", uniPolicy, uni(urV21, execute(t, []byte{0x80 | uniswap.CmdV3SwapExactIn}, urV3In(t, uniswap.MsgSender, e6(3000), milli18(995), v3path(usdc, weth), true, true)), nil),
			verdict.ReasonAllowed, "", nil, nil, ""},
		{"UR: a swap with zero minimum out", uniPolicy, uni(urV21, execute(t, []byte{uniswap.CmdV3SwapExactIn}, urV3In(t, uniswap.MsgSender, e6(3000), new(big.Int), v3path(usdc, weth), true, true)), nil),
			verdict.ReasonNoSlippageGuard, "swaps.requireMinOut", ids("slippage_guard"), nil, ""},
		{"UR 1.2 on Base reads no BALANCE_CHECK_ERC20", uniOpen, evmTx("uniswap", 8453, urV12, execute(t, []byte{uniswap.CmdBalanceCheckERC20}, urTokenTo(t, escrow, usdc, one)), nil),
			verdict.ReasonDecodeFailure, "", nil, nil, ""},
		{"UR 1.2 masks with 0x1f: 0x20|0x0c is UNWRAP_WETH", uniOpen, evmTx("uniswap", 8453, urV12, execute(t, []byte{0x2c}, urToAmount(t, uniswap.MsgSender, one)), nil),
			verdict.ReasonAllowed, "", nil, st{"recipient": cN, "sink_recipient": cP}, ""},
		{"UR 2.1.1 refuses swap inputs without minHopPriceX36", uniPolicy, uni(urV21, execute(t, []byte{uniswap.CmdV3SwapExactIn}, urV3In(t, uniswap.MsgSender, e6(3000), milli18(995), v3path(usdc, weth), true, false)), nil),
			verdict.ReasonDecodeFailure, "", nil, nil, ""},
		{"an unknown router's swap is undecodable, with or without minHopPriceX36", uniOpen, uni(urOther, execute(t, []byte{uniswap.CmdV3SwapExactIn}, urV3In(t, uniswap.MsgSender, e6(3000), milli18(995), v3path(usdc, weth), true, false)), nil),
			verdict.ReasonDecodeFailure, "", nil, nil, ""},

		// Issue 21: nothing the engine cannot understand and price is approved.
		{"why 1: a plan at an unknown contract granting it 2^160-2 USDC through Permit2 is undecodable", selfCapped, uni(urOther, execute(t, []byte{uniswap.CmdPermit2Permit},
			permit2Single(t, usdc, maxUint160m1, urOther)), nil),
			verdict.ReasonDecodeFailure, "", nil, nil, "undecoded"},
		{"why 1: a SwapRouter selector at an unknown address is undecodable", uniOpen, uni(urOther, v3single(usdc, weth, escrow, e6(3000), milli18(995)), nil),
			verdict.ReasonDecodeFailure, "", nil, nil, "undecoded"},
		{"why 1: a V3 SwapRouter function sent to a V2 router is undecodable", uniOpen, uni(v2Router, v3single(usdc, weth, escrow, e6(3000), milli18(995)), nil),
			verdict.ReasonDecodeFailure, "", nil, nil, "undecoded"},
		{"why 1: a Permit2 grant of 2^160-2 USDC to a known router is priced at its amount, and its spender is a recipient", selfCapped, uni(urV21, execute(t, []byte{uniswap.CmdPermit2Permit},
			permit2Single(t, usdc, maxUint160m1, urV21)), nil),
			verdict.ReasonRecipientNotAllowed, "recipients.allowed", ids("recipient", "per_tx_cap"), nil, "uniswap.ur.execute"},
		{"why 1: a Permit2 batch grant under the cap to an allowed spender passes, priced", uniPolicy, uni(urV21, execute(t, []byte{uniswap.CmdPermit2PermitBatch},
			encode(t, []string{"permitBatch", "bytes"}, permitBatch{[]permitDetail{{usdc, e6(100), deadline, big.NewInt(0)}}, payee, deadline}, make([]byte, 65))), nil),
			verdict.ReasonAllowed, "", nil, st{"recipient": cP, "per_tx_cap": cP}, ""},
		{"why 2: Permit2's own approve is priced at its amount", selfCapped, uni(uniswap.Permit2, pack(t, uniswap.Permit2ABI, "approve(address,address,uint160,uint48)", usdc, escrow, e6(200), big.NewInt(1_900_000_000)), nil),
			verdict.ReasonPerTxCapExceeded, "limits.perTxUsd", ids("per_tx_cap"), st{"recipient": cP}, "permit2.approve"},
		{"why 2: Permit2's own permit to a stranger is a recipient the policy lacks", selfCapped, uni(uniswap.Permit2, pack(t, uniswap.Permit2ABI, "permit(address,((address,uint160,uint48,uint48),address,uint256),bytes)",
			escrow, permitSingle{permitDetail{usdc, e6(50), deadline, big.NewInt(0)}, stranger, deadline}, make([]byte, 65)), nil),
			verdict.ReasonRecipientNotAllowed, "recipients.allowed", ids("recipient"), st{"per_tx_cap": cP}, "permit2.permit"},
		{"why 2: Permit2's transferFrom pays its recipient, priced", selfCapped, uni(uniswap.Permit2, pack(t, uniswap.Permit2ABI, "transferFrom(address,address,uint160,address)", escrow, escrow, e6(150), usdc), nil),
			verdict.ReasonPerTxCapExceeded, "limits.perTxUsd", ids("per_tx_cap"), st{"recipient": cP}, "permit2.transferFrom"},
		{"an EIP-2612 permit of 2^256-2 is priced at its amount, as before", selfCapped, tok(pack(t, erc20.ABI, "permit(address,address,uint256,uint256,uint8,bytes32,bytes32)", escrow, escrow, new(big.Int).Sub(maxU, one), deadline, uint8(27), r, s)),
			verdict.ReasonPerTxCapExceeded, "limits.perTxUsd", ids("per_tx_cap"), nil, "eip2612.permit"},
		{"a policy's knownContracts adds a Universal Router at its version", `{"venues": {"allowed": ["uniswap"]}, "chains": {"allowed": [84532]},
			"knownContracts": {"84532": {"0x7777777777777777777777777777777777777777": "uniswap.universalRouter@2.1.1"}}}`,
			uni(urOther, execute(t, []byte{uniswap.CmdV3SwapExactIn}, urV3In(t, uniswap.MsgSender, e6(3000), milli18(995), v3path(usdc, weth), true, true)), nil),
			verdict.ReasonAllowed, "", nil, nil, "uniswap.ur.execute"},
		{"a policy's knownContracts on another chain adds nothing here", `{"venues": {"allowed": ["uniswap"]}, "chains": {"allowed": [84532]},
			"knownContracts": {"8453": {"0x7777777777777777777777777777777777777777": "uniswap.universalRouter@2.1.1"}}}`,
			uni(urOther, execute(t, []byte{uniswap.CmdV3SwapExactIn}, urV3In(t, uniswap.MsgSender, e6(3000), milli18(995), v3path(usdc, weth), true, true)), nil),
			verdict.ReasonDecodeFailure, "", nil, nil, "undecoded"},
		{"a policy cannot redefine a built-in router", `{"venues": {"allowed": ["uniswap"]}, "chains": {"allowed": [84532]},
			"knownContracts": {"84532": {"0x8B844f885672f333Bc0042cB669255f93a4C1E6b": "uniswap.swapRouter"}}}`,
			uni(urV21, v3single(usdc, weth, escrow, e6(3000), milli18(995)), nil),
			verdict.ReasonDecodeFailure, "", nil, nil, "undecoded"},
		{"why 3: a V3 swap without its own price limit fails swaps.requirePriceLimit", uniPriceLimit, uni(swapRouter, v3single(usdc, weth, escrow, e6(3000), milli18(995)), nil),
			verdict.ReasonNoExecutionPriceBound, "swaps.requirePriceLimit", ids("execution_price_bound"), st{"slippage_guard": cP}, ""},
		{"why 3: a V3 swap with its own price limit and a minimum out passes swaps.requirePriceLimit", uniPriceLimit, uni(swapRouter, v3limited(milli18(995), sqrtLimit), nil),
			verdict.ReasonAllowed, "", nil, st{"execution_price_bound": cP}, ""},
		{"why 3: a price limit does not stand in for a minimum out", `{"venues": {"allowed": ["uniswap"]}, "chains": {"allowed": [84532]}, "swaps": {"requirePriceLimit": true}}`,
			uni(swapRouter, v3limited(new(big.Int), sqrtLimit), nil),
			verdict.ReasonNoExecutionPriceBound, "swaps.requirePriceLimit", ids("execution_price_bound"), nil, ""},
		{"why 3: a sqrtPriceLimitX96 at the pool's bound limits nothing", uniPriceLimit, uni(swapRouter, v3limited(milli18(995), new(big.Int).Add(uniswap.MinSqrtRatio, one)), nil),
			verdict.ReasonNoExecutionPriceBound, "swaps.requirePriceLimit", ids("execution_price_bound"), nil, ""},
		{"why 3: a Universal Router 2.1.1 swap with a minHopPriceX36 for its hop passes", uniPriceLimit, uni(urV21, execute(t, []byte{uniswap.CmdV3SwapExactIn},
			urV3InHops(t, uniswap.MsgSender, e6(3000), milli18(995), v3path(usdc, weth), true, []*big.Int{big.NewInt(1)})), nil),
			verdict.ReasonAllowed, "", nil, st{"execution_price_bound": cP}, ""},
	}
	if len(rows) < 40 {
		t.Fatalf("%d rows", len(rows))
	}
	runGolden(t, e, rows)
}
