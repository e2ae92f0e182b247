package journal

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/x402gate/x402gate/gate/payledger"
	"github.com/x402gate/x402gate/internal/sqldb"
)

// ledgerSchema is the gate's payment ledger (docs/gate.md#payment-ledger) in the
// journal's database, with its own version table and lock key ("x402gled" in ASCII), so
// it migrates apart from the journal. Times are unix microseconds; 0 is none.
var ledgerSchema = sqldb.Schema{
	Table:   "gate_ledger_schema_migrations",
	LockKey: 0x783430326767656c,
	Migrations: []sqldb.Migration{{Version: 1, Statements: []string{
		`CREATE TABLE gate_ledger (
			pay_key       TEXT PRIMARY KEY,
			state         INTEGER NOT NULL,
			fingerprint   {{blob}} NOT NULL,
			binding       {{blob}} NOT NULL,
			data          {{blob}},
			token         {{blob}},
			credits       INTEGER NOT NULL,
			credits_until BIGINT NOT NULL,
			expires       BIGINT NOT NULL,
			owner         TEXT NOT NULL,
			lease         BIGINT NOT NULL
		)`,
		`CREATE INDEX gate_ledger_expires ON gate_ledger (expires)`,
		`CREATE TABLE gate_ledger_ids (
			id_key  TEXT PRIMARY KEY,
			pay_key TEXT NOT NULL,
			expires BIGINT NOT NULL
		)`,
	}}},
}

// Ledger is the gate's payment ledger kept with the settlement journal, so a single
// instance keeps its payments' records, retry tokens included, across its own restart:
// what must survive lives with the journal. Each transition is one transaction that loads
// the payment's record, applies payledger.Record's transition and saves it. It
// implements payledger.Ledger; every failure wraps payledger.ErrUnavailable.
type Ledger struct {
	j      *DB
	writes atomic.Uint32 // every purgeEvery-th new record purges the expired ones
}

// purgeEvery is how often a new record purges expired records and ids.
const purgeEvery = 1024

// Ledger migrates the ledger's tables in the journal's database and returns the ledger.
func (j *DB) Ledger(ctx context.Context) (*Ledger, error) {
	if err := j.db.Migrate(ctx, ledgerSchema); err != nil {
		return nil, fmt.Errorf("payment ledger: %w", err)
	}
	return &Ledger{j: j}, nil
}

const ledgerColumns = `state, fingerprint, binding, data, token, credits, credits_until, expires, owner, lease`

// micros is t as the ledger stores it.
func micros(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMicro()
}

func fromMicros(v int64) time.Time {
	if v == 0 {
		return time.Time{}
	}
	return time.UnixMicro(v)
}

// load reads the live record of key on q, locking its row on PostgreSQL; nil when there
// is none.
func (l *Ledger) load(ctx context.Context, q querier, key string, now time.Time) (*payledger.Record, error) {
	lock := ""
	if l.j.db.Dialect.Name == sqldb.Postgres.Name {
		lock = " FOR UPDATE"
	}
	var r payledger.Record
	var until, exp, lease int64
	err := q.QueryRowContext(ctx, `SELECT `+ledgerColumns+` FROM gate_ledger WHERE pay_key = $1`+lock, key).Scan(
		&r.State, &r.Fingerprint, &r.Binding, &r.Data, &r.Token, &r.Credits, &until, &exp, &r.Owner, &lease)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	r.CreditsUntil, r.Expires, r.Lease = fromMicros(until), fromMicros(exp), fromMicros(lease)
	if !now.Before(r.Expires) {
		_, err := q.ExecContext(ctx, `DELETE FROM gate_ledger WHERE pay_key = $1`, key)
		return nil, err
	}
	return &r, nil
}

