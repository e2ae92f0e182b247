package main

import (
	"bytes"
	"encoding/json"
	"io"
	"maps"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// rpcProxy forwards JSON-RPC over HTTP to anvil and, while recording, times the calls that
// are the chain's part of a settlement: eth_sendRawTransaction (start, end, tx hash) and the
// first eth_getTransactionReceipt that returns a receipt for that hash. Both facilitators
// are pointed at it, so both pay the same extra hop.
type rpcProxy struct {
	target string
	client *http.Client
	srv    *http.Server
	url    string

	mu        sync.Mutex
	recording bool
	txs       map[string]*txTiming
	counts    map[string]int // JSON-RPC calls by method while recording
}

// roundTrips is the key of calls() that counts HTTP requests to the node (a batch is one).
const roundTrips = "(round trips)"

type txTiming struct {
	sendStart, sendEnd, receiptAt time.Time
}

type rpcCall struct {
	Method string            `json:"method"`
	Params []json.RawMessage `json:"params"`
}

type rpcAnswer struct {
	Result json.RawMessage `json:"result"`
}

func newRPCProxy(target string) (*rpcProxy, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &rpcProxy{
		target: target,
		client: &http.Client{Transport: &http.Transport{MaxIdleConns: 512, MaxIdleConnsPerHost: 512, IdleConnTimeout: time.Minute}},
		url:    "http://" + l.Addr().String(),
		txs:    map[string]*txTiming{},
		counts: map[string]int{},
	}
	p.srv = &http.Server{Handler: p}
	go func() { _ = p.srv.Serve(l) }()
	return p, nil
}

func (p *rpcProxy) close() { _ = p.srv.Close() }

// record starts (or stops) recording and forgets what was recorded.
func (p *rpcProxy) record(on bool) {
	p.mu.Lock()
	p.recording = on
	p.txs = map[string]*txTiming{}
	p.counts = map[string]int{}
	p.mu.Unlock()
}

// calls returns the JSON-RPC calls by method since record(true).
func (p *rpcProxy) calls() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return maps.Clone(p.counts)
}

// chainTime returns, for a tx hash, the time from the start of its eth_sendRawTransaction to
// the answer that carried its receipt, and the eth_sendRawTransaction call alone.
func (p *rpcProxy) chainTime(hash string) (total, send time.Duration, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	t := p.txs[strings.ToLower(hash)]
	if t == nil || t.sendStart.IsZero() || t.receiptAt.IsZero() {
		return 0, 0, false
	}
	return t.receiptAt.Sub(t.sendStart), t.sendEnd.Sub(t.sendStart), true
}

func (p *rpcProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 8<<20))
	if err != nil {
		http.Error(w, "read", http.StatusBadRequest)
		return
	}
	p.mu.Lock()
	recording := p.recording
	p.mu.Unlock()
	var calls []rpcCall
	if recording {
		trimmed := bytes.TrimSpace(body)
		if len(trimmed) > 0 && trimmed[0] == '[' {
			_ = json.Unmarshal(trimmed, &calls)
		} else {
			var c rpcCall
			if json.Unmarshal(trimmed, &c) == nil {
				calls = []rpcCall{c}
			}
		}
	}
	startAt := time.Now()
	req, err := http.NewRequestWithContext(r.Context(), http.MethodPost, p.target, bytes.NewReader(body))
	if err != nil {
		http.Error(w, "proxy", http.StatusBadGateway)
		return
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := p.client.Do(req)
	if err != nil {
		http.Error(w, "proxy", http.StatusBadGateway)
		return
	}
	out, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	endAt := time.Now()
	if err != nil {
		http.Error(w, "proxy", http.StatusBadGateway)
		return
	}
	if recording && len(calls) > 0 {
		p.note(calls, out, startAt, endAt)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(out)
}

// note matches the calls of one request with their answers (a batch's answers may come in any
// order, but the two methods timed here are never batched by either facilitator; a batch is
// matched by position, which anvil keeps).
func (p *rpcProxy) note(calls []rpcCall, out []byte, startAt, endAt time.Time) {
	var answers []rpcAnswer
	trimmed := bytes.TrimSpace(out)
	if len(trimmed) > 0 && trimmed[0] == '[' {
		_ = json.Unmarshal(trimmed, &answers)
	} else {
		var a rpcAnswer
		if json.Unmarshal(trimmed, &a) == nil {
			answers = []rpcAnswer{a}
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.counts[roundTrips]++
	for _, c := range calls {
		p.counts[c.Method]++
	}
	for i, c := range calls {
		if i >= len(answers) {
			break
		}
		switch c.Method {
		case "eth_sendRawTransaction":
			var hash string
			if json.Unmarshal(answers[i].Result, &hash) != nil || hash == "" {
				continue
			}
			t := p.tx(hash)
			t.sendStart, t.sendEnd = startAt, endAt
		case "eth_getTransactionReceipt":
			if len(c.Params) == 0 || len(answers[i].Result) == 0 || string(answers[i].Result) == "null" {
				continue
			}
			var hash string
			if json.Unmarshal(c.Params[0], &hash) != nil {
				continue
			}
			if t := p.tx(hash); t.receiptAt.IsZero() {
				t.receiptAt = endAt
			}
		}
	}
}

func (p *rpcProxy) tx(hash string) *txTiming {
	hash = strings.ToLower(hash)
	t := p.txs[hash]
	if t == nil {
		t = &txTiming{}
		p.txs[hash] = t
	}
	return t
}
