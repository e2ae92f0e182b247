package approval_test

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/redis/go-redis/v9"

	"github.com/x402gate/x402gate/facilitator/approval"
	"github.com/x402gate/x402gate/internal/testenv"
	"github.com/x402gate/x402gate/x402"
)

// testPaymentKey returns a distinct, fully populated key for i.
func testPaymentKey(i int) x402.PaymentKey {
	var nonce [32]byte
	copy(nonce[:], fmt.Sprintf("nonce-%028d", i))
	return x402.PaymentKey{
		Network: "eip155:84532",
		Asset:   common.HexToAddress("0x036CbD53842c5426634e7929541eC2318f3dCF7e"),
		Payer:   common.HexToAddress(fmt.Sprintf("0x%040x", 0xA11CE000+i)),
		PayTo:   common.HexToAddress("0x209693Bc6afc0C5328bA36FaF03C514EF312287C"),
		Amount:  big.NewInt(10_000),
		Nonce:   nonce,
	}
}

func testApproval(tag string) approval.Approval {
	now := time.Now().UTC().Truncate(time.Millisecond)
	return approval.Approval{RequestHash: "0xreq-" + tag, RecordedAt: now, ExpiresAt: now.Add(time.Minute)}
}

func sameApproval(a, b approval.Approval) bool {
	return a.RequestHash == b.RequestHash && a.RecordedAt.Equal(b.RecordedAt) && a.ExpiresAt.Equal(b.ExpiresAt)
}

// waitPast blocks until d has elapsed since start: the point of an expiry test is the
// logic after the TTL, not how quickly it runs.
func waitPast(start time.Time, d time.Duration) {
	for time.Since(start) <= d {
		time.Sleep(d / 5)
	}
}

