package verdictserver

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"

	"github.com/x402gate/x402gate/internal/testenv"
	"github.com/x402gate/x402gate/verdictserver/store"
)

// replayBenchActions is how many stored actions BenchmarkReplay replays: the most one
// replay takes.
const replayBenchActions = MaxReplayLast

// BenchmarkReplay: one replay of a draft over an agent's 10,000 stored actions on SQLite
// (bench/verdict.md#replay-before-enforce), every action a payment judged by the workers
// under allowPolicy, every second one to strangerPay (refused). "recipients" is a draft
// that allows strangerPay only (every action changes), "windows" allowPolicy with a $25
// daily spend window (the replayed windows refuse past the cap). Each replay is checked
// to write nothing: the store's every table is the same after the loop as before.
func BenchmarkReplay(b *testing.B) {
	path := filepath.Join(b.TempDir(), "verdict.db")
	e := newEnv(b, sqliteAt(path)(b), nil)
	a := e.agent("replayed", common.HexToAddress("0xA11CE00000000000000000000000000000000020"), allowPolicy)
	storeJudged(b, e, a, replayBenchActions)
	before := dumpStore(b, path)
	for _, bc := range []struct{ name, draft string }{
		{"recipients", strangerPolicy},
		{"windows", windowPolicy(`{"period": "day", "capUsd": 25}`)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var rep ReplayReport
			b.ReportAllocs()
			for b.Loop() {
				var err error
				if rep, err = e.srv.Operator().Replay(context.Background(), a.ID, []byte(bc.draft), MaxReplayLast); err != nil {
					b.Fatal(err)
				}
			}
			if rep.Replayed != replayBenchActions {
				b.Fatalf("replayed %d, want %d", rep.Replayed, replayBenchActions)
			}
			b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/replay")
			b.ReportMetric(float64(len(rep.NewlyRefused)), "refused")
			b.ReportMetric(float64(len(rep.NewlyApproved)), "approved")
		})
	}
	unwritten(b, path, before)
}

// storeJudged submits n payments of a straight to the store, every second one to
// strangerPay, from 64 goroutines (so that the group commit batches them), and waits until
// the workers have judged them all.
func storeJudged(b *testing.B, e *env, a agent, n int) {
	b.Helper()
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for w := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 64 {
				to := allowedPay
				if i%2 == 1 {
					to = strangerPay
				}
				rec := store.Transaction{RequestHash: fmt.Sprintf("0x%064x", i+1), AgentID: a.ID, Escrow: a.Wallet, ChainID: testChain,
					ProposedTx: []byte(testenv.JSON(b, payment(to))), Description: "replay benchmark"}
				if err := e.st.CreateTransaction(ctx, &rec); err != nil {
					errs <- err
					return
				}
				e.srv.enqueue(job{hash: rec.RequestHash})
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
	for {
		left, err := e.st.CountPending(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if left == 0 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}
