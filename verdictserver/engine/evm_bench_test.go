package engine

import (
	"context"
	"math/big"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/x402gate/x402gate/verdict"
	"github.com/x402gate/x402gate/verdictserver/engine/erc20"
	"github.com/x402gate/x402gate/verdictserver/engine/uniswap"
)

// benchEvaluate runs one approved action through every check, as the service's workers do
// (Judge: the verdict is used at once and its memory reused), and reports, beside ns/op and
// allocations, the CPU time per op and the median and 99th percentile of single
// evaluations (p50-ns, p99-ns).
func benchEvaluate(b *testing.B, opts Deps, in Input) {
	benchEvaluateWith(b, opts, in, false)
}

// benchEvaluateWith is benchEvaluate through Evaluate when keep is set: the caller keeps
// the verdict, so nothing of it is reused.
func benchEvaluateWith(b *testing.B, opts Deps, in Input, keep bool) {
	e := newEngine(b, Config{}, opts)
	ctx := context.Background()
	if v := e.Evaluate(ctx, in); v.Outcome != verdict.OutcomeApproved {
		b.Fatalf("outcome %s %s: %s", v.Outcome, v.ReasonCode, v.HumanReason)
	}
	lat := make([]time.Duration, 0, 1<<16)
	b.ReportAllocs()
	cpu0 := cpuTime()
	n := 0
	for b.Loop() {
		n++
		start := time.Now()
		if keep {
			kept = e.Evaluate(ctx, in)
		} else {
			e.Judge(ctx, in, func(v *verdict.Verdict) {
				if v.Outcome != verdict.OutcomeApproved {
					b.Errorf("outcome %s", v.Outcome)
				}
			})
		}
		if len(lat) < cap(lat) {
			lat = append(lat, time.Since(start))
		}
	}
	// On a shared machine wall time includes waiting for a core; the process's CPU time per
	// evaluation (GC included) is the cost itself.
	b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/float64(n), "cpu-ns/op")
	slices.Sort(lat)
	if len(lat) > 0 {
		b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "p50-ns")
		b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "p99-ns")
	}
}

// BenchmarkEvaluateERC20Transfer: an ERC-20 transfer of USDC, decoded from calldata, through
// every check with a full policy and the OFAC fixture.
func BenchmarkEvaluateERC20Transfer(b *testing.B) {
	tx := evmTx("evm", 84532, usdc, pack(b, erc20.ABI, "transfer(address,uint256)", payee, e6(5)), nil)
	benchEvaluate(b, Deps{}, Input{Escrow: escrow, ProposedTx: tx, Policy: mustPolicy(b, 1, evmPolicy)})
}

// kept holds the last verdict of a keep benchmark, so the compiler cannot drop it.
var kept *verdict.Verdict

// BenchmarkEvaluateKeptV3Swap is BenchmarkEvaluateV3Swap through Evaluate: a verdict the
// caller keeps, whose memory is not reused (bench/engine.md#the-tail-closed-2026-11-23-session-6).
func BenchmarkEvaluateKeptV3Swap(b *testing.B) {
	benchEvaluateWith(b, Deps{}, v3SwapInput(b), true)
}

// v3SwapInput is the V3 swap of BenchmarkEvaluateV3Swap.
func v3SwapInput(b *testing.B) Input {
	data := pack(b, uniswap.RouterABI, "exactInputSingle((address,address,uint24,address,uint256,uint256,uint160))",
		single02{usdc, weth, big.NewInt(500), uniswap.MsgSender, e6(3000), milli18(995), new(big.Int)})
	return Input{Escrow: escrow, ProposedTx: evmTx("uniswap", 84532, router02, data, nil), Policy: mustPolicy(b, 1, uniPolicy)}
}

// BenchmarkEvaluateV3Swap: a SwapRouter02 exactInputSingle of USDC for WETH, through every
// check including the trading checks, slippage priced from the table.
func BenchmarkEvaluateV3Swap(b *testing.B) {
	benchEvaluate(b, Deps{}, v3SwapInput(b))
}

// BenchmarkEvaluateURPlan: a Universal Router 2.1.1 plan: a V3 swap to the router, then
// UNWRAP_WETH to the agent.
func BenchmarkEvaluateURPlan(b *testing.B) {
	data := execute(b, []byte{uniswap.CmdV3SwapExactIn, uniswap.CmdUnwrapWETH}, urV3In(b, uniswap.AddressThis, e6(3000), milli18(995), v3path(usdc, weth), true, true), urToAmount(b, uniswap.MsgSender, milli18(995)))
	benchEvaluate(b, Deps{}, Input{Escrow: escrow, ProposedTx: evmTx("uniswap", 84532, urV21, data, nil), Policy: mustPolicy(b, 1, uniPolicy)})
}

// cpuTime is the process's user and system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
