package verdictserver

import (
	"context"
	"errors"
	"math"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/x402gate/x402gate/internal/ratelimit"
)

// Rate is one token bucket: PerSecond events in the long run, Burst at once.
type Rate struct {
	// PerSecond is the sustained rate. Must be positive.
	PerSecond float64
	// Burst is how many events may come at once. Must be at least 1.
	Burst int
}

// RateLimits are the API's rate limits (docs/verdict-api.md#rate-limits): one bucket per API
// key (or admin key) and one per client IP, in process or, with Redis, shared by every
// instance.
type RateLimits struct {
	// PerKey limits each key. Default 20/s, burst 40.
	PerKey Rate
	// PerIP limits each client IP, before authentication. Default 50/s, burst 100.
	PerIP Rate
	// Redis, when set, holds the buckets so that every instance on it shares them, under
	// keys that start with redisPrefix. It stays the caller's to close. Default: in process.
	Redis redis.UniversalClient
}

// redisPrefix starts the Redis keys of the buckets.
const redisPrefix = "x402gate:verdict-api:"

// Default rates.
var (
	DefaultPerKey = Rate{PerSecond: 20, Burst: 40}
	DefaultPerIP  = Rate{PerSecond: 50, Burst: 100}
)

func (r *Rate) fill(def Rate, name string) error {
	if *r == (Rate{}) {
		*r = def
	}
	if !(r.PerSecond > 0) || math.IsInf(r.PerSecond, 0) || r.Burst < 1 {
		return errors.New("limits: " + name + " needs a positive rate and a burst of at least 1")
	}
	return nil
}

// taker is a per-key bucket store: ratelimit.Memory or ratelimit.Redis.
type taker interface {
	Take(ctx context.Context, key string) (ratelimit.Result, error)
}

type limiters struct {
	key, ip taker
}

func newLimiters(l *RateLimits) (limiters, error) {
	if err := l.PerKey.fill(DefaultPerKey, "perKey"); err != nil {
		return limiters{}, err
	}
	if err := l.PerIP.fill(DefaultPerIP, "perIp"); err != nil {
		return limiters{}, err
	}
	if l.Redis == nil {
		return limiters{
			key: ratelimit.NewMemory(l.PerKey.PerSecond, l.PerKey.Burst),
			ip:  ratelimit.NewMemory(l.PerIP.PerSecond, l.PerIP.Burst),
		}, nil
	}
	return limiters{
		key: ratelimit.NewRedis(l.Redis, redisPrefix+"key:", l.PerKey.PerSecond, l.PerKey.Burst),
		ip:  ratelimit.NewRedis(l.Redis, redisPrefix+"ip:", l.PerIP.PerSecond, l.PerIP.Burst),
	}, nil
}

// allow takes one event of bucket from t, sets the X-RateLimit-* headers, and answers
// 429 (with Retry-After) or 503 when the event may not go on. It reports whether it may.
func (s *Server) allow(w http.ResponseWriter, r *http.Request, t taker, bucket string) bool {
	res, err := t.Take(r.Context(), bucket)
	if err != nil {
		s.log.Error("rate limiter unavailable", zapError(err))
		writeCode(w, codeUnavailable, "the rate limiter is unavailable")
		return false
	}
	h := w.Header()
	h.Set("X-RateLimit-Limit", strconv.Itoa(res.Limit))
	h.Set("X-RateLimit-Remaining", strconv.Itoa(res.Remaining))
	h.Set("X-RateLimit-Reset", strconv.FormatInt(ceilSeconds(res.Reset), 10))
	if res.Allowed {
		return true
	}
	h.Set("Retry-After", strconv.FormatInt(max(1, ceilSeconds(res.RetryAfter)), 10))
	writeCode(w, codeRateLimited, "rate limit exceeded; retry after the number of seconds in Retry-After")
	return false
}

func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	if d > 365*24*time.Hour {
		d = 365 * 24 * time.Hour
	}
	return int64((d + time.Second - 1) / time.Second)
}

// remoteIP is the default client IP: the host of the connection's remote address. Behind
// a proxy, Deps.ClientIP says whom to believe (in Caddy, its trusted proxies).
func remoteIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}
