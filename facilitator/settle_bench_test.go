package facilitator

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"

	"github.com/x402gate/x402gate/internal/testenv"
	"github.com/x402gate/x402gate/x402"
)

// BenchmarkSettleConcurrent settles b.N distinct payments through one Service against anvil
// with automine (GUARDIAN_MODE off, MemoryStore, SQLite journal), from c goroutines at
// once: the paid path's settle as payers are added. The payments come from the nine
// funded payer accounts in turn, each with a fresh EIP-3009 nonce, signed before the
// timer starts. All settlements share the one facilitator signer, so they contend for its
// nonce, the journal and the node. It reports settles/s, the median and 99th percentile
// latency of one Settle, the share that settled, the CPU time per settle of this process
// and of the anvil node, and the HTTP requests per settle to the node (a JSON-RPC batch
// counts once) (bench/pipeline.md).
//
//	go test -run '^$' -bench BenchmarkSettleConcurrent -benchtime 256x ./facilitator/
func BenchmarkSettleConcurrent(b *testing.B) {
	for _, c := range []int{1, 8, 64} {
		b.Run(fmt.Sprintf("c=%d", c), func(b *testing.B) { benchSettleConcurrent(b, c) })
	}
}

func benchSettleConcurrent(b *testing.B, conc int) {
	env := benchEnv(b)
	e := env.engine(b, env.config(b))
	payee, payers, jobs := env.settleJobs(b)
	// Warm the engine (fee cache, sender nonce, connections) outside the timer.
	p, r := env.pay(b, x402.Version2, payers[0], payee)
	if res, err := e.Settle(context.Background(), p, r); err != nil || !res.Success {
		b.Fatalf("warm-up settle = %+v, %v", res, err)
	}
	signer := env.chain.FacilitatorAccount().Address
	rpcBefore := e.order[0].Requests()
	var first sync.Once
	run := runSettles(b, e, jobs, conc, func(res x402.SettleResponse, err error) {
		first.Do(func() {
			// Say where the transactions are: a node that leaves ready transactions unmined
			// in automine shows them pending here (bench/pipeline.md).
			var pool map[string]any
			env.chain.RPC(b, &pool, "txpool_status")
			b.Logf("settle = %+v, %v; signer nonce mined %d, pending %d; txpool %v", res, err,
				env.signerNonce(b, signer), env.pendingNonce(b, signer), pool)
		})
	})
	rpcs := e.order[0].Requests() - rpcBefore
	lat, elapsed := run.lat, run.elapsed
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "settles/s")
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[min(len(lat)-1, len(lat)*99/100)].Microseconds())/1000, "p99-ms")
	b.ReportMetric(100*float64(run.ok)/float64(b.N), "settled-%")
	run.reportCPU(b)
	b.ReportMetric(float64(rpcs)/float64(b.N), "rpc/settle")
}

// settleRun is what runSettles measured.
type settleRun struct {
	lat        []time.Duration // each Settle's latency, sorted
	ok         int64           // settles that succeeded
	elapsed    time.Duration   // from the first Settle to the last answer
	self, node time.Duration   // CPU time of this process and of the anvil node meanwhile
}

// runSettles settles every job of jobs through e from conc goroutines once the benchmark
// timer is reset, and stops the timer after the last answer. onFail is called with each
// settle that did not succeed.
func runSettles(b *testing.B, e *Service, jobs chan settleJob, conc int, onFail func(x402.SettleResponse, error)) settleRun {
	lat := make([]time.Duration, b.N)
	var next, ok atomic.Int64
	var wg sync.WaitGroup
	b.ReportAllocs()
	b.ResetTimer()
	selfBefore, nodeBefore := testenv.SelfCPU(), childrenCPU()
	start := time.Now()
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				t0 := time.Now()
				res, err := e.Settle(context.Background(), j.p, j.r)
				lat[next.Add(1)-1] = time.Since(t0)
				if err == nil && res.Success {
					ok.Add(1)
				} else {
					onFail(res, err)
				}
			}
		}()
	}
	wg.Wait()
	run := settleRun{lat: lat, ok: ok.Load(), elapsed: time.Since(start)}
	run.self, run.node = testenv.SelfCPU()-selfBefore, childrenCPU()-nodeBefore
	b.StopTimer()
	slices.Sort(lat)
	return run
}

// reportCPU reports the CPU time per settle of this process and of the anvil node.
func (r settleRun) reportCPU(b *testing.B) {
	b.ReportMetric(float64(r.self.Microseconds())/1000/float64(b.N), "cpu-ms/settle")
	b.ReportMetric(float64(r.node.Microseconds())/1000/float64(b.N), "anvil-cpu-ms/settle")
}

