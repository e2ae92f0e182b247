package main

import (
	"context"
	"errors"
	"fmt"
	mathrand "math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// fatalError is what benchTB.Fatalf panics with; main recovers it, cleans up and exits 1.
type fatalError struct{ msg string }

// benchTB lets the driver use internal/testenv (anvil and our token) outside a test. Only the
// methods testenv calls on the chain path are implemented; any other panics on the nil TB.
type benchTB struct {
	testing.TB
	mu       sync.Mutex
	cleanups []func()
	tmp      string
}

func (t *benchTB) Helper()                           {}
func (t *benchTB) Name() string                      { return "bench" }
func (t *benchTB) Failed() bool                      { return false }
func (t *benchTB) Logf(format string, args ...any)   { logf(format, args...) }
func (t *benchTB) Errorf(format string, args ...any) { t.Fatalf(format, args...) }
func (t *benchTB) Error(args ...any)                 { t.Fatal(args...) }
func (t *benchTB) Fatal(args ...any)                 { panic(fatalError{fmt.Sprint(args...)}) }
func (t *benchTB) Fatalf(format string, args ...any) {
	panic(fatalError{fmt.Sprintf(format, args...)})
}

func (t *benchTB) Cleanup(f func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.cleanups = append(t.cleanups, f)
}

func (t *benchTB) TempDir() string {
	dir, err := os.MkdirTemp(t.tmp, "tb-")
	if err != nil {
		t.Fatalf("temp dir: %v", err)
	}
	return dir
}

// runCleanups runs the registered cleanups, last first.
func (t *benchTB) runCleanups() {
	t.mu.Lock()
	fs := t.cleanups
	t.cleanups = nil
	t.mu.Unlock()
	for i := len(fs) - 1; i >= 0; i-- {
		fs[i]()
	}
}

// proc is a child process in its own process group; stop kills the group.
type proc struct {
	name   string
	cmd    *exec.Cmd
	exited chan struct{}
	log    string
}

// procs are the children the driver started, stopped at exit.
var procs struct {
	mu   sync.Mutex
	list []*proc
}

// start runs name with args in dir, its output appended to logPath, env added to the driver's.
func start(name, logPath, dir string, env []string, bin string, args ...string) (*proc, error) {
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = f, f
	// Its own group (stop kills the group), and killed if the driver dies first.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, exited: make(chan struct{}), log: logPath}
	go func() {
		_ = cmd.Wait()
		close(p.exited)
	}()
	procs.mu.Lock()
	procs.list = append(procs.list, p)
	procs.mu.Unlock()
	return p, nil
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

func (p *proc) stop() {
	select {
	case <-p.exited:
		return
	default:
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(5 * time.Second):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.exited
	}
}

func stopAll() {
	procs.mu.Lock()
	list := procs.list
	procs.list = nil
	procs.mu.Unlock()
	for i := len(list) - 1; i >= 0; i-- {
		list[i].stop()
	}
}

// waitHTTP waits until url answers any HTTP status, or the process exits, or 60 s pass.
func waitHTTP(p *proc, url string) error {
	deadline := time.Now().Add(60 * time.Second)
	c := &http.Client{Timeout: 2 * time.Second}
	for time.Now().Before(deadline) {
		select {
		case <-p.exited:
			return fmt.Errorf("%s exited; see %s", p.name, p.log)
		default:
		}
		resp, err := c.Get(url)
		if err == nil {
			resp.Body.Close()
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("%s did not answer %s within 60s; see %s", p.name, url, p.log)
}

// Ports of the servers bench starts: below Linux's default ephemeral range (32768-60999),
// so the port of an outgoing connection, which the kernel takes from that range, is never
// one that a server is about to bind (a port from net.Listen(":0") was, once: the run
// failed to start Caddy).
const (
	portLow  = 20000
	portHigh = 32000
)

var (
	portsMu    sync.Mutex
	portsGiven = map[int]bool{}
)

// freePort returns a loopback port between portLow and portHigh that nothing listens on
// and that no earlier call returned.
func freePort() int {
	portsMu.Lock()
	defer portsMu.Unlock()
	for range 1000 {
		port := portLow + mathrand.IntN(portHigh-portLow)
		if portsGiven[port] {
			continue
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue // taken
		}
		l.Close()
		portsGiven[port] = true
		return port
	}
	panic(fatalError{fmt.Sprintf("free port: none free between %d and %d", portLow, portHigh)})
}

// cpuSeconds is the user+system CPU time of pid so far (/proc/PID/stat, in clock ticks of 1/100 s).
func cpuSeconds(pid int) float64 {
	u, k := cpuSplit(pid)
	return u + k
}

// cpuSplit is the user and the system (kernel) CPU time of pid so far, in seconds (0, 0 when
// /proc/PID/stat cannot be read).
func cpuSplit(pid int) (user, sys float64) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, 0
	}
	u, _ := strconv.ParseFloat(f[11], 64)
	k, _ := strconv.ParseFloat(f[12], 64)
	return u / 100, k / 100
}

// groupCPU sums cpuSeconds over the process and its direct children (the npm anvil wrapper, node).
func groupCPU(pid int) float64 {
	total := cpuSeconds(pid)
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	if err == nil {
		for _, c := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(c); err == nil {
				total += cpuSeconds(n)
			}
		}
	}
	return total
}

// rssKB is VmRSS of pid in kB.
func rssKB(pid int) (int, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			return strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
		}
	}
	return 0, errors.New("no VmRSS")
}

