package verdictserver

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"go.uber.org/zap"

	"github.com/x402gate/x402gate/internal/testenv"
	"github.com/x402gate/x402gate/verdictserver/engine"
	"github.com/x402gate/x402gate/verdictserver/store"
)

// decideWindows is the verdict complete stores for j under the spend windows of in's
// policy when they hold what fill writes into them (their committed and reserved totals),
// decided as complete decides it but without the store (an approval written into into when
// it is not nil, as complete writes it into a recycled buffer): the CPU part of the windows
// (BenchmarkEvaluate) and the verdicts of random window states
// (TestEveryVerdictOfAnyModeWindowAndSignatureIsValid).
func decideWindows(t testing.TB, s *Server, in engine.Input, hash string, j judgement, fill func([]engine.WindowUse), into *bytes.Buffer) (json.RawMessage, string) {
	t.Helper()
	check, obs := engine.SpendWindowNotChecked(), (*engine.Observation)(nil)
	if j.status == store.StatusApproved {
		_, uses := applying(in.Policy.Doc.SpendWindows, assetsOf(j.v.Evidence.DecodedAction))
		fill(uses)
		c, o := engine.SpendWindow(uses, notionalOf(j.v))
		check, obs = c, &o
	} else {
		into = nil
	}
	raw, status, err := s.withWindowCheck(j.v, in, hash, check, obs, into)
	if err != nil {
		t.Fatalf("%s: %v", hash, err)
	}
	return raw, status
}

// evalCase is one configuration of the evaluation benchmark.
type evalCase struct {
	name            string
	windows, signed bool
}

var evalCases = []evalCase{{"plain", false, false}, {"windows", true, false}, {"signed", false, true}, {"windows+signed", true, true}}

// evalServer is a Server on a fresh SQLite store that is not started (no worker competes
// with the benchmark for its records), with one agent whose policy is allowPolicy, with a
// daily and an hourly per-asset window no benchmark fills when c.windows.
func evalServer(b *testing.B, c evalCase) (*Server, agent) {
	b.Helper()
	st := sqliteStore(b)
	b.Cleanup(func() { _ = st.Close() })
	eng, err := engine.New(engine.Config{}, engine.Deps{})
	if err != nil {
		b.Fatal(err)
	}
	cfg := Config{AdminKey: "test-admin-key-0123456789abcdef"}
	if c.signed {
		cfg.SignerKey = testSignerKey
	}
	s, err := New(cfg, Deps{Store: st, Engine: eng, Logger: zap.NewNop()})
	if err != nil {
		b.Fatal(err)
	}
	pol := allowPolicy
	if c.windows {
		pol = windowPolicy(`{"period": "day", "capUsd": 1000000000}`, `{"period": "hour", "capUsd": 1000000000, "asset": "`+testAsset.Hex()+`"}`)
	}
	e := &env{t: b, st: st, srv: s}
	return s, e.agent("eval", common.HexToAddress("0xA11CE00000000000000000000000000000000001"), pol)
}

// pendingRecords stores n PENDING $0.01 payments of a, 64 at a time (the store group-commits
// them), and returns their request hashes.
func pendingRecords(b *testing.B, st *store.Store, a agent, n int) []string {
	b.Helper()
	tx := []byte(testenv.JSON(b, payment(allowedPay)))
	hashes := make([]string, n)
	errs := make(chan error, n)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	for i := range n {
		hashes[i] = fmt.Sprintf("0x%064x", i+1)
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			errs <- st.CreateTransaction(context.Background(), &store.Transaction{
				RequestHash: hashes[i], AgentID: a.ID, Escrow: a.Wallet, ChainID: testChain, ProposedTx: tx,
			})
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			b.Fatal(err)
		}
	}
	return hashes
}

// reportLatencies reports the median and the 99th percentile of lat, and the process's CPU
// time per op since cpu0 (cpuTime): the cost itself, GC included, without the waits for a
// core that a shared machine adds to the wall time.
func reportLatencies(b *testing.B, lat []time.Duration, cpu0 time.Duration) {
	b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/1e3/float64(b.N), "cpu-µs/op")
	slices.Sort(lat)
	at := func(q float64) float64 { return float64(lat[int(q*float64(len(lat)-1))].Nanoseconds()) / 1e3 }
	b.ReportMetric(at(0.50), "p50-µs")
	b.ReportMetric(at(0.99), "p99-µs")
}

// BenchmarkEvaluate times the service's evaluation of one record, verdict by verdict, and
// reports the median and p99 per verdict (bench/verdict.md#evaluation-with-windows-and-signing),
// plain, with spend windows, signed, and both:
//
//   - store: Server.evaluate as a worker runs it on SQLite: read the record and the active
//     policy, the engine, signing, and the durable write (with windows: the agent's lock,
//     the windows' totals, the reservation and the verdict in one transaction);
//   - cpu: the same without the store: the engine, signing, and the windows' decision on
//     windows that hold nothing, for a record whose input was read once.
func BenchmarkEvaluate(b *testing.B) {
	for _, c := range evalCases {
		b.Run("store/"+c.name, func(b *testing.B) {
			s, a := evalServer(b, c)
			hashes := pendingRecords(b, s.store, a, b.N)
			lat := make([]time.Duration, 0, b.N)
			b.ReportAllocs()
			b.ResetTimer()
			cpu0 := cpuTime()
			for _, h := range hashes {
				start := time.Now()
				if !s.evaluate(context.Background(), job{hash: h}) {
					b.Fatalf("%s was not evaluated", h)
				}
				lat = append(lat, time.Since(start))
			}
			b.StopTimer()
			mustBeApproved(b, s.store, hashes)
			reportLatencies(b, lat, cpu0)
		})
		b.Run("cpu/"+c.name, func(b *testing.B) {
			s, a := evalServer(b, c)
			in := evalInput(b, s, a)
			lat := make([]time.Duration, 0, b.N)
			nothing := func([]engine.WindowUse) {}
			var buf bytes.Buffer // complete's recycled buffer
			b.ReportAllocs()
			b.ResetTimer()
			cpu0 := cpuTime()
			for i := range b.N {
				hash := fmt.Sprintf("0x%064x", i+1)
				start := time.Now()
				j, ok := s.judge(context.Background(), hash, in)
				status := j.status
				if ok && c.windows {
					_, status = decideWindows(b, s, in, hash, j, nothing, &buf)
				}
				j.done() // as evaluate does once the verdict is stored
				lat = append(lat, time.Since(start))
				if !ok || j.err != nil || status != store.StatusApproved {
					b.Fatalf("verdict %d: ok %v, %v, %s", i, ok, j.err, status)
				}
			}
			b.StopTimer()
			reportLatencies(b, lat, cpu0)
		})
	}
}

// evalInput is the engine's input for one stored payment of a, read once.
func evalInput(b *testing.B, s *Server, a agent) engine.Input {
	b.Helper()
	h := pendingRecords(b, s.store, a, 1)[0]
	t, err := s.store.TransactionByHash(context.Background(), h)
	if err != nil {
		b.Fatal(err)
	}
	in, err := s.input(context.Background(), t)
	if err != nil {
		b.Fatal(err)
	}
	return in
}

// mustBeApproved: the benchmark measured approvals, not refusals.
func mustBeApproved(b *testing.B, st *store.Store, hashes []string) {
	b.Helper()
	for _, h := range []string{hashes[0], hashes[len(hashes)-1]} {
		t, err := st.TransactionByHash(context.Background(), h)
		if err != nil || t.Status != store.StatusApproved {
			b.Fatalf("%s: %s %v, want APPROVED", h, t.Status, err)
		}
	}
}
