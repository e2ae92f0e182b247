package gate

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// DefaultRedisRetryPrefix prefixes every key a RedisRetryStore writes unless another is
// given. It matches approval.DefaultRedisKeyPrefix, so one Redis holds both.
const DefaultRedisRetryPrefix = "x402gate:"

// Each script is one atomic step on a hash {n: credits left, h: SHA-256 of the retry
// token, d: settlement data}.
var (
	// grantScript creates the grant only when the key is absent (a grant is never
	// refilled nor rebound to another token), and gives it a lifetime. It returns 1 when
	// it granted.
	grantScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], 'n', ARGV[1], 'h', ARGV[3], 'd', ARGV[4])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1`)
	// useScript takes one credit when one is left and the token hash matches (compared
	// without an early exit), and returns the data; nil otherwise, taking nothing.
	useScript = redis.NewScript(`
local v = redis.call('HMGET', KEYS[1], 'n', 'h', 'd')
local n, h, t = tonumber(v[1]), v[2], ARGV[1]
if n == nil or not h or #t == 0 or #h ~= #t then return false end
local diff = 0
for i = 1, #h do
  diff = bit.bor(diff, bit.bxor(string.byte(h, i), string.byte(t, i)))
end
if diff ~= 0 or n <= 0 then return false end
redis.call('HINCRBY', KEYS[1], 'n', -1)
return v[3]`)
	// peekScript is useScript that takes nothing.
	peekScript = redis.NewScript(`
local v = redis.call('HMGET', KEYS[1], 'n', 'h', 'd')
local n, h, t = tonumber(v[1]), v[2], ARGV[1]
if n == nil or not h or #t == 0 or #h ~= #t then return false end
local diff = 0
for i = 1, #h do
  diff = bit.bor(diff, bit.bxor(string.byte(h, i), string.byte(t, i)))
end
if diff ~= 0 or n <= 0 then return false end
return v[3]`)
	// revokeScript empties a grant but keeps it until it expires, so it cannot be
	// granted again.
	revokeScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], 'n', 0)
return 1`)
)

// RedisRetryStore is the RetryStore several instances share (DESIGN.md "State and where
// it lives"). Each operation is one Lua script, so Use checks the token hash and takes a
// credit atomically across every process on the same Redis. Every failure wraps
// ErrRetryStoreUnavailable.
type RedisRetryStore struct {
	client redis.UniversalClient
	prefix string
	owned  bool
}

// NewRedisRetryStore uses client, which stays the caller's (Close does not close it).
// An empty prefix means DefaultRedisRetryPrefix. Give it a client with MaxRetries -1:
// go-redis resends a command whose reply was lost, and a resent use would take a second
// credit.
func NewRedisRetryStore(client redis.UniversalClient, prefix string) *RedisRetryStore {
	if prefix == "" {
		prefix = DefaultRedisRetryPrefix
	}
	return &RedisRetryStore{client: client, prefix: prefix}
}

// OpenRedisRetryStore connects to the Redis at rawURL
// (redis://[user:password@]host:port[/db], rediss:// for TLS) and checks it answers
// PING. Errors never quote the URL, which may hold a password.
func OpenRedisRetryStore(ctx context.Context, rawURL, prefix string) (*RedisRetryStore, error) {
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
		return nil, fmt.Errorf("redis retry store: connect: %w", ErrRetryStoreUnavailable)
	}
	s := NewRedisRetryStore(c, prefix)
	s.owned = true
	return s, nil
}

// Close closes the connection OpenRedisRetryStore made; it does nothing for a client
// given to NewRedisRetryStore.
func (s *RedisRetryStore) Close() error {
	if s.owned {
		return s.client.Close()
	}
	return nil
}

func (s *RedisRetryStore) key(k string) string { return s.prefix + k }

// redisFail wraps a Redis error. Redis replies quote no password, but go-redis's dial errors
// can quote the address; that is not secret.
func redisFail(op string, err error) error {
	return fmt.Errorf("redis retry %s: %w: %v", op, ErrRetryStoreUnavailable, err)
}

// Grant implements RetryStore.
func (s *RedisRetryStore) Grant(ctx context.Context, key string, tokenHash []byte, n int, ttl time.Duration, data []byte) (bool, error) {
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

// Use implements RetryStore.
func (s *RedisRetryStore) Use(ctx context.Context, key string, tokenHash []byte) ([]byte, bool, error) {
	return s.runWithToken(ctx, useScript, "use", key, tokenHash)
}

// Peek implements RetryStore.
func (s *RedisRetryStore) Peek(ctx context.Context, key string, tokenHash []byte) ([]byte, bool, error) {
	return s.runWithToken(ctx, peekScript, "peek", key, tokenHash)
}

// runWithToken runs a script that answers the credit's data when tokenHash matches the
// grant's, and nil otherwise. Without a token hash nothing is asked.
func (s *RedisRetryStore) runWithToken(ctx context.Context, script *redis.Script, op, key string, tokenHash []byte) ([]byte, bool, error) {
	if len(tokenHash) == 0 {
		return nil, false, nil
	}
	b, err := script.Run(ctx, s.client, []string{s.key(key)}, tokenHash).Text()
	if errors.Is(err, redis.Nil) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, redisFail(op, err)
	}
	return []byte(b), true, nil
}

// Revoke implements RetryStore.
func (s *RedisRetryStore) Revoke(ctx context.Context, key string) error {
	if err := revokeScript.Run(ctx, s.client, []string{s.key(key)}).Err(); err != nil {
		return redisFail("revoke", err)
	}
	return nil
}
