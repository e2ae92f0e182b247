package engine

import (
	"strings"

	"github.com/ethereum/go-ethereum/accounts/abi"
)

// The ABIs the EVM decoders read calldata with (docs/policy.md#evm-actions): written from the
// contracts' published interfaces (ERC-20, EIP-3009 as USDC implements it, Uniswap's V2
// Router02, V3 SwapRouter, SwapRouter02 and Universal Router). TestSelectors pins every
// selector against its keccak-256 signature.

const tokenABIJSON = `[
{"type":"function","name":"transfer","inputs":[{"name":"to","type":"address"},{"name":"value","type":"uint256"}]},
{"type":"function","name":"approve","inputs":[{"name":"spender","type":"address"},{"name":"value","type":"uint256"}]},
{"type":"function","name":"transferFrom","inputs":[{"name":"from","type":"address"},{"name":"to","type":"address"},{"name":"value","type":"uint256"}]},
{"type":"function","name":"transferWithAuthorization","inputs":[{"name":"from","type":"address"},{"name":"to","type":"address"},{"name":"value","type":"uint256"},{"name":"validAfter","type":"uint256"},{"name":"validBefore","type":"uint256"},{"name":"nonce","type":"bytes32"},{"name":"v","type":"uint8"},{"name":"r","type":"bytes32"},{"name":"s","type":"bytes32"}]},
{"type":"function","name":"transferWithAuthorization","inputs":[{"name":"from","type":"address"},{"name":"to","type":"address"},{"name":"value","type":"uint256"},{"name":"validAfter","type":"uint256"},{"name":"validBefore","type":"uint256"},{"name":"nonce","type":"bytes32"},{"name":"signature","type":"bytes"}]},
{"type":"function","name":"receiveWithAuthorization","inputs":[{"name":"from","type":"address"},{"name":"to","type":"address"},{"name":"value","type":"uint256"},{"name":"validAfter","type":"uint256"},{"name":"validBefore","type":"uint256"},{"name":"nonce","type":"bytes32"},{"name":"v","type":"uint8"},{"name":"r","type":"bytes32"},{"name":"s","type":"bytes32"}]},
{"type":"function","name":"increaseAllowance","inputs":[{"name":"spender","type":"address"},{"name":"addedValue","type":"uint256"}]},
{"type":"function","name":"permit","inputs":[{"name":"owner","type":"address"},{"name":"spender","type":"address"},{"name":"value","type":"uint256"},{"name":"deadline","type":"uint256"},{"name":"v","type":"uint8"},{"name":"r","type":"bytes32"},{"name":"s","type":"bytes32"}]},
{"type":"function","name":"deposit","inputs":[]},
{"type":"function","name":"withdraw","inputs":[{"name":"wad","type":"uint256"}]}
]`

