package verdictserver

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"

	"github.com/x402gate/x402gate/internal/testenv"
	"github.com/x402gate/x402gate/verdictserver/store"
)

// The HTTP benchmarks drive the real handler over loopback with many concurrent clients
// (bench/verdict.md): clients is how many, spread over benchAgents agents with a key and
// a wallet each. The rate limits are lifted; everything else is as served.
const (
	benchClients = 64
	benchAgents  = 8
)

// benchStores are the engines the HTTP benchmarks run on. PostgreSQL runs durable
// (durablePostgres), as SQLite does. open returns the store and, for a database in
// processes of its own, their CPU time so far (nil for SQLite, which runs in this process).
var benchStores = []struct {
	name string
	open func(b *testing.B) (*store.Store, func() time.Duration)
}{
	{"sqlite", func(b *testing.B) (*store.Store, func() time.Duration) { return sqliteStore(b), nil }},
	{"postgres", func(b *testing.B) (*store.Store, func() time.Duration) {
		srv := testenv.StartPostgresServer(b, testenv.PostgresConfig{Durable: true})
		return postgresAt(b, srv.CreateDatabase(b, "verdict_bench")), srv.CPUTime
	}},
}

// durablePostgres is a store on a PostgreSQL cluster that fsyncs its commits, as in
// production (testenv.PostgresConfig.Durable).
func durablePostgres(b *testing.B) *store.Store {
	b.Helper()
	st, _ := benchStores[1].open(b)
	return st
}

// meterDB starts counting the database's own CPU time (dbCPU; nothing when nil) and
// returns what reports it, per op, as db-cpu-µs/op: with cpu-µs/op, the whole CPU cost of
// an op on PostgreSQL.
func meterDB(b *testing.B, dbCPU func() time.Duration) func() {
	if dbCPU == nil {
		return func() {}
	}
	start := dbCPU()
	return func() {
		b.ReportMetric(float64((dbCPU()-start).Microseconds())/float64(b.N), "db-cpu-µs/op")
	}
}

// benchEnv is a running service with benchAgents agents and an HTTP client that keeps
// benchClients connections.
type benchEnv struct {
	*env
	agents []agent
	client *http.Client
	bodies []string // one submit body per agent
}

func newBenchEnv(b *testing.B, st *store.Store) *benchEnv {
	b.Helper()
	unlimited := &RateConfig{Rate: 1e9, Burst: 1 << 30}
	e := newEnv(b, st, func(c *Config, d *Deps) {
		c.RateKey, c.RateIP = unlimited, unlimited
		d.SweepInterval = 0 // the default, not the tests' 50 ms
	})
	be := &benchEnv{env: e, client: &http.Client{Transport: &http.Transport{
		MaxIdleConns: benchClients, MaxIdleConnsPerHost: benchClients, DisableCompression: true,
	}}}
	b.Cleanup(be.client.CloseIdleConnections)
	for i := range benchAgents {
		w := common.BigToAddress(common.Big1)
		w[0], w[19] = 0xbe, byte(i+1)
		a := e.agent(fmt.Sprintf("bench-%d", i), w, allowPolicy)
		be.agents = append(be.agents, a)
		be.bodies = append(be.bodies, testenv.JSON(b, submitBody(w, allowedPay, "")))
	}
	return be
}