// settleJob is one payment a settle benchmark settles.
type settleJob struct {
	p *x402.Payment
	r *x402.Requirements
}

// settleJobs signs b.N payments to the env's last account from the payers between the
// first (the facilitator) and the last in turn, each with a fresh EIP-3009 nonce, and
// queues them on a closed channel; it returns the payee and the payers too.
func (v *testEnv) settleJobs(b *testing.B) (common.Address, []testenv.Account, chan settleJob) {
	payee := v.chain.Accounts[len(v.chain.Accounts)-1].Address
	payers := v.chain.Accounts[1 : len(v.chain.Accounts)-1]
	jobs := make(chan settleJob, b.N)
	for i := range b.N {
		p, r := v.pay(b, x402.Version2, payers[i%len(payers)], payee)
		jobs <- settleJob{p, r}
	}
	close(jobs)
	return payee, payers, jobs
}

// childrenCPU is the CPU time used so far by the live descendants of this process (the
// anvil node, under its npm wrapper), read from /proc; 0 where there is no /proc.
func childrenCPU() time.Duration {
	const clockTick = 10 * time.Millisecond // USER_HZ, 100 on Linux
	dirs, _ := os.ReadDir("/proc")
	parent := map[int]int{}
	ticks := map[int]int64{}
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		raw, err := os.ReadFile("/proc/" + d.Name() + "/stat")
		if err != nil {
			continue
		}
		// Fields after the parenthesised command: state ppid ... utime(14) stime(15).
		f := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+1:]))
		if len(f) < 13 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		ut, _ := strconv.ParseInt(f[11], 10, 64)
		st, _ := strconv.ParseInt(f[12], 10, 64)
		parent[pid], ticks[pid] = ppid, ut+st
	}
	self := os.Getpid()
	var sum int64
	for pid, t := range ticks {
		for p := parent[pid]; p > 1; p = parent[p] {
			if p == self {
				sum += t
				break
			}
		}
	}
	return time.Duration(sum) * clockTick
}

// BenchmarkPaidRequest is the bundled facilitator's work for one paid request: Verify,
// then Settle, of the same payment values in process, as a gate on the bundled
// facilitator makes them, against anvil with automine (GUARDIAN_MODE off, MemoryStore,
// SQLite journal). The payments, from the nine funded payer accounts in turn, are signed
// before the timer starts. It reports the CPU time of this process per paid request, the
// anvil node's, and the HTTP requests to the node per paid request (bench/results.md).
//
//	go test -run '^$' -bench BenchmarkPaidRequest -benchtime 200x ./facilitator/
func BenchmarkPaidRequest(b *testing.B) {
	env := benchEnv(b)
	e := env.engine(b, env.config(b)).InProcess() // as the bundled gate uses it
	payee := env.chain.Accounts[len(env.chain.Accounts)-1].Address
	payers := env.chain.Accounts[1 : len(env.chain.Accounts)-1]
	ctx := context.Background()
	pay := func(p *x402.Payment, r *x402.Requirements) {
		if v, err := e.Verify(ctx, x402.VerifyInput{Payment: p, Requirements: r}); err != nil || !v.IsValid {
			b.Fatalf("verify = %+v, %v", v, err)
		}
		if s, err := e.Settle(ctx, p, r); err != nil || !s.Success {
			b.Fatalf("settle = %+v, %v", s, err)
		}
	}
	pay(env.pay(b, x402.Version2, payers[0], payee)) // warm the fee cache, nonce, connections
	ps := make([]*x402.Payment, b.N)
	rs := make([]*x402.Requirements, b.N)
	for i := range b.N {
		ps[i], rs[i] = env.pay(b, x402.Version2, payers[i%len(payers)], payee)
	}
	b.ReportAllocs()
	b.ResetTimer()
	selfBefore, nodeBefore := testenv.SelfCPU(), childrenCPU()
	rpcBefore := e.order[0].Requests()
	for i := range b.N {
		pay(ps[i], rs[i])
	}
	self, node := testenv.SelfCPU()-selfBefore, childrenCPU()-nodeBefore
	rpcs := e.order[0].Requests() - rpcBefore
	b.StopTimer()
	b.ReportMetric(float64(self.Microseconds())/1000/float64(b.N), "cpu-ms/payment")
	b.ReportMetric(float64(node.Microseconds())/1000/float64(b.N), "anvil-cpu-ms/payment")
	b.ReportMetric(float64(rpcs)/float64(b.N), "rpc/payment")
}