const routerABIJSON = `[
{"type":"function","name":"swapExactTokensForTokens","inputs":[{"name":"amountIn","type":"uint256"},{"name":"amountOutMin","type":"uint256"},{"name":"path","type":"address[]"},{"name":"to","type":"address"},{"name":"deadline","type":"uint256"}]},
{"type":"function","name":"swapTokensForExactTokens","inputs":[{"name":"amountOut","type":"uint256"},{"name":"amountInMax","type":"uint256"},{"name":"path","type":"address[]"},{"name":"to","type":"address"},{"name":"deadline","type":"uint256"}]},
{"type":"function","name":"swapExactETHForTokens","inputs":[{"name":"amountOutMin","type":"uint256"},{"name":"path","type":"address[]"},{"name":"to","type":"address"},{"name":"deadline","type":"uint256"}]},
{"type":"function","name":"swapETHForExactTokens","inputs":[{"name":"amountOut","type":"uint256"},{"name":"path","type":"address[]"},{"name":"to","type":"address"},{"name":"deadline","type":"uint256"}]},
{"type":"function","name":"swapExactTokensForETH","inputs":[{"name":"amountIn","type":"uint256"},{"name":"amountOutMin","type":"uint256"},{"name":"path","type":"address[]"},{"name":"to","type":"address"},{"name":"deadline","type":"uint256"}]},
{"type":"function","name":"swapTokensForExactETH","inputs":[{"name":"amountOut","type":"uint256"},{"name":"amountInMax","type":"uint256"},{"name":"path","type":"address[]"},{"name":"to","type":"address"},{"name":"deadline","type":"uint256"}]},
{"type":"function","name":"swapExactTokensForTokensSupportingFeeOnTransferTokens","inputs":[{"name":"amountIn","type":"uint256"},{"name":"amountOutMin","type":"uint256"},{"name":"path","type":"address[]"},{"name":"to","type":"address"},{"name":"deadline","type":"uint256"}]},
{"type":"function","name":"swapExactETHForTokensSupportingFeeOnTransferTokens","inputs":[{"name":"amountOutMin","type":"uint256"},{"name":"path","type":"address[]"},{"name":"to","type":"address"},{"name":"deadline","type":"uint256"}]},
{"type":"function","name":"swapExactTokensForETHSupportingFeeOnTransferTokens","inputs":[{"name":"amountIn","type":"uint256"},{"name":"amountOutMin","type":"uint256"},{"name":"path","type":"address[]"},{"name":"to","type":"address"},{"name":"deadline","type":"uint256"}]},
{"type":"function","name":"swapExactTokensForTokens","inputs":[{"name":"amountIn","type":"uint256"},{"name":"amountOutMin","type":"uint256"},{"name":"path","type":"address[]"},{"name":"to","type":"address"}]},
{"type":"function","name":"swapTokensForExactTokens","inputs":[{"name":"amountOut","type":"uint256"},{"name":"amountInMax","type":"uint256"},{"name":"path","type":"address[]"},{"name":"to","type":"address"}]},
{"type":"function","name":"exactInputSingle","inputs":[{"name":"params","type":"tuple","components":[{"name":"tokenIn","type":"address"},{"name":"tokenOut","type":"address"},{"name":"fee","type":"uint24"},{"name":"recipient","type":"address"},{"name":"deadline","type":"uint256"},{"name":"amountIn","type":"uint256"},{"name":"amountOutMinimum","type":"uint256"},{"name":"sqrtPriceLimitX96","type":"uint160"}]}]},
{"type":"function","name":"exactInput","inputs":[{"name":"params","type":"tuple","components":[{"name":"path","type":"bytes"},{"name":"recipient","type":"address"},{"name":"deadline","type":"uint256"},{"name":"amountIn","type":"uint256"},{"name":"amountOutMinimum","type":"uint256"}]}]},
{"type":"function","name":"exactOutputSingle","inputs":[{"name":"params","type":"tuple","components":[{"name":"tokenIn","type":"address"},{"name":"tokenOut","type":"address"},{"name":"fee","type":"uint24"},{"name":"recipient","type":"address"},{"name":"deadline","type":"uint256"},{"name":"amountOut","type":"uint256"},{"name":"amountInMaximum","type":"uint256"},{"name":"sqrtPriceLimitX96","type":"uint160"}]}]},
{"type":"function","name":"exactOutput","inputs":[{"name":"params","type":"tuple","components":[{"name":"path","type":"bytes"},{"name":"recipient","type":"address"},{"name":"deadline","type":"uint256"},{"name":"amountOut","type":"uint256"},{"name":"amountInMaximum","type":"uint256"}]}]},
{"type":"function","name":"exactInputSingle","inputs":[{"name":"params","type":"tuple","components":[{"name":"tokenIn","type":"address"},{"name":"tokenOut","type":"address"},{"name":"fee","type":"uint24"},{"name":"recipient","type":"address"},{"name":"amountIn","type":"uint256"},{"name":"amountOutMinimum","type":"uint256"},{"name":"sqrtPriceLimitX96","type":"uint160"}]}]},
{"type":"function","name":"exactInput","inputs":[{"name":"params","type":"tuple","components":[{"name":"path","type":"bytes"},{"name":"recipient","type":"address"},{"name":"amountIn","type":"uint256"},{"name":"amountOutMinimum","type":"uint256"}]}]},
{"type":"function","name":"exactOutputSingle","inputs":[{"name":"params","type":"tuple","components":[{"name":"tokenIn","type":"address"},{"name":"tokenOut","type":"address"},{"name":"fee","type":"uint24"},{"name":"recipient","type":"address"},{"name":"amountOut","type":"uint256"},{"name":"amountInMaximum","type":"uint256"},{"name":"sqrtPriceLimitX96","type":"uint160"}]}]},
{"type":"function","name":"exactOutput","inputs":[{"name":"params","type":"tuple","components":[{"name":"path","type":"bytes"},{"name":"recipient","type":"address"},{"name":"amountOut","type":"uint256"},{"name":"amountInMaximum","type":"uint256"}]}]},
{"type":"function","name":"multicall","inputs":[{"name":"data","type":"bytes[]"}]},
{"type":"function","name":"multicall","inputs":[{"name":"deadline","type":"uint256"},{"name":"data","type":"bytes[]"}]},
{"type":"function","name":"multicall","inputs":[{"name":"previousBlockhash","type":"bytes32"},{"name":"data","type":"bytes[]"}]},
{"type":"function","name":"unwrapWETH9","inputs":[{"name":"amountMinimum","type":"uint256"},{"name":"recipient","type":"address"}]},
{"type":"function","name":"unwrapWETH9","inputs":[{"name":"amountMinimum","type":"uint256"}]},
{"type":"function","name":"sweepToken","inputs":[{"name":"token","type":"address"},{"name":"amountMinimum","type":"uint256"},{"name":"recipient","type":"address"}]},
{"type":"function","name":"sweepToken","inputs":[{"name":"token","type":"address"},{"name":"amountMinimum","type":"uint256"}]},
{"type":"function","name":"refundETH","inputs":[]},
{"type":"function","name":"execute","inputs":[{"name":"commands","type":"bytes"},{"name":"inputs","type":"bytes[]"},{"name":"deadline","type":"uint256"}]},
{"type":"function","name":"execute","inputs":[{"name":"commands","type":"bytes"},{"name":"inputs","type":"bytes[]"}]}
]`

