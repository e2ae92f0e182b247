package verdictserver

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"go.uber.org/zap"

	"github.com/x402gate/x402gate/internal/faults"
	"github.com/x402gate/x402gate/verdict"
	"github.com/x402gate/x402gate/verdictserver/engine"
	"github.com/x402gate/x402gate/verdictserver/policy"
	"github.com/x402gate/x402gate/verdictserver/store"
)

// The lifecycle (docs/verdict-api.md#lifecycle): a submit is judged before it is stored and
// written with its terminal verdict in one commit (judgeAtSubmit). What cannot be judged at
// once (spend windows, a failed evaluation) is written PENDING, queued for a bounded pool of
// workers, evaluated against the agent's policy as it is at evaluation time, and completed
// once, APPROVED or REJECTED. The queue only speeds things up: the store is the list of work. A record that finds the queue full, whose evaluation could
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

// Close stops the workers and the sweeper and waits for evaluations under way to end, and
// for the writes of keys' last uses (keyUsed).
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
	s.closeKeyUses()
	return nil
}

// job is a record for a worker: its request hash and, when it was just created here, the
// record as written, which the worker evaluates without reading it back. A record the
// sweeper found (rec nil) is read again: it may have been completed since.
type job struct {
	hash string
	rec  *store.Transaction
}

// enqueue hands a record to the workers unless one holds it already. A full queue leaves
// it to the sweeper; it stays PENDING in the store meanwhile.
func (s *Server) enqueue(j job) bool {
	hash := j.hash
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.inFlight[hash] || s.closed {
		return false
	}
	select {
	case s.queue <- j:
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
		case j := <-s.queue:
			s.settle(j.hash, s.evaluate(ctx, j))
			s.done(j.hash)
		}
	}
}

// retryState is how often a record's evaluation failed here, and when it is due again.
type retryState struct {
	fails int
	at    time.Time
}

// maxRetryDelay caps the wait before a record whose evaluation failed is tried again.
const maxRetryDelay = 10 * time.Minute

// settle records how an evaluation of hash ended. A record left pending by a failure (an
// engine panic, a stored policy this build refuses, a store error) waits before the
// sweeper tries it again, twice as long after each failure, so that records that keep
// failing never crowd out the others (docs/verdict-api.md#lifecycle).
func (s *Server) settle(hash string, completed bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if completed {
		delete(s.retry, hash)
		return
	}
	r := s.retry[hash]
	r.fails++
	delay := s.sweepEvery << min(r.fails-1, 20)
	if delay <= 0 || delay > maxRetryDelay {
		delay = maxRetryDelay
	}
	r.at = s.now().Add(delay)
	s.retry[hash] = r
}

// waiting reports whether hash failed recently and is not due again yet.
func (s *Server) waiting(hash string, now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.retry[hash]
	return ok && now.Before(r.at)
}

