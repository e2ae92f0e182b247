package verdictserver

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"go.uber.org/zap"

	"github.com/x402gate/x402gate/verdict"
	"github.com/x402gate/x402gate/verdictserver/engine"
	"github.com/x402gate/x402gate/verdictserver/policy"
	"github.com/x402gate/x402gate/verdictserver/store"
)

// The lifecycle (docs/verdict-api.md#lifecycle): a record is written PENDING, queued for
// a bounded pool of workers, evaluated against the agent's policy as it is at evaluation
// time, and completed once, APPROVED or REJECTED. The queue only speeds things up: the
// store is the list of work. A record that finds the queue full, whose evaluation could
// not be stored, or that was pending when a process stopped, is found by the sweeper.

// Start starts the workers and the sweeper, which at once hands every PENDING record
// left from before (a restart, another instance) to the workers. ctx bounds their life
// as Close does.
func (s *Server) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("verdictserver: closed")
	}
	if s.started {
		return errors.New("verdictserver: already started")
	}
	s.started = true
	ctx, s.cancel = context.WithCancel(ctx)
	for range s.workers {
		s.wg.Add(1)
		go s.work(ctx)
	}
	s.wg.Add(1)
	go s.sweep(ctx)
	return nil
}

// Close stops the workers and the sweeper and waits for evaluations under way to end.
// Records not yet completed stay PENDING in the store, for the next Start. The store stays
// open.
func (s *Server) Close() error {
	s.mu.Lock()
	s.closed = true
	cancel := s.cancel
	s.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	s.wg.Wait()
	return nil
}

// enqueue hands a record to the workers unless one holds it already. A full queue leaves
// it to the sweeper; it stays PENDING in the store meanwhile.
func (s *Server) enqueue(hash string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.inFlight[hash] || s.closed {
		return false
	}
	select {
	case s.queue <- hash:
		s.inFlight[hash] = true
		return true
	default:
		s.log.Warn("evaluation queue full; the sweeper will pick the record up", zap.String("requestHash", hash))
		return false
	}
}

func (s *Server) done(hash string) {
	s.mu.Lock()
	delete(s.inFlight, hash)
	s.mu.Unlock()
}

func (s *Server) work(ctx context.Context) {
	defer s.wg.Done()
	for {
		select {
		case <-ctx.Done():
			return
		case hash := <-s.queue:
			s.evaluate(ctx, hash)
			s.done(hash)
		}
	}
}

// sweep hands PENDING records to the workers: at once, then every SweepInterval.
func (s *Server) sweep(ctx context.Context) {
	defer s.wg.Done()
	t := time.NewTicker(s.sweepEvery)
	defer t.Stop()
	for {
		pending, err := s.store.Pending(ctx, cap(s.queue))
		if err != nil && ctx.Err() == nil {
			s.log.Warn("sweep: cannot list pending records", zapError(err))
		}
		for _, p := range pending {
			s.enqueue(p.RequestHash)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// evaluate evaluates one record and completes it. Any failure leaves it PENDING for the
// sweeper; a record another instance completed first is left as it is (terminal verdicts
// are immutable).
func (s *Server) evaluate(ctx context.Context, hash string) {
	log := s.log.With(zap.String("requestHash", hash))
	defer func() {
		// a panicking evaluation must not take the process (and every other record) down;
		// the record stays PENDING and the client's poll bound fails it closed
		if v := recover(); v != nil {
			log.Error("evaluate: panic; left pending", zap.Any("panic", v))
		}
	}()
	t, err := s.store.TransactionByHash(ctx, hash)
	if err != nil {
		if ctx.Err() == nil {
			log.Warn("evaluate: cannot read the record", zapError(err))
		}
		return
	}
	if t.Status != store.StatusPending {
		return
	}
	in, err := s.input(ctx, t)
	if err != nil {
		if ctx.Err() == nil {
			log.Warn("evaluate: cannot prepare the input; left pending", zapError(err))
		}
		return
	}
	v := s.engine.Evaluate(ctx, in)
	if v == nil || !v.Terminal() || v.Consistent() != nil {
		// the engine promises a terminal, consistent verdict; anything else is never
		// stored as one (docs/verdict-api.md#lifecycle)
		log.Error("evaluate: the engine answered no terminal, consistent verdict; left pending")
		return
	}
	raw, err := json.Marshal(v)
	if err != nil {
		log.Error("evaluate: cannot encode the verdict", zapError(err))
		return
	}
	status := store.StatusRejected
	if v.Outcome == verdict.OutcomeApproved {
		status = store.StatusApproved
	}
	switch err := s.store.Complete(ctx, hash, status, raw, v.PolicyVersion); {
	case errors.Is(err, store.ErrTerminal):
		log.Debug("evaluate: completed elsewhere first")
	case err != nil:
		if ctx.Err() == nil {
			log.Warn("evaluate: cannot store the verdict; left pending", zapError(err))
		}
	default:
		log.Debug("evaluated", zap.String("outcome", string(v.Outcome)), zap.String("reasonCode", string(v.ReasonCode)))
	}
}

// input builds the engine's input from a stored record and the agent's active policy,
// resolved now (docs/verdict-api.md#lifecycle). An agent without a policy gets a nil
// Policy: the engine denies by default.
func (s *Server) input(ctx context.Context, t store.Transaction) (engine.Input, error) {
	in := engine.Input{Escrow: t.Escrow}
	var err error
	if in.ProposedTx, err = object(t.ProposedTx); err != nil || in.ProposedTx == nil {
		return in, errors.New("stored proposedTx is not a json object")
	}
	if in.Metadata, err = object(t.Metadata); err != nil {
		return in, errors.New("stored metadata is not a json object")
	}
	if in.ContextLogs, err = object(t.ContextLogs); err != nil {
		return in, errors.New("stored contextLogs is not a json object")
	}
	pv, err := s.store.ActivePolicy(ctx, t.AgentID)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return in, nil
	case err != nil:
		return in, err
	}
	doc, err := policy.Parse(pv.Document)
	if err != nil {
		// a stored version that this build's schema refuses (stored by an older or newer
		// build) is not guessed at: the record waits for an operator's fix
		return in, errors.New("the active policy version does not parse: " + err.Error())
	}
	in.Policy = &policy.Policy{Version: pv.Version, Doc: doc}
	return in, nil
}

// object decodes a stored JSON object strictly (numbers as json.Number); nil stays nil.
func object(raw json.RawMessage) (map[string]any, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	tree, err := verdict.ParseJSON(raw)
	if err != nil {
		return nil, err
	}
	m, ok := tree.(map[string]any)
	if !ok {
		return nil, errors.New("not an object")
	}
	return m, nil
}
