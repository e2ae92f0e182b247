package redisretry

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

// The pass book of sign-in-with-x (docs/gate.md#sign-in-with-x) shares the retry store's
// Redis, so a payer who bought a pass on one instance signs in on any other. A pass is a
// string holding its expiry in Unix milliseconds, expiring itself then (PXAT); a nonce is
// a key set once (SET NX PX).

// recordPassScript keeps the later of the stored and the new expiry (ARGV[1], ms).
var recordPassScript = redis.NewScript(`
local old = tonumber(redis.call('GET', KEYS[1]))
if old ~= nil and old >= tonumber(ARGV[1]) then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PXAT', ARGV[1])
return 1`)

// RecordPass implements gate.PassBook.
func (s *Store) RecordPass(ctx context.Context, key string, expiry time.Time) error {
	if err := recordPassScript.Run(ctx, s.client, []string{s.key(key)}, expiry.UnixMilli()).Err(); err != nil && !errors.Is(err, redis.Nil) {
		return redisFail("record pass", err)
	}
	return nil
}

// PassExpiry implements gate.PassBook.
func (s *Store) PassExpiry(ctx context.Context, keys []string) (time.Time, error) {
	if len(keys) == 0 {
		return time.Time{}, nil
	}
	full := make([]string, len(keys))
	for i, k := range keys {
		full[i] = s.key(k)
	}
	vs, err := s.client.MGet(ctx, full...).Result()
	if err != nil {
		return time.Time{}, redisFail("pass expiry", err)
	}
	var latest int64
	for _, v := range vs {
		str, _ := v.(string)
		var ms int64
		for _, c := range str {
			if c < '0' || c > '9' {
				ms = 0
				break
			}
			ms = ms*10 + int64(c-'0')
		}
		latest = max(latest, ms)
	}
	if latest == 0 {
		return time.Time{}, nil
	}
	return time.UnixMilli(latest), nil
}

// UseNonce implements gate.PassBook.
func (s *Store) UseNonce(ctx context.Context, nonce string, ttl time.Duration) (bool, error) {
	ok, err := s.client.SetNX(ctx, s.key(nonce), 1, max(ttl, time.Millisecond)).Result()
	if err != nil {
		return false, redisFail("use nonce", err)
	}
	return ok, nil
}
