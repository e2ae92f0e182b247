// Package ratelimit limits how often one key (a payer, an API key, a client IP) may do
// something, in process (golang.org/x/time/rate) or across the instances that share a Redis
// (a GCRA script on Redis's own clock). The facilitator uses it for verdict submissions
// (docs/facilitator.md#guardian), the verdict service for its API per key and per client
// IP. Take also says when to come back, for a Retry-After.
package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"
	"github.com/redis/go-redis/v9"
	"golang.org/x/time/rate"
)

// maxKeys bounds the keys a Memory limiter tracks; the least recently seen is forgotten
// first (it then starts again with a full burst).
const maxKeys = 100_000

// Memory is a per-key token bucket of one process. It is safe for concurrent use.
type Memory struct {
	mu    sync.Mutex
	limit rate.Limit
	burst int
	keys  *simplelru.LRU[string, *rate.Limiter]
}

// NewMemory allows each key perSecond events in the long run and burst at once.
func NewMemory(perSecond float64, burst int) *Memory {
	keys, _ := simplelru.NewLRU[string, *rate.Limiter](maxKeys, nil)
	return &Memory{limit: rate.Limit(perSecond), burst: burst, keys: keys}
}

// Result is the outcome of one Take.
type Result struct {
	// Allowed is true when the event was taken.
	Allowed bool
	// RetryAfter is how long until one event would be allowed; zero when Allowed.
	RetryAfter time.Duration
	// Limit is the burst: the most events allowed at once.
	Limit int
	// Remaining is how many more events are allowed right now, after this one.
	Remaining int
	// Reset is how long until the full burst is available again.
	Reset time.Duration
}

// Allow takes one event of key, or reports that key is over its rate.
func (m *Memory) Allow(ctx context.Context, key string) (bool, error) {
	r, err := m.Take(ctx, key)
	return r.Allowed, err
}

// Take takes one event of key, or says how long until it could.
func (m *Memory) Take(_ context.Context, key string) (Result, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	lim, ok := m.keys.Get(key)
	if !ok {
		lim = rate.NewLimiter(m.limit, m.burst)
		m.keys.Add(key, lim)
	}
	now := time.Now()
	res := Result{Limit: m.burst}
	if r := lim.ReserveN(now, 1); !r.OK() {
		// burst 0, or a zero rate: never allowed
		res.RetryAfter = time.Duration(math.MaxInt64)
	} else if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now)
		res.RetryAfter = d
	} else {
		res.Allowed = true
	}
	tokens := lim.TokensAt(now)
	res.Remaining = max(0, int(math.Floor(tokens)))
	if missing := float64(m.burst) - tokens; missing > 0 && m.limit > 0 {
		res.Reset = time.Duration(missing / float64(m.limit) * float64(time.Second))
	}
	return res, nil
}

// ErrUnavailable wraps every failure to reach Redis; a caller fails closed on it.
var ErrUnavailable = errors.New("rate limiter unavailable")

// gcra is the generic cell rate algorithm on Redis's clock: KEYS[1] holds the theoretical
// arrival time in ms; ARGV[1] is the emission interval (ms per event), ARGV[2] the burst
// tolerance (ms). It returns {allowed (1 or 0), ms until one more event is allowed, ms
// until the whole burst is back}.
var gcra = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local interval = tonumber(ARGV[1])
local tolerance = tonumber(ARGV[2])
local tat = tonumber(redis.call('GET', KEYS[1]) or now)
if tat < now then tat = now end
local new = tat + interval
if new - now > tolerance then
  return {0, new - now - tolerance, tat - now}
end
redis.call('SET', KEYS[1], new, 'PX', math.ceil(new - now) + 1)
return {1, 0, new - now}`)

// Redis is a per-key limiter shared by every instance on one Redis.
type Redis struct {
	client   redis.UniversalClient
	prefix   string
	interval int64 // ms per event
	burst    int64 // ms of tolerance
}

// NewRedis allows each key perSecond events in the long run and burst at once, across
// every process that uses client with the same prefix. The client stays the caller's.
func NewRedis(client redis.UniversalClient, prefix string, perSecond float64, burst int) *Redis {
	interval := int64(math.Ceil(1000 / perSecond))
	return &Redis{client: client, prefix: prefix, interval: interval, burst: interval * int64(burst)}
}

// Allow takes one event of key, or reports that key is over its rate.
func (r *Redis) Allow(ctx context.Context, key string) (bool, error) {
	res, err := r.Take(ctx, key)
	return res.Allowed, err
}

// Take takes one event of key, or says how long until it could.
func (r *Redis) Take(ctx context.Context, key string) (Result, error) {
	v, err := gcra.Run(ctx, r.client, []string{r.prefix + key}, r.interval, r.burst).Int64Slice()
	if err != nil || len(v) != 3 {
		return Result{}, fmt.Errorf("redis rate limit: %w: %v", ErrUnavailable, err)
	}
	limit := int(r.burst / r.interval)
	// the bucket is full again when the theoretical arrival time is now; every interval
	// before it is one event fewer than the burst
	used := int((v[2] + r.interval - 1) / r.interval)
	return Result{
		Allowed:    v[0] == 1,
		RetryAfter: time.Duration(v[1]) * time.Millisecond,
		Limit:      limit,
		Remaining:  max(0, limit-used),
		Reset:      time.Duration(v[2]) * time.Millisecond,
	}, nil
}

// OpenRedis connects to the Redis at rawURL and returns a limiter with its own client,
// closed by Close. Errors never quote the URL.
func OpenRedis(ctx context.Context, rawURL, prefix string, perSecond float64, burst int) (*Redis, error) {
	o, err := redis.ParseURL(rawURL)
	if err != nil {
		return nil, errors.New("redis rate limit: invalid url")
	}
	c := redis.NewClient(o)
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := c.Ping(pctx).Err(); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("redis rate limit: connect: %w", ErrUnavailable)
	}
	return NewRedis(c, prefix, perSecond, burst), nil
}

// Close closes the limiter's client.
func (r *Redis) Close() error { return r.client.Close() }
