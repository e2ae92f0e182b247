package verdictclient

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/x402gate/x402gate/verdict"
)

// MaxResponseBytes caps every answer the shared JSON transport reads: 1 MiB. A verdict
// with all twelve checks and its evidence is a few KiB and a transaction record less, so
// the cap leaves two orders of magnitude of headroom while bounding the memory one
// hostile or broken service can make a caller spend. A larger answer (by Content-Length
// or by what actually arrives) fails with ErrResponseTooLarge and is never approval
// (docs/verdict.md#fail-closed: "Larger responses are rejected").
const MaxResponseBytes = 1 << 20

// DefaultTimeout is the per-request timeout when Config.Timeout is zero. The spec leaves
// it open; 10 s is long for a deterministic verdict and short enough that a stuck
// connection frees its caller. The caller's context still bounds everything.
const DefaultTimeout = 10 * time.Second

const userAgent = "x402gate-verdictclient/1"

// jsonTransport is the shared JSON transport (docs/facilitator.md#verification-fee):
// no redirects, a response size cap, a JSON content type on success, and a per-request
// timeout under the caller's context.
type jsonTransport struct {
	hc      *http.Client
	timeout time.Duration
	log     *zap.Logger // never nil
}

func newJSONTransport(hc *http.Client, timeout time.Duration) *jsonTransport {
	c := &http.Client{}
	if hc != nil {
		// A shallow copy keeps the caller's Transport and Timeout but lets us replace
		// CheckRedirect without changing the caller's client.
		*c = *hc
	}
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	return &jsonTransport{hc: c, timeout: timeout, log: zap.NewNop()}
}

// logDone records one finished request at debug level. Only non-sensitive identifiers
// are fields (docs/verdict.md#secrets): the operation, the method, the status, the requestHash. Never
// the URL's query, a body, a header or the key.
func (t *jsonTransport) logDone(c call, status int, err error) {
	ce := t.log.Check(zapcore.DebugLevel, "verdict service request")
	if ce == nil {
		return
	}
	fs := []zap.Field{zap.String("op", c.op), zap.String("method", c.method), zap.Int("status", status)}
	if c.requestHash != "" {
		fs = append(fs, zap.String("requestHash", c.requestHash))
	}
	if err != nil {
		fs = append(fs, zap.Error(err)) // this package's errors never carry the key
	}
	ce.Write(fs...)
}

// call is one request: the operation name for errors, and the secret it must not leak.
type call struct {
	op          string
	method      string
	url         string
	body        []byte // JSON; nil for GET
	apiKey      string // sent as x-api-key when non-empty
	requestHash string // for errors
}

// answer is a response read in full (at most MaxResponseBytes).
type answer struct {
	status int
	header http.Header
	body   []byte
}

// do sends c and returns a 2xx answer whose content type is JSON, or an error: a
// *StatusError for any other status, ErrNetwork for transport failures while ctx is live,
// ctx's own error once ctx is done.
func (t *jsonTransport) do(ctx context.Context, c call) (*answer, error) {
	ans, status, err := t.send(ctx, c)
	t.logDone(c, status, err)
	return ans, err
}

