package verdictserver

import (
	"context"
	"math"
	"net/http"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"

	"github.com/x402gate/x402gate/internal/testenv"
)

// windowInstances is how many verdict instances share the window in BenchmarkWindowApprovals.
const windowInstances = 3

// BenchmarkWindowApprovals: the approvals per second one spend window sustains across 3
// instances on one durable PostgreSQL (bench/verdict.md#evaluation-with-windows-and-signing).
// One agent with a daily window no run fills submits b.N $0.01 payments from 64 clients,
// spread over the instances, over loopback; approvals/s is b.N over the time from the first
// submit to the last verdict stored. Every approval takes the agent's row lock, so the
// instances judge this agent's records one at a time, each in a transaction of its own.
// no-window is the same run for an agent without windows, whose verdicts share group
// commits: what the window costs.
func BenchmarkWindowApprovals(b *testing.B) {
	dsn := testenv.StartPostgresServer(b, testenv.PostgresConfig{Durable: true}).CreateDatabase(b, "verdict_window_bench")
	client := &http.Client{Transport: &http.Transport{MaxIdleConns: benchClients, MaxIdleConnsPerHost: benchClients, DisableCompression: true}}
	b.Cleanup(client.CloseIdleConnections)
	unlimited := &RateConfig{Rate: 1e9, Burst: 1 << 30}
	bes := make([]*benchEnv, windowInstances)
	for i := range bes {
		bes[i] = &benchEnv{client: client, env: newEnv(b, postgresAt(b, dsn), func(c *Config, d *Deps) {
			c.RateKey, c.RateIP = unlimited, unlimited
			d.SweepInterval = 0
		})}
	}
	wallet := common.HexToAddress("0xA11CE00000000000000000000000000000000001")
	for _, c := range []struct {
		name, policy string
	}{
		{"window", windowPolicy(`{"period": "day", "capUsd": 1000000000}`)},
		{"no-window", allowPolicy},
	} {
		wallet[0]++
		a := bes[0].agent(c.name, wallet, c.policy)
		body := testenv.JSON(b, submitBody(a.Wallet, allowedPay, ""))
		for _, be := range bes {
			be.agents, be.bodies = []agent{a}, []string{body}
		}
		b.Run("postgres/"+c.name, func(b *testing.B) { approveAll(b, bes, a, c.name == "window") })
	}
}

// approveAll submits b.N payments of a over the instances, waits until every one is judged,
// and reports the approvals per second; windowed, the agent's first window must hold them
// all. Every one must be approved.
func approveAll(b *testing.B, bes []*benchEnv, a agent, windowed bool) {
	before := 0
	if windowed {
		before = reservedPayments(bes[0].env, a)
	}
	hashes := make([]string, b.N+1)
	parallel(b, "submits", func(i int) error {
		h, err := bes[i%len(bes)].submit(i)
		hashes[i] = h
		return err
	})
	for {
		n, err := bes[0].st.CountPending(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		if n == 0 {
			break
		}
		time.Sleep(2 * time.Millisecond)
	}
	b.StopTimer()
	mustBeApproved(b, bes[0].st, hashes[1:])
	if windowed {
		if got := reservedPayments(bes[0].env, a) - before; got != b.N {
			b.Fatalf("%d of %d payments reserved in the window: not all approved", got, b.N)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "approvals/s")
}

// reservedPayments is how many $0.01 payments the agent's first window holds reserved,
// read through the admin API.
func reservedPayments(e *env, a agent) int {
	usd, _ := e.windows(a.ID)[0].(map[string]any)["reservedUsd"].(float64)
	return int(math.Round(usd * 100))
}
