package redisretry

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

// PaymentIDs keeps the gate's payment identifiers in Redis (docs/gate.md#payment-identifier),
// on the retry Store's connection and prefix, so every instance of a fleet sees an id the
// moment another took it. It satisfies gate.PaymentIDStore. Each step is one Lua script on
// a hash {f: fingerprint, n: credits left, d: settlement, l: lease end in Redis server
// milliseconds}.
type PaymentIDs struct {
	s *Store
}

// PaymentIDs returns the payment identifier store on s's connection.
func (s *Store) PaymentIDs() *PaymentIDs { return &PaymentIDs{s: s} }

// Begin outcomes, the values of gate.PaymentIDStatus.
const (
	idNew      = 0
	idReplay   = 1
	idBusy     = 2
	idConflict = 3
	idSpent    = 4
	idResumed  = 5
)

var (
	// beginScript: ARGV = fingerprint, ttl ms, lease ms, credits. It returns {status, data}.
	beginScript = redis.NewScript(`
local now = redis.call('TIME')
local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('HSET', KEYS[1], 'f', ARGV[1], 'n', ARGV[4], 'l', ms + tonumber(ARGV[3]))
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {0, ''}
end
local v = redis.call('HMGET', KEYS[1], 'f', 'n', 'd', 'l')
local f, t = v[1] or '', ARGV[1]
local diff = 0
if #f ~= #t then diff = 1 end
for i = 1, math.min(#f, #t) do
  diff = bit.bor(diff, bit.bxor(string.byte(f, i), string.byte(t, i)))
end
if diff ~= 0 then return {3, ''} end
if tonumber(v[4]) ~= nil and tonumber(v[4]) > ms then return {2, ''} end
if not v[3] then
  redis.call('HSET', KEYS[1], 'l', ms + tonumber(ARGV[3]))
  return {5, ''}
end
if (tonumber(v[2]) or 0) <= 0 then return {4, v[3]} end
redis.call('HINCRBY', KEYS[1], 'n', -1)
redis.call('HSET', KEYS[1], 'l', ms + tonumber(ARGV[3]))
return {1, v[3]}`)
	// settledScript keeps the settlement when the id still exists.
	settledScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], 'd', ARGV[1])
return 1`)
	// endScript ends the lease; ARGV[1] == '1' (a good answer) spends the credits.
	endScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HDEL', KEYS[1], 'l')
if ARGV[1] == '1' then redis.call('HSET', KEYS[1], 'n', 0) end
return 1`)
)

// Begin implements gate.PaymentIDStore.
func (p *PaymentIDs) Begin(ctx context.Context, key string, fingerprint []byte, ttl, lease time.Duration, credits int) ([]byte, int, error) {
	if len(fingerprint) == 0 || ttl < time.Millisecond {
		return nil, idNew, errors.New("redis payment id store: a fingerprint and a lifetime are required")
	}
	r, err := beginScript.Run(ctx, p.s.client, []string{p.s.key(key)}, fingerprint, ttl.Milliseconds(), max(lease.Milliseconds(), 1), credits).Slice()
	if err != nil {
		return nil, idNew, redisFail("payment id begin", err)
	}
	code, _ := r[0].(int64)
	var data []byte
	if len(r) > 1 {
		if s, _ := r[1].(string); s != "" {
			data = []byte(s)
		}
	}
	return data, int(code), nil
}

// Settled implements gate.PaymentIDStore.
func (p *PaymentIDs) Settled(ctx context.Context, key string, data []byte) error {
	if err := settledScript.Run(ctx, p.s.client, []string{p.s.key(key)}, data).Err(); err != nil {
		return redisFail("payment id settled", err)
	}
	return nil
}

// End implements gate.PaymentIDStore.
func (p *PaymentIDs) End(ctx context.Context, key string, answered bool) error {
	a := "0"
	if answered {
		a = "1"
	}
	if err := endScript.Run(ctx, p.s.client, []string{p.s.key(key)}, a).Err(); err != nil {
		return redisFail("payment id end", err)
	}
	return nil
}

// Forget implements gate.PaymentIDStore.
func (p *PaymentIDs) Forget(ctx context.Context, key string) error {
	if err := p.s.client.Del(ctx, p.s.key(key)).Err(); err != nil {
		return redisFail("payment id forget", err)
	}
	return nil
}