// do sends one request and returns the status and, when keep or the status is not
// want, the body.
func (be *benchEnv) do(method, path, key, body string, want int, keep bool) (int, []byte, error) {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(context.Background(), method, be.api.URL+path, rd)
	if err != nil {
		return 0, nil, err
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("x-api-key", key)
	resp, err := be.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode == want && !keep {
		_, err := io.Copy(io.Discard, resp.Body)
		return resp.StatusCode, nil, err
	}
	raw, err := io.ReadAll(resp.Body)
	return resp.StatusCode, raw, err
}

// submit posts agent i's body and returns the requestHash of the 201.
func (be *benchEnv) submit(i int) (string, error) {
	a := be.agents[i%len(be.agents)]
	code, raw, err := be.do(http.MethodPost, "/transactions", a.Key, be.bodies[i%len(be.bodies)], http.StatusCreated, true)
	if err != nil {
		return "", err
	}
	if code != http.StatusCreated {
		return "", fmt.Errorf("submit = %d %s", code, raw)
	}
	var rec struct{ RequestHash string }
	if err := json.Unmarshal(raw, &rec); err != nil {
		return "", err
	}
	return rec.RequestHash, nil
}

// read gets one approval status and wants a 200.
func (be *benchEnv) read(path, key string) error {
	code, raw, err := be.do(http.MethodGet, path, key, "", http.StatusOK, false)
	if err == nil && code != http.StatusOK {
		err = fmt.Errorf("approval status = %d %s", code, raw)
	}
	return err
}

// parallel runs b.N calls of f over benchClients goroutines and reports the rate as
// unit per second, and the CPU time this process spent per call (clients, server and,
// for SQLite, the database): on a shared machine the rate follows the load, the CPU time
// much less.
func parallel(b *testing.B, unit string, f func(i int) error) {
	b.Helper()
	var next atomic.Int64
	b.SetParallelism((benchClients + 1) / 2) // RunParallel starts GOMAXPROCS times this many
	b.ReportAllocs()
	cpu0 := cpuTime()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := f(int(next.Add(1))); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), unit+"/s")
	b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
}

// cpuTime is the user and system CPU time of this process so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkHTTPSubmit: POST /transactions over loopback from 64 clients of 8 agents: rate
// limits, key lookup, decoding, the wallet check, the durable write (a 201 is durable) and
// the queueing, while the workers evaluate and complete what was submitted.
func BenchmarkHTTPSubmit(b *testing.B) {
	for _, sb := range benchStores {
		st, dbCPU := sb.open(b)
		be := newBenchEnv(b, st) // one service per engine, for every round of b.N
		b.Run(sb.name, func(b *testing.B) {
			defer meterDB(b, dbCPU)()
			parallel(b, "submits", func(i int) error {
				_, err := be.submit(i)
				return err
			})
		})
	}
}

// BenchmarkHTTPStatus: GET /transactions/{requestHash}/approval-status over loopback from
// 64 clients of 8 agents, over 1024 records (mostly evaluated by the time they are read).
func BenchmarkHTTPStatus(b *testing.B) {
	const records = 1024
	for _, sb := range benchStores {
		st, dbCPU := sb.open(b)
		be := newBenchEnv(b, st) // one service per engine, for every round of b.N
		paths, keys := make([]string, records), make([]string, records)
		for i := range records {
			h, err := be.submit(i)
			if err != nil {
				b.Fatal(err)
			}
			paths[i] = "/transactions/" + h + "/approval-status"
			keys[i] = be.agents[i%len(be.agents)].Key
		}
		b.Run(sb.name, func(b *testing.B) {
			defer meterDB(b, dbCPU)()
			parallel(b, "reads", func(i int) error { return be.read(paths[i%records], keys[i%records]) })
		})
	}
}

// BenchmarkJudge: b.N submits over loopback from 64 clients, as BenchmarkHTTPSubmit, timed
// until the workers have judged every one (no record PENDING): judged/s is the rate the
// service turns submitted transactions into verdicts, which must keep up with the rate it
// accepts them or the backlog grows (bench/verdict.md#judging).
func BenchmarkJudge(b *testing.B) {
	for _, sb := range benchStores {
		st, dbCPU := sb.open(b)
		be := newBenchEnv(b, st)
		b.Run(sb.name, func(b *testing.B) {
			defer meterDB(b, dbCPU)()
			parallel(b, "submits", func(i int) error {
				_, err := be.submit(i)
				return err
			})
			for {
				n, err := be.st.CountPending(context.Background())
				if err != nil {
					b.Fatal(err)
				}
				if n == 0 {
					break
				}
				time.Sleep(2 * time.Millisecond)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "judged/s")
		})
	}
}
