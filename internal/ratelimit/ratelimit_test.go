package ratelimit

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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

// TestTakeSaysWhenToComeBack: past its burst a key is told how long until one event is
// allowed again (at most one emission interval, here 1000 s at 0.001/s), and how many it
// has left; in process and on Redis alike.
func TestTakeSaysWhenToComeBack(t *testing.T) {
	url := testenv.StartRedis(t)
	o, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(o)
	t.Cleanup(func() { _ = c.Close() })
	type taker interface {
		Take(ctx context.Context, key string) (Result, error)
	}
	for name, l := range map[string]taker{
		"memory": NewMemory(0.001, 2),
		"redis":  NewRedis(c, "test:take:", 0.001, 2),
	} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			var got []Result
			for range 3 {
				r, err := l.Take(ctx, "k")
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, r)
			}
			if !got[0].Allowed || got[0].Remaining != 1 || got[0].RetryAfter != 0 || got[0].Limit != 2 {
				t.Errorf("first = %+v, want allowed with 1 remaining of 2", got[0])
			}
			if !got[1].Allowed || got[1].Remaining != 0 {
				t.Errorf("second = %+v, want allowed with 0 remaining", got[1])
			}
			third := got[2]
			if third.Allowed || third.Remaining != 0 {
				t.Errorf("third = %+v, want refused with 0 remaining", third)
			}
			if third.RetryAfter <= 0 || third.RetryAfter > 1000*time.Second {
				t.Errorf("third.RetryAfter = %v, want within one interval (0, 1000s]", third.RetryAfter)
			}
			if third.Reset < third.RetryAfter || third.Reset > 2000*time.Second {
				t.Errorf("third.Reset = %v, want between RetryAfter and two intervals", third.Reset)
			}
		})
	}
}
