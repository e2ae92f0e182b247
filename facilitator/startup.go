package facilitator

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/x402gate/x402gate/facilitator/txsender"
	"github.com/x402gate/x402gate/x402"
)

// Readiness of a network (docs/facilitator.md#start-up).
const (
	// NetworkStarting: its chain id has not been checked yet, or its start-up reconcile
	// has not run: the RPC endpoint is unreachable or the journal unreadable, for now.
	NetworkStarting = "starting"
	// NetworkWrongChain: its RPC endpoint serves another chain id than the configured one.
	NetworkWrongChain = "wrong_chain_id"
	// NetworkReady: the chain id matched and the start-up reconcile ran; the network
	// verifies and settles.
	NetworkReady = "ready"
)

// errWrongChainID: the RPC endpoint answered eth_chainId with another chain's id.
var errWrongChainID = errors.New("wrong chain id")

// Bounds of the retries of a network's start-up (Start).
const (
	startRetryMin = time.Second
	startRetryMax = 30 * time.Second
)

// netState is a chain's readiness: one of the Network* values.
type netState struct{ v atomic.Pointer[string] }

func (s *netState) get() string {
	if p := s.v.Load(); p != nil {
		return *p
	}
	return NetworkStarting
}

func (s *netState) set(v string) { s.v.Store(&v) }

// Ready reports whether the network of a CAIP-2 id is ready: its chain id was checked and
// its start-up reconcile ran. Verify and Settle refuse a payment on a network that is not
// (ReasonChainUnavailable); a gate answers its routes 503 until it is
// (docs/facilitator.md#start-up).
func (e *Service) Ready(caip2 string) bool {
	c, ok := e.chains[caip2]
	return ok && c.state.get() == NetworkReady
}

// NetworkState is the readiness of the network of a CAIP-2 id: one of NetworkStarting,
// NetworkWrongChain, NetworkReady; empty for a network the engine does not serve.
func (e *Service) NetworkState(caip2 string) string {
	if c, ok := e.chains[caip2]; ok {
		return c.state.get()
	}
	return ""
}

// notReady is the refusal of a payment on a network that is not ready.
func notReady(c *chain) *failure {
	if s := c.state.get(); s != NetworkReady {
		return fail(x402.ReasonChainUnavailable, "network %s is not ready (%s)", c.net.CAIP2, s)
	}
	return nil
}

// bringUp checks the chain id of c and, unless Config.SkipStartupReconcile, reconciles
// the journal's unfinished settlements of c; then c is ready. Until then c's sender sends
// nothing new: Verify and Settle refuse its payments.
func (e *Service) bringUp(ctx context.Context, c *chain) error {
	if err := c.checkChainID(ctx); err != nil {
		if errors.Is(err, errWrongChainID) {
			c.state.set(NetworkWrongChain)
		}
		return err
	}
	if !e.cfg.SkipStartupReconcile {
		rep, err := e.reconcile(ctx, 0, c)
		if err != nil {
			return fmt.Errorf("network %s: startup reconcile: %w", c.net.CAIP2, err)
		}
		e.addStartupReport(rep)
	}
	// Each lane's gas balance is known before the first settle, so a lane short of gas
	// never takes one (docs/facilitator.md#signer-pool).
	e.checkBalances(ctx, c)
	c.state.set(NetworkReady)
	return nil
}

// checkChainID asks c's RPC endpoint for its chain id: an error wrapping
// txsender.ErrRPCUnavailable when it does not answer, errWrongChainID when it serves another chain.
func (c *chain) checkChainID(ctx context.Context) error {
	id, err := c.Client.ChainID(ctx)
	if err != nil {
		return fmt.Errorf("network %s: chain id: %w: %s", c.net.CAIP2, txsender.ErrRPCUnavailable, c.Redact(err))
	}
	if id.Cmp(c.net.ChainID) != 0 {
		return fmt.Errorf("network %s (%s): %w: the endpoint serves chain id %s, not %s", c.net.CAIP2, c.net.Name, errWrongChainID, id, c.net.ChainID)
	}
	return nil
}

// addStartupReport adds one network's start-up reconcile to StartupReconcile's report.
func (e *Service) addStartupReport(rep ReconcileReport) {
	e.reconMu.Lock()
	defer e.reconMu.Unlock()
	r := &e.lastRecon
	r.Checked += rep.Checked
	r.Confirmed += rep.Confirmed
	r.Failed += rep.Failed
	r.Resent += rep.Resent
	r.Bumped += rep.Bumped
	r.Pending += rep.Pending
	r.Recent += rep.Recent
	r.Skipped += rep.Skipped
	r.Outcomes = append(r.Outcomes, rep.Outcomes...)
}

// Start brings every network up in the background, one goroutine each, and returns at
// once: it checks the network's chain id and runs its start-up reconcile (bringUp),
// again and again with a backoff from 1 s to 30 s while the RPC endpoint cannot be
// reached, the journal cannot be read or the endpoint serves another chain id. A wrong
// chain id keeps the network unavailable and is logged as an error naming the network at
// every try. onReady, when not nil, is called once per network that becomes ready. Start
// is for an engine made by Open. It also reads every signer lane's gas balance each
// Config.BalanceCheckInterval (CheckBalances). The goroutines stop when ctx is done, and
// the returned wait waits for them.
func (e *Service) Start(ctx context.Context, onReady func(caip2 string)) (wait func()) {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		e.watchBalances(ctx)
	}()
	for _, c := range e.order {
		if c.state.get() == NetworkReady {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if e.keepBringingUp(ctx, c) && onReady != nil {
				onReady(c.net.CAIP2)
			}
		}()
	}
	return wg.Wait
}

// keepBringingUp runs bringUp on c until it succeeds (true) or ctx is done (false).
func (e *Service) keepBringingUp(ctx context.Context, c *chain) bool {
	delay := startRetryMin
	for {
		err := e.bringUp(ctx, c)
		if err == nil {
			e.log.Info("x402 network ready", zap.String("network", c.net.CAIP2), zap.String("name", c.net.Name))
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		if errors.Is(err, errWrongChainID) {
			e.log.Error("x402 network unavailable: its RPC endpoint serves another chain",
				zap.String("network", c.net.CAIP2), zap.String("name", c.net.Name), zap.Error(err), zap.Duration("retry_in", delay))
		} else {
			e.log.Warn("x402 network not ready yet", zap.String("network", c.net.CAIP2), zap.String("name", c.net.Name),
				zap.Error(err), zap.Duration("retry_in", delay))
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(delay):
		}
		delay = min(2*delay, startRetryMax)
	}
}

// CheckChainIDs asks every network's RPC endpoint for its chain id once, and returns an
// error naming each network whose endpoint serves another chain. unreachable lists the
// networks whose endpoint did not answer; they are no error. It changes nothing: `caddy
// validate` calls it on an engine it never starts.
func (e *Service) CheckChainIDs(ctx context.Context) (unreachable []string, err error) {
	var errs []error
	for _, c := range e.order {
		switch err := c.checkChainID(ctx); {
		case errors.Is(err, txsender.ErrRPCUnavailable):
			unreachable = append(unreachable, c.net.CAIP2)
		case err != nil:
			errs = append(errs, err)
		}
	}
	return unreachable, errors.Join(errs...)
}
