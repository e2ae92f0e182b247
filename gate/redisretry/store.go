// Package redisretry keeps the gate's retry credits in Redis, so several instances
// behind one load balancer share them (docs/gate.md#retry-credits). It satisfies
// gate.RetryStore; the gate package itself links no Redis client.
package redisretry

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// DefaultPrefix prefixes every key a Store writes unless another is given. It matches
// the approval store's default prefix, so one Redis holds both.
const DefaultPrefix = "x402gate:"

// ErrUnavailable is wrapped by every failure to reach Redis. The gate fails closed on
// it: no credit is taken or granted.
var ErrUnavailable = errors.New("retry store unavailable")

// errNoTokenHash refuses a grant that no token could unlock, or that any would.
var errNoTokenHash = errors.New("retry store: a grant needs its token hash")

// Each script is one atomic step on a hash {n: credits left, h: SHA-256 of the retry
// token, d: settlement data, l: lease end in Redis server milliseconds}.

// tokenCheck reads the grant into n, h, d and l, and returns false (nil to the client)
// unless the token hash in ARGV[1] equals h (compared without an early exit) and a credit
// is left.
const tokenCheck = `
local v = redis.call('HMGET', KEYS[1], 'n', 'h', 'd', 'l')
local n, h, t = tonumber(v[1]), v[2], ARGV[1]
if n == nil or not h or #t == 0 or #h ~= #t then return false end
local diff = 0
for i = 1, #h do
  diff = bit.bor(diff, bit.bxor(string.byte(h, i), string.byte(t, i)))
end
if diff ~= 0 or n <= 0 then return false end
`

var (
	// grantScript creates the grant only when the key is absent (a grant is never
	// refilled nor rebound to another token), and gives it a lifetime. It returns 1 when
	// it granted.
	grantScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], 'n', ARGV[1], 'h', ARGV[3], 'd', ARGV[4])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1`)
	// acquireScript takes one credit and sets the lease (ARGV[2] ms from Redis's own
	// clock, so instances' clocks do not matter) unless a lease is held. It returns
	// {1, data} when it took a credit, {2} while a lease is held, false otherwise.
	acquireScript = redis.NewScript(tokenCheck + `
local now = redis.call('TIME')
local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
if tonumber(v[4]) ~= nil and tonumber(v[4]) > ms then return {2} end
redis.call('HINCRBY', KEYS[1], 'n', -1)
redis.call('HSET', KEYS[1], 'l', ms + tonumber(ARGV[2]))
return {1, v[3]}`)
	// peekScript returns the data when the token matches and a credit is left.
	peekScript = redis.NewScript(tokenCheck + `
return v[3]`)
	// releaseScript ends the lease.
	releaseScript = redis.NewScript(`
return redis.call('HDEL', KEYS[1], 'l')`)
	// revokeScript empties a grant but keeps it until it expires, so it cannot be
	// granted again.
	revokeScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], 'n', 0)
return 1`)
)

// Acquire outcomes, the values of gate.CreditStatus.
const (
	creditNone  = 0
	creditTaken = 1
	creditBusy  = 2
)

// Store is the gate.RetryStore several instances share. Each operation is one Lua script,
// so Use checks the token hash and takes a credit atomically across every process on the same Redis. Every failure wraps
// ErrUnavailable.
type Store struct {
	client redis.UniversalClient
	prefix string
	owned  bool
}

// New uses client, which stays the caller's (Close does not close it).
// An empty prefix means DefaultPrefix. Give it a client with MaxRetries -1:
// go-redis resends a command whose reply was lost, and a resent use would take a second
// credit.
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
	return fmt.Errorf("redis retry %s: %w: %v", op, ErrUnavailable, err)
}

// Grant implements gate.RetryStore.
func (s *Store) Grant(ctx context.Context, key string, tokenHash []byte, n int, ttl time.Duration, data []byte) (bool, error) {
	if len(tokenHash) == 0 {
		return false, errNoTokenHash
	}
	if n <= 0 || ttl < time.Millisecond {
		return false, nil
	}
	r, err := grantScript.Run(ctx, s.client, []string{s.key(key)}, n, ttl.Milliseconds(), tokenHash, data).Int()
	if err != nil {
		return false, redisFail("grant", err)
	}
	return r == 1, nil
}

// Acquire implements gate.RetryStore.
func (s *Store) Acquire(ctx context.Context, key string, tokenHash []byte, lease time.Duration) ([]byte, int, error) {
	if len(tokenHash) == 0 {
		return nil, creditNone, nil
	}
	r, err := acquireScript.Run(ctx, s.client, []string{s.key(key)}, tokenHash, max(lease.Milliseconds(), 1)).Slice()
	switch {
	case errors.Is(err, redis.Nil):
		return nil, creditNone, nil
	case err != nil:
		return nil, creditNone, redisFail("acquire", err)
	}
	if code, _ := r[0].(int64); code == creditBusy {
		return nil, creditBusy, nil
	}
	var data string
	if len(r) > 1 {
		data, _ = r[1].(string)
	}
	return []byte(data), creditTaken, nil
}

// Peek implements gate.RetryStore.
func (s *Store) Peek(ctx context.Context, key string, tokenHash []byte) ([]byte, bool, error) {
	if len(tokenHash) == 0 {
		return nil, false, nil
	}
	b, err := peekScript.Run(ctx, s.client, []string{s.key(key)}, tokenHash).Text()
	if errors.Is(err, redis.Nil) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, redisFail("peek", err)
	}
	return []byte(b), true, nil
}

// Release implements gate.RetryStore.
func (s *Store) Release(ctx context.Context, key string) error {
	if err := releaseScript.Run(ctx, s.client, []string{s.key(key)}).Err(); err != nil {
		return redisFail("release", err)
	}
	return nil
}

// Revoke implements gate.RetryStore.
func (s *Store) Revoke(ctx context.Context, key string) error {
	if err := revokeScript.Run(ctx, s.client, []string{s.key(key)}).Err(); err != nil {
		return redisFail("revoke", err)
	}
	return nil
}
