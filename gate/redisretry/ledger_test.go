package redisretry_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/x402gate/x402gate/gate/payledger"
	"github.com/x402gate/x402gate/gate/payledger/ledgertest"
	"github.com/x402gate/x402gate/gate/redisretry"
	"github.com/x402gate/x402gate/internal/testenv"
)

// ledgers returns the in-process ledger and two Redis ledgers on one server (two
// instances), each under a fresh prefix; the conformance tests run on each pair.
func ledgers(t *testing.T) map[string][2]payledger.Ledger {
	t.Helper()
	url := testenv.StartRedis(t)
	open := func(prefix string) *redisretry.Store {
		s, err := redisretry.Open(t.Context(), url, prefix)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	m := payledger.NewMemory(0, nil)
	prefix := fmt.Sprintf("t%d:", time.Now().UnixNano())
	return map[string][2]payledger.Ledger{"memory": {m, m}, "redis": {open(prefix), open(prefix)}}
}

// TestLedgerRedisDown: every transition fails with ErrUnavailable when Redis is gone.
func TestLedgerRedisDown(t *testing.T) {
	srv := testenv.StartRedisServer(t, testenv.RedisConfig{})
	o, _ := redis.ParseURL(srv.URL)
	c := redis.NewClient(o)
	defer c.Close()
	s := redisretry.New(c, "")
	srv.Stop()
	ctx := context.Background()
	if _, err := s.Begin(ctx, payledger.Claim{Key: "k", Fingerprint: []byte("f"), Binding: []byte("b"), Owner: "o", Lease: time.Minute, TTL: time.Hour}); !errors.Is(err, redisretry.ErrUnavailable) {
		t.Errorf("Begin: %v", err)
	}
	if _, err := s.End(ctx, "k", "o", payledger.Answer, nil, 0, 0); !errors.Is(err, redisretry.ErrUnavailable) {
		t.Errorf("End: %v", err)
	}
}

// TestLedgerConformance: memory and Redis behave alike, transition by transition, and 40
// attempts of one payment across two instances take one lease.
func TestLedgerConformance(t *testing.T) { ledgertest.Run(t, ledgers(t)) }

// malformedRedis is a server that speaks RESP but answers every script with an empty
// array: a reply a real Redis running our scripts does not give. It returns its address.
func malformedRedis(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go answerMalformed(c)
		}
	}()
	return l.Addr().String()
}

// answerMalformed reads RESP commands from c: HELLO is unknown, EVALSHA and EVAL get an
// empty array, anything else +OK.
func answerMalformed(c net.Conn) {
	defer c.Close()
	r := bufio.NewReader(c)
	for {
		var args []string
		line, err := r.ReadString('\n')
		if err != nil {
			return
		}
		n, _ := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "*")))
		for range n {
			if _, err := r.ReadString('\n'); err != nil { // $len
				return
			}
			arg, err := r.ReadString('\n')
			if err != nil {
				return
			}
			args = append(args, strings.ToUpper(strings.TrimSpace(arg)))
		}
		reply := "+OK\r\n"
		switch {
		case len(args) == 0:
			return
		case args[0] == "HELLO":
			reply = "-ERR unknown command 'HELLO'\r\n"
		case args[0] == "EVALSHA" || args[0] == "EVAL":
			reply = "*0\r\n"
		}
		if _, err := c.Write([]byte(reply)); err != nil {
			return
		}
	}
}

// TestLedgerMalformedReply: a reply that is not {status, data, known} is ErrUnavailable,
// not a status. It read as the zero Status, New: the caller paid and served (fail open).
func TestLedgerMalformedReply(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: malformedRedis(t), MaxRetries: -1})
	defer c.Close()
	s := redisretry.New(c, "")
	e, err := s.Begin(t.Context(), payledger.Claim{Key: "k", Fingerprint: []byte("f"), Binding: []byte("b"), Owner: "o", Lease: time.Minute, TTL: time.Hour})
	if !errors.Is(err, redisretry.ErrUnavailable) {
		t.Errorf("Begin on a malformed reply: status %d, %v; want ErrUnavailable", e.Status, err)
	}
}
