package testenv

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Bounds of the Caddy harness. They only turn a hang into a failure; no test asserts on them.
const (
	caddyBuildBound = 10 * time.Minute
	caddyStartBound = 60 * time.Second
	caddyStopBound  = 15 * time.Second
	caddyLoadBound  = 60 * time.Second
	// caddyLogMax is how much of Caddy's output a Caddy keeps for Logs: all of it in any test
	// that is not a load test.
	caddyLogMax = 64 << 20
)

// CaddyAdminVar is the environment variable StartCaddy sets to the admin address it picked
// (127.0.0.1:<free port>). Every Caddyfile given to StartCaddy carries the global option
// `admin {$CADDY_ADMIN}`, so that parallel tests and packages never share an admin port.
const CaddyAdminVar = "CADDY_ADMIN"

// CaddyOptions change how StartCaddy runs Caddy.
type CaddyOptions struct {
	// Env entries ("NAME=value") are added to Caddy's environment, for the Caddyfile's
	// {$NAME} (parse time) and {env.NAME} (run time) placeholders. Pass secrets this way or
	// through files ({file.path}), never inline in the Caddyfile.
	Env []string
	// WaitPorts are loopback ports StartCaddy waits for (a TCP connect succeeds) after the
	// admin endpoint answers: the config's site ports.
	WaitPorts []int
	// Faults, when not empty, runs FaultCaddyBinary with $X402GATE_FAULT set to it
	// ("settle.after-journal=kill", package internal/faults).
	Faults string
	// FaultBinary runs FaultCaddyBinary even with no Faults armed, so that a restarted
	// process is the same build as the one that crashed.
	FaultBinary bool
	// NoWaitNetworks returns without waiting for the bundled facilitators' networks to be
	// ready: for a test of the time before (an RPC endpoint down, a journal to reconcile).
	NoWaitNetworks bool
}

// Caddy is a running caddy process, private to the test that started it.
type Caddy struct {
	// AdminURL is the admin endpoint, http://127.0.0.1:<port>; its /metrics serves the
	// Prometheus metrics and /load replaces the config.
	AdminURL string
	// DataDir is Caddy's data directory ($XDG_DATA_HOME/caddy), where the bundled
	// facilitator's default SQLite journal lives.
	DataDir string

	cmd      *exec.Cmd
	exited   chan struct{}
	logs     *tailBuffer
	stopOnce sync.Once
}

