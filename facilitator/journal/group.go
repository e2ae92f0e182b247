package journal

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"time"

	"github.com/x402gate/x402gate/internal/sqldb"
)

// querier runs statements: the database itself, or one transaction.
type querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// writeOp is one write of the journal: statements run on q, inside a transaction, that
// either succeed together or leave nothing behind when it returns an error.
type writeOp func(ctx context.Context, q querier) error

// groupCommitBound bounds one group transaction, whatever its callers' contexts say: a
// caller that goes away must not abort the writes of the others it shares a commit with.
const groupCommitBound = 30 * time.Second

// groupCommit batches the concurrent writes of one SQLite journal into one transaction,
// so that one fsync makes all of them durable (docs/facilitator.md#settlement-journal).
// SQLite has one writer at a time: without it, concurrent writers queue in SQLite's busy
// handler, which sleeps between tries, and each pays its own fsync. A write returns only
// after the transaction holding it has committed (synchronous=FULL: on disk) or failed.
// Each write runs inside its own savepoint, so one that fails leaves nothing behind and
// does not disturb the others; when the commit itself fails, each write of the group is
// run again alone, in its own transaction, so each gets its own answer.
type groupCommit struct {
	db   *sqldb.DB
	fail func(op string, err error) error // wraps a transaction's error as DB.fail does

	lead  chan struct{} // holds a token while a writer commits a group
	qmu   sync.Mutex
	queue []*pendingWrite
	armed bool // a flush of the deferred writes is scheduled (later)
	// laterBound is how long a deferred write (later) waits for another write to carry it
	// into a group commit before it is committed on its own (the package's laterBound;
	// a test lengthens it).
	laterBound time.Duration
}

type pendingWrite struct {
	ctx  context.Context
	op   writeOp
	err  error
	done chan struct{}
	// then, when set, is told the outcome of a deferred write (later) once its group
	// committed or failed; nobody waits on done.
	then func(error)
}

// laterBound is how long a deferred write (later) waits for another write to carry it
// into a group commit before it is committed on its own. At one request at a time, the
// next write of the same request comes within a millisecond or so; under load, writes
// come all the time.
const laterBound = 5 * time.Millisecond

// do runs op in the next group transaction and returns once it is committed (nil) or
// failed (its error).
func (g *groupCommit) do(ctx context.Context, op writeOp) error {
	w := &pendingWrite{ctx: ctx, op: op, done: make(chan struct{})}
	g.qmu.Lock()
	g.queue = append(g.queue, w)
	g.qmu.Unlock()
	// Wait for a group to answer w, or lead the next group. A write that an earlier group
	// answered returns without taking the lead, so the writers of a group do not queue for
	// it one by one to learn they are done.
	select {
	case <-w.done:
	case g.lead <- struct{}{}:
		g.qmu.Lock()
		group := g.queue
		g.queue = nil
		g.qmu.Unlock()
		// A group answers every write it takes before it lets go of the lead, so w is in
		// this one unless an earlier group answered it.
		if len(group) > 0 {
			g.commit(ctx, group)
		}
		<-g.lead
		<-w.done
	}
	return w.err
}

// later queues op for the next group commit and returns at once: the next write that
// leads a group commits op with its own, in one fsync, and when none comes within
// g.laterBound, op is committed on its own. Deferred writes keep their order among
// themselves and with the writes queued after them. then, when set, gets op's outcome.
// A crash before the commit loses op: only a write whose loss the journal's readers
// repair may be deferred (DB.UpdateLater).
func (g *groupCommit) later(op writeOp, then func(error)) {
	w := &pendingWrite{ctx: context.Background(), op: op, done: make(chan struct{}), then: then}
	g.qmu.Lock()
	g.queue = append(g.queue, w)
	arm := !g.armed
	g.armed = true
	g.qmu.Unlock()
	if arm {
		time.AfterFunc(g.laterBound, g.flush)
	}
}

// flush commits whatever is queued, deferred writes included, and returns once it is
// committed. A group already running takes its lead first.
func (g *groupCommit) flush() {
	g.qmu.Lock()
	g.armed = false
	empty := len(g.queue) == 0
	g.qmu.Unlock()
	if empty {
		return // a group carried them
	}
	g.lead <- struct{}{}
	g.qmu.Lock()
	group := g.queue
	g.queue = nil
	g.qmu.Unlock()
	if len(group) > 0 {
		g.commit(context.Background(), group)
	}
	<-g.lead
}

// commit runs group in one transaction and answers each write.
func (g *groupCommit) commit(ctx context.Context, group []*pendingWrite) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), groupCommitBound)
	defer cancel()
	err := g.run(ctx, group)
	if err != nil && len(group) > 1 {
		// The group could not commit: nothing of it was written. Each write alone.
		for _, w := range group {
			wctx, cancel := context.WithTimeout(context.WithoutCancel(w.ctx), groupCommitBound)
			w.err = g.run(wctx, []*pendingWrite{w})
			cancel()
		}
	} else if err != nil {
		group[0].err = err
	}
	for _, w := range group {
		close(w.done)
		if w.then != nil {
			w.then(w.err)
		}
	}
}

// run runs group in one transaction, each write in its own savepoint; a write that fails
// is rolled back to its savepoint and keeps its error. The error is the transaction's.
func (g *groupCommit) run(ctx context.Context, group []*pendingWrite) error {
	tx, err := g.db.BeginTx(ctx, nil)
	if err != nil {
		return g.fail("begin", err)
	}
	defer func() { _ = tx.Rollback() }()
	for i, w := range group {
		sp := fmt.Sprintf("w%d", i)
		if _, err := tx.ExecContext(ctx, "SAVEPOINT "+sp); err != nil {
			return g.fail("savepoint", err)
		}
		if w.err = w.op(ctx, tx); w.err != nil {
			if _, err := tx.ExecContext(ctx, "ROLLBACK TO SAVEPOINT "+sp); err != nil {
				return g.fail("savepoint", err)
			}
		}
		if _, err := tx.ExecContext(ctx, "RELEASE SAVEPOINT "+sp); err != nil {
			return g.fail("savepoint", err)
		}
	}
	if len(group) == 1 && group[0].err != nil {
		return nil // answered; nothing to commit
	}
	if err := tx.Commit(); err != nil {
		return g.fail("commit", err)
	}
	return nil
}
