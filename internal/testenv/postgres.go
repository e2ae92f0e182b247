package testenv

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// pgInstallHint names the install step in every failure about missing binaries.
const pgInstallHint = "install it with `apt-get install -y postgresql`"

// PostgresConfig configures StartPostgresServer.
type PostgresConfig struct {
	// Password, when set, becomes the postgres user's password, TCP connections must
	// present it (scram-sha-256), and DSN carries it. Default: none, trust on loopback.
	Password string
	// Durable, when set, runs the cluster with fsync, synchronous_commit and
	// full_page_writes on, as in production, for a benchmark of durable writes. Default:
	// off, which is faster and enough for a test.
	Durable bool
	// MaxConnections, when set, is the cluster's max_connections. Default: PostgreSQL's
	// own, 100, which a handful of instances of ours fill (each opens up to
	// sqldb.MaxOpenConns per handle).
	MaxConnections int
}

// PostgresServer is a throwaway PostgreSQL cluster in a temporary directory, listening on
// a loopback port, with fsync off unless Durable.
type PostgresServer struct {
	// DSN is postgres://postgres[:password]@127.0.0.1:port/postgres?sslmode=disable.
	DSN string
	// Port is the cluster's loopback TCP port.
	Port int

	bin      string // directory of initdb and pg_ctl
	dir      string // owned by the postgres user when run as root
	asRoot   bool
	durable  bool
	maxConns int // max_connections, 0 for PostgreSQL's default
	uid, gid int // of the postgres user, when asRoot
	stopOnce sync.Once
}

// StartPostgres starts a PostgreSQL cluster for t, its postgres user's password
// DefaultPostgresPassword when that is set, and returns its DSN. It is stopped and
// removed when t ends.
func StartPostgres(t testing.TB) string {
	t.Helper()
	return StartPostgresServer(t, PostgresConfig{Password: DefaultPostgresPassword}).DSN
}

// StartPostgresServer starts a throwaway cluster for t: initdb into a new temporary
// directory, then pg_ctl start on a free loopback port with its unix socket in that
// directory. PostgreSQL refuses to run as root, so as root both run as the postgres user
// via runuser, and the directory is chowned to it. It returns once the server accepts
// connections; t.Cleanup stops it (pg_ctl stop -m immediate) and removes the directory.
// Missing binaries fail the test; it is never skipped.
func StartPostgresServer(t testing.TB, cfg PostgresConfig) *PostgresServer {
	t.Helper()
	bin, err := pgBinDir()
	if err != nil {
		t.Fatalf("testenv: %v; %s", err, pgInstallHint)
	}
	s := &PostgresServer{bin: bin, asRoot: os.Geteuid() == 0, durable: cfg.Durable, maxConns: cfg.MaxConnections}
	if s.asRoot {
		if _, err := exec.LookPath("runuser"); err != nil {
			t.Fatalf("testenv: running as root needs runuser to start PostgreSQL as its own user: %v", err)
		}
	}
	if err := s.makeDir(); err != nil {
		t.Fatalf("testenv: %v", err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(s.dir) })
	if err := s.initdb(cfg.Password); err != nil {
		t.Fatalf("testenv: %v", err)
	}
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ { // a free port can be taken before postgres binds it
		port, err := pickPort()
		if err != nil {
			t.Fatalf("testenv: %v", err)
		}
		if lastErr = s.start(port); lastErr == nil {
			s.Port = port
			break
		}
		_ = s.command("pg_ctl", "-D", s.dataDir(), "-m", "immediate", "-w", "stop").Run()
	}
	if lastErr != nil {
		t.Fatalf("testenv: %v", lastErr)
	}
	t.Cleanup(s.Stop)
	u := url.URL{
		Scheme:   "postgres",
		User:     url.User("postgres"),
		Host:     net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Port)),
		Path:     "/postgres",
		RawQuery: "sslmode=disable",
	}
	if cfg.Password != "" {
		u.User = url.UserPassword("postgres", cfg.Password)
	}
	s.DSN = u.String()
	if err := pgWaitReady(s.DSN); err != nil {
		t.Fatalf("testenv: postgres on port %d: %v", s.Port, err)
	}
	return s
}

