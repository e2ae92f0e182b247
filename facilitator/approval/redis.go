package approval

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/x402gate/x402gate/internal/redact"
	"github.com/x402gate/x402gate/x402"
)

// DefaultRedisKeyPrefix prefixes every key a RedisStore writes, unless WithKeyPrefix sets
// another.
const DefaultRedisKeyPrefix = "x402gate:"

// RedisStore is the shared Store of several instances (docs/reliability.md#several-instances).
// Record is SET PX, Consume is GETDEL and Claim is SET NX PX, each one command,
// so consumption and claims are atomic across every process that uses the same Redis
// (docs/facilitator.md#settle-order rule 2). GETDEL needs Redis 6.2 or later.
//
// Every failure to reach Redis wraps ErrUnavailable, and callers fail closed on it.
// No error carries the password of the Redis URL.
type RedisStore struct {
	client *redis.Client
	prefix string
	secret string // the URL's password, scrubbed from every error text
}

// RedisOption configures a RedisStore.
type RedisOption func(*RedisStore)

// WithKeyPrefix sets the prefix of every key the store writes. Default
// DefaultRedisKeyPrefix. Instances that must see each other's approvals use the same one.
func WithKeyPrefix(prefix string) RedisOption {
	return func(s *RedisStore) { s.prefix = prefix }
}

// NewRedisStore connects to the Redis at rawURL (redis://[user:password@]host:port[/db],
// rediss:// for TLS, or unix://; go-redis's ParseURL query options such as dial_timeout
// apply) and checks it answers PING, so a misconfigured store fails at start, not at the
// first payment. An unreachable Redis returns an error wrapping ErrUnavailable.
func NewRedisStore(ctx context.Context, rawURL string, opts ...RedisOption) (*RedisStore, error) {
	o, err := redis.ParseURL(rawURL)
	if err != nil {
		// url.Parse errors quote the whole URL, password included: say nothing of it.
		if strings.HasPrefix(err.Error(), "redis: ") {
			return nil, fmt.Errorf("redis store: invalid url: %s", redact.Secrets(err.Error(), redact.URLPassword(rawURL)))
		}
		return nil, errors.New("redis store: invalid url: want redis://[user:password@]host:port[/db]")
	}
	s := &RedisStore{prefix: DefaultRedisKeyPrefix, secret: o.Password}
	for _, opt := range opts {
		opt(s)
	}
	s.client = redis.NewClient(o)
	if err := s.client.Ping(ctx).Err(); err != nil {
		_ = s.client.Close()
		return nil, s.fail("connect", err)
	}
	return s, nil
}

// fail wraps a Redis failure in ErrUnavailable, keeping context cancellation
// visible to errors.Is and scrubbing the password from the text.
func (s *RedisStore) fail(op string, err error) error {
	msg := redact.Secrets(err.Error(), s.secret)
	for _, ctxErr := range []error{context.Canceled, context.DeadlineExceeded} {
		if errors.Is(err, ctxErr) {
			return fmt.Errorf("redis %s: %w: %s: %w", op, ErrUnavailable, msg, ctxErr)
		}
	}
	return fmt.Errorf("redis %s: %w: %s", op, ErrUnavailable, msg)
}

func (s *RedisStore) approvalKey(k x402.PaymentKey) string {
	return s.prefix + "approval:" + k.String()
}

func (s *RedisStore) claimKey(k x402.PaymentKey) string {
	return s.prefix + "claim:" + k.AuthorizationKey()
}

func checkRedisTTL(ttl time.Duration) error {
	// PX takes whole milliseconds, and SET without PX never expires.
	if ttl < time.Millisecond {
		return fmt.Errorf("%w: %s is under 1ms", ErrInvalidTTL, ttl)
	}
	return nil
}

