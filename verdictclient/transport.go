package verdictclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/x402gate/x402gate/internal/jsonhttp"
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

// jsonTransport is the verdict service's use of the shared JSON transport
// (internal/jsonhttp: no redirects, a response size cap, a per-request timeout under the
// caller's context, URL-free errors), plus what this client adds: the key only in
// x-api-key, a JSON content type on success, and the service's statuses as *StatusError.
type jsonTransport struct {
	hc  *jsonhttp.Client
	log *zap.Logger // never nil
}

func newJSONTransport(hc *http.Client, timeout time.Duration) *jsonTransport {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	return &jsonTransport{hc: jsonhttp.New(hc, MaxResponseBytes, timeout), log: zap.NewNop()}
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
	h := http.Header{"User-Agent": {userAgent}}
	if c.apiKey != "" {
		h.Set("x-api-key", c.apiKey) // docs/verdict.md#secrets; no bearer token alongside
	}
	resp, err := t.hc.Do(ctx, jsonhttp.Request{Method: c.method, URL: c.url, Header: h, Body: c.body})
	ok := resp.Status >= 200 && resp.Status <= 299
	switch {
	case errors.Is(err, jsonhttp.ErrRedirect):
		return nil, resp.Status, &StatusError{Op: c.op, Status: resp.Status, RequestHash: c.requestHash}
	case err != nil && resp.Status != 0 && !ok:
		// An error status whose body was too large or broke off: the status decides.
		return nil, resp.Status, t.statusErr(c, resp, nil)
	case errors.Is(err, jsonhttp.ErrTooLarge):
		return nil, resp.Status, fmt.Errorf("%s%s: %w (limit %d bytes)", c.op, hashSuffix(c.requestHash), ErrResponseTooLarge, MaxResponseBytes)
	case err != nil && !errors.Is(err, jsonhttp.ErrUnreachable) && ctx.Err() == nil:
		return nil, 0, &verdict.InputError{Field: "url", Problem: "cannot build request"}
	case err != nil:
		return nil, resp.Status, t.netErr(ctx, c, err)
	case !ok:
		return nil, resp.Status, t.statusErr(c, resp, resp.Body)
	case !isJSONContentType(resp.Header.Get("Content-Type")):
		return nil, resp.Status, fmt.Errorf("%s%s: http %d: %w", c.op, hashSuffix(c.requestHash), resp.Status, ErrContentType)
	}
	return &answer{status: resp.Status, header: resp.Header, body: resp.Body}, resp.Status, nil
}

// netErr classifies a transport failure: the caller's context ending is reported as
// such (not transient); anything else, including the per-request timeout, is ErrNetwork.
func (t *jsonTransport) netErr(ctx context.Context, c call, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return fmt.Errorf("%s%s: %w", c.op, hashSuffix(c.requestHash), cerr)
	}
	return fmt.Errorf("%s%s: %w: %w", c.op, hashSuffix(c.requestHash), ErrNetwork, err)
}

func (t *jsonTransport) statusErr(c call, resp jsonhttp.Response, body []byte) *StatusError {
	e := &StatusError{Op: c.op, Status: resp.Status, RequestHash: c.requestHash}
	if resp.Status == http.StatusTooManyRequests || resp.Status == http.StatusServiceUnavailable {
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
