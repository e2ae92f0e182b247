package verdictserver

import (
	"context"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/x402gate/x402gate/internal/ratelimit"
)

// redisPrefix starts the Redis keys of the buckets (docs/verdict-api.md#rate-limits).
const redisPrefix = "x402gate:verdict-api:"

// Default rates: Config.RateKey and Config.RateIP when unset.
var (
	DefaultPerKey = RateConfig{Rate: 20, Burst: 40}
	DefaultPerIP  = RateConfig{Rate: 50, Burst: 100}
)

// taker is a per-key bucket store: ratelimit.Memory or ratelimit.Redis.
type taker interface {
	Take(ctx context.Context, key string) (ratelimit.Result, error)
}

type limiters struct {
	key, ip taker
}

// newLimiters are the buckets of the per-key and per-IP rates, in process or, with rc,
// in Redis, shared by every instance on it (docs/verdict-api.md#rate-limits).
func newLimiters(key, ip RateConfig, rc redis.UniversalClient) limiters {
	if rc == nil {
		return limiters{key: ratelimit.NewMemory(key.Rate, key.Burst), ip: ratelimit.NewMemory(ip.Rate, ip.Burst)}
	}
	return limiters{
		key: ratelimit.NewRedis(rc, redisPrefix+"key:", key.Rate, key.Burst),
		ip:  ratelimit.NewRedis(rc, redisPrefix+"ip:", ip.Rate, ip.Burst),
	}
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
	setRateLimitHeaders(h, res.Limit, res.Remaining, ceilSeconds(res.Reset))
	if res.Allowed {
		return true
	}
	h["Retry-After"] = []string{strconv.FormatInt(max(1, ceilSeconds(res.RetryAfter)), 10)}
	writeCode(w, codeRateLimited, "rate limit exceeded; retry after the number of seconds in Retry-After")
	return false
}

// The rate limit's headers under the keys net/http writes (its canonical form of
// X-RateLimit-*), so that setting them canonicalises nothing.
const (
	headerRateLimit     = "X-Ratelimit-Limit"
	headerRateRemaining = "X-Ratelimit-Remaining"
	headerRateReset     = "X-Ratelimit-Reset"
)

// setRateLimitHeaders sets the X-RateLimit-* headers of every limited answer. The three
// values share one backing array: one allocation for the three, besides their digits.
func setRateLimitHeaders(h http.Header, limit, remaining int, reset int64) {
	vals := [...]string{strconv.Itoa(limit), strconv.Itoa(remaining), strconv.FormatInt(reset, 10)}
	all := vals[:]
	h[headerRateLimit], h[headerRateRemaining], h[headerRateReset] = all[0:1:1], all[1:2:2], all[2:3:3]
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
