// Package txsender signs and sends a facilitator's transactions on one EVM chain
// (docs/facilitator.md#settle-order): a Node is the chain's JSON-RPC endpoint, with batches
// that degrade to one call per request and errors that never carry its URL; a Sender owns
// one signer's nonce, batches concurrent sends, journals each transaction before it is
// broadcast, fills nonce gaps and signs fee-bumped replacements.
package txsender

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ethereum/go-ethereum/ethclient"
	"github.com/ethereum/go-ethereum/rpc"
	"go.uber.org/zap"

	"github.com/x402gate/x402gate/internal/jsonhttp"
	"github.com/x402gate/x402gate/internal/redact"
)

// ErrRPCUnavailable is the sentinel of every failure to reach a chain's RPC endpoint. Its
// text never carries the endpoint URL, which may embed an API key.
var ErrRPCUnavailable = errors.New("rpc unavailable")

// ErrCallReverted marks a call the node answered with an error (usually a revert).
var ErrCallReverted = errors.New("call reverted")

// Node is one chain's JSON-RPC endpoint.
type Node struct {
	// Client is the endpoint's client.
	Client   *ethclient.Client
	network  string        // the CAIP-2 id, for errors and logs
	timeout  time.Duration // bounds a request no caller's context ends
	redactor *strings.Replacer
	// requests counts the HTTP requests sent to the endpoint (a JSON-RPC batch is one).
	requests *atomic.Int64
	// oneByOneUntil (unix nanos): the endpoint refused a JSON-RPC batch request
	// (batchRefused), so until then the calls of a batch go in requests of their own
	// (BatchCall); batching is tried again after batchRetry.
	oneByOneUntil atomic.Int64
	log           *zap.Logger
}

// Dial makes the client of the endpoint url of network (a CAIP-2 id), whose every
// request is bounded by timeout, whatever its caller's context. An http or https endpoint
// is not contacted: the first call connects. Errors never carry the URL.
func Dial(network, url string, timeout time.Duration, log *zap.Logger) (*Node, error) {
	red := redact.URL(url, "rpc")
	// Settles at once share the endpoint: keep their connections (jsonhttp.NewTransport).
	rt := &countingTransport{next: jsonhttp.NewTransport()}
	rc, err := rpc.DialOptions(context.Background(), url, rpc.WithHTTPClient(&http.Client{Timeout: timeout, Transport: rt}))
	if err != nil {
		return nil, fmt.Errorf("network %s: dial: %w: %s", network, ErrRPCUnavailable, red.Replace(err.Error()))
	}
	if log == nil {
		log = zap.NewNop()
	}
	return &Node{Client: ethclient.NewClient(rc), network: network, timeout: timeout, redactor: red, requests: &rt.n, log: log}, nil
}

// Requests is the number of HTTP requests sent to the endpoint so far.
func (c *Node) Requests() int64 { return c.requests.Load() }

// Close closes the client.
func (c *Node) Close() { c.Client.Close() }

// batchRetry is how long a chain whose endpoint refused a batch request sends each call
// alone before it tries a batch again.
const batchRetry = 10 * time.Minute

// BatchCall makes the calls of batch in one JSON-RPC batch request, bounded by
// the node's timeout, and sets each one's Result or Error; its error is the request's
// failure, for all of them.
//
// An endpoint that does not take batches (docs/facilitator.md#rpc-batches: some providers
// refuse them, or cap their size) gets each call in a request of its own: when it refuses
// a batch request as a whole (batchRefused), and then for batchRetry; and a call its batch
// reply left out is made again alone. Every call batched here is a read, or the broadcast
// of a signed transaction, which the node takes once however often it gets the same bytes:
// making a call again never makes a second settlement. But a broadcast made again after a
// batch that may have delivered it can fail because the first one was taken ("nonce too
// low" once it is mined), so its failure, other than "already known", says nothing certain
// (errMaybeSent).
func (c *Node) BatchCall(ctx context.Context, batch []rpc.BatchElem) error {
	if time.Now().UnixNano() < c.oneByOneUntil.Load() {
		c.callEach(ctx, batch, nil, false)
		return nil
	}
	bctx, cancel := context.WithTimeout(ctx, c.timeout)
	err := c.Client.Client().BatchCallContext(bctx, batch)
	cancel()
	if err == nil {
		var missing []int
		for i := range batch {
			if errors.Is(batch[i].Error, rpc.ErrMissingBatchResponse) {
				missing = append(missing, i)
			}
		}
		if len(missing) > 0 {
			c.callEach(ctx, batch, missing, true)
		}
		return nil
	}
	if !batchRefused(err) {
		return err
	}
	c.oneByOneUntil.Store(time.Now().Add(batchRetry).UnixNano())
	if c.log != nil {
		c.log.Warn("the RPC endpoint refused a JSON-RPC batch request: each call goes in a request of its own for a while",
			zap.String("network", c.network), zap.Duration("for", batchRetry), zap.String("error", c.Redact(err)))
	}
	c.callEach(ctx, batch, nil, true)
	return nil
}

