package facilitator

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/x402gate/x402gate/facilitator/txsender"
)

// batchlessNode forwards JSON-RPC requests to the real node at target, as a provider that
// does not take batches as they are would (a fault anvil does not make): how says what it
// does with a request of more than one call.
//   - "400": answers HTTP 400 with one error object, forwarding nothing;
//   - "object": answers 200 with one error object, forwarding nothing;
//   - "omit": forwards all calls but the second, and leaves the second's reply out;
//   - "lost": forwards all calls, and leaves the second's reply out;
//   - "malformed": forwards all calls, and answers the second broadcast of a batch of
//     broadcasts with an error whose code is a string (a list all the same: no refusal of
//     batches, but a reply the client cannot read).
//
// It counts the requests of more than one call it saw.
func batchlessNode(t *testing.T, target, how string, batches *atomic.Int32) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var calls []json.RawMessage
		if json.Unmarshal(body, &calls) == nil && len(calls) > 1 {
			batches.Add(1)
			refusal := []byte(`{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"batch requests are not supported"}}`)
			switch how {
			case "400":
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusBadRequest)
				_, _ = w.Write(refusal)
				return
			case "object":
				w.Header().Set("Content-Type", "application/json")
				_, _ = w.Write(refusal)
				return
			case "omit":
				calls = append(calls[:1], calls[2:]...)
				body, _ = json.Marshal(calls)
			}
		}
		out, err := relay(target, body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		var replies []json.RawMessage
		sends := bytes.Contains(body, []byte(`"eth_sendRawTransaction"`))
		if (how == "lost" || how == "malformed" && sends) && json.Unmarshal(out, &replies) == nil && len(replies) > 1 {
			if how == "lost" {
				replies = append(replies[:1], replies[2:]...)
			} else {
				var second struct{ ID json.RawMessage }
				_ = json.Unmarshal(replies[1], &second)
				replies[1], _ = json.Marshal(map[string]any{"jsonrpc": "2.0", "id": second.ID, "error": map[string]any{"code": "-32000", "message": "busy"}})
			}
			out, _ = json.Marshal(replies)
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(out)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestBroadcastWithoutBatches: against a node that refuses JSON-RPC batches, with HTTP 400
// or with one error object, the sender sends the transactions of the refused batch one
// request each (the same signed bytes), and every later batch that way: all are taken and
// mined, each once. Against a node whose batch reply leaves a transaction out, that one is
// sent again alone: mined, and answered as mined when the node had not got it ("omit"), or
// as of unknown outcome, never as not broadcast, when the node had taken it already and
// answers the second send with "nonce too low" ("lost"). A batch reply with a malformed
// element is no refusal of batches: the batch's outcome is unknown, and all are mined.
func TestBroadcastWithoutBatches(t *testing.T) {
	for _, how := range []string{"400", "object", "omit", "lost", "malformed"} {
		t.Run(how, func(t *testing.T) {
			env := newTestEnv(t)
			var batches atomic.Int32
			cfg := env.config(t)
			cfg.Networks[0].RPC = batchlessNode(t, env.chain.RPCURL, how, &batches)
			e := env.engine(t, cfg)
			s, payee, before, start := synced(t, env, e)

			first := sendAsOneBatch(t, s, settleCalls(t, env, e, 2, 3))
			second := sendAsOneBatch(t, s, settleCalls(t, env, e, 5, 2))
			for i, a := range append(first, second...) {
				if (how == "lost" && i%3 == 1 || how == "malformed") && a.tx != nil && errors.Is(a.err, txsender.ErrBroadcastUnknown) {
					a.err = nil // taken, but its reply did not say so: its outcome is for the receipt to tell
				}
				wantMined(t, s, i, a)
			}
			wantMoved(t, env, payee, before, 5, start, 5)
			// Refused: the first batch (a verify's token state) is the last one sent. A
			// partial or malformed reply is no refusal: batches go on.
			got, oneByOne := batches.Load(), e.order[0].OneByOne()
			refused := how == "400" || how == "object"
			if refused && (got != 1 || !oneByOne) || !refused && (got < 3 || oneByOne) {
				t.Errorf("the node saw %d batch requests, one call per request from then on: %v", got, oneByOne)
			}
		})
	}
}