// approvalStoreCases is the behaviour every ApprovalStore shares (docs/facilitator.md#approval-records approval
// record; docs/facilitator.md#settle-order rules 1-2).
var approvalStoreCases = []struct {
	name string
	run  func(t *testing.T, s approval.Store)
}{
	{"a recorded approval is consumed exactly once", func(t *testing.T, s approval.Store) {
		ctx, k, a := context.Background(), testPaymentKey(1), testApproval("once")
		if err := s.Record(ctx, k, a, time.Minute); err != nil {
			t.Fatal(err)
		}
		got, err := s.Consume(ctx, k)
		if err != nil || !sameApproval(got, a) {
			t.Fatalf("first consume = %+v, %v; want %+v", got, err, a)
		}
		if _, err := s.Consume(ctx, k); !errors.Is(err, approval.ErrNotFound) {
			t.Fatalf("second consume err = %v, want ErrNotFound", err)
		}
	}},
	{"a payment never recorded has no approval", func(t *testing.T, s approval.Store) {
		if _, err := s.Consume(context.Background(), testPaymentKey(2)); !errors.Is(err, approval.ErrNotFound) {
			t.Fatalf("err = %v, want ErrNotFound", err)
		}
	}},
	{"recording again keeps the earlier unexpired approval", func(t *testing.T, s approval.Store) {
		ctx, k := context.Background(), testPaymentKey(3)
		first, second := testApproval("first"), testApproval("second")
		for _, a := range []approval.Approval{first, second} {
			if err := s.Record(ctx, k, a, time.Minute); err != nil {
				t.Fatal(err)
			}
		}
		got, err := s.Consume(ctx, k)
		if err != nil || !sameApproval(got, first) {
			t.Fatalf("consume = %+v, %v; want the first record", got, err)
		}
		if _, err := s.Consume(ctx, k); !errors.Is(err, approval.ErrNotFound) {
			t.Fatalf("second consume: %v, want ErrNotFound", err)
		}
	}},
	{"recording after the earlier approval expired stores the new one", func(t *testing.T, s approval.Store) {
		ctx, k, ttl := context.Background(), testPaymentKey(33), 50*time.Millisecond
		if err := s.Record(ctx, k, testApproval("old"), ttl); err != nil {
			t.Fatal(err)
		}
		waitPast(time.Now(), ttl+10*time.Millisecond)
		fresh := testApproval("fresh")
		if err := s.Record(ctx, k, fresh, time.Minute); err != nil {
			t.Fatal(err)
		}
		got, err := s.Consume(ctx, k)
		if err != nil || !sameApproval(got, fresh) {
			t.Fatalf("consume = %+v, %v; want the fresh record", got, err)
		}
	}},
	{"an expired approval is not consumable", func(t *testing.T, s approval.Store) {
		ctx, k, ttl := context.Background(), testPaymentKey(4), 50*time.Millisecond
		if err := s.Record(ctx, k, testApproval("short"), ttl); err != nil {
			t.Fatal(err)
		}
		waitPast(time.Now(), ttl+10*time.Millisecond)
		if _, err := s.Consume(ctx, k); !errors.Is(err, approval.ErrNotFound) {
			t.Fatalf("consume after ttl err = %v, want ErrNotFound", err)
		}
	}},
	{"an approval matches only the exact payer, payee, amount, asset, network and nonce", func(t *testing.T, s approval.Store) {
		ctx, base := context.Background(), testPaymentKey(5)
		differ := map[string]func(k *x402.PaymentKey){
			"payer":   func(k *x402.PaymentKey) { k.Payer[19] ^= 1 },
			"payee":   func(k *x402.PaymentKey) { k.PayTo[0] ^= 1 },
			"amount":  func(k *x402.PaymentKey) { k.Amount = new(big.Int).Add(k.Amount, big.NewInt(1)) },
			"asset":   func(k *x402.PaymentKey) { k.Asset[7] ^= 1 },
			"network": func(k *x402.PaymentKey) { k.Network = "eip155:8453" },
			"nonce":   func(k *x402.PaymentKey) { k.Nonce[31] ^= 1 },
		}
		if err := s.Record(ctx, base, testApproval("exact"), time.Minute); err != nil {
			t.Fatal(err)
		}
		for field, mutate := range differ {
			k := base
			k.Amount = new(big.Int).Set(base.Amount)
			mutate(&k)
			if _, err := s.Consume(ctx, k); !errors.Is(err, approval.ErrNotFound) {
				t.Errorf("key differing in %s: err = %v, want ErrNotFound", field, err)
			}
		}
		// Mismatches consumed nothing; address case is not part of the key.
		lower := base
		lower.Payer = common.HexToAddress(strings.ToLower(base.Payer.Hex()))
		lower.PayTo = common.HexToAddress(strings.ToLower(base.PayTo.Hex()))
		lower.Asset = common.HexToAddress(strings.ToUpper(base.Asset.Hex()[2:]))
		lower.Amount = big.NewInt(base.Amount.Int64())
		if _, err := s.Consume(ctx, lower); err != nil {
			t.Fatalf("exact key with other address case: %v", err)
		}
	}},
	{"50 concurrent consumes of one approval: exactly one gets it", func(t *testing.T, s approval.Store) {
		ctx, k := context.Background(), testPaymentKey(6)
		if err := s.Record(ctx, k, testApproval("race"), time.Minute); err != nil {
			t.Fatal(err)
		}
		wins := testenv.Race(t, 50, approval.ErrNotFound, func(int) error { _, err := s.Consume(ctx, k); return err })
		if wins != 1 {
			t.Fatalf("%d consumes succeeded, want 1", wins)
		}
	}},
	{"20 concurrent claims of one authorization: exactly one wins", func(t *testing.T, s approval.Store) {
		ctx, k := context.Background(), testPaymentKey(7)
		wins := testenv.Race(t, 20, approval.ErrAlreadyClaimed, func(int) error { return s.Claim(ctx, k, time.Minute) })
		if wins != 1 {
			t.Fatalf("%d claims won, want 1", wins)
		}
	}},
	{"a claim covers the authorization whatever it pays; another nonce is another authorization", func(t *testing.T, s approval.Store) {
		ctx, k := context.Background(), testPaymentKey(8)
		if err := s.Claim(ctx, k, time.Minute); err != nil {
			t.Fatal(err)
		}
		samePayerNonce := k
		samePayerNonce.PayTo[0] ^= 1
		samePayerNonce.Amount = big.NewInt(1)
		if err := s.Claim(ctx, samePayerNonce, time.Minute); !errors.Is(err, approval.ErrAlreadyClaimed) {
			t.Fatalf("same (asset, payer, nonce) other payee: err = %v, want ErrAlreadyClaimed", err)
		}
		otherNonce := k
		otherNonce.Nonce[0] ^= 1
		if err := s.Claim(ctx, otherNonce, time.Minute); err != nil {
			t.Fatalf("other nonce: %v", err)
		}
	}},
	{"an expired claim can be claimed again", func(t *testing.T, s approval.Store) {
		ctx, k, ttl := context.Background(), testPaymentKey(9), 50*time.Millisecond
		if err := s.Claim(ctx, k, ttl); err != nil {
			t.Fatal(err)
		}
		if err := s.Claim(ctx, k, ttl); !errors.Is(err, approval.ErrAlreadyClaimed) {
			t.Fatalf("claim before expiry err = %v, want ErrAlreadyClaimed", err)
		}
		waitPast(time.Now(), ttl+10*time.Millisecond)
		if err := s.Claim(ctx, k, time.Minute); err != nil {
			t.Fatalf("claim after expiry: %v", err)
		}
	}},
	{"a remembered verdict is recalled for its exact payment only, and the first one stands", func(t *testing.T, s approval.Store) {
		ctx, k := context.Background(), testPaymentKey(60)
		if _, err := s.RecallVerdict(ctx, k); !errors.Is(err, approval.ErrNotFound) {
			t.Fatalf("recall before any verdict: %v, want ErrNotFound", err)
		}
		first := approval.FirstVerdict{Status: "rejected", ReasonCode: "recipient_not_allowed", RequestHash: "0xr1"}
		if err := s.RememberVerdict(ctx, k, first, time.Minute); err != nil {
			t.Fatal(err)
		}
		if err := s.RememberVerdict(ctx, k, approval.FirstVerdict{Status: "approved", RequestHash: "0xr2"}, time.Minute); err != nil {
			t.Fatal(err)
		}
		if got, err := s.RecallVerdict(ctx, k); err != nil || got != first {
			t.Fatalf("recall = %+v, %v; want the first verdict %+v", got, err, first)
		}
		if _, err := s.RecallVerdict(ctx, testPaymentKey(61)); !errors.Is(err, approval.ErrNotFound) {
			t.Fatalf("another payment's verdict: %v, want ErrNotFound", err)
		}
	}},
	{"a record or claim that would never expire is refused", func(t *testing.T, s approval.Store) {
		ctx, k := context.Background(), testPaymentKey(10)
		if err := s.Record(ctx, k, testApproval("forever"), 0); !errors.Is(err, approval.ErrInvalidTTL) {
			t.Errorf("record ttl 0 err = %v, want ErrInvalidTTL", err)
		}
		if err := s.Claim(ctx, k, -time.Second); !errors.Is(err, approval.ErrInvalidTTL) {
			t.Errorf("claim ttl -1s err = %v, want ErrInvalidTTL", err)
		}
		if _, err := s.Consume(ctx, k); !errors.Is(err, approval.ErrNotFound) {
			t.Errorf("refused record is consumable: %v", err)
		}
	}},
}