// callEach makes the calls of batch at the indexes idx (all when nil) one request each, in
// order, within one the node's timeout. After a failure to reach the endpoint, the calls
// left are not made. maybeDelivered: a batch request that may have reached the node
// carried these calls already, so a broadcast that fails now, or is not made, may have
// been taken (errMaybeSent); otherwise a call not made certainly was not
// (errRequestNotSent).
func (c *Node) callEach(ctx context.Context, batch []rpc.BatchElem, idx []int, maybeDelivered bool) {
	if idx == nil {
		idx = make([]int, len(batch))
		for i := range idx {
			idx[i] = i
		}
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	var stop error // the failure to reach the endpoint that ended the loop
	for _, i := range idx {
		el := &batch[i]
		var err error
		if stop != nil {
			err = fmt.Errorf("%w: %s", errRequestNotSent, c.Redact(stop))
		} else {
			err = c.Client.Client().CallContext(ctx, el.Result, el.Method, el.Args...)
			if err != nil && !IsRPCReply(err) {
				stop = err
			}
		}
		if err != nil && maybeDelivered && el.Method == "eth_sendRawTransaction" && !isAlreadyKnown(err) {
			err = fmt.Errorf("%w: %s", errMaybeSent, c.Redact(err))
		}
		el.Error = err
	}
}

// errMaybeSent: a broadcast made again after a batch request that may have delivered it
// failed, or was not made: the transaction may be in the node's pool or mined all the
// same. It is neither an RPC reply nor a refused connection, so the sender takes its
// outcome as unknown (ErrBroadcastUnknown), for a receipt or reconcile to decide.
var errMaybeSent = errors.New("sent again after a batch that may have delivered it")

// countingTransport counts the HTTP requests it forwards to next: the RPC requests a
// chain costs its node (bench/pipeline.md reports them per settle).
type countingTransport struct {
	next http.RoundTripper
	n    atomic.Int64
}

func (t *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	t.n.Add(1)
	return t.next.RoundTrip(r)
}

// Redact returns err's text without the RPC URL, for logs. Callers still never put it in
// a response.
func (c *Node) Redact(err error) string {
	if err == nil {
		return ""
	}
	return c.redactor.Replace(err.Error())
}

// IsRPCReply reports whether err is an answer of the node (a JSON-RPC error object, such
// as a revert), as opposed to a failure to reach it.
func IsRPCReply(err error) bool {
	var re rpc.Error
	return errors.As(err, &re)
}

// Unavailable wraps a transport failure as ErrRPCUnavailable for the op, without the URL.
func (c *Node) Unavailable(op string, err error) error {
	return &ChainError{op: op, network: c.network, detail: c.Redact(err)}
}

// ChainError is a failure to reach a chain. Error() names the operation and network only;
// Detail is the redacted cause for logs.
type ChainError struct {
	op, network, detail string
}

// Error says what the node did not answer, without its URL.
func (e *ChainError) Error() string {
	return fmt.Sprintf("%s on %s: %s", e.op, e.network, ErrRPCUnavailable)
}

// Unwrap is ErrRPCUnavailable, so callers test for it with errors.Is.
func (e *ChainError) Unwrap() error { return ErrRPCUnavailable }

// Detail is the cause with the RPC URL removed.
func (e *ChainError) Detail() string { return e.detail }

// OneByOne reports whether the calls of a batch go in requests of their own for now,
// since the endpoint refused a batch request (BatchCall).
func (c *Node) OneByOne() bool { return time.Now().UnixNano() < c.oneByOneUntil.Load() }
