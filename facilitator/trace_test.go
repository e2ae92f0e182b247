package facilitator

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"

	"github.com/x402gate/x402gate/facilitator/journal"
	"github.com/x402gate/x402gate/internal/testenv"
	"github.com/x402gate/x402gate/x402"
)

// spans collects the phases of a traced request from several goroutines.
type spans struct {
	mu  sync.Mutex
	all []testenv.Span
}

// time runs f as the phase what.
func (s *spans) time(what string, f func() error) error {
	start := time.Now()
	err := f()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.all = append(s.all, testenv.Span{Start: start, End: time.Now(), What: what})
	return err
}

// tracedJournal is a Journal that times the writes and reads a settlement makes.
type tracedJournal struct {
	journal.Journal
	s *spans
}

func (j tracedJournal) Prepare(ctx context.Context, s journal.Settlement) error {
	return j.s.time("journal Prepare (fsync)", func() error { return j.Journal.Prepare(ctx, s) })
}

func (j tracedJournal) PrepareAll(ctx context.Context, rows []journal.Settlement) error {
	return j.s.time("journal PrepareAll (fsync)", func() error { return j.Journal.PrepareAll(ctx, rows) })
}

func (j tracedJournal) Update(ctx context.Context, key string, state journal.State, reason string) error {
	return j.s.time("journal Update "+string(state)+" (fsync)", func() error { return j.Journal.Update(ctx, key, state, reason) })
}

func (j tracedJournal) UpdateSettled(ctx context.Context, key string, state journal.State, reason string, tx common.Hash) error {
	return j.s.time("journal UpdateSettled "+string(state)+" (fsync)", func() error {
		return j.Journal.UpdateSettled(ctx, key, state, reason, tx)
	})
}

// UpdateLater is timed from the call to its commit: the settle does not wait for it.
func (j tracedJournal) UpdateLater(key string, state journal.State, reason string, tx *common.Hash, then func(error)) {
	start := time.Now()
	j.Journal.UpdateLater(key, state, reason, tx, func(err error) {
		j.s.mu.Lock()
		j.s.all = append(j.s.all, testenv.Span{Start: start, End: time.Now(), What: "journal UpdateLater " + string(state) + " (joins the next commit)"})
		j.s.mu.Unlock()
		if then != nil {
			then(err)
		}
	})
}

// TestTracePaidRequest traces one paid request at c=1 on the bundled path (Verify then
// Settle in process, anvil with automine, SQLite journal): each JSON-RPC round trip and
// journal write with its start and end, the gaps between them being our CPU or a timer.
// It checks the phases a settlement must go through, in order; run with -v to see the
// trace (bench/paid-request.md):
//
//	go test -count=1 -v -run TestTracePaidRequest ./facilitator/
func TestTracePaidRequest(t *testing.T) {
	env := newTestEnv(t)
	node := testenv.TraceCalls(t, env.chain.RPCURL)
	cfg := env.config(t)
	cfg.Networks[0].RPC = node.URL
	var s spans
	cfg.Journal = tracedJournal{Journal: cfg.Journal, s: &s}
	e := env.engine(t, cfg).InProcess()
	payer, payee := env.chain.Accounts[1], env.chain.Accounts[2]
	ctx := context.Background()
	pay := func() {
		p, r := env.pay(t, x402.Version2, payer, payee.Address)
		_ = s.time("Verify", func() error {
			v, err := e.Verify(ctx, x402.VerifyInput{Payment: p, Requirements: r})
			if err == nil && !v.IsValid {
				err = fmt.Errorf("invalid: %s", v.InvalidReason)
			}
			return err
		})
		_ = s.time("Settle", func() error {
			res, err := e.Settle(ctx, p, r)
			if err == nil && !res.Success {
				err = fmt.Errorf("refused: %s", res.ErrorReason)
			}
			if err != nil {
				t.Fatalf("settle: %v", err)
			}
			return nil
		})
	}
	pay()                             // warm the fee cache, the nonce and the connections
	time.Sleep(20 * time.Millisecond) // the deferred writes of the warm-up commit
	s.mu.Lock()
	s.all = nil
	s.mu.Unlock()
	node.Reset()
	pay()
	time.Sleep(20 * time.Millisecond) // and this payment's
	s.mu.Lock()
	names := node.LogTrace(t, s.all)
	s.mu.Unlock()
	trace := strings.Join(names, "\n")
	for _, want := range []string{"Verify", "Settle", "journal Prepare", "rpc eth_sendRawTransaction",
		"journal UpdateLater broadcast", "rpc eth_getTransactionReceipt\n", "journal UpdateLater confirmed"} {
		i := strings.Index(trace, want)
		if i < 0 {
			t.Fatalf("trace lacks %q after the phases before it:\n%s", want, trace)
		}
		trace = trace[i+len(want):]
	}
}