// pgBinDir finds initdb and pg_ctl: the newest /usr/lib/postgresql/<version>/bin, else PATH.
func pgBinDir() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { // numeric, so 15 sorts after 9
		vi, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[i])))
		vj, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[j])))
		return vi > vj
	})
	for _, d := range dirs {
		if pgIsExec(filepath.Join(d, "initdb")) && pgIsExec(filepath.Join(d, "pg_ctl")) {
			return d, nil
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		d := filepath.Dir(p)
		if pgIsExec(filepath.Join(d, "pg_ctl")) {
			return d, nil
		}
	}
	return "", fmt.Errorf("postgresql server binaries (initdb, pg_ctl) not found in /usr/lib/postgresql/*/bin or on PATH")
}

func pgIsExec(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}

// makeDir makes the cluster's directory. As root it must be reachable by the postgres
// user: t.TempDir() is not (its parent is 0700), so it is made under a temp root whose
// every parent others can traverse, and chowned to postgres.
func (s *PostgresServer) makeDir() error {
	base := os.TempDir()
	if s.asRoot && !pgTraversable(base) {
		base = "/tmp"
	}
	dir, err := os.MkdirTemp(base, "x402gate-pg-")
	if err != nil {
		return fmt.Errorf("make postgres dir: %w", err)
	}
	if !s.asRoot {
		s.dir = dir
		return nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		_ = os.RemoveAll(dir)
		return fmt.Errorf("running as root needs the postgres user to own the cluster (%v); %s", err, pgInstallHint)
	}
	s.uid, _ = strconv.Atoi(u.Uid)
	s.gid, _ = strconv.Atoi(u.Gid)
	if err := os.Chown(dir, s.uid, s.gid); err != nil {
		_ = os.RemoveAll(dir)
		return fmt.Errorf("chown postgres dir: %w", err)
	}
	s.dir = dir
	return nil
}

// pgTraversable reports whether every directory from dir up to / lets others through.
func pgTraversable(dir string) bool {
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil || fi.Mode().Perm()&0o001 == 0 {
			return false
		}
		if d == filepath.Dir(d) {
			return true
		}
	}
}

// command runs a PostgreSQL binary, as the postgres user when we are root.
func (s *PostgresServer) command(name string, args ...string) *exec.Cmd {
	bin := filepath.Join(s.bin, name)
	var cmd *exec.Cmd
	if s.asRoot {
		cmd = exec.Command("runuser", append([]string{"-u", "postgres", "--", bin}, args...)...)
	} else {
		cmd = exec.Command(bin, args...)
	}
	cmd.Dir = s.dir
	cmd.Env = append(os.Environ(), "LC_ALL=C", "LANG=C")
	return cmd
}

func (s *PostgresServer) dataDir() string { return filepath.Join(s.dir, "data") }

func (s *PostgresServer) logFile() string { return filepath.Join(s.dir, "postgres.log") }

func (s *PostgresServer) initdb(password string) error {
	args := []string{"-D", s.dataDir(), "-U", "postgres", "-E", "UTF8", "--locale=C", "--no-sync",
		"--auth-local=trust"}
	if password == "" {
		args = append(args, "--auth-host=trust")
	} else {
		pwfile := filepath.Join(s.dir, "pwfile")
		if err := os.WriteFile(pwfile, []byte(password+"\n"), 0o600); err != nil {
			return fmt.Errorf("write postgres password file: %w", err)
		}
		if s.asRoot {
			if err := os.Chown(pwfile, s.uid, s.gid); err != nil {
				return fmt.Errorf("chown postgres password file: %w", err)
			}
		}
		args = append(args, "--auth-host=scram-sha-256", "--pwfile="+pwfile)
		defer os.Remove(pwfile)
	}
	if out, err := s.command("initdb", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("initdb: %w\n%s", err, pgTail(out))
	}
	return nil
}

