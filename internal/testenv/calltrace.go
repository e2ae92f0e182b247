package testenv

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// CallTracer is a JSON-RPC endpoint in front of a real node that forwards every request
// as it is and records when each began and ended, with the methods it carried: the round
// trips of a client, one after another, for a trace of where a request's time goes.
type CallTracer struct {
	// URL is the endpoint to give the client instead of the node's.
	URL string

	mu    sync.Mutex
	calls []TracedCall
}

// TracedCall is one HTTP request to the node: a JSON-RPC call or a batch.
type TracedCall struct {
	Start, End time.Time
	// Methods names the calls of the request, a batch's joined by "+"; a call whose
	// result was null (a receipt not there yet) is marked "(null)".
	Methods string
}

// TraceCalls starts a CallTracer in front of the node at target; it stops when t ends.
func TraceCalls(t testing.TB, target string) *CallTracer {
	t.Helper()
	ct := &CallTracer{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		resp, err := postJSON(r.Context(), target, body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		out, err := io.ReadAll(resp.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		ct.record(TracedCall{Start: start, End: time.Now(), Methods: methodsOf(body, out)})
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(resp.StatusCode)
		_, _ = w.Write(out)
	}))
	t.Cleanup(srv.Close)
	ct.URL = srv.URL
	return ct
}

func (ct *CallTracer) record(c TracedCall) {
	ct.mu.Lock()
	defer ct.mu.Unlock()
	ct.calls = append(ct.calls, c)
}

// Calls returns the requests recorded since the last Reset, in the order they ended.
func (ct *CallTracer) Calls() []TracedCall {
	ct.mu.Lock()
	defer ct.mu.Unlock()
	return append([]TracedCall(nil), ct.calls...)
}

// Reset forgets the requests recorded so far.
func (ct *CallTracer) Reset() {
	ct.mu.Lock()
	defer ct.mu.Unlock()
	ct.calls = nil
}

// methodsOf names the calls of one request body (one call or a batch), each marked
// "(null)" when its answer's result was null.
func methodsOf(body, answer []byte) string {
	type call struct {
		Method string          `json:"method"`
		Result json.RawMessage `json:"result"`
	}
	var calls, answers []call
	if json.Unmarshal(body, &calls) != nil {
		var one, a call
		_ = json.Unmarshal(body, &one)
		_ = json.Unmarshal(answer, &a)
		calls, answers = []call{one}, []call{a}
	} else {
		_ = json.Unmarshal(answer, &answers)
	}
	names := make([]string, len(calls))
	for i, c := range calls {
		names[i] = c.Method
		if i < len(answers) && string(answers[i].Result) == "null" {
			names[i] += "(null)"
		}
	}
	return strings.Join(names, "+")
}

// Span is one timed phase of a traced request.
type Span struct {
	Start, End time.Time
	What       string
}

// LogTrace logs spans and the calls recorded since the last Reset ("rpc " and their
// methods) in the order they began: start and end from the first start, and duration, in
// milliseconds. It returns what each was, in that order.
func (ct *CallTracer) LogTrace(t testing.TB, spans []Span) []string {
	t.Helper()
	all := slices.Clone(spans)
	for _, c := range ct.Calls() {
		all = append(all, Span{Start: c.Start, End: c.End, What: "rpc " + c.Methods})
	}
	if len(all) == 0 {
		return nil
	}
	slices.SortStableFunc(all, func(a, b Span) int { return a.Start.Compare(b.Start) })
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	t0 := all[0].Start
	names := make([]string, len(all))
	for i, s := range all {
		t.Logf("%8.3f ms %8.3f ms  %7.3f ms  %s", ms(s.Start.Sub(t0)), ms(s.End.Sub(t0)), ms(s.End.Sub(s.Start)), s.What)
		names[i] = s.What
	}
	return names
}
