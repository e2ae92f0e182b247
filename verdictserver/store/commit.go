package store

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
)

// Group commit (docs/verdict-api.md#durability): the writes of the hot path (a submit's
// insert, an evaluation's Complete) go to one committer per Store, which runs every write
// that is waiting in one transaction, so that one commit (one fsync) makes a whole batch
// durable. Each caller returns only once the transaction holding its write has committed,
// with its own result: whether its statement wrote a row, or its own error.
//
// A write that fails inside a batch spoils the transaction for the others (PostgreSQL
// aborts it), so the batch is rolled back and each of its writes runs again alone: an
// error reaches only the caller it belongs to. A write is a statement whose effect holds
// only once it commits (an INSERT ... ON CONFLICT DO NOTHING, an UPDATE guarded by its
// WHERE), so running it again after a rollback is running it once.
//
// On PostgreSQL a batch is one pipeline (a pgx batch): every statement is sent at once and
// runs in the implicit transaction that the pipeline's Sync commits, so a batch costs one
// round trip and one commit however many writes it holds. Several batches run at once
// (pgCommitters), each on its own connection: while one waits for its WAL flush, the next
// is already on its way, and PostgreSQL flushes the commits that wait together at once.
// SQLite has one writer at a time, so it runs one batch at a time, in a transaction of
// statements prepared once.

const (
	// maxBatch bounds the writes of one transaction.
	maxBatch = 256
	// pgCommitters is how many batches run at once on PostgreSQL.
	pgCommitters = 4
	// batchTimeout bounds one batch's transaction, so a database that stops answering
	// fails the callers rather than holding them.
	batchTimeout = 30 * time.Second
)

// errClosed is the error of a write sent to a closed Store.
var errClosed = errors.New("store closed")

// write is one caller's statement in a batch: q with args, in the store's dialect, and
// its prepared form when it has one (used on SQLite).
type write struct {
	ctx  context.Context // the caller's: a write whose caller has gone is not run
	q    string
	stmt *sql.Stmt
	args []any
	done chan writeResult // buffered: the committer never waits for the caller
}

type writeResult struct {
	wrote bool
	err   error
}

// committer runs writes in batches, loops batches at a time.
type committer struct {
	db       *sql.DB
	pipeline bool // PostgreSQL: a batch is a pgx pipeline
	writes   chan *write
	quit     chan struct{} // closed by stop
	stopped  chan struct{} // closed once the loops have answered every write they will answer
}

// newCommitter starts the committer of db: pgCommitters pipelined loops on PostgreSQL, one
// loop of transactions on SQLite.
func newCommitter(db *sql.DB, postgres bool) *committer {
	c, loops := idleCommitter(db, postgres), 1
	if postgres {
		loops = pgCommitters
	}
	c.start(loops)
	return c
}

// idleCommitter is the committer of db, its loops not started.
func idleCommitter(db *sql.DB, postgres bool) *committer {
	return &committer{
		db: db, pipeline: postgres, writes: make(chan *write, maxBatch),
		quit: make(chan struct{}), stopped: make(chan struct{}),
	}
}

// start starts loops loops, which take batches from the one queue.
func (c *committer) start(loops int) {
	var wg sync.WaitGroup
	for range loops {
		wg.Go(c.loop)
	}
	go func() {
		wg.Wait()
		close(c.stopped)
	}()
}

// do runs q with args (through stmt, when set, on SQLite) in the next batch and returns
// whether it wrote a row, once that batch committed (or failed). When ctx ends first, do
// returns its error and the write may yet commit. Errors are the driver's (or errClosed,
// or the context's), for the caller to wrap.
func (c *committer) do(ctx context.Context, stmt *sql.Stmt, q string, args ...any) (bool, error) {
	w := &write{ctx: ctx, q: q, stmt: stmt, args: args, done: make(chan writeResult, 1)}
	select {
	case c.writes <- w:
	case <-c.quit:
		return false, errClosed
	case <-ctx.Done():
		return false, ctx.Err()
	}
	select {
	case r := <-w.done:
		return r.wrote, r.err
	case <-ctx.Done():
		return false, ctx.Err()
	case <-c.stopped:
		select { // the loop may have answered it on its way out
		case r := <-w.done:
			return r.wrote, r.err
		default:
			return false, errClosed
		}
	}
}