// Record stores a for k until ttl elapses (SET NX PX). While an earlier approval for k is
// unexpired it is kept as it is and Record succeeds.
func (s *RedisStore) Record(ctx context.Context, k x402.PaymentKey, a Approval, ttl time.Duration) error {
	if err := checkRedisTTL(ttl); err != nil {
		return fmt.Errorf("record approval: %w", err)
	}
	b, err := json.Marshal(a)
	if err != nil {
		return fmt.Errorf("record approval: %w", err)
	}
	if err := s.client.SetNX(ctx, s.approvalKey(k), b, ttl).Err(); err != nil {
		return s.fail("record", err)
	}
	return nil
}

// Consume atomically removes and returns the unexpired approval for k with GETDEL (docs/facilitator.md#api).
// When the reply to a GETDEL is lost the approval is gone anyway:
// the settle fails closed and the payer verifies again.
func (s *RedisStore) Consume(ctx context.Context, k x402.PaymentKey) (Approval, error) {
	b, err := s.client.GetDel(ctx, s.approvalKey(k)).Bytes()
	if errors.Is(err, redis.Nil) {
		return Approval{}, ErrNotFound
	}
	if err != nil {
		return Approval{}, s.fail("consume", err)
	}
	var a Approval
	if err := json.Unmarshal(b, &a); err != nil {
		// Not ours, or corrupted: it is consumed now, and it approves nothing.
		return Approval{}, fmt.Errorf("consume approval: malformed record: %w", ErrNotFound)
	}
	return a, nil
}

// Claim atomically marks the authorization of k as being settled for ttl (SET NX PX). The
// claim holds a random token, so a claim whose first reply was lost and whose SET was
// retried by the client is still recognised as ours.
func (s *RedisStore) Claim(ctx context.Context, k x402.PaymentKey, ttl time.Duration) error {
	if err := checkRedisTTL(ttl); err != nil {
		return fmt.Errorf("claim authorization: %w", err)
	}
	var raw [16]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return fmt.Errorf("claim authorization: %w", err)
	}
	token := hex.EncodeToString(raw[:])
	key := s.claimKey(k)
	ok, err := s.client.SetNX(ctx, key, token, ttl).Result()
	if err != nil {
		return s.fail("claim", err)
	}
	if ok {
		return nil
	}
	held, err := s.client.Get(ctx, key).Result()
	switch {
	case errors.Is(err, redis.Nil):
		return ErrAlreadyClaimed // held a moment ago and expired since: still not ours
	case err != nil:
		return s.fail("claim", err)
	case held == token:
		return nil
	default:
		return ErrAlreadyClaimed
	}
}

func (s *RedisStore) verdictKey(k x402.PaymentKey) string {
	return s.prefix + "verdict:" + k.String()
}

// RememberVerdict keeps v for k for ttl (SET NX PX): the first terminal verdict stands.
func (s *RedisStore) RememberVerdict(ctx context.Context, k x402.PaymentKey, v FirstVerdict, ttl time.Duration) error {
	if err := checkRedisTTL(ttl); err != nil {
		return fmt.Errorf("remember verdict: %w", err)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("remember verdict: %w", err)
	}
	if err := s.client.SetNX(ctx, s.verdictKey(k), b, ttl).Err(); err != nil {
		return s.fail("remember verdict", err)
	}
	return nil
}

// RecallVerdict returns the remembered verdict of k, or ErrNotFound.
func (s *RedisStore) RecallVerdict(ctx context.Context, k x402.PaymentKey) (FirstVerdict, error) {
	b, err := s.client.Get(ctx, s.verdictKey(k)).Bytes()
	if errors.Is(err, redis.Nil) {
		return FirstVerdict{}, ErrNotFound
	}
	if err != nil {
		return FirstVerdict{}, s.fail("recall verdict", err)
	}
	var v FirstVerdict
	if err := json.Unmarshal(b, &v); err != nil || v.Status == "" {
		return FirstVerdict{}, fmt.Errorf("recall verdict: malformed record: %w", ErrNotFound)
	}
	return v, nil
}

// Close closes the Redis client.
func (s *RedisStore) Close() error {
	if err := s.client.Close(); err != nil {
		return s.fail("close", err)
	}
	return nil
}

var _ Store = (*RedisStore)(nil)
