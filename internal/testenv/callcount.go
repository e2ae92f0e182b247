package testenv

import (
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// CallCounter is a JSON-RPC endpoint in front of a real node that forwards every request
// as it is and counts the eth_call requests (batched or not) whose calldata starts with
// one 4-byte selector: how often a client reads one contract function.
type CallCounter struct {
	// URL is the endpoint to give the client instead of the node's.
	URL      string
	selector string
	n        atomic.Int64
}

// CountCalls starts a CallCounter in front of the node at target for the function of
// selector; it stops when t ends.
func CountCalls(t testing.TB, target string, selector []byte) *CallCounter {
	t.Helper()
	cc := &CallCounter{selector: "0x" + hex.EncodeToString(selector)}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		cc.n.Add(cc.count(body))
		forwardJSON(w, r.Context(), target, body)
	}))
	t.Cleanup(srv.Close)
	cc.URL = srv.URL
	return cc
}

// Calls is the number of counted calls so far.
func (cc *CallCounter) Calls() int64 { return cc.n.Load() }

// count is the number of counted calls in one request body: one call or a batch.
func (cc *CallCounter) count(body []byte) int64 {
	type call struct {
		Method string `json:"method"`
		Params []json.RawMessage
	}
	var calls []call
	if json.Unmarshal(body, &calls) != nil {
		var one call
		if json.Unmarshal(body, &one) != nil {
			return 0
		}
		calls = []call{one}
	}
	var n int64
	for _, c := range calls {
		if c.Method != "eth_call" || len(c.Params) == 0 {
			continue
		}
		var arg struct{ Data, Input string }
		if json.Unmarshal(c.Params[0], &arg) != nil {
			continue
		}
		if strings.HasPrefix(strings.ToLower(arg.Data+arg.Input), cc.selector) {
			n++
		}
	}
	return n
}
