package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// loadClient is the one HTTP client every closed-loop run uses, on both sides.
var loadClient = &http.Client{
	Transport: &http.Transport{MaxIdleConns: 1024, MaxIdleConnsPerHost: 1024, IdleConnTimeout: time.Minute},
	Timeout:   60 * time.Second,
}

// result is one closed-loop run: latencies of the successful requests, failures by reason.
type result struct {
	ok       int
	failed   int
	reasons  map[string]int
	lat      []time.Duration
	elapsed  time.Duration
	overhead []time.Duration // total minus the chain part, per settled request
	chain    []time.Duration // eth_sendRawTransaction start → receipt answer
	send     []time.Duration // eth_sendRawTransaction alone
	cpu      float64         // CPU seconds of the measured server processes during the run
	usage    cpuUsage        // where the machine's CPU went during the run (paid runs)
	rpc      map[string]int  // JSON-RPC calls by method during the run (the timing proxy)
}

// perRequest is the number of calls of method per request sent in the run.
func (r result) perRequest(method string) float64 {
	n := r.ok + r.failed
	if n == 0 {
		return 0
	}
	return float64(r.rpc[method]) / float64(n)
}

// rpcPerRequest lists the JSON-RPC methods per request, most frequent first.
func (r result) rpcPerRequest() string {
	var ms []string
	for m := range r.rpc {
		if m != roundTrips {
			ms = append(ms, m)
		}
	}
	sort.Slice(ms, func(i, j int) bool { return r.rpc[ms[i]] > r.rpc[ms[j]] })
	var parts []string
	for _, m := range ms {
		parts = append(parts, fmt.Sprintf("%s %.2f", m, r.perRequest(m)))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

func (r result) rate() float64 { return float64(r.ok) / r.elapsed.Seconds() }

func (r result) successPct() float64 {
	if r.ok+r.failed == 0 {
		return 0
	}
	return 100 * float64(r.ok) / float64(r.ok+r.failed)
}

func pct(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	i := int(q*float64(len(s))+0.5) - 1
	i = max(0, min(i, len(s)-1))
	return s[i]
}

func (r result) topReasons() string {
	type kv struct {
		k string
		v int
	}
	var l []kv
	for k, v := range r.reasons {
		l = append(l, kv{k, v})
	}
	sort.Slice(l, func(i, j int) bool { return l[i].v > l[j].v })
	var parts []string
	for i, e := range l {
		if i == 3 {
			break
		}
		parts = append(parts, fmt.Sprintf("%d× %s", e.v, e.k))
	}
	return strings.Join(parts, "; ")
}

// job builds request i and judges its answer: ok, and the settlement tx hash if one was named.
type job struct {
	request func(i int) (*http.Request, error)
	judge   func(resp *http.Response, body []byte) (ok bool, tx string, reason string)
	limit   int // at most this many requests (0: no limit)
}

// closedLoop runs job from conc workers for d (or until limit requests were sent).
func closedLoop(conc int, d time.Duration, j job) result {
	var (
		next atomic.Int64
		mu   sync.Mutex
		res  = result{reasons: map[string]int{}}
		wg   sync.WaitGroup
	)
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	start := time.Now()
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if j.limit > 0 && i >= j.limit {
					return
				}
				req, err := j.request(i)
				if err != nil {
					panic(fatalError{fmt.Sprintf("build request: %v", err)})
				}
				t0 := time.Now()
				resp, err := loadClient.Do(req)
				var ok bool
				var tx, reason string
				if err != nil {
					reason = "transport: " + err.Error()
				} else {
					body, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					ok, tx, reason = j.judge(resp, body)
				}
				lat := time.Since(t0)
				mu.Lock()
				if ok {
					res.ok++
					res.lat = append(res.lat, lat)
				} else {
					res.failed++
					res.reasons[reason]++
				}
				mu.Unlock()
				if ok && tx != "" {
					txSeen(tx, lat)
				}
			}
		}()
	}
	wg.Wait()
	res.elapsed = time.Since(start)
	return res
}

// txLatencies collects, per settled tx hash, the latency of the request that settled it.
var txLatencies struct {
	mu sync.Mutex
	m  map[string]time.Duration
}

func txSeen(tx string, lat time.Duration) {
	txLatencies.mu.Lock()
	defer txLatencies.mu.Unlock()
	if txLatencies.m == nil {
		txLatencies.m = map[string]time.Duration{}
	}
	txLatencies.m[strings.ToLower(tx)] = lat
}

func takeTxLatencies() map[string]time.Duration {
	txLatencies.mu.Lock()
	defer txLatencies.mu.Unlock()
	m := txLatencies.m
	txLatencies.m = nil
	return m
}

// settledTx reads the transaction hash from an X-PAYMENT-RESPONSE header.
func settledTx(resp *http.Response) string {
	h := resp.Header.Get("X-Payment-Response")
	if h == "" {
		return ""
	}
	raw, err := base64.StdEncoding.DecodeString(h)
	if err != nil {
		return ""
	}
	var sr struct {
		Success     bool   `json:"success"`
		Transaction string `json:"transaction"`
	}
	if json.Unmarshal(raw, &sr) != nil || !sr.Success {
		return ""
	}
	return sr.Transaction
}

func snippet(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 120 {
		s = s[:120] + "…"
	}
	return s
}
