package ratelimit

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/x402gate/x402gate/internal/testenv"
)

type limiter interface {
	Allow(ctx context.Context, key string) (bool, error)
}

// TestBurstPerKey: a key gets its burst at once and no more (the rate is far too slow to
// refill during the test), whatever the concurrency; another key has its own. On Redis
// the budget is shared by two instances.
func TestBurstPerKey(t *testing.T) {
	url := testenv.StartRedis(t)
	newRedis := func() limiter {
		o, err := redis.ParseURL(url)
		if err != nil {
			t.Fatal(err)
		}
		c := redis.NewClient(o)
		t.Cleanup(func() { _ = c.Close() })
		return NewRedis(c, "test:rl:", 0.001, 5)
	}
	mem := NewMemory(0.001, 5)
	for name, pair := range map[string][2]limiter{
		"memory":               {mem, mem},
		"redis, two instances": {newRedis(), newRedis()},
	} {
		t.Run(name, func(t *testing.T) {
			var allowed atomic.Int32
			var wg sync.WaitGroup
			for i := range 40 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					ok, err := pair[i%2].Allow(context.Background(), "0xpayer-"+name)
					if err != nil {
						t.Error(err)
					}
					if ok {
						allowed.Add(1)
					}
				}()
			}
			wg.Wait()
			if n := allowed.Load(); n != 5 {
				t.Errorf("%d of 40 allowed, want the burst of 5", n)
			}
			if ok, err := pair[0].Allow(context.Background(), "0xother-"+name); !ok || err != nil {
				t.Errorf("another key: %v %v, want allowed", ok, err)
			}
		})
	}
}

// TestRedisDownFailsClosed: a limiter that cannot reach Redis answers an error, never an
// allowance.
func TestRedisDownFailsClosed(t *testing.T) {
	srv := testenv.StartRedisServer(t, testenv.RedisConfig{})
	o, _ := redis.ParseURL(srv.URL)
	c := redis.NewClient(o)
	defer c.Close()
	l := NewRedis(c, "", 1, 1)
	srv.Stop()
	if ok, err := l.Allow(context.Background(), "k"); ok || err == nil {
		t.Errorf("Allow with Redis down = %v, %v; want an error", ok, err)
	}
}
