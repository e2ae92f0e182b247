// Package redisretry keeps the gate's payment ledger (docs/gate.md#payment-ledger) and
// pass book in Redis, so several instances behind one load balancer share them. It
// satisfies gate/payledger.Ledger and gate.PassBook; the gate package itself links no Redis
// client.
package redisretry

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/x402gate/x402gate/gate/payledger"
)

// DefaultPrefix prefixes every key a Store writes unless another is given. It matches
// the approval store's default prefix, so one Redis holds both.
const DefaultPrefix = "x402gate:"

// ErrUnavailable is wrapped by every failure to reach Redis: it is
// gate/payledger.ErrUnavailable, and the gate fails closed on it.
var ErrUnavailable = payledger.ErrUnavailable

// Store is the payment ledger and pass book several instances share. Each ledger
// transition is one Lua script (ledger.go), so it is atomic across every process on the
// same Redis. Every failure wraps ErrUnavailable.
type Store struct {
	client redis.UniversalClient
	prefix string
	owned  bool
}

// New uses client, which stays the caller's (Close does not close it).
// An empty prefix means DefaultPrefix. Give it a client with MaxRetries -1:
// go-redis resends a command whose reply was lost, and a resent script would take a
// second credit.
func New(client redis.UniversalClient, prefix string) *Store {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	return &Store{client: client, prefix: prefix}
}

// Open connects to the Redis at rawURL
// (redis://[user:password@]host:port[/db], rediss:// for TLS) and checks it answers
// PING. Errors never quote the URL, which may hold a password.
func Open(ctx context.Context, rawURL, prefix string) (*Store, error) {
	o, err := redis.ParseURL(rawURL)
	if err != nil {
		return nil, errors.New("redis retry store: invalid url: want redis://[user:password@]host:port[/db]")
	}
	// A lost reply must be an error (fail closed), never a resent script that takes a
	// second credit.
	o.MaxRetries = -1
	c := redis.NewClient(o)
	if err := c.Ping(ctx).Err(); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("redis retry store: connect: %w", ErrUnavailable)
	}
	s := New(c, prefix)
	s.owned = true
	return s, nil
}

// Close closes the connection Open made; it does nothing for a client
// given to New.
func (s *Store) Close() error {
	if s.owned {
		return s.client.Close()
	}
	return nil
}

func (s *Store) key(k string) string { return s.prefix + k }

// redisFail wraps a Redis error. Redis replies quote no password, but go-redis's dial errors
// can quote the address; that is not secret.
func redisFail(op string, err error) error {
	return fmt.Errorf("redis ledger %s: %w: %v", op, ErrUnavailable, err)
}
