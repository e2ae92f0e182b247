package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"runtime"
	"sync"

	"github.com/x402gate/x402gate/gate/gatetest"
	"github.com/x402gate/x402gate/x402"
)

// --- 3b. Ways to pay ------------------------------------------------------------------------
//
// Exact over Permit2 and upto (metered, over Permit2) on our gate, beside exact over EIP-3009
// on the same run (docs/gate.md#permit2, docs/gate.md#metering). The reference x402 1.2.0
// peers speak neither, so the peer column is our EIP-3009 route. Every payer approved
// Permit2 once, before the runs; the upto route's upstream reports half the price.

// schemes runs the paid path of each way to pay at concurrency 1, 8 and 64.
func (e *env) schemes() {
	e.approvePermit2()
	base := e.gateURL[:len(e.gateURL)-len(paidPath)]
	ways := []struct {
		name, url string
	}{
		{"exact over EIP-3009 (v1)", e.gateURL},
		{"exact over Permit2 (v2)", base + permit2Path},
		{"upto over Permit2 (v2, 50% metered)", base + uptoPath},
	}
	pools := make([]func(n int) []payment, len(ways))
	pools[0] = e.signer.pool
	for i := 1; i < len(ways); i++ {
		req := e.offer(ways[i].url)
		pools[i] = func(n int) []payment { return e.v2Pool(req, n) }
	}
	for i, w := range ways {
		if r := e.paidRunOf(w.url, 2, pools[i](4), nil); r.ok == 0 {
			e.tb.Fatalf("paid warm-up of %s: nothing settled: %s", w.name, r.topReasons())
		}
	}
	sec := "3b. Paid requests by way of paying (ours; the peer column is our exact over EIP-3009)"
	pids := []int{e.caddy.pid()}
	for _, conc := range []int{1, 8, 64} {
		n := 4000
		if conc == 1 {
			n = 1000
		}
		runs := make([]result, len(ways))
		for i, w := range ways {
			logf("schemes c=%d: %s, %s", conc, w.name, e.c.paidDur)
			quiesce()
			runs[i] = e.paidRunOf(w.url, conc, pools[i](n), pids)
			logf("  %d ok / %d failed, %.1f/s, p50 %.1f ms, p99 %.1f ms; %s", runs[i].ok, runs[i].failed, runs[i].rate(),
				ms(pct(runs[i].lat, .5)), ms(pct(runs[i].lat, .99)), runs[i].topReasons())
		}
		ref := runs[0]
		for i, w := range ways[1:] {
			r := runs[i+1]
			e.rep.add(row{section: sec, measure: fmt.Sprintf("c=%d: %s: settled requests/s", conc, w.name),
				ours: fmt.Sprintf("%.1f", r.rate()), peer: fmt.Sprintf("%.1f", ref.rate()), ratio: r.rate() / ref.rate(), higherBetter: true,
				note: fmt.Sprintf("success: %s; EIP-3009 %s", okPct([]result{r}), okPct([]result{ref}))})
			e.rep.add(row{section: sec, measure: fmt.Sprintf("c=%d: %s: p50 / p99 (ms)", conc, w.name),
				ours:  fmt.Sprintf("%.1f / %.1f", ms(pct(r.lat, .5)), ms(pct(r.lat, .99))),
				peer:  fmt.Sprintf("%.1f / %.1f", ms(pct(ref.lat, .5)), ms(pct(ref.lat, .99))),
				ratio: ms(pct(ref.lat, .5)) / ms(pct(r.lat, .5)), higherBetter: true, note: "ratio of the p50s, EIP-3009/this"})
		}
	}
}

// approvePermit2 places Permit2 and the x402 proxies at their canonical addresses and has
// every payer give Permit2 its one-time allowance of the token (ERC-20 approve of the
// largest amount, as the x402 clients approve).
func (e *env) approvePermit2() {
	e.chain.InstallPermit2(e.tb)
	data := append([]byte{0x09, 0x5e, 0xa7, 0xb3}, make([]byte, 12)...) // approve(address,uint256)
	data = append(append(data, x402.Permit2Address[:]...), bytes.Repeat([]byte{0xff}, 32)...)
	for _, a := range e.chain.Accounts[2:] {
		e.chain.Transact(e.tb, a, e.token.Address, data)
	}
}

// offer is the first requirement of url's 402, as a v2 client reads PAYMENT-REQUIRED.
func (e *env) offer(url string) *x402.Requirements {
	resp, err := http.Get(url)
	if err != nil {
		e.tb.Fatalf("GET %s: %v", url, err)
	}
	_ = resp.Body.Close()
	pr, err := x402.DecodePaymentRequired(resp.Header.Get("PAYMENT-REQUIRED"))
	if err != nil {
		e.tb.Fatalf("PAYMENT-REQUIRED of %s: %v", url, err)
	}
	raw, _ := json.Marshal(pr.Accepts[0])
	req, err := x402.DecodeRequirementsJSON(raw, x402.Version2, nil)
	if err != nil {
		e.tb.Fatalf("the requirement of %s: %v", url, err)
	}
	req.Resource = *pr.Resource
	return req
}

// v2Pool signs n v2 payments of req (Permit2, exact or upto, as req asks), on every core,
// spread over the payers round-robin.
func (e *env) v2Pool(req *x402.Requirements, n int) []payment {
	out := make([]payment, n)
	var wg sync.WaitGroup
	workers := runtime.NumCPU()
	for w := range workers {
		wg.Go(func() {
			for i := w; i < n; i += workers {
				p := e.signer.payers[i%len(e.signer.payers)]
				name, value, err := (&gatetest.Payer{Key: p.key, Address: p.addr}).Pay(x402.Version2, req, nil)
				if err != nil {
					panic(fatalError{fmt.Sprintf("sign %s: %v", req.Scheme, err)})
				}
				out[i] = payment{header: value, name: name}
			}
		})
	}
	wg.Wait()
	return out
}