// run runs a command to completion with a bound and returns its combined output.
func run(ctx context.Context, dir string, env []string, bin string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// cpuUsage is where the machine's CPU went during a run, in cores (1 = one core busy for
// the whole run): all of it (/proc/stat), the node (anvil), the driver (this process: the
// clients and the timing proxy) and the server under test.
type cpuUsage struct {
	machine, node, driver, server float64
	cores                         int
}

// String is "machine 1.9 of 2 cores busy: anvil 0.9, driver 0.4, server 0.5".
func (u cpuUsage) String() string {
	return fmt.Sprintf("machine %.2f of %d cores busy: anvil %.2f, driver %.2f, server %.2f", u.machine, u.cores, u.node, u.driver, u.server)
}

// cpuSample is a reading of the counters cpuUsage is made of.
type cpuSample struct {
	at           time.Time
	busy         float64 // machine-wide busy seconds (/proc/stat)
	node, driver float64
	server       float64
}

func sampleCPU(nodePid int, serverPids []int) cpuSample {
	s := cpuSample{at: time.Now(), busy: machineBusy(), node: groupCPU(nodePid), driver: cpuSeconds(os.Getpid())}
	for _, p := range serverPids {
		s.server += groupCPU(p)
	}
	return s
}

// usageSince is the CPU used from a to now, in cores.
func (a cpuSample) usageSince(nodePid int, serverPids []int) cpuUsage {
	b := sampleCPU(nodePid, serverPids)
	d := b.at.Sub(a.at).Seconds()
	if d <= 0 {
		return cpuUsage{}
	}
	return cpuUsage{machine: (b.busy - a.busy) / d, node: (b.node - a.node) / d, driver: (b.driver - a.driver) / d,
		server: (b.server - a.server) / d, cores: runtime.NumCPU()}
}

// machineBusy is the machine's busy CPU seconds so far: the first line of /proc/stat, all
// but idle and iowait, in clock ticks of 1/100 s.
func machineBusy() float64 {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 8 || f[0] != "cpu" {
		return 0
	}
	total := 0.0
	for i, v := range f[1:] {
		n, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return 0
		}
		if i == 3 || i == 4 { // idle, iowait
			continue
		}
		if i >= 8 { // guest time is counted in user already
			break
		}
		total += n
	}
	return total / 100
}

// quiesce waits, up to 30 s, until the machine is quiet (under a quarter of a core busy
// over two half-second windows in a row), so that one side's run does not pay for work the
// other side left running: the reference's facilitator keeps polling the node for the
// receipts of the settlements it lost for a while after its run ends, and the node's CPU
// then goes to that.
func quiesce() {
	start := time.Now()
	quiet := 0
	for quiet < 2 && time.Since(start) < 30*time.Second {
		b0 := machineBusy()
		time.Sleep(500 * time.Millisecond)
		if (machineBusy()-b0)/0.5 < 0.25 {
			quiet++
		} else {
			quiet = 0
		}
	}
	if d := time.Since(start); d > 1500*time.Millisecond {
		logf("  waited %s for the machine to be quiet", d.Round(100*time.Millisecond))
	}
}