// StartCaddy writes caddyfile to a temporary file and runs the custom Caddy (CaddyBinary) with
// `caddy run --config <file> --adapter caddyfile`. The Caddyfile must contain the global option
// `admin {$CADDY_ADMIN}`: StartCaddy sets CADDY_ADMIN to a free loopback port. HOME,
// XDG_CONFIG_HOME and XDG_DATA_HOME point at temporary directories. StartCaddy returns once
// the admin endpoint answers and every opts.WaitPorts port accepts connections; a Caddy that
// exits or does not get there fails the test with its output. Caddy's output (its logs, the
// access log included) is kept for Logs and shown in the test log only when the test failed.
// A cleanup stops Caddy.
func StartCaddy(t testing.TB, caddyfile string, opts CaddyOptions) *Caddy {
	t.Helper()
	if !strings.Contains(caddyfile, "{$"+CaddyAdminVar) {
		t.Fatalf("testenv: the Caddyfile must set the global option `admin {$%s}`", CaddyAdminVar)
	}
	bin := CaddyBinary
	if opts.Faults != "" || opts.FaultBinary {
		bin = FaultCaddyBinary
	}
	dir := t.TempDir()
	config := filepath.Join(dir, "Caddyfile")
	if err := os.WriteFile(config, []byte(caddyfile), 0o600); err != nil {
		t.Fatalf("testenv: write Caddyfile: %v", err)
	}
	admin := "127.0.0.1:" + strconv.Itoa(FreePort(t))
	home := filepath.Join(dir, "home")
	for _, d := range []string{home, filepath.Join(dir, "config"), filepath.Join(dir, "data")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatalf("testenv: %v", err)
		}
	}
	c := &Caddy{
		AdminURL: "http://" + admin,
		DataDir:  filepath.Join(dir, "data", "caddy"),
		exited:   make(chan struct{}),
		logs:     &tailBuffer{max: caddyLogMax, scanAs: t.Name() + ": caddy output"},
	}
	c.cmd = exec.Command(bin(t), "run", "--config", config, "--adapter", "caddyfile")
	c.cmd.Dir = dir
	c.cmd.Env = append(os.Environ(),
		CaddyAdminVar+"="+admin,
		"HOME="+home,
		"XDG_CONFIG_HOME="+filepath.Join(dir, "config"),
		"XDG_DATA_HOME="+filepath.Join(dir, "data"),
	)
	c.cmd.Env = append(c.cmd.Env, opts.Env...)
	if opts.Faults != "" {
		c.cmd.Env = append(c.cmd.Env, "X402GATE_FAULT="+opts.Faults)
	}
	c.cmd.Stdout, c.cmd.Stderr = c.logs, c.logs
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	c.cmd.WaitDelay = caddyStopBound
	if err := c.cmd.Start(); err != nil {
		t.Fatalf("testenv: start caddy %s: %v", c.cmd.Path, err)
	}
	go func() {
		_ = c.cmd.Wait()
		close(c.exited)
	}()
	t.Cleanup(func() {
		c.scanAdmin(t.Name())
		c.Stop()
		ScanCanaries(t.Name()+": caddy output", c.logs.bytes())
		if t.Failed() {
			t.Logf("caddy output:\n%s", c.logs.String())
		}
	})

	deadline := time.Now().Add(caddyStartBound)
	client := &http.Client{Timeout: 2 * time.Second}
	for {
		if c.adminUp(client) {
			break
		}
		select {
		case <-c.exited:
			t.Fatalf("testenv: caddy exited before its admin endpoint answered:\n%s", c.logs.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("testenv: caddy's admin endpoint did not answer within %s:\n%s", caddyStartBound, c.logs.String())
		}
	}
	for _, p := range opts.WaitPorts {
		addr := "127.0.0.1:" + strconv.Itoa(p)
		for {
			conn, err := net.DialTimeout("tcp", addr, time.Second)
			if err == nil {
				conn.Close()
				break
			}
			select {
			case <-c.exited:
				t.Fatalf("testenv: caddy exited before listening on %s:\n%s", addr, c.logs.String())
			case <-time.After(50 * time.Millisecond):
			}
			if time.Now().After(deadline) {
				t.Fatalf("testenv: caddy did not listen on %s within %s:\n%s", addr, caddyStartBound, c.logs.String())
			}
		}
	}
	if !opts.NoWaitNetworks {
		c.WaitNetworks(t, deadline)
	}
	return c
}

