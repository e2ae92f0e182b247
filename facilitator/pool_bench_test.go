package facilitator

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/x402gate/x402gate/internal/testenv"
	"github.com/x402gate/x402gate/x402"
)

// BenchmarkSettlePool settles b.N distinct payments from 64 goroutines through one
// Service whose pool has 1, 2 or 4 signer keys, against anvil mining a block every second
// behind testenv.PendingProxy, which admits 16 pending transactions per sender as a
// go-ethereum node does. One key can then have 16 settlements in a block at most, so the
// settled rate grows with the keys (docs/facilitator.md#signer-pool, bench/pipeline.md).
// Besides settles/s it reports the share settled, the transactions the proxy refused
// (0: the pool never sends a 17th), and the CPU time per settle of this process and of
// the anvil node.
//
//	go test -run '^$' -bench BenchmarkSettlePool -benchtime 256x ./facilitator/
func BenchmarkSettlePool(b *testing.B) {
	for _, keys := range []int{1, 2, 4} {
		b.Run(fmt.Sprintf("keys=%d", keys), func(b *testing.B) { benchSettlePool(b, keys, 64) })
	}
}

func benchSettlePool(b *testing.B, keys, conc int) {
	env := newTestEnv(b, testenv.WithBlockTime(1))
	proxy := testenv.StartPendingProxy(b, env.chain, testenv.GethAccountSlots)
	cfg, _ := env.poolConfig(b, keys)
	cfg.Networks[0].RPC = proxy.URL
	e := env.engine(b, cfg)
	payee, payers, jobs := env.settleJobs(b)
	// Warm every lane (fee cache, nonce, connections) outside the timer.
	var warm sync.WaitGroup
	for i := range keys {
		warm.Add(1)
		go func() {
			defer warm.Done()
			p, r := env.pay(b, x402.Version2, payers[i%len(payers)], payee)
			if res, err := e.Settle(context.Background(), p, r); err != nil || !res.Success {
				b.Errorf("warm-up settle = %+v, %v", res, err)
			}
		}()
	}
	warm.Wait()
	refusedBefore := proxy.Refused()
	run := runSettles(b, e, jobs, conc, func(res x402.SettleResponse, err error) {
		b.Logf("settle = %+v, %v", res, err)
	})
	b.ReportMetric(float64(run.ok)/run.elapsed.Seconds(), "settled/s")
	b.ReportMetric(float64(run.lat[len(run.lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(100*float64(run.ok)/float64(b.N), "settled-%")
	b.ReportMetric(float64(proxy.Refused()-refusedBefore), "refused")
	run.reportCPU(b)
}
