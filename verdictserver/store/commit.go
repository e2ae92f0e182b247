package store

import (
	"context"
	"database/sql"
	"errors"
	"time"
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

const (
	// maxBatch bounds the writes of one transaction.
	maxBatch = 256
	// batchTimeout bounds one batch's transaction, so a database that stops answering
	// fails the callers rather than holding them.
	batchTimeout = 30 * time.Second
)

// errClosed is the error of a write sent to a closed Store.
var errClosed = errors.New("store closed")

// write is one caller's statement in a batch.
type write struct {
	ctx  context.Context // the caller's: a write whose caller has gone is not run
	run  func(ctx context.Context, tx *sql.Tx) (wrote bool, err error)
	done chan writeResult // buffered: the committer never waits for the caller
}

type writeResult struct {
	wrote bool
	err   error
}

// committer runs writes in batches, one batch at a time.
type committer struct {
	db      *sql.DB
	writes  chan *write
	quit    chan struct{} // closed by stop
	stopped chan struct{} // closed once the loop has answered every write it will answer
}

func newCommitter(db *sql.DB) *committer {
	c := &committer{
		db: db, writes: make(chan *write, maxBatch),
		quit: make(chan struct{}), stopped: make(chan struct{}),
	}
	go c.loop()
	return c
}

// do runs f in the next batch and returns once that batch committed (or failed). When ctx
// ends first, do returns its error and the write may yet commit. Errors are the driver's
// (or errClosed, or the context's), for the caller to wrap.
func (c *committer) do(ctx context.Context, f func(ctx context.Context, tx *sql.Tx) (bool, error)) (bool, error) {
	w := &write{ctx: ctx, run: f, done: make(chan writeResult, 1)}
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
	defer close(c.stopped)
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
	tx, err := c.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, false, err
	}
	defer func() { _ = tx.Rollback() }()
	wrote = make([]bool, len(ws))
	for i, w := range ws {
		if wrote[i], err = w.run(ctx, tx); err != nil {
			return nil, true, err
		}
	}
	if err := tx.Commit(); err != nil {
		return nil, false, err
	}
	return wrote, false, nil
}