// WaitNetworks waits until no network of a bundled facilitator is unavailable (the
// gauge caddy_x402_networks_unavailable of /metrics is 0 or absent): Caddy brings them
// up in the background after it starts (docs/facilitator.md#start-up). It fails the test
// at deadline.
func (c *Caddy) WaitNetworks(t testing.TB, deadline time.Time) {
	t.Helper()
	for {
		n := c.unavailableNetworks(t)
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("testenv: %d network(s) of the bundled facilitators not ready in time:\n%s", n, c.logs.String())
		}
		select {
		case <-c.exited:
			t.Fatalf("testenv: caddy exited before its networks were ready:\n%s", c.logs.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// unavailableNetworks is the value of caddy_x402_networks_unavailable, 0 when absent.
func (c *Caddy) unavailableNetworks(t testing.TB) int {
	for _, line := range strings.Split(c.Metrics(t), "\n") {
		if v, ok := strings.CutPrefix(line, "caddy_x402_networks_unavailable "); ok {
			n, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				t.Fatalf("testenv: caddy_x402_networks_unavailable %q: %v", v, err)
			}
			return int(n)
		}
	}
	return 0
}

func (c *Caddy) adminUp(client *http.Client) bool {
	resp, err := client.Get(c.AdminURL + "/config/")
	if err != nil {
		return false
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// Reload replaces Caddy's config with caddyfile through the admin endpoint (POST /load,
// Content-Type text/caddyfile), the way `caddy reload` does, and fails the test unless Caddy
// accepted it, the old config's listeners are closed and its networks are ready
// (WaitNetworks). The new config must keep `admin {$CADDY_ADMIN}`.
func (c *Caddy) Reload(t testing.TB, caddyfile string) {
	t.Helper()
	if err := c.Load(caddyfile); err != nil {
		t.Fatalf("testenv: %v", err)
	}
	deadline := time.Now().Add(caddyLoadBound)
	c.waitOldListenersClosed(t, deadline)
	c.WaitNetworks(t, deadline)
}

// Load is Reload returning an error instead of failing the test, for configs Caddy must refuse
// and for calls from goroutines other than the test's.
func (c *Caddy) Load(caddyfile string) error {
	ctx, cancel := context.WithTimeout(context.Background(), caddyLoadBound)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.AdminURL+"/load", strings.NewReader(caddyfile))
	if err != nil {
		return fmt.Errorf("caddy /load: %w", err)
	}
	req.Header.Set("Content-Type", "text/caddyfile")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("caddy /load: %w", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("caddy /load answered %d: %s", resp.StatusCode, strings.TrimSpace(string(body)))
	}
	return nil
}

// Metrics returns the Prometheus text exposition of the admin endpoint's /metrics.
func (c *Caddy) Metrics(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), rpcBound)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.AdminURL+"/metrics", nil)
	if err != nil {
		t.Fatalf("testenv: caddy /metrics: %v", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("testenv: caddy /metrics: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("testenv: caddy /metrics answered %d: %v", resp.StatusCode, err)
	}
	return string(body)
}

// scanAdmin hands the admin API's /config/ and /metrics answers to ScanCanaries, when
// Caddy still runs.
func (c *Caddy) scanAdmin(test string) {
	if c.Exited() {
		return
	}
	client := &http.Client{Timeout: 10 * time.Second}
	for _, path := range []string{"/config/", "/metrics"} {
		resp, err := client.Get(c.AdminURL + path)
		if err != nil {
			continue
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		ScanCanaries(test+": admin "+path, body)
	}
}

// Logs returns everything Caddy wrote to stdout and stderr so far: its logs, and the access
// log of sites whose `log` writes to stderr (Caddy's default).
func (c *Caddy) Logs() string {
	c.logs.mu.Lock()
	defer c.logs.mu.Unlock()
	return string(c.logs.b)
}

// Exited reports whether the Caddy process has exited.
func (c *Caddy) Exited() bool {
	select {
	case <-c.exited:
		return true
	default:
		return false
	}
}

// Stop asks Caddy to shut down (SIGTERM), and kills its process group when it has not exited
// within the stop bound. It is safe to call more than once and runs at cleanup.
func (c *Caddy) Stop() {
	c.stopOnce.Do(func() {
		if c.cmd == nil || c.cmd.Process == nil {
			return
		}
		_ = c.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-c.exited:
			return
		case <-time.After(caddyStopBound):
		}
		_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
		select {
		case <-c.exited:
		case <-time.After(caddyStopBound):
		}
	})
}

// Kill sends SIGKILL to Caddy's process group, as a crash would, and waits for it to exit.
func (c *Caddy) Kill() {
	c.stopOnce.Do(func() {
		if c.cmd == nil || c.cmd.Process == nil {
			return
		}
		_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
		select {
		case <-c.exited:
		case <-time.After(caddyStopBound):
		}
	})
}

// Pid is the Caddy process's id, to sample its resident memory (/proc/<pid>/status).
func (c *Caddy) Pid() int { return c.cmd.Process.Pid }

// WaitExit waits up to bound for Caddy to exit by itself (a crash point that killed it),
// and reports whether it did.
func (c *Caddy) WaitExit(bound time.Duration) bool {
	select {
	case <-c.exited:
		return true
	case <-time.After(bound):
		return false
	}
}

// errCaddyExited is returned by helpers that find Caddy gone.
var errCaddyExited = errors.New("caddy exited")

// Alive returns an error when the Caddy process has exited, quoting the tail of its output.
func (c *Caddy) Alive() error {
	if c.Exited() {
		out := c.logs.String()
		if len(out) > 4096 {
			out = out[len(out)-4096:]
		}
		return fmt.Errorf("%w:\n%s", errCaddyExited, out)
	}
	return nil
}