func TestMemoryStore(t *testing.T) {
	for _, tc := range approvalStoreCases {
		t.Run(tc.name, func(t *testing.T) {
			s := approval.NewMemoryStore(0)
			t.Cleanup(func() { _ = s.Close() })
			tc.run(t, s)
		})
	}
}

func TestMemoryStoreLimits(t *testing.T) {
	ctx := context.Background()
	t.Run("a full claim table refuses rather than evicting a live claim", func(t *testing.T) {
		s := approval.NewMemoryStore(2)
		defer s.Close()
		for i := 0; i < 2; i++ {
			if err := s.Claim(ctx, testPaymentKey(i), time.Minute); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Claim(ctx, testPaymentKey(2), time.Minute); !errors.Is(err, approval.ErrUnavailable) {
			t.Fatalf("third claim err = %v, want ErrUnavailable", err)
		}
		if err := s.Claim(ctx, testPaymentKey(0), time.Minute); !errors.Is(err, approval.ErrAlreadyClaimed) {
			t.Fatalf("first claim was evicted: err = %v", err)
		}
	})
	t.Run("a full approval table evicts the oldest approval, which then settles nothing", func(t *testing.T) {
		s := approval.NewMemoryStore(2)
		defer s.Close()
		for i := 0; i < 3; i++ {
			if err := s.Record(ctx, testPaymentKey(i), testApproval("x"), time.Minute); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := s.Consume(ctx, testPaymentKey(0)); !errors.Is(err, approval.ErrNotFound) {
			t.Fatalf("oldest approval err = %v, want ErrNotFound", err)
		}
		if _, err := s.Consume(ctx, testPaymentKey(2)); err != nil {
			t.Fatalf("newest approval: %v", err)
		}
	})
	t.Run("a ttl beyond the maximum is refused", func(t *testing.T) {
		s := approval.NewMemoryStore(10, approval.WithMaxTTL(time.Minute))
		defer s.Close()
		if err := s.Record(ctx, testPaymentKey(0), testApproval("x"), 2*time.Minute); !errors.Is(err, approval.ErrInvalidTTL) {
			t.Fatalf("err = %v, want ErrInvalidTTL", err)
		}
	})
	t.Run("a closed store is unavailable", func(t *testing.T) {
		s := approval.NewMemoryStore(10)
		if err := s.Record(ctx, testPaymentKey(0), testApproval("x"), time.Minute); err != nil {
			t.Fatal(err)
		}
		_ = s.Close()
		if _, err := s.Consume(ctx, testPaymentKey(0)); !errors.Is(err, approval.ErrUnavailable) {
			t.Fatalf("consume err = %v, want ErrUnavailable", err)
		}
		if err := s.Claim(ctx, testPaymentKey(0), time.Minute); !errors.Is(err, approval.ErrUnavailable) {
			t.Fatalf("claim err = %v, want ErrUnavailable", err)
		}
	})
}

func TestRedisStore(t *testing.T) {
	url := testenv.StartRedis(t)
	for i, tc := range approvalStoreCases {
		t.Run(tc.name, func(t *testing.T) {
			// A prefix per case keeps the cases apart on one server.
			s, err := approval.NewRedisStore(context.Background(), url, approval.WithKeyPrefix(fmt.Sprintf("case%d:", i)))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			tc.run(t, s)
		})
	}
}

func TestRedisStoreAcrossInstances(t *testing.T) {
	ctx := context.Background()
	url := testenv.StartRedis(t)
	var instances []*approval.RedisStore
	for i := 0; i < 3; i++ {
		s, err := approval.NewRedisStore(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		instances = append(instances, s)
	}
	t.Run("an approval recorded by one instance is consumed once across three", func(t *testing.T) {
		k := testPaymentKey(100)
		if err := instances[0].Record(ctx, k, testApproval("shared"), time.Minute); err != nil {
			t.Fatal(err)
		}
		wins := testenv.Race(t, 30, approval.ErrNotFound, func(i int) error {
			_, err := instances[i%3].Consume(ctx, k)
			return err
		})
		if wins != 1 {
			t.Fatalf("%d consumes succeeded, want 1", wins)
		}
	})
	t.Run("three instances claiming one authorization: exactly one wins", func(t *testing.T) {
		k := testPaymentKey(101)
		wins := testenv.Race(t, 30, approval.ErrAlreadyClaimed, func(i int) error { return instances[i%3].Claim(ctx, k, time.Minute) })
		if wins != 1 {
			t.Fatalf("%d claims won, want 1", wins)
		}
	})
	t.Run("instances with different key prefixes do not share approvals", func(t *testing.T) {
		other, err := approval.NewRedisStore(ctx, url, approval.WithKeyPrefix("other:"))
		if err != nil {
			t.Fatal(err)
		}
		defer other.Close()
		k := testPaymentKey(102)
		if err := instances[0].Record(ctx, k, testApproval("p"), time.Minute); err != nil {
			t.Fatal(err)
		}
		if _, err := other.Consume(ctx, k); !errors.Is(err, approval.ErrNotFound) {
			t.Fatalf("other prefix err = %v, want ErrNotFound", err)
		}
		if _, err := instances[1].Consume(ctx, k); err != nil {
			t.Fatalf("same prefix: %v", err)
		}
	})
	t.Run("a malformed record approves nothing and is gone", func(t *testing.T) {
		k := testPaymentKey(103)
		o, err := redis.ParseURL(url)
		if err != nil {
			t.Fatal(err)
		}
		raw := redis.NewClient(o)
		defer raw.Close()
		if err := raw.Set(ctx, approval.DefaultRedisKeyPrefix+"approval:"+k.String(), "{not json", time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		if _, err := instances[0].Consume(ctx, k); !errors.Is(err, approval.ErrNotFound) {
			t.Fatalf("err = %v, want ErrNotFound", err)
		}
		if n, _ := raw.Exists(ctx, approval.DefaultRedisKeyPrefix+"approval:"+k.String()).Result(); n != 0 {
			t.Fatalf("malformed record still present")
		}
	})
}

func TestRedisStoreUnavailable(t *testing.T) {
	const password = "s3cret-redis-pw-9f2c"
	ctx := context.Background()
	srv := testenv.StartRedisServer(t, testenv.RedisConfig{Password: password})
	noPassword := func(t *testing.T, err error) {
		t.Helper()
		if err != nil && strings.Contains(err.Error(), password) {
			t.Fatalf("error text carries the password: %q", err)
		}
	}

	t.Run("a wrong password fails at start without echoing either password", func(t *testing.T) {
		const wrong = "wrong-pw-71d0"
		_, err := approval.NewRedisStore(ctx, strings.Replace(srv.URL, password, wrong, 1))
		if err == nil {
			t.Fatal("connected with a wrong password")
		}
		noPassword(t, err)
		if strings.Contains(err.Error(), wrong) {
			t.Fatalf("error text carries the wrong password: %q", err)
		}
	})
	t.Run("a malformed url fails without echoing its password", func(t *testing.T) {
		for _, bad := range []string{
			"redis://:" + password + "@127.0.0.1:notaport/0",
			"redis://:" + password + "@127.0.0.1:6379/zero",
			"http://:" + password + "@127.0.0.1:6379",
		} {
			_, err := approval.NewRedisStore(ctx, bad)
			if err == nil {
				t.Fatalf("accepted a malformed url")
			}
			noPassword(t, err)
		}
	})

	s, err := approval.NewRedisStore(ctx, srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	k := testPaymentKey(200)
	if err := s.Record(ctx, k, testApproval("before"), time.Minute); err != nil {
		t.Fatal(err)
	}
	srv.Stop()

	ops := map[string]func() error{
		"record":  func() error { return s.Record(ctx, k, testApproval("after"), time.Minute) },
		"consume": func() error { _, err := s.Consume(ctx, k); return err },
		"claim":   func() error { return s.Claim(ctx, k, time.Minute) },
		"connect": func() error { _, err := approval.NewRedisStore(ctx, srv.URL); return err },
	}
	for name, op := range ops {
		t.Run("with redis down, "+name+" fails closed", func(t *testing.T) {
			err := op()
			if !errors.Is(err, approval.ErrUnavailable) {
				t.Fatalf("err = %v, want ErrUnavailable", err)
			}
			noPassword(t, err)
		})
	}
}

func BenchmarkMemoryStoreRecordConsume(b *testing.B) {
	benchmarkStore(b, approval.NewMemoryStore(0))
}

func BenchmarkRedisStoreRecordConsume(b *testing.B) {
	s, err := approval.NewRedisStore(context.Background(), testenv.StartRedis(b))
	if err != nil {
		b.Fatal(err)
	}
	benchmarkStore(b, s)
}

func benchmarkStore(b *testing.B, s approval.Store) {
	defer s.Close()
	ctx, a := context.Background(), testApproval("bench")
	keys := make([]x402.PaymentKey, 1024)
	for i := range keys {
		keys[i] = testPaymentKey(i)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		k := keys[i%len(keys)]
		if err := s.Record(ctx, k, a, time.Minute); err != nil {
			b.Fatal(err)
		}
		if _, err := s.Consume(ctx, k); err != nil {
			b.Fatal(err)
		}
	}
}

// TestMemoryStoreLeaksNoGoroutine: a reload that changes a facilitator opens a new
// MemoryStore and closes the old one; 50 such cycles must leave no goroutine behind.
func TestMemoryStoreLeaksNoGoroutine(t *testing.T) {
	settle := func() int {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
		return runtime.NumGoroutine()
	}
	before := settle()
	for range 50 {
		s := approval.NewMemoryStore(0)
		if err := s.Claim(context.Background(), testPaymentKey(1), time.Minute); err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if after := settle(); after > before+2 {
		t.Errorf("50 open/close cycles left %d goroutines (from %d to %d)", after-before, before, after)
	}
}