// sweep hands PENDING records to the workers: at once, then every SweepInterval. It lists
// as many records as the queue holds beyond those waiting after a failure, oldest first,
// so the records that keep failing never hide newer ones.
func (s *Server) sweep(ctx context.Context) {
	defer s.wg.Done()
	t := time.NewTicker(s.sweepEvery)
	defer t.Stop()
	for {
		s.mu.Lock()
		limit := cap(s.queue) + len(s.retry)
		s.mu.Unlock()
		pending, err := s.store.Pending(ctx, limit)
		if err != nil && ctx.Err() == nil {
			s.log.Warn("sweep: cannot list pending records", zapError(err))
		}
		now := s.now()
		listed := make(map[string]bool, len(pending))
		for _, p := range pending {
			listed[p.RequestHash] = true
			if !s.waiting(p.RequestHash, now) {
				s.enqueue(job{hash: p.RequestHash})
			}
		}
		if err == nil && len(pending) < limit {
			s.forgetDone(listed) // every pending record was listed: the others are done
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// forgetDone drops the retry state of records that are no longer pending (completed by
// another instance).
func (s *Server) forgetDone(pending map[string]bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for h := range s.retry {
		if !pending[h] {
			delete(s.retry, h)
		}
	}
}

// evaluate evaluates one record and completes it, and reports whether the record is done
// with (completed here or elsewhere, or gone). Any failure leaves it PENDING for the
// sweeper; a record another instance completed first is left as it is (terminal verdicts
// are immutable).
func (s *Server) evaluate(ctx context.Context, jb job) (done bool) {
	faults.Point("verdict.before-worker")
	hash := jb.hash
	log := s.log.With(zap.String("requestHash", hash))
	defer func() {
		// a panicking evaluation must not take the process (and every other record) down;
		// the record stays PENDING and the client's poll bound fails it closed
		if v := recover(); v != nil {
			log.Error("evaluate: panic; left pending", zap.Any("panic", v))
			done = false
		}
	}()
	t, pending, done := s.pendingRecord(ctx, jb, log)
	if !pending {
		return done
	}
	in, err := s.input(ctx, t)
	if err != nil {
		if ctx.Err() == nil {
			log.Warn("evaluate: cannot prepare the input; left pending", zapError(err))
		}
		return false
	}
	faults.Point("verdict.evaluate")
	j, ok := s.judge(ctx, hash, in)
	defer j.done()
	if !ok {
		// the engine promises a terminal, consistent verdict; anything else is never
		// stored as one (docs/verdict-api.md#lifecycle)
		log.Error("evaluate: the engine answered no terminal, consistent verdict; left pending")
		return false
	}
	if j.err != nil {
		log.Error("evaluate: cannot encode the verdict", zapError(j.err))
		return false
	}
	switch err := s.complete(ctx, t, in, &j); {
	case errors.Is(err, store.ErrTerminal):
		log.Debug("evaluate: completed elsewhere first")
		return true
	case err != nil:
		if ctx.Err() == nil {
			log.Warn("evaluate: cannot store the verdict; left pending", zapError(err))
		}
	default:
		s.completed(t.CreatedAt, j.note)
		log.Debug("evaluated", zap.String("outcome", j.outcome), zap.String("reasonCode", j.reasonCode))
		return true
	}
	return false
}

// pendingRecord is the record of j, read from the store unless j holds it. pending says it
// is to be evaluated; otherwise done says whether evaluate is done with it (terminal, or
// gone) or not (it could not be read).
func (s *Server) pendingRecord(ctx context.Context, j job, log *zap.Logger) (t store.Transaction, pending, done bool) {
	if j.rec != nil {
		return *j.rec, true, false
	}
	t, err := s.store.TransactionByHash(ctx, j.hash)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return t, false, true
	case err != nil:
		if ctx.Err() == nil {
			log.Warn("evaluate: cannot read the record", zapError(err))
		}
		return t, false, false
	}
	pending = t.Status == store.StatusPending
	return t, pending, !pending
}

// judgement is what evaluate keeps of a verdict: its JSON and what the store and the log
// need, copied out of it.
type judgement struct {
	raw                 json.RawMessage
	v                   *verdict.Verdict // under spend windows, the engine's verdict instead of raw (complete)
	release             func()           // gives v's memory back to the engine (Holder), or nil
	err                 error            // encoding the verdict failed
	status              string
	policyVersion       *int64
	outcome, reasonCode string
	note                verdictNote // what the metrics count (metrics.go); complete notes the windows' say
}

// judge evaluates in, the record hash, and keeps what evaluate needs, through the engine's
// Judge when it has one (the verdict's memory is then reused once it is encoded). ok is
// false when the engine answered no terminal, consistent verdict. A signing service signs
// the verdict; one it cannot sign is not stored (docs/verdict-signing.md).
//
// Under spend windows the verdict is kept as it is, neither encoded nor signed: the windows
// decide after the engine and may turn it into a refusal, so complete adds their check, signs,
// validates and encodes it once (withWindowCheck). It is then held (engine.Holder) until
// j.done, or the engine's Evaluate's, which the engine does not reuse.
func (s *Server) judge(ctx context.Context, hash string, in engine.Input) (judgement, bool) {
	keep := windowed(in)
	start := time.Now()
	if h, holds := s.engine.(engine.Holder); holds && keep {
		v, release := h.Hold(ctx, in)
		j, ok := judgement{release: release}, false
		gated(v, &ok, func(v *verdict.Verdict) { s.keepOf(&j, v, in, hash, start, keep) })
		return j, ok
	}
	j := new(judgement) // the engine's Judge calls back with the verdict
	ok := s.run(ctx, in, !keep, func(v *verdict.Verdict) { s.keepOf(j, v, in, hash, start, keep) })
	return *j, ok
}

// keepOf fills j with what evaluate keeps of v, the engine's terminal and consistent verdict
// of in, judged since start: v itself under spend windows (keep), else its JSON.
func (s *Server) keepOf(j *judgement, v *verdict.Verdict, in engine.Input, hash string, start time.Time, keep bool) {
	j.note = noteOf(v, time.Since(start))
	if keep {
		j.v = v
	} else {
		j.raw, j.err = s.encodeVerdict(v, in, hash)
	}
	j.status = store.StatusRejected
	if v.Outcome == verdict.OutcomeApproved {
		j.status = store.StatusApproved
	}
	if v.PolicyVersion != nil {
		pv := *v.PolicyVersion
		j.policyVersion = &pv
	}
	j.outcome, j.reasonCode = string(v.Outcome), string(v.ReasonCode)
}

// done gives the verdict j holds back to the engine: nothing may read j.v after it.
func (j *judgement) done() {
	if j.release != nil {
		j.release()
		j.v, j.release = nil, nil
	}
}

// run evaluates in with the engine, through its Judge when it has one and reuse allows,
// and calls use with the verdict only when it is terminal and consistent; it reports
// whether it did. With reuse the verdict is use's only for the call (a Judger reuses its
// memory afterwards); without, it is Evaluate's, which the engine does not reuse.
func (s *Server) run(ctx context.Context, in engine.Input, reuse bool, use func(*verdict.Verdict)) (ok bool) {
	gate := func(v *verdict.Verdict) { gated(v, &ok, use) }
	if jg, isJudger := s.engine.(engine.Judger); isJudger && reuse {
		jg.Judge(ctx, in, gate)
	} else {
		gate(s.engine.Evaluate(ctx, in))
	}
	return ok
}

// gated calls use with v, and sets ok, only when v is terminal and consistent.
func gated(v *verdict.Verdict, ok *bool, use func(*verdict.Verdict)) {
	if v == nil || !v.Terminal() || v.Consistent() != nil {
		return
	}
	*ok = true
	use(v)
}

// input builds the engine's input from a stored record and the agent's active policy,
// resolved now (docs/verdict-api.md#lifecycle). An agent without a policy gets a nil
// Policy: the engine denies by default.
func (s *Server) input(ctx context.Context, t store.Transaction) (engine.Input, error) {
	in, err := recordInput(t)
	if err != nil {
		return in, err
	}
	in.Policy, err = s.activePolicy(ctx, t.AgentID)
	if errors.Is(err, store.ErrNotFound) {
		return in, nil
	}
	return in, err
}

// activePolicy is the agent's active policy, resolved now: the number of its newest version is
// read, and the version's document only when this Server has not parsed it yet (a version is
// immutable). An agent without a policy is store.ErrNotFound.
func (s *Server) activePolicy(ctx context.Context, agentID string) (*policy.Policy, error) {
	v, err := s.store.ActivePolicyVersion(ctx, agentID)
	if err != nil {
		return nil, err
	}
	if doc, ok := s.cachedPolicy(policyKey{agentID, v}); ok {
		return &policy.Policy{Version: v, Doc: doc}, nil
	}
	pv, err := s.store.ActivePolicy(ctx, agentID)
	if err != nil {
		return nil, err
	}
	doc, err := s.parsedPolicy(pv)
	if err != nil {
		// a stored version that this build's schema refuses (stored by an older or newer
		// build) is not guessed at: the record waits for an operator's fix
		return nil, errors.New("the active policy version does not parse: " + err.Error())
	}
	return &policy.Policy{Version: pv.Version, Doc: doc}, nil
}

// recordInput is the engine's input of a stored record, without its policy.
func recordInput(t store.Transaction) (engine.Input, error) {
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
	return in, nil
}

// policyKey names one version of one agent's policy.
type policyKey struct {
	agentID string
	version int64
}

// policyCacheSize bounds the parsed policy versions a Server keeps.
const policyCacheSize = 1024

// parsedPolicy parses a stored policy version once: a version is immutable
// (docs/verdict-api.md#policies), so its parse is too. The engine only reads a Document.
func (s *Server) parsedPolicy(pv store.PolicyVersion) (*policy.Document, error) {
	k := policyKey{pv.AgentID, pv.Version}
	if doc, ok := s.cachedPolicy(k); ok {
		return doc, nil
	}
	doc, err := policy.Parse(pv.Document)
	if err != nil {
		return nil, err
	}
	s.policyMu.Lock()
	s.policies.Add(k, doc)
	s.policyMu.Unlock()
	return doc, nil
}

// cachedPolicy is the parsed policy version k, if this Server parsed it.
func (s *Server) cachedPolicy(k policyKey) (*policy.Document, bool) {
	s.policyMu.Lock()
	defer s.policyMu.Unlock()
	return s.policies.Get(k)
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