// send is do without the log entry; status is the HTTP status, 0 when none arrived.
func (t *jsonTransport) send(ctx context.Context, c call) (*answer, int, error) {
	if err := ctx.Err(); err != nil {
		return nil, 0, fmt.Errorf("%s: %w", c.op, err)
	}
	// docs/verdict.md#secrets: the key never travels in a URL or a body, whatever the caller put there.
	if c.apiKey != "" && (strings.Contains(c.url, c.apiKey) || bytes.Contains(c.body, []byte(c.apiKey))) {
		return nil, 0, &verdict.InputError{Field: "request", Problem: "the api key appears in the request url or body; refusing to send"}
	}
	rctx, cancel := context.WithTimeout(ctx, t.timeout)
	defer cancel()
	var body io.Reader
	if c.body != nil {
		body = bytes.NewReader(c.body)
	}
	req, err := http.NewRequestWithContext(rctx, c.method, c.url, body)
	if err != nil {
		return nil, 0, &verdict.InputError{Field: "url", Problem: "cannot build request"}
	}
	if body == nil {
		// net/http silently resends an idempotent request without a body when a reused
		// keep-alive connection fails; a body without GetBody opts out (see
		// http.Transport). One attempt is then one request on the wire, so
		// PollOptions.MaxAttempts counts what the service sees.
		req.Body = emptyBody{}
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", userAgent)
	if c.body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.apiKey != "" {
		req.Header.Set("x-api-key", c.apiKey) // docs/verdict.md#secrets; no bearer token alongside
	}
	resp, err := t.hc.Do(req)
	if err != nil {
		return nil, 0, t.netErr(ctx, c, err)
	}
	defer resp.Body.Close()

	if resp.StatusCode >= 300 && resp.StatusCode <= 399 {
		return nil, resp.StatusCode, &StatusError{Op: c.op, Status: resp.StatusCode, RequestHash: c.requestHash}
	}
	tooLarge := fmt.Errorf("%s%s: %w (limit %d bytes)", c.op, hashSuffix(c.requestHash), ErrResponseTooLarge, MaxResponseBytes)
	ok := resp.StatusCode >= 200 && resp.StatusCode <= 299
	if resp.ContentLength > MaxResponseBytes {
		if ok {
			return nil, resp.StatusCode, tooLarge
		}
		return nil, resp.StatusCode, t.statusErr(c, resp, nil)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, MaxResponseBytes+1))
	if err != nil {
		if !ok {
			return nil, resp.StatusCode, t.statusErr(c, resp, nil)
		}
		return nil, resp.StatusCode, t.netErr(ctx, c, err)
	}
	if len(data) > MaxResponseBytes {
		if ok {
			return nil, resp.StatusCode, tooLarge
		}
		data = nil
	}
	if !ok {
		return nil, resp.StatusCode, t.statusErr(c, resp, data)
	}
	if !isJSONContentType(resp.Header.Get("Content-Type")) {
		return nil, resp.StatusCode, fmt.Errorf("%s%s: http %d: %w", c.op, hashSuffix(c.requestHash), resp.StatusCode, ErrContentType)
	}
	return &answer{status: resp.StatusCode, header: resp.Header, body: data}, resp.StatusCode, nil
}

// emptyBody is an empty request body that net/http does not consider replayable.
type emptyBody struct{}

func (emptyBody) Read([]byte) (int, error) { return 0, io.EOF }
func (emptyBody) Close() error             { return nil }

// netErr classifies a transport failure: the caller's context ending is reported as
// such (not transient); anything else, including the per-request timeout, is ErrNetwork.
func (t *jsonTransport) netErr(ctx context.Context, c call, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return fmt.Errorf("%s%s: %w", c.op, hashSuffix(c.requestHash), cerr)
	}
	return fmt.Errorf("%s%s: %w: %w", c.op, hashSuffix(c.requestHash), ErrNetwork, err)
}

func (t *jsonTransport) statusErr(c call, resp *http.Response, body []byte) *StatusError {
	e := &StatusError{Op: c.op, Status: resp.StatusCode, RequestHash: c.requestHash}
	if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable {
		e.RetryAfter = parseRetryAfter(resp.Header.Get("Retry-After"))
	}
	e.Message = errorMessage(body, c.apiKey)
	return e
}

func hashSuffix(h string) string {
	if h == "" {
		return ""
	}
	return " for request " + h
}

// isJSONContentType accepts application/json and application/*+json, with no charset
// or charset utf-8.
func isJSONContentType(v string) bool {
	mt, params, err := mime.ParseMediaType(v)
	if err != nil {
		return false
	}
	if mt != "application/json" && !(strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json")) {
		return false
	}
	if cs, ok := params["charset"]; ok && !strings.EqualFold(cs, "utf-8") {
		return false
	}
	return true
}

// parseRetryAfter reads delay-seconds (RFC 9110 §10.2.3); an HTTP-date or garbage gives 0.
func parseRetryAfter(v string) time.Duration {
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n < 0 {
		return 0
	}
	if n > 3600 {
		n = 3600
	}
	return time.Duration(n) * time.Second
}

// errorMessage pulls a string "message" out of a JSON error body (the NestJS shape
// {statusCode, message, error} of the service's ancestor, docs/verdict.md#envelope) for
// diagnostics: at most 200 bytes, printable characters only, never the key.
func errorMessage(body []byte, apiKey string) string {
	if len(body) == 0 {
		return ""
	}
	var b struct {
		Message any `json:"message"`
	}
	if json.Unmarshal(body, &b) != nil {
		return ""
	}
	s, _ := b.Message.(string)
	if apiKey != "" && strings.Contains(s, apiKey) {
		s = strings.ReplaceAll(s, apiKey, "[redacted]")
	}
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return -1
		}
		return r
	}, s)
	if len(s) > 200 {
		s = strings.ToValidUTF8(s[:200], "")
	}
	return s
}
