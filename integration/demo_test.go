package integration_test

import (
	"bufio"
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

	"github.com/x402gate/x402gate/internal/testenv"
)

// Bounds of the scripts/run tests. They only turn a hang into a failure; no test asserts on them.
const (
	demoRunBound  = 5 * time.Minute
	demoStopBound = 30 * time.Second
)

// demoPort is one port of the demo and the environment variable that moves it.
type demoPort struct {
	name string
	env  string
	port int
}

// demoPortList is every port scripts/run uses (port left zero).
var demoPortList = []demoPort{
	{name: "anvil", env: "ANVIL_PORT"},
	{name: "the static site", env: "X402_DEMO_SITE_PORT"},
	{name: "the legacy API", env: "X402_DEMO_API_PORT"},
	{name: "the facilitator API", env: "X402_DEMO_FACILITATOR_PORT"},
	{name: "the legacy API's upstream", env: "X402_DEMO_UPSTREAM_PORT"},
	{name: "the verdict service", env: "X402_DEMO_VERDICT_PORT"},
	{name: "Caddy's admin endpoint", env: "CADDY_ADMIN"},
}

// demoPorts picks free loopback ports for every port scripts/run uses, so a test never
// collides with a demo a developer runs, and returns them (in demoPortList's order) with the
// environment that moves them there.
func demoPorts(t *testing.T) ([]demoPort, []string) {
	t.Helper()
	ports := append([]demoPort(nil), demoPortList...)
	var env []string
	for i := range ports {
		ports[i].port = testenv.FreePort(t)
		v := strconv.Itoa(ports[i].port)
		if ports[i].env == "CADDY_ADMIN" {
			v = "127.0.0.1:" + v
		}
		env = append(env, ports[i].env+"="+v)
	}
	return ports, env
}

// demoScript is one run of scripts/run in its own process group, as a terminal runs it, with
// its stdout and stderr kept together.
type demoScript struct {
	cmd      *exec.Cmd
	mu       sync.Mutex
	out      strings.Builder
	lines    chan string   // every output line; closed when the output ends
	exited   chan struct{} // closed when the script has exited
	stopOnce sync.Once
}

// startDemo runs `bash scripts/run` with env added to the test's environment. A cleanup
// interrupts the script's process group (Ctrl-C) and kills it if it is still running after
// demoStopBound.
func startDemo(t *testing.T, env []string) *demoScript {
	t.Helper()
	root, err := testenv.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	d := &demoScript{lines: make(chan string, 1024), exited: make(chan struct{})}
	d.cmd = exec.Command("bash", filepath.Join(root, "scripts", "run"))
	d.cmd.Env = append(os.Environ(), env...)
	d.cmd.Stdout, d.cmd.Stderr = w, w
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := d.cmd.Start(); err != nil {
		t.Fatalf("start scripts/run: %v", err)
	}
	w.Close()
	go func() {
		defer close(d.lines)
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			d.mu.Lock()
			d.out.WriteString(sc.Text() + "\n")
			d.mu.Unlock()
			select {
			case d.lines <- sc.Text():
			default: // nobody reads lines any more; the output is still kept
			}
		}
		r.Close()
	}()
	go func() {
		_ = d.cmd.Wait()
		close(d.exited)
	}()
	t.Cleanup(func() {
		d.stop()
		testenv.ScanCanaries(t.Name()+": scripts/run output", []byte(d.output()))
		if t.Failed() {
			t.Logf("scripts/run output:\n%s", d.output())
		}
	})
	return d
}

// output returns what the script printed so far.
func (d *demoScript) output() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.out.String()
}

// interrupt sends SIGINT to the script's process group, as Ctrl-C in a terminal does.
func (d *demoScript) interrupt() {
	_ = syscall.Kill(-d.cmd.Process.Pid, syscall.SIGINT)
}

// stop interrupts the script and kills its process group if it has not exited in time.
func (d *demoScript) stop() {
	d.stopOnce.Do(func() {
		select {
		case <-d.exited:
			return
		default:
		}
		d.interrupt()
		select {
		case <-d.exited:
		case <-time.After(demoStopBound):
			_ = syscall.Kill(-d.cmd.Process.Pid, syscall.SIGKILL)
			<-d.exited
		}
	})
}

// listening reports whether something accepts connections on the loopback port.
func listening(port int) bool {
	c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port), time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// TestScriptsRunRefusesATakenPort occupies one demo port at a time and runs scripts/run: it