// insert writes r as the new record of key on q; it reports false when another
// transaction wrote one first.
func (l *Ledger) insert(ctx context.Context, q querier, key string, r *payledger.Record) (bool, error) {
	res, err := q.ExecContext(ctx, `INSERT INTO gate_ledger (pay_key, `+ledgerColumns+`)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) ON CONFLICT (pay_key) DO NOTHING`,
		key, r.State, r.Fingerprint, r.Binding, r.Data, r.Token, r.Credits, micros(r.CreditsUntil), micros(r.Expires), r.Owner, micros(r.Lease))
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

// save writes r over the record of key on q.
func (l *Ledger) save(ctx context.Context, q querier, key string, r *payledger.Record) error {
	_, err := q.ExecContext(ctx, `UPDATE gate_ledger SET state = $2, data = $3, token = $4, credits = $5,
		credits_until = $6, owner = $7, lease = $8 WHERE pay_key = $1`,
		key, r.State, r.Data, r.Token, r.Credits, micros(r.CreditsUntil), r.Owner, micros(r.Lease))
	return err
}

// fail wraps a database error as the gate expects of a ledger.
func (l *Ledger) fail(op string, err error) error {
	return fmt.Errorf("%w: %w", payledger.ErrUnavailable, l.j.fail("ledger "+op, err))
}

// Begin implements payledger.Ledger.
func (l *Ledger) Begin(ctx context.Context, c payledger.Claim) (payledger.Entry, error) {
	var e payledger.Entry
	var now time.Time
	err := l.j.write(ctx, true, func(ctx context.Context, q querier) error {
		e = payledger.Entry{} // a group commit may run this again
		var err error
		if now, err = l.clock(ctx, q); err != nil {
			return err
		}
		if c.ID != "" && l.j.db.Dialect.Name != sqldb.SQLite.Name {
			// Concurrent claims under one payment id are decided one after the other, as
			// memory and Redis decide them: the second sees the first's id.
			if _, err := q.ExecContext(ctx, `SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`, c.ID); err != nil {
				return err
			}
		}
		known := false
		if c.ID != "" {
			var ref string
			var exp int64
			err := q.QueryRowContext(ctx, `SELECT pay_key, expires FROM gate_ledger_ids WHERE id_key = $1`, c.ID).Scan(&ref, &exp)
			switch {
			case errors.Is(err, sql.ErrNoRows):
			case err != nil:
				return err
			case now.UnixMicro() < exp && ref != c.Key:
				other, err := l.load(ctx, q, ref, now)
				if err != nil {
					return err
				}
				if other != nil {
					e = payledger.Entry{Status: payledger.Conflict}
					return nil
				}
			case now.UnixMicro() < exp:
				known = true
			}
		}
		r, err := l.begin(ctx, q, c, known, now, &e)
		if err != nil || e.Status > payledger.Retry {
			return err
		}
		if c.ID == "" || known {
			return nil
		}
		_, err = q.ExecContext(ctx, `INSERT INTO gate_ledger_ids (id_key, pay_key, expires) VALUES ($1, $2, $3)
			ON CONFLICT (id_key) DO UPDATE SET pay_key = excluded.pay_key, expires = excluded.expires`,
			c.ID, c.Key, micros(r.Expires))
		return err
	})
	if err != nil {
		return payledger.Entry{}, l.fail("begin", err)
	}
	if e.Status == payledger.New {
		l.purge(ctx, now)
	}
	return e, nil
}

// begin decides c on its record, new or not, and saves what it took into e; it returns
// the record.
func (l *Ledger) begin(ctx context.Context, q querier, c payledger.Claim, known bool, now time.Time, e *payledger.Entry) (*payledger.Record, error) {
	r, err := l.load(ctx, q, c.Key, now)
	if err != nil {
		return nil, err
	}
	if r == nil {
		r = payledger.NewRecord(c, now)
		ok, err := l.insert(ctx, q, c.Key, r)
		if err != nil || ok {
			*e = payledger.Entry{Status: payledger.New, KnownID: known}
			return r, err
		}
		// Another transaction wrote the record first: decide on it.
		if r, err = l.load(ctx, q, c.Key, now); err != nil || r == nil {
			return nil, errors.Join(err, errors.New("the record vanished"))
		}
	}
	if *e = r.Judge(c, known, now); e.Status > payledger.Retry {
		return r, nil
	}
	return r, l.save(ctx, q, c.Key, r)
}

// purge deletes expired records and ids, every purgeEvery-th new record, in a write of its
// own after the transition's: a failed statement must not abort (on PostgreSQL) the
// transaction of a request. A failure is left for the next one: the rows are dead either way.
func (l *Ledger) purge(ctx context.Context, now time.Time) {
	if l.writes.Add(1)%purgeEvery != 0 {
		return
	}
	_ = l.j.write(ctx, false, func(ctx context.Context, q querier) error {
		_, _ = q.ExecContext(ctx, `DELETE FROM gate_ledger WHERE expires <= $1`, now.UnixMicro())
		_, _ = q.ExecContext(ctx, `DELETE FROM gate_ledger_ids WHERE expires <= $1`, now.UnixMicro())
		return nil
	})
}

// clock is the time a transition judges leases and lifetimes by: on PostgreSQL the
// database's clock, which every instance sharing it reads alike, so no instance's clock
// skew moves another's lease; on SQLite (one instance) this process's.
func (l *Ledger) clock(ctx context.Context, q querier) (time.Time, error) {
	if l.j.db.Dialect.Name == sqldb.SQLite.Name {
		return time.Now(), nil
	}
	var us int64
	if err := q.QueryRowContext(ctx, `SELECT (EXTRACT(EPOCH FROM clock_timestamp()) * 1000000)::BIGINT`).Scan(&us); err != nil {
		return time.Time{}, err
	}
	return time.UnixMicro(us), nil
}

// owned runs f on the record of key when owner holds its lease, and saves it when f
// reports a change (or deletes it when f asks).
func (l *Ledger) owned(ctx context.Context, op, key, owner string, f func(r *payledger.Record, now time.Time) (changed, remove bool)) (bool, error) {
	done := false
	err := l.j.write(ctx, true, func(ctx context.Context, q querier) error {
		done = false
		now, err := l.clock(ctx, q)
		if err != nil {
			return err
		}
		r, err := l.load(ctx, q, key, now)
		if err != nil || r == nil || !r.Held(owner, now) {
			return err
		}
		changed, remove := f(r, now)
		switch {
		case remove:
			_, err = q.ExecContext(ctx, `DELETE FROM gate_ledger WHERE pay_key = $1`, key)
		case changed:
			err = l.save(ctx, q, key, r)
		}
		done = changed || remove
		return err
	})
	if err != nil {
		return false, l.fail(op, err)
	}
	return done, nil
}

// Renew implements payledger.Ledger.
func (l *Ledger) Renew(ctx context.Context, key, owner string, lease time.Duration) (bool, error) {
	return l.owned(ctx, "renew", key, owner, func(r *payledger.Record, now time.Time) (bool, bool) {
		return r.Renew(lease, now), false
	})
}

// Settle implements payledger.Ledger.
func (l *Ledger) Settle(ctx context.Context, key, owner string, data []byte) (bool, error) {
	return l.owned(ctx, "settle", key, owner, func(r *payledger.Record, _ time.Time) (bool, bool) {
		return r.Settle(data), false
	})
}

// Pend implements payledger.Ledger.
func (l *Ledger) Pend(ctx context.Context, key, owner string, token, data []byte) (bool, error) {
	return l.owned(ctx, "pend", key, owner, func(r *payledger.Record, _ time.Time) (bool, bool) {
		return r.Pend(token, data), false
	})
}

// End implements payledger.Ledger.
func (l *Ledger) End(ctx context.Context, key, owner string, outcome int, token []byte, credits int, ttl time.Duration) (bool, error) {
	granted := false
	done, err := l.owned(ctx, "end", key, owner, func(r *payledger.Record, now time.Time) (bool, bool) {
		granted = r.End(outcome, token, credits, ttl, now)
		return true, false
	})
	// A group commit may run the transition again, and find the lease gone the second
	// time: granted counts only from the run that was committed.
	return granted && done, err
}

// Forget implements payledger.Ledger.
func (l *Ledger) Forget(ctx context.Context, key, owner string) (bool, error) {
	return l.owned(ctx, "forget", key, owner, func(r *payledger.Record, _ time.Time) (bool, bool) {
		return false, r.Forgettable()
	})
}
