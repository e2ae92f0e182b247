package main

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"time"
)

// The waits a paid request at c=1 owes its promises (bench/paid-request.md): durable
// commits of the journal's SQLite file, three before the answer (the ledger's record
// before anything is verified, the journal's row before the broadcast, the record
// settled before the upstream runs) and the answered record of the request before, which
// the next request on the keep-alive connection is read after; and the node round trips
// before the broadcast (Verify's batch, the simulation).
const (
	floorCommits    = 4
	floorRoundTrips = 2
)

// floor is what the promised waits of one paid request cost on this machine, measured.
type floor struct {
	commit, roundTrip time.Duration
}

func (f floor) total() time.Duration {
	return floorCommits*f.commit + floorRoundTrips*f.roundTrip
}

// against says where the goal bound lies against the floor.
func (f floor) against(bound time.Duration) string {
	if f.total() > bound {
		return fmt.Sprintf("goal 1a's %.2f ms lies below it", ms(bound))
	}
	return fmt.Sprintf("goal 1a's %.2f ms lies above it", ms(bound))
}

func (f floor) String() string {
	return fmt.Sprintf("the waits our promises require at c=1, measured in this run: %d durable commits × %.2f ms (BenchmarkJournalPrepareSQLite, the journal's SQLite on this disk) + %d node round trips × %.2f ms (eth_blockNumber through the same proxy, median of 200) = %.2f ms, before any HTTP hop or CPU",
		floorCommits, ms(f.commit), floorRoundTrips, ms(f.roundTrip), ms(f.total()))
}

// measureFloor measures one durable commit of the journal and one round trip to the node
// through the proxy that every paid request's calls go through. A part it cannot measure
// is 0.
func (e *env) measureFloor() floor {
	var f floor
	if l := find(e.goBench("bench-journal-commit", 5*time.Minute, "-bench", "^BenchmarkJournalPrepareSQLite$", "-benchtime", "300x", "-count", "3", "./facilitator/journal/"),
		func(n string) bool { return n == "BenchmarkJournalPrepareSQLite" }); l != nil {
		f.commit = time.Duration(l.metrics["ns/op"])
	}
	var rtts []time.Duration
	body := []byte(`{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber","params":[]}`)
	for range 200 {
		start := time.Now()
		res, err := loadClient.Post(e.proxy.url, "application/json", bytes.NewReader(body))
		if err != nil {
			logf("  floor: eth_blockNumber: %v", err)
			return f
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			logf("  floor: eth_blockNumber answered %d", res.StatusCode)
			return f
		}
		rtts = append(rtts, time.Since(start))
	}
	f.roundTrip = pct(rtts, .5)
	return f
}
