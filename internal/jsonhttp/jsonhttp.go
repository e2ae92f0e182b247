// Package jsonhttp is one strict JSON-over-HTTP transport for calls to another service: a
// redirect is never followed (it would carry the caller's key and payload to another
// origin), an answer is read up to a size cap, every call has a deadline, and no error
// carries the URL, whose user info, query or path can hold a secret.
package jsonhttp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"
)

// DefaultMaxBytes caps an answer when New is given no cap: 1 MiB.
const DefaultMaxBytes = 1 << 20

// Errors of Do. A Response that arrived is returned beside ErrRedirect and ErrTooLarge,
// so a caller can tell the status.
var (
	// ErrRedirect: the answer was a redirect (3xx), which is never followed.
	ErrRedirect = errors.New("redirect refused")
	// ErrTooLarge: the answer exceeded the cap, by Content-Length or by what arrived.
	ErrTooLarge = errors.New("response too large")
	// ErrUnreachable: the request could not be sent or its answer not read (connection
	// refused or reset, the per-call deadline) while the caller's context was live. For a
	// call that changes state the outcome is then unknown.
	ErrUnreachable = errors.New("unreachable")
)

// Client sends JSON requests under one policy. It is safe for concurrent use.
type Client struct {
	hc       *http.Client
	maxBytes int64
	timeout  time.Duration
}

// MaxIdlePerHost is how many idle connections to one host a transport of NewTransport
// keeps: enough for the calls a gate or a facilitator makes to one service at once.
const MaxIdlePerHost = 256

// NewTransport returns a transport with http.DefaultTransport's settings but for idle
// connections: it keeps up to MaxIdlePerHost to one host, where the default keeps 2, so
// concurrent calls to one service (a chain's node, a facilitator, the verdict service)
// reuse their connections instead of opening one per call and leaving it in TIME_WAIT.
func NewTransport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = max(t.MaxIdleConns, MaxIdlePerHost)
	t.MaxIdleConnsPerHost = MaxIdlePerHost
	return t
}

// defaultTransport sends the calls of the Clients made without an http.Client.
var defaultTransport = NewTransport()

// New returns a Client that sends with a copy of hc (a client on a transport of
// NewTransport, shared by such clients, when nil) that never follows redirects, reads at
// most maxBytes of an answer (DefaultMaxBytes when maxBytes <= 0), and bounds each call by
// timeout unless the Request sets its own (no bound of its own when timeout <= 0; the
// caller's context still applies).
func New(hc *http.Client, maxBytes int64, timeout time.Duration) *Client {
	c := &http.Client{Transport: defaultTransport}
	if hc != nil {
		// A shallow copy keeps the caller's Transport and Timeout but lets us replace
		// CheckRedirect without changing the caller's client.
		*c = *hc
	}
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	if maxBytes <= 0 {
		maxBytes = DefaultMaxBytes
	}
	return &Client{hc: c, maxBytes: maxBytes, timeout: timeout}
}

// Request is one call.
type Request struct {
	Method string
	URL    string
	// Header is sent as it is; Accept: application/json is always set.
	Header http.Header
	// Body is sent as application/json; nil sends no body.
	Body []byte
	// Timeout bounds this call instead of the Client's, when > 0.
	Timeout time.Duration
}

// Response is an answer read in full.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// Do sends r and reads the answer, whatever its status. It fails with ErrRedirect for a
// 3xx and ErrTooLarge for an answer over the cap (both beside the Response's status and
// header), with ErrUnreachable for a transport failure, and with the caller's context error
// once ctx is done. No error carries r.URL.
func (c *Client) Do(ctx context.Context, r Request) (Response, error) {
	timeout := c.timeout
	if r.Timeout > 0 {
		timeout = r.Timeout
	}
	rctx := ctx
	if timeout > 0 {
		var cancel context.CancelFunc
		rctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	var body io.Reader
	if r.Body != nil {
		body = bytes.NewReader(r.Body)
	}
	req, err := http.NewRequestWithContext(rctx, r.Method, r.URL, body)
	if err != nil {
		return Response{}, errors.New("cannot build request") // err quotes the URL
	}
	if body == nil {
		// net/http silently resends an idempotent request without a body when a reused
		// keep-alive connection fails; a body without GetBody opts out (see
		// http.Transport). One call is then one request on the wire, so a caller that
		// counts its attempts counts what the service sees.
		req.Body = emptyBody{}
	}
	for k, vs := range r.Header {
		req.Header[k] = vs
	}
	req.Header.Set("Accept", "application/json")
	if r.Body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // url.Error quotes the URL
		}
		return Response{}, unreachable(ctx, err)
	}
	defer resp.Body.Close()
	out := Response{Status: resp.StatusCode, Header: resp.Header}
	if resp.StatusCode >= 300 && resp.StatusCode <= 399 {
		return out, fmt.Errorf("http %d: %w", resp.StatusCode, ErrRedirect)
	}
	if resp.ContentLength > c.maxBytes {
		return out, fmt.Errorf("%w (limit %d bytes)", ErrTooLarge, c.maxBytes)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, c.maxBytes+1))
	if err != nil {
		return out, unreachable(ctx, fmt.Errorf("read answer: %w", err))
	}
	if int64(len(b)) > c.maxBytes {
		return out, fmt.Errorf("%w (limit %d bytes)", ErrTooLarge, c.maxBytes)
	}
	out.Body = b
	return out, nil
}

// emptyBody is an empty request body that net/http does not consider replayable.
type emptyBody struct{}

func (emptyBody) Read([]byte) (int, error) { return 0, io.EOF }
func (emptyBody) Close() error             { return nil }

// unreachable reports a transport failure: the caller's context ending as such, anything
// else, the per-call deadline included, as ErrUnreachable with its cause.
func unreachable(ctx context.Context, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return cerr
	}
	return fmt.Errorf("%w: %w", ErrUnreachable, err)
}