// must exit non-zero before it starts anything (no "==> " step), naming the port and the
// variable that moves it. Caddy listens with SO_REUSEPORT, so a second demo on taken Caddy
// ports would otherwise start without an error and share the requests with the first.
func TestScriptsRunRefusesATakenPort(t *testing.T) {
	for i, taken := range demoPortList {
		t.Run("the port of "+taken.name+" is taken", func(t *testing.T) {
			ports, env := demoPorts(t)
			p := ports[i]
			l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p.port))
			if err != nil {
				t.Fatalf("occupy port %d: %v", p.port, err)
			}
			defer l.Close()

			d := startDemo(t, env)
			deadline := time.After(demoRunBound)
		wait:
			for {
				select {
				case line, ok := <-d.lines:
					if !ok {
						break wait
					}
					if strings.HasPrefix(line, "==> ") {
						t.Fatalf("scripts/run went on (%q) although port %d (%s) is taken", line, p.port, p.env)
					}
				case <-deadline:
					t.Fatalf("scripts/run did not exit within %s although port %d is taken", demoRunBound, p.port)
				}
			}
			<-d.exited
			if d.cmd.ProcessState.Success() {
				t.Errorf("scripts/run exited 0 although port %d is taken", p.port)
			}
			want := "port " + strconv.Itoa(p.port) + " is taken; stop what listens there or set " + p.env
			if !strings.Contains(d.output(), want) {
				t.Errorf("scripts/run's output lacks %q", want)
			}
			for _, other := range ports {
				if other != p && listening(other.port) {
					t.Errorf("port %d (%s) listens after scripts/run refused to start", other.port, other.name)
				}
			}
		})
	}
}

// demoEnv is the environment a test runs scripts/run with besides its ports: the chain's
// files go to a temporary DEVCHAIN_DIR (never the repository's .devchain), the script runs the
// Caddy this test binary built (X402_CADDY) instead of building ./caddy, and Caddy's config
// and data directories (autosave, the facilitator's journal) are temporary. Go keeps the
// caches and settings it has outside the test, so `go run` stays a cache hit.
func demoEnv(t *testing.T) (devchain string, env []string) {
	t.Helper()
	dir := t.TempDir()
	devchain = filepath.Join(dir, "devchain")
	env = []string{
		"DEVCHAIN_DIR=" + devchain,
		"X402_CADDY=" + testenv.CaddyBinary(t),
		"XDG_CONFIG_HOME=" + filepath.Join(dir, "config"),
		"XDG_DATA_HOME=" + filepath.Join(dir, "data"),
	}
	out, err := exec.Command("go", "env", "GOENV", "GOCACHE", "GOMODCACHE").Output()
	if err != nil {
		t.Fatalf("go env: %v", err)
	}
	vals := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(vals) != 3 {
		t.Fatalf("go env printed %q", out)
	}
	return devchain, append(env, "GOENV="+vals[0], "GOCACHE="+vals[1], "GOMODCACHE="+vals[2])
}

// waitForDemo waits until url answers 402, the demo's answer to an unpaid request, and fails
// the test if the script exits first.
func waitForDemo(t *testing.T, d *demoScript, url string) {
	t.Helper()
	deadline := time.After(demoRunBound)
	for {
		if r, err := do(t, http.MethodGet, url, "", nil); err == nil && r.Status == http.StatusPaymentRequired {
			return
		}
		select {
		case <-d.exited:
			t.Fatalf("scripts/run exited (%s) before %s answered 402", d.cmd.ProcessState, url)
		case <-deadline:
			t.Fatalf("%s did not answer 402 within %s", url, demoRunBound)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// TestScriptsRunKeepsTheDevelopmentKeysOutOfItsLog runs the demo as a user does, with its
// ports moved, until its static site answers; anvil.log must not hold anvil's start-up banner,
// which lists the development private keys, the facilitator's included. Then Ctrl-C must stop
// Caddy and anvil.
func TestScriptsRunKeepsTheDevelopmentKeysOutOfItsLog(t *testing.T) {
	ports, env := demoPorts(t)
	devchain, more := demoEnv(t)
	d := startDemo(t, append(env, more...))
	anvil, site := ports[0], ports[1]
	waitForDemo(t, d, "http://127.0.0.1:"+strconv.Itoa(site.port)+"/")

	log, err := os.ReadFile(filepath.Join(devchain, "anvil.log"))
	if err != nil {
		t.Fatalf("read anvil.log: %v", err)
	}
	for i, key := range testenv.DevKeys {
		if strings.Contains(strings.ToLower(string(log)), key) {
			t.Errorf("anvil.log holds the private key of development account %d", i)
		}
	}
	// The demo's state is the chain's: the journal and autosave.json live under DEVCHAIN_DIR.
	for _, f := range []string{"caddy/data/caddy/x402/journal.db", "caddy/config/caddy/autosave.json"} {
		if _, err := os.Stat(filepath.Join(devchain, f)); err != nil {
			t.Errorf("the demo's %s is not under DEVCHAIN_DIR: %v", f, err)
		}
	}

	d.interrupt()
	select {
	case <-d.exited:
	case <-time.After(demoStopBound):
		t.Fatalf("scripts/run did not exit within %s of Ctrl-C", demoStopBound)
	}
	for _, p := range []demoPort{anvil, site} {
		if listening(p.port) {
			t.Errorf("port %d (%s) still listens after Ctrl-C", p.port, p.name)
		}
	}
}