// stop ends the loop after the batch under way; writes not yet taken get errClosed.
func (c *committer) stop() {
	select {
	case <-c.quit:
	default:
		close(c.quit)
	}
	<-c.stopped
}

func (c *committer) loop() {
	batch := make([]*write, 0, maxBatch)
	for {
		select {
		case <-c.quit:
			c.drain()
			return
		case w := <-c.writes:
			batch = append(batch[:0], w)
		}
		// Take every write that is waiting now, without waiting for more: a lone write is
		// committed at once, and the writes that arrive during a commit form the next batch.
	more:
		for len(batch) < maxBatch {
			select {
			case w := <-c.writes:
				batch = append(batch, w)
			default:
				break more
			}
		}
		c.commit(batch)
		clear(batch)
	}
}

// drain answers the writes still queued after quit.
func (c *committer) drain() {
	for {
		select {
		case w := <-c.writes:
			w.done <- writeResult{err: errClosed}
		default:
			return
		}
	}
}

// commit runs batch in one transaction, or each write alone after a write failed.
func (c *committer) commit(batch []*write) {
	live := batch[:0:len(batch)]
	for _, w := range batch {
		if err := w.ctx.Err(); err != nil {
			w.done <- writeResult{err: err} // not run: nothing written
			continue
		}
		live = append(live, w)
	}
	if len(live) == 0 {
		return
	}
	wrote, writeFailed, err := c.inTx(live)
	if err == nil || len(live) == 1 || !writeFailed {
		for i, w := range live {
			if err != nil {
				w.done <- writeResult{err: err}
			} else {
				w.done <- writeResult{wrote: wrote[i]}
			}
		}
		return
	}
	for _, w := range live {
		wrote, _, err := c.inTx([]*write{w})
		if err != nil {
			w.done <- writeResult{err: err}
		} else {
			w.done <- writeResult{wrote: wrote[0]}
		}
	}
}

// inTx runs ws in one transaction and commits it. writeFailed says the error is one
// write's own, not the transaction's (begin or commit).
func (c *committer) inTx(ws []*write) (wrote []bool, writeFailed bool, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), batchTimeout)
	defer cancel()
	if c.pipeline {
		return c.pipelined(ctx, ws)
	}
	tx, err := c.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, false, err
	}
	defer func() { _ = tx.Rollback() }()
	wrote = make([]bool, len(ws))
	for i, w := range ws {
		var res sql.Result
		if w.stmt != nil {
			res, err = tx.StmtContext(ctx, w.stmt).ExecContext(ctx, w.args...)
		} else {
			res, err = tx.ExecContext(ctx, w.q, w.args...)
		}
		if wrote[i], err = affected(res, err); err != nil {
			return nil, true, err
		}
	}
	if err := tx.Commit(); err != nil {
		return nil, false, err
	}
	return wrote, false, nil
}

// pipelined sends ws to PostgreSQL as one pipeline on one connection: the statements run
// in the implicit transaction that the pipeline's Sync ends, committed when all of them
// succeeded and rolled back when one failed (the ones after it are not run).
func (c *committer) pipelined(ctx context.Context, ws []*write) (wrote []bool, writeFailed bool, err error) {
	conn, err := c.db.Conn(ctx)
	if err != nil {
		return nil, false, err
	}
	defer conn.Close()
	wrote = make([]bool, len(ws))
	err = conn.Raw(func(driverConn any) error {
		var b pgx.Batch
		for _, w := range ws {
			b.Queue(w.q, w.args...)
		}
		br := driverConn.(*stdlib.Conn).Conn().SendBatch(ctx, &b)
		for i := range ws {
			tag, err := br.Exec()
			if err != nil {
				writeFailed = true
				_ = br.Close()
				return err
			}
			wrote[i] = tag.RowsAffected() > 0
		}
		return br.Close() // the commit's error
	})
	if err != nil {
		return nil, writeFailed, err
	}
	return wrote, false, nil
}