// Overloads share their name; go-ethereum names the later ones name0, name1 …, and the
// decoders find a method by its selector, never by that name.

var (
	tokenABI  = mustABI(tokenABIJSON)
	routerABI = mustABI(routerABIJSON)
)

// methodIndexes maps each built-in ABI's selectors to its methods, built once: go-ethereum's
// ABI.MethodById scans every method and returns a copy of the one found, on the heap.
var methodIndexes = map[*abi.ABI]map[[4]byte]*abi.Method{}

func init() {
	for _, a := range []*abi.ABI{&tokenABI, &routerABI, &permit2ABI} {
		idx := make(map[[4]byte]*abi.Method, len(a.Methods))
		for name := range a.Methods {
			m := a.Methods[name]
			if _, dup := idx[[4]byte(m.ID)]; dup {
				panic("engine: two built-in methods share the selector of " + m.Sig)
			}
			idx[[4]byte(m.ID)] = &m
		}
		methodIndexes[a] = idx
	}
}

// methodByID is a.MethodById(sel) for a built-in ABI, read only; nil when a has no method
// with that selector.
func methodByID(a *abi.ABI, sel []byte) *abi.Method {
	if idx, ok := methodIndexes[a]; ok {
		return idx[[4]byte(sel)]
	}
	m, err := a.MethodById(sel)
	if err != nil {
		return nil
	}
	return m
}

func mustABI(s string) abi.ABI {
	a, err := abi.JSON(strings.NewReader(s))
	if err != nil {
		panic("engine: bad built-in ABI: " + err.Error())
	}
	return a
}