func (s *PostgresServer) start(port int) error {
	opts := fmt.Sprintf("-p %d -c listen_addresses=127.0.0.1 -c unix_socket_directories=%s", port, s.dir)
	if !s.durable {
		opts += " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
	}
	if s.maxConns > 0 {
		opts += fmt.Sprintf(" -c max_connections=%d", s.maxConns)
	}
	_ = os.Remove(s.logFile())
	cmd := s.command("pg_ctl", "-D", s.dataDir(), "-l", s.logFile(), "-w", "-t", "60", "-o", opts, "start")
	if out, err := cmd.CombinedOutput(); err != nil {
		log, _ := os.ReadFile(s.logFile())
		return fmt.Errorf("pg_ctl start on port %d: %w\n%s\n%s", port, err, pgTail(out), pgTail(log))
	}
	return nil
}

// Stop stops the cluster at once (pg_ctl stop -m immediate). Later calls do nothing.
func (s *PostgresServer) Stop() {
	s.stopOnce.Do(func() {
		_ = s.command("pg_ctl", "-D", s.dataDir(), "-m", "immediate", "-w", "stop").Run()
	})
}

var pgDatabaseName = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// CreateDatabase creates an empty database named name (lower case letters, digits and
// '_') in the cluster and returns its DSN.
func (s *PostgresServer) CreateDatabase(t testing.TB, name string) string {
	t.Helper()
	if !pgDatabaseName.MatchString(name) {
		t.Fatalf("testenv: database name %q: want [a-z_][a-z0-9_]*", name)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.DSN)
	if err != nil {
		t.Fatalf("testenv: connect to postgres on port %d: %v", s.Port, err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("testenv: create database %s: %v", name, err)
	}
	u, err := url.Parse(s.DSN)
	if err != nil {
		t.Fatalf("testenv: postgres dsn does not parse")
	}
	u.Path = "/" + name
	return u.String()
}

// pgWaitReady pings until the server accepts connections, within a bound.
func pgWaitReady(dsn string) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		conn, err := pgx.Connect(ctx, dsn)
		if err == nil {
			err = conn.Ping(ctx)
			_ = conn.Close(ctx)
		}
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not accepting connections: %w", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func pgTail(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 4<<10 {
		s = s[len(s)-4<<10:]
	}
	return s
}

// CPUTime is the CPU time (user and system) the cluster's processes have used so far: the
// postmaster's own, that of the children it has reaped, and that of its live children
// (backends, WAL writer, checkpointer...). A benchmark takes it before and after, to charge
// the database's own work to each operation beside its client's. Zero when the cluster's
// processes cannot be read (not Linux, or stopped).
func (s *PostgresServer) CPUTime() time.Duration {
	raw, err := os.ReadFile(filepath.Join(s.dataDir(), "postmaster.pid"))
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(raw), "\n", 2)[0]))
	if err != nil {
		return 0
	}
	ticks := procTicks(pid, true)
	procs, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, p := range procs {
		child, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
		if procParent(child) == pid {
			ticks += procTicks(child, false)
		}
	}
	return time.Duration(ticks) * time.Second / clockTicks
}

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's times: 100 on every Linux we run on.
const clockTicks = 100

// procStat is the fields of /proc/<pid>/stat after the command name, or nil.
func procStat(pid int) []string {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil
	}
	s := string(raw)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(s[i+1:])
}

// procParent is the parent pid of pid, or -1.
func procParent(pid int) int {
	f := procStat(pid)
	if len(f) < 2 {
		return -1
	}
	ppid, err := strconv.Atoi(f[1])
	if err != nil {
		return -1
	}
	return ppid
}

// procTicks is the user and system time of pid in clock ticks, with its reaped children's
// when reaped is set.
func procTicks(pid int, reaped bool) int64 {
	f := procStat(pid)
	if len(f) < 15 {
		return 0
	}
	fields := f[11:13] // utime, stime (stat fields 14 and 15)
	if reaped {
		fields = f[11:15] // and cutime, cstime
	}
	var n int64
	for _, v := range fields {
		t, _ := strconv.ParseInt(v, 10, 64)
		n += t
	}
	return n
}
