package testenv

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"net/url"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// redisStartBound bounds how long StartRedisServer waits for PING to answer. It is a
// bound on a wait, not a timing assertion.
const redisStartBound = 20 * time.Second

// RedisConfig configures StartRedisServer.
type RedisConfig struct {
	// Password, when set, is required by the server (requirepass) and carried in URL.
	// Default: none.
	Password string
}

// RedisServer is a throwaway redis-server on a loopback port, with no persistence.
type RedisServer struct {
	// URL is redis://[:password@]127.0.0.1:port/0.
	URL string
	// Addr is 127.0.0.1:port.
	Addr string

	bin, dir string
	cfg      RedisConfig
	port     int
	cmd      *exec.Cmd
	exited   chan struct{}
	out      *redisLog
	stopOnce *sync.Once
}

// DefaultRedisPassword and DefaultPostgresPassword are the passwords StartRedis and
// StartPostgres give their servers; empty means none. A test binary's TestMain may set
// them before m.Run, so that every server its tests start requires a password and the
// URLs carry it (the secret canaries of docs/caddy.md#secrets).
var DefaultRedisPassword, DefaultPostgresPassword string

// StartRedis starts a redis-server for t, requiring DefaultRedisPassword when it is set,
// and returns its URL. It is stopped when t ends.
func StartRedis(t testing.TB) string {
	t.Helper()
	return StartRedisServer(t, RedisConfig{Password: DefaultRedisPassword}).URL
}

// StartRedisServer starts a redis-server for t: a free loopback port, no RDB or AOF,
// its working directory in t.TempDir(). It returns once PING answers, and t.Cleanup stops
// it. Stop takes it down earlier, for tests of an unavailable store. A missing
// redis-server fails the test; it is never skipped.
func StartRedisServer(t testing.TB, cfg RedisConfig) *RedisServer {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		bin = "/usr/bin/redis-server"
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("testenv: redis-server not found on PATH or at /usr/bin/redis-server; install it with `apt-get install -y redis-server`")
		}
	}
	dir := t.TempDir()
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ { // a free port can be taken before redis binds it
		s, err := redisTryStart(bin, dir, cfg, 0)
		if err == nil {
			t.Cleanup(s.Stop)
			return s
		}
		lastErr = err
	}
	t.Fatalf("testenv: start redis-server: %v", lastErr)
	return nil
}

func redisTryStart(bin, dir string, cfg RedisConfig, port int) (*RedisServer, error) {
	if port == 0 {
		var err error
		if port, err = pickPort(); err != nil {
			return nil, err
		}
	}
	args := []string{
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", dir,
		"--protected-mode", "yes",
	}
	if cfg.Password != "" {
		args = append(args, "--requirepass", cfg.Password)
	}
	s := &RedisServer{
		Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		bin:  bin, dir: dir, cfg: cfg, port: port,
		exited:   make(chan struct{}),
		out:      &redisLog{},
		stopOnce: new(sync.Once),
	}
	u := url.URL{Scheme: "redis", Host: s.Addr, Path: "/0"}
	if cfg.Password != "" {
		u.User = url.UserPassword("", cfg.Password)
	}
	s.URL = u.String()
	s.cmd = exec.Command(bin, args...)
	s.cmd.Dir = dir
	s.cmd.Stdout = s.out
	s.cmd.Stderr = s.out
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("run %s: %w", bin, err)
	}
	go func() {
		_ = s.cmd.Wait()
		close(s.exited)
	}()
	deadline := time.Now().Add(redisStartBound)
	for {
		if redisAnswers(s.Addr) {
			return s, nil
		}
		select {
		case <-s.exited:
			return nil, fmt.Errorf("redis-server exited before answering PING; its output:\n%s", s.out.tail())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.Stop()
			return nil, fmt.Errorf("redis-server did not answer PING within %s; its output:\n%s", redisStartBound, s.out.tail())
		}
	}
}

// redisAnswers reports whether a Redis server answers PING at addr. "-NOAUTH" is an
// answer too: the server is up and wants a password.
func redisAnswers(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return false
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return false
	}
	return strings.HasPrefix(line, "+PONG") || strings.HasPrefix(line, "-NOAUTH")
}

// Restart kills the server and starts a new one on the same port and directory, with no
// data: a restarted Redis without persistence, as a fleet may see one. It returns once
// PING answers.
func (s *RedisServer) Restart(t testing.TB) {
	t.Helper()
	s.Stop()
	var err error
	for attempt := 0; attempt < 50; attempt++ { // the old socket may linger a moment
		var n *RedisServer
		if n, err = redisTryStart(s.bin, s.dir, s.cfg, s.port); err == nil {
			s.cmd, s.exited, s.out, s.stopOnce = n.cmd, n.exited, n.out, n.stopOnce
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("testenv: restart redis-server on %s: %v", s.Addr, err)
}

// Stop kills the server and waits for it to exit. Later calls do nothing.
func (s *RedisServer) Stop() {
	s.stopOnce.Do(func() {
		_ = s.cmd.Process.Kill()
		<-s.exited
	})
}

// redisLog keeps the server's output for a failure message.
type redisLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *redisLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.buf.Len() < 64<<10 {
		l.buf.Write(p)
	}
	return len(p), nil
}

func (l *redisLog) tail() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.buf.Bytes()
	if len(b) > 4<<10 {
		b = b[len(b)-4<<10:]
	}
	return string(b)
}
