package testenv

// Building the custom Caddy once per test binary, and the free ports its sites listen on.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
)

type caddyBuildState struct {
	once sync.Once
	dir  string
	path string
	err  error
}

var caddyBuild, faultCaddyBuild caddyBuildState

// CaddyBinary returns the path of the custom Caddy built from ./cmd/caddy, building it the
// first time it is called in a test binary (go build -o <tmp>/caddy ./cmd/caddy). $X402_CADDY,
// when set, names a binary to use instead. A build failure fails the test with go's output.
// Call RemoveCaddyBuild from TestMain to delete the build directory.
func CaddyBinary(t testing.TB) string {
	t.Helper()
	caddyBuild.once.Do(func() {
		if p := os.Getenv("X402_CADDY"); p != "" {
			if !isExecutable(p) {
				caddyBuild.err = fmt.Errorf("$X402_CADDY=%s is not an executable file", p)
				return
			}
			caddyBuild.path = p
			return
		}
		caddyBuild.path, caddyBuild.dir, caddyBuild.err = buildCaddy()
	})
	if caddyBuild.err != nil {
		t.Fatalf("testenv: %v", caddyBuild.err)
	}
	return caddyBuild.path
}

// FaultCaddyBinary is CaddyBinary built with the x402faults tag (go build -tags x402faults),
// whose crash points act on $X402GATE_FAULT (package internal/faults). It is built once per
// test binary, only by the tests that ask for it.
func FaultCaddyBinary(t testing.TB) string {
	t.Helper()
	faultCaddyBuild.once.Do(func() {
		faultCaddyBuild.path, faultCaddyBuild.dir, faultCaddyBuild.err = buildCaddy("-tags", "x402faults")
	})
	if faultCaddyBuild.err != nil {
		t.Fatalf("testenv: %v", faultCaddyBuild.err)
	}
	return faultCaddyBuild.path
}

func buildCaddy(flags ...string) (path, dir string, err error) {
	root, err := ModuleRoot()
	if err != nil {
		return "", "", err
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		return "", "", fmt.Errorf("go is not on PATH, so ./cmd/caddy cannot be built: %w", err)
	}
	dir, err = os.MkdirTemp("", "x402gate-caddy-")
	if err != nil {
		return "", "", fmt.Errorf("build caddy: %w", err)
	}
	path = filepath.Join(dir, "caddy")
	ctx, cancel := context.WithTimeout(context.Background(), caddyBuildBound)
	defer cancel()
	args := append(append([]string{"build"}, flags...), "-o", path, "./cmd/caddy")
	cmd := exec.CommandContext(ctx, goBin, args...)
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err != nil {
		_ = os.RemoveAll(dir)
		return "", "", fmt.Errorf("go build %s ./cmd/caddy: %w: %s", strings.Join(flags, " "), err, strings.TrimSpace(string(out)))
	}
	return path, dir, nil
}

// RemoveCaddyBuild deletes the directory CaddyBinary built into, if it built one. Call it from
// TestMain after m.Run.
func RemoveCaddyBuild() {
	for _, b := range []*caddyBuildState{&caddyBuild, &faultCaddyBuild} {
		if b.dir != "" {
			_ = os.RemoveAll(b.dir)
		}
	}
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago, for a Caddy site
// address. (Another process may take it before Caddy binds it; the window is small.)
func FreePort(t testing.TB) int {
	t.Helper()
	port, err := pickPort()
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	return port
}

// pickPort is FreePort for the servers testenv starts itself (Redis, PostgreSQL).
func pickPort() (int, error) {
	handedOut.Lock()
	defer handedOut.Unlock()
	for range 200 {
		port := freePortLow + rand.IntN(freePortHigh-freePortLow)
		if handedOut.ports[port] {
			continue
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			continue
		}
		l.Close()
		handedOut.ports[port] = true
		return port, nil
	}
	return 0, fmt.Errorf("no free loopback port in [%d, %d) after 200 tries", freePortLow, freePortHigh)
}

// FreePort and pickPort draw from below Linux's ephemeral range (32768-60999), so that neither
// a port the kernel picks for another listener nor the source port of an outgoing connection
// takes it between the pick and the bind, and they never hand the same port out twice in one
// process (a Caddy's admin and site ports once came out equal, and the test talked to the
// admin API).
const (
	freePortLow  = 20000
	freePortHigh = 32000
)

var handedOut = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}
