package redisretry

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/x402gate/x402gate/gate/payledger"
)

// A record is a hash {s: state, f: fingerprint, b: binding, d: settlement, t: SHA-256 of
// the retry token, n: credits left, u: credits' end, o: lease owner, l: lease end}; an
// id index entry is a string holding its record's key. Times are Redis server
// milliseconds, so the instances' clocks do not matter. Each transition below is one
// script; the states and statuses are gate/ledger's numbers.

// prelude reads the server's clock into now and defines same, a comparison of two hashes
// without an early exit.
const prelude = `
local tm = redis.call('TIME')
local now = tonumber(tm[1]) * 1000 + math.floor(tonumber(tm[2]) / 1000)
local function same(a, b)
  if not a or not b or #a == 0 or #a ~= #b then return false end
  local diff = 0
  for i = 1, #a do diff = bit.bor(diff, bit.bxor(string.byte(a, i), string.byte(b, i))) end
  return diff == 0
end
`

// ownedCheck returns 0 unless ARGV[1] owns the record's live lease, and reads its state into s.
const ownedCheck = prelude + `
local ov = redis.call('HMGET', KEYS[1], 'o', 'l', 's')
if ov[1] ~= ARGV[1] or not tonumber(ov[2]) or tonumber(ov[2]) <= now then return 0 end
local s = tonumber(ov[3])
`

var (
	// beginScript: KEYS = record, id index (the record again without an id); ARGV =
	// fingerprint, binding, token hash ('' for none), owner, lease ms, ttl ms, '1' with an
	// id. It returns {status, data, known}.
	beginScript = redis.NewScript(prelude + `
local hasID, known = ARGV[7] == '1', false
if hasID then
  local ref = redis.call('GET', KEYS[2])
  if ref then
    if ref == KEYS[1] then known = true
    elseif redis.call('EXISTS', ref) == 1 then return {7, '', 0} end
  end
end
local k = known and 1 or 0
local function take(status, d)
  redis.call('HSET', KEYS[1], 'o', ARGV[4], 'l', now + tonumber(ARGV[5]))
  if hasID and not known then
    local ttl = redis.call('PTTL', KEYS[1])
    if ttl > 0 then redis.call('SET', KEYS[2], KEYS[1], 'PX', ttl) end
  end
  return {status, d or '', k}
end
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('HSET', KEYS[1], 's', 1, 'f', ARGV[1], 'b', ARGV[2])
  redis.call('PEXPIRE', KEYS[1], ARGV[6])
  return take(1, '')
end
local v = redis.call('HMGET', KEYS[1], 's', 'f', 'b', 'd', 't', 'n', 'u', 'l')
local s, d = tonumber(v[1]), v[4]
if not same(v[2], ARGV[1]) then return {7, '', k} end
if not same(v[3], ARGV[2]) then return {8, '', k} end
if s == 5 then return {9, d or '', k} end
if tonumber(v[8]) and tonumber(v[8]) > now then return {6, '', k} end
if s == 1 then return take(2, d) end
if v[5] and not same(v[5], ARGV[3]) and not known then return {10, '', k} end
if s == 2 then return take(3, d) end
if s == 3 then return take(4, d) end
if (tonumber(v[6]) or 0) > 0 and (tonumber(v[7]) or 0) > now then
  redis.call('HINCRBY', KEYS[1], 'n', -1)
  return take(5, d)
end
return {9, d or '', k}`)
	// renewScript: ARGV = owner, lease ms.
	renewScript = redis.NewScript(ownedCheck + `
redis.call('HSET', KEYS[1], 'l', now + tonumber(ARGV[2]))
return 1`)
	// settleScript: ARGV = owner, settlement.
	settleScript = redis.NewScript(ownedCheck + `
if s ~= 1 and s ~= 2 then return 0 end
redis.call('HSET', KEYS[1], 's', 3, 'd', ARGV[2])
return 1`)
	// pendScript: ARGV = owner, token hash, settlement.
	pendScript = redis.NewScript(ownedCheck + `
if s ~= 1 then return 0 end
redis.call('HSET', KEYS[1], 's', 2, 't', ARGV[2], 'd', ARGV[3])
redis.call('HDEL', KEYS[1], 'o', 'l')
return 1`)
	// endScript: ARGV = owner, outcome, token hash, credits, credits' ttl ms. It returns 2
	// when it granted credits.
	endScript = redis.NewScript(ownedCheck + `
redis.call('HDEL', KEYS[1], 'o', 'l')
if ARGV[2] == '1' then
  redis.call('HSET', KEYS[1], 's', 5, 'n', 0)
elseif ARGV[2] == '2' and s == 3 then
  local n = math.max(tonumber(ARGV[4]) or 0, 0)
  redis.call('HSET', KEYS[1], 's', 4, 'n', n, 'u', now + tonumber(ARGV[5]))
  if n > 0 and #ARGV[3] > 0 then
    redis.call('HSET', KEYS[1], 't', ARGV[3])
    return 2
  end
end
return 1`)
	// forgetScript: ARGV = owner.
	forgetScript = redis.NewScript(ownedCheck + `
if s ~= 1 and s ~= 2 then return 0 end
redis.call('DEL', KEYS[1])
return 1`)
)

