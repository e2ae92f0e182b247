package testenv

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/core/types"
)

// GethAccountSlots is go-ethereum's default number of executable transaction slots per
// account in its pool (txpool.legacypool AccountSlots).
const GethAccountSlots = 16

// PendingProxy is a JSON-RPC reverse proxy in front of anvil that admits at most Limit
// pending transactions per sender, as a go-ethereum node's pool bounds one account: the
// transaction past the limit is refused with geth's error text ("account limit
// exceeded"). A transaction is pending from its eth_sendRawTransaction until the
// sender's mined nonce passes it; a replacement of a pending nonce takes no new slot.
// Anvil itself admits any number, so without the proxy one signer key is not bounded the
// way it is on a real node.
type PendingProxy struct {
	// URL is the proxy's JSON-RPC endpoint.
	URL string
	// Limit is the pending transactions admitted per sender.
	Limit int

	chain   *Chain
	refused atomic.Int64
	mu      sync.Mutex
	pending map[common.Address]map[uint64]bool // nonces admitted and not known mined
}

// StartPendingProxy starts a PendingProxy for c on loopback, admitting limit pending
// transactions per sender, and stops it at the test's end.
func StartPendingProxy(t testing.TB, c *Chain, limit int) *PendingProxy {
	t.Helper()
	p := &PendingProxy{Limit: limit, chain: c, pending: map[common.Address]map[uint64]bool{}}
	srv := httptest.NewServer(http.HandlerFunc(p.serve))
	t.Cleanup(srv.Close)
	p.URL = srv.URL
	return p
}

// Refused is how many transactions the proxy refused for the limit.
func (p *PendingProxy) Refused() int64 { return p.refused.Load() }

// rpcMsg is one JSON-RPC request or reply, kept raw where the proxy does not look.
type rpcMsg struct {
	JSONRPC string            `json:"jsonrpc"`
	ID      json.RawMessage   `json:"id,omitempty"`
	Method  string            `json:"method,omitempty"`
	Params  []json.RawMessage `json:"params,omitempty"`
	Result  json.RawMessage   `json:"result,omitempty"`
	Error   *rpcErr           `json:"error,omitempty"`
}

type rpcErr struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// serve admits or refuses each eth_sendRawTransaction of a request (single or batch) and
// forwards the rest to anvil.
func (p *PendingProxy) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var batch []rpcMsg
	single := len(bytes.TrimSpace(body)) > 0 && bytes.TrimSpace(body)[0] == '{'
	if single {
		var m rpcMsg
		err = json.Unmarshal(body, &m)
		batch = []rpcMsg{m}
	} else {
		err = json.Unmarshal(body, &batch)
	}
	if err != nil {
		p.forward(w, r.Context(), body) // let anvil answer what the proxy cannot read
		return
	}
	var forward []rpcMsg
	var replies []rpcMsg
	for _, m := range batch {
		if m.Method == "eth_sendRawTransaction" && !p.admit(r.Context(), m) {
			p.refused.Add(1)
			replies = append(replies, rpcMsg{JSONRPC: "2.0", ID: m.ID,
				Error: &rpcErr{Code: -32000, Message: fmt.Sprintf("account limit exceeded: pooled %d txs", p.Limit)}})
			continue
		}
		forward = append(forward, m)
	}
	if len(forward) > 0 {
		got, err := p.roundTrip(r.Context(), forward, single)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		replies = append(replies, got...)
	}
	w.Header().Set("Content-Type", "application/json")
	if single {
		_ = json.NewEncoder(w).Encode(replies[0])
		return
	}
	_ = json.NewEncoder(w).Encode(replies)
}

// admit decides one eth_sendRawTransaction: true when its sender has fewer than Limit
// transactions pending, or the nonce is one of them (a replacement). A transaction the
// proxy cannot decode is admitted, for anvil to refuse.
func (p *PendingProxy) admit(ctx context.Context, m rpcMsg) bool {
	var raw hexutil.Bytes
	if len(m.Params) != 1 || json.Unmarshal(m.Params[0], &raw) != nil {
		return true
	}
	tx := new(types.Transaction)
	if tx.UnmarshalBinary(raw) != nil {
		return true
	}
	from, err := types.Sender(types.LatestSignerForChainID(p.chain.ChainID), tx)
	if err != nil {
		return true
	}
	mined, err := p.chain.Client.NonceAt(ctx, from, nil)
	if err != nil {
		return true
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	set := p.pending[from]
	if set == nil {
		set = map[uint64]bool{}
		p.pending[from] = set
	}
	for n := range set {
		if n < mined {
			delete(set, n)
		}
	}
	if tx.Nonce() < mined || set[tx.Nonce()] {
		return true // anvil answers a nonce too low; a replacement takes no new slot
	}
	if len(set) >= p.Limit {
		return false
	}
	set[tx.Nonce()] = true
	return true
}

// roundTrip sends msgs to anvil, as one request or a batch, and returns its replies.
func (p *PendingProxy) roundTrip(ctx context.Context, msgs []rpcMsg, single bool) ([]rpcMsg, error) {
	var body []byte
	var err error
	if single {
		body, err = json.Marshal(msgs[0])
	} else {
		body, err = json.Marshal(msgs)
	}
	if err != nil {
		return nil, err
	}
	resp, err := p.post(ctx, body)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if single {
		var m rpcMsg
		if err := json.Unmarshal(out, &m); err != nil {
			return nil, fmt.Errorf("anvil reply: %w", err)
		}
		return []rpcMsg{m}, nil
	}
	var ms []rpcMsg
	if err := json.Unmarshal(out, &ms); err != nil {
		return nil, fmt.Errorf("anvil batch reply: %w", err)
	}
	return ms, nil
}

// forward passes body to anvil as it is and copies the reply back.
func (p *PendingProxy) forward(w http.ResponseWriter, ctx context.Context, body []byte) {
	forwardJSON(w, ctx, p.chain.RPCURL, body)
}

// post sends body to anvil.
func (p *PendingProxy) post(ctx context.Context, body []byte) (*http.Response, error) {
	return postJSON(ctx, p.chain.RPCURL, body)
}

// forwardJSON posts body to target and copies the reply (status and body) to w; a target
// that cannot be reached is a 502.
func forwardJSON(w http.ResponseWriter, ctx context.Context, target string, body []byte) {
	resp, err := postJSON(ctx, target, body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
}

// postJSON posts the JSON body to target.
func postJSON(ctx context.Context, target string, body []byte) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	return http.DefaultClient.Do(req)
}