// Begin implements payledger.Ledger.
func (s *Store) Begin(ctx context.Context, c payledger.Claim) (payledger.Entry, error) {
	if len(c.Fingerprint) == 0 || len(c.Binding) == 0 || c.Owner == "" || c.TTL < time.Millisecond {
		return payledger.Entry{}, errors.New("redis ledger: a claim needs a fingerprint, a binding, an owner and a lifetime")
	}
	keys, hasID := []string{s.key(c.Key), s.key(c.Key)}, "0"
	if c.ID != "" {
		keys[1], hasID = s.key(c.ID), "1"
	}
	r, err := beginScript.Run(ctx, s.client, keys, c.Fingerprint, c.Binding, c.Token, c.Owner,
		max(c.Lease.Milliseconds(), 1), c.TTL.Milliseconds(), hasID).Slice()
	if err != nil {
		return payledger.Entry{}, redisFail("begin", err)
	}
	return beginEntry(r)
}

// beginEntry reads beginScript's answer {status, data, known}; anything else is a failure
// of the store (fail closed), never a status.
func beginEntry(r []any) (payledger.Entry, error) {
	var code, known int64
	var data string
	ok := len(r) == 3
	if ok {
		code, ok = r[0].(int64)
	}
	if ok {
		data, ok = r[1].(string)
	}
	if ok {
		known, ok = r[2].(int64)
	}
	if !ok || int(code) < payledger.New || int(code) > payledger.Refused {
		return payledger.Entry{}, redisFail("begin", fmt.Errorf("malformed reply %v", r))
	}
	e := payledger.Entry{Status: int(code), KnownID: known == 1}
	if data != "" {
		e.Data = []byte(data)
	}
	return e, nil
}

// run runs an owned transition and reports its integer answer.
func (s *Store) run(ctx context.Context, op string, script *redis.Script, key string, args ...any) (int64, error) {
	n, err := script.Run(ctx, s.client, []string{s.key(key)}, args...).Int64()
	if err != nil {
		return 0, redisFail(op, err)
	}
	return n, nil
}

// Renew implements payledger.Ledger.
func (s *Store) Renew(ctx context.Context, key, owner string, lease time.Duration) (bool, error) {
	n, err := s.run(ctx, "renew", renewScript, key, owner, max(lease.Milliseconds(), 1))
	return n == 1, err
}

// Settle implements payledger.Ledger.
func (s *Store) Settle(ctx context.Context, key, owner string, data []byte) (bool, error) {
	n, err := s.run(ctx, "settle", settleScript, key, owner, data)
	return n == 1, err
}

// Pend implements payledger.Ledger.
func (s *Store) Pend(ctx context.Context, key, owner string, token, data []byte) (bool, error) {
	if len(token) == 0 {
		return false, errors.New("redis ledger: a pending record needs its token hash")
	}
	n, err := s.run(ctx, "pend", pendScript, key, owner, token, data)
	return n == 1, err
}

// End implements payledger.Ledger.
func (s *Store) End(ctx context.Context, key, owner string, outcome int, token []byte, credits int, ttl time.Duration) (bool, error) {
	n, err := s.run(ctx, "end", endScript, key, owner, outcome, token, credits, max(ttl.Milliseconds(), 0))
	return n == 2, err
}

// Forget implements payledger.Ledger.
func (s *Store) Forget(ctx context.Context, key, owner string) (bool, error) {
	n, err := s.run(ctx, "forget", forgetScript, key, owner)
	return n == 1, err
}
