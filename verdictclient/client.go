package verdictclient

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/x402gate/x402gate/verdict"
)

// MinAPIKeyLength is the shortest API key New accepts. The client refuses to send any
// request whose URL or body contains the key (docs/verdict.md#secrets); a key shorter than this would
// turn up inside ordinary text by chance, and is too weak to be a secret anyway.
const MinAPIKeyLength = 16

// Config configures a low-level Client.
type Config struct {
	// BaseURL is the verdict service's base URL, http or https, without user info, query
	// or fragment. A trailing slash is removed (docs/verdict.md#paymentaction). Required.
	BaseURL string
	// APIKey is the agent key, sent only in the x-api-key header (docs/verdict.md#secrets). It needs
	// at least MinAPIKeyLength visible ASCII characters. Required.
	APIKey string
	// Timeout bounds each HTTP request (not a whole Await). Default DefaultTimeout
	// (10 s). The context passed to each call bounds it as well.
	Timeout time.Duration
	// HTTPClient sends the requests. Default: a client with http.DefaultTransport's
	// settings that keeps up to 256 idle connections to the service (the default keeps 2).
	// It is copied, never modified; the copy refuses redirects.
	HTTPClient *http.Client
	// Logger receives one debug entry per request (operation, method, status,
	// requestHash, and the error, none of which carries the key) and a warning per
	// uncertain submit, with its trace id. Default: no logging.
	Logger *zap.Logger
}

// Client is the low-level client of the verdict service (docs/verdict.md#envelope). It is safe for
// concurrent use. Submit is never retried; Await retries reads within its bound.
type Client struct {
	base   string
	apiKey string
	t      *jsonTransport
}

// New validates cfg and returns a Client. Errors are *InputError and never quote the key.
func New(cfg Config) (*Client, error) {
	base, err := cleanBaseURL(cfg.BaseURL, "config.baseUrl")
	if err != nil {
		return nil, err
	}
	if err := checkAPIKey(cfg.APIKey, "config.apiKey"); err != nil {
		return nil, err
	}
	if cfg.Timeout < 0 {
		return nil, &verdict.InputError{Field: "config.timeout", Problem: "must not be negative"}
	}
	t := newJSONTransport(cfg.HTTPClient, cfg.Timeout)
	if cfg.Logger != nil {
		t.log = cfg.Logger.Named("verdictclient")
	}
	return &Client{base: base, apiKey: cfg.APIKey, t: t}, nil
}

// WithAPIKey returns a Client that shares c's settings and connection pool but
// authenticates with key. Use it for a payer's own key; the status route checks that the
// caller owns the transaction (docs/verdict.md#envelope), so submit and poll with the same Client.
func (c *Client) WithAPIKey(key string) (*Client, error) {
	if err := checkAPIKey(key, "apiKey"); err != nil {
		return nil, err
	}
	cp := *c
	cp.apiKey = key
	return &cp, nil
}

// BaseURL returns the normalised base URL (no trailing slash).
func (c *Client) BaseURL() string { return c.base }

func cleanBaseURL(raw, field string) (string, error) {
	u, err := checkURL(raw, field)
	if err != nil {
		return "", err
	}
	return strings.TrimRight(u, "/"), nil
}

// checkURL accepts an absolute http(s) URL without user info, query or fragment, so
// that no credential can ride in it.
func checkURL(raw, field string) (string, error) {
	u, err := url.Parse(strings.TrimSpace(raw))
	switch {
	case raw == "":
		return "", &verdict.InputError{Field: field, Problem: "is required"}
	case err != nil:
		return "", &verdict.InputError{Field: field, Problem: "is not a url"}
	case u.Scheme != "http" && u.Scheme != "https":
		return "", &verdict.InputError{Field: field, Problem: "must be an http or https url"}
	case u.Host == "":
		return "", &verdict.InputError{Field: field, Problem: "has no host"}
	case u.User != nil:
		return "", &verdict.InputError{Field: field, Problem: "must not carry user info; credentials travel only in headers"}
	case u.RawQuery != "" || u.ForceQuery || u.Fragment != "":
		return "", &verdict.InputError{Field: field, Problem: "must not have a query or fragment"}
	}
	return u.String(), nil
}

func checkAPIKey(key, field string) error {
	if key == "" {
		return &verdict.InputError{Field: field, Problem: "is required"}
	}
	if len(key) < MinAPIKeyLength {
		return &verdict.InputError{Field: field, Problem: fmt.Sprintf("must be at least %d characters", MinAPIKeyLength)}
	}
	if !printableASCII(key) {
		return &verdict.InputError{Field: field, Problem: "must be visible ascii characters"}
	}
	return nil
}

// SubmitRequest is the body of POST /transactions (docs/verdict.md#envelope). Submit adds
// arbiter: "policy" and metadata.traceId.
type SubmitRequest struct {
	// EscrowAddress is the agent's registered wallet on the proposed chain. Required.
	EscrowAddress string
	// Prompt says in words what initiated the action. Required, non-empty.
	Prompt string
	// ProposedTx is the canonical action; it must encode as a JSON object with a
	// non-empty string "protocol" and a numeric "chainId" (e.g. a PaymentAction).
	ProposedTx any
	// Metadata is non-action context such as environment. Never put secrets here. It
	// must not contain "traceId": set TraceID instead.
	Metadata map[string]any
	// ContextLogs is extra non-sensitive debugging context.
	ContextLogs map[string]any
	// ExecutionSignature is the agent's execution signature when its flow needs one.
	ExecutionSignature string
	// TraceID is the client-chosen id sent as metadata.traceId, the handle for
	// reconciling an uncertain submit. Default: 128 random bits in hex. When given it
	// must be 8 to 128 visible ASCII characters and unique per action.
	TraceID string
}

type submitWire struct {
	EscrowAddress      string          `json:"escrowAddress"`
	Prompt             string          `json:"prompt"`
	ProposedTx         json.RawMessage `json:"proposedTx"`
	Metadata           map[string]any  `json:"metadata"`
	ContextLogs        map[string]any  `json:"contextLogs,omitempty"`
	ExecutionSignature string          `json:"executionSignature,omitempty"`
	Arbiter            string          `json:"arbiter"`
}

// encode validates r and returns the JSON body and the trace id it carries.
func (r SubmitRequest) encode() ([]byte, string, error) {
	if strings.TrimSpace(r.EscrowAddress) == "" {
		return nil, "", &verdict.InputError{Field: "escrowAddress", Problem: "is required"}
	}
	if strings.TrimSpace(r.Prompt) == "" {
		return nil, "", &verdict.InputError{Field: "prompt", Problem: "must be non-empty"}
	}
	tx, err := json.Marshal(r.ProposedTx)
	if err != nil {
		return nil, "", &verdict.InputError{Field: "proposedTx", Problem: "cannot be encoded as json"}
	}
	tree, err := verdict.ParseJSON(tx)
	obj, ok := tree.(map[string]any)
	if err != nil || !ok {
		return nil, "", &verdict.InputError{Field: "proposedTx", Problem: "must be a json object"}
	}
	if p, ok := obj["protocol"].(string); !ok || p == "" {
		return nil, "", &verdict.InputError{Field: "proposedTx.protocol", Problem: "must be a non-empty string"}
	}
	if _, ok := obj["chainId"].(json.Number); !ok {
		return nil, "", &verdict.InputError{Field: "proposedTx.chainId", Problem: "must be a number"}
	}
	trace := r.TraceID
	if trace == "" {
		trace = newTraceID()
	} else if len(trace) < 8 || len(trace) > 128 || !printableASCII(trace) {
		return nil, "", &verdict.InputError{Field: "traceId", Problem: "must be 8 to 128 visible ascii characters"}
	}
	md := make(map[string]any, len(r.Metadata)+1)
	for k, v := range r.Metadata {
		if k == "traceId" {
			return nil, "", &verdict.InputError{Field: "metadata.traceId", Problem: "is reserved; set SubmitRequest.TraceID"}
		}
		md[k] = v
	}
	md["traceId"] = trace
	body, err := json.Marshal(submitWire{
		EscrowAddress:      r.EscrowAddress,
		Prompt:             r.Prompt,
		ProposedTx:         tx,
		Metadata:           md,
		ContextLogs:        r.ContextLogs,
		ExecutionSignature: r.ExecutionSignature,
		Arbiter:            "policy", // docs/verdict.md#envelope: clients send policy explicitly
	})
	if err != nil {
		return nil, "", &verdict.InputError{Field: "metadata", Problem: "cannot be encoded as json"}
	}
	return body, trace, nil
}

func newTraceID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b[:])
}

// Submit sends POST /transactions once and returns the created record. It accepts only
// a 201 whose body carries a non-empty string requestHash (docs/verdict.md#fail-closed 2–3).
//
// Submit never retries (docs/verdict.md#fail-closed 4). Its errors fall in three groups:
//   - *InputError: nothing was sent;
//   - *StatusError for 400, 401, 403, 404 or 409: the service refused; no transaction
//     was created by this call (409: one with this trace id already exists);
//   - *UncertainSubmitError for everything else (429, 5xx, network failure, the
//     context ending mid-request, a redirect, an unreadable or non-201 success): the
//     transaction may exist. Call Reconcile with its TraceID before anything else.
func (c *Client) Submit(ctx context.Context, req SubmitRequest) (*verdict.Transaction, error) {
	body, trace, err := req.encode()
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("submit: %w", err) // nothing sent yet
	}
	ans, err := c.t.do(ctx, call{op: "submit", method: http.MethodPost, url: c.base + "/transactions", body: body, apiKey: c.apiKey})
	if err != nil {
		var ie *verdict.InputError
		if errors.As(err, &ie) {
			return nil, err
		}
		var se *StatusError
		if errors.As(err, &se) {
			switch se.Status {
			case http.StatusBadRequest, http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound, http.StatusConflict:
				return nil, se
			}
		}
		return nil, c.uncertain(trace, err)
	}
	if ans.status != http.StatusCreated {
		return nil, c.uncertain(trace, &StatusError{Op: "submit", Status: ans.status})
	}
	tx, err := verdict.ParseTransaction(ans.body, trace)
	if err != nil {
		return nil, c.uncertain(trace, err)
	}
	return tx, nil
}

// uncertain builds an *UncertainSubmitError and logs it with its trace id, the handle
// an operator needs to reconcile by hand.
func (c *Client) uncertain(trace string, cause error) error {
	e := &UncertainSubmitError{TraceID: trace, Cause: cause}
	c.t.log.Warn("submit outcome unknown; reconcile by trace id", zap.String("traceId", trace), zap.Error(cause))
	return e
}

// Status reads GET /transactions/{requestHash}/approval-status once and validates it
// (docs/verdict.md#envelope). A nil Envelope.Verdict means no verdict yet. Errors: *StatusError
// (400, 401, 403, 404 stop; 429 and 5xx are transient), ErrNetwork (transient),
// *ValidationError (never approval), or the context's error.
func (c *Client) Status(ctx context.Context, requestHash string) (*verdict.Envelope, error) {
	if requestHash == "" || len(requestHash) > 512 || !printableASCII(requestHash) {
		return nil, &verdict.InputError{Field: "requestHash", Problem: "must be 1 to 512 visible ascii characters"}
	}
	u := c.base + "/transactions/" + url.PathEscape(requestHash) + "/approval-status"
	ans, err := c.t.do(ctx, call{op: "approval status", method: http.MethodGet, url: u, apiKey: c.apiKey, requestHash: requestHash})
	if err != nil {
		return nil, err
	}
	if ans.status != http.StatusOK {
		return nil, &StatusError{Op: "approval status", Status: ans.status, RequestHash: requestHash}
	}
	return verdict.ParseEnvelope(ans.body, requestHash)
}

// Reconcile settles an uncertain submit: it asks GET /transactions?traceId={traceID}
// for the caller's transactions whose metadata.traceId equals traceID, and expects
// 200 {"transactions": [record, …]}. It returns the one record found, ErrNotCreated when
// the list is empty, and ErrReconcileUnsupported when the service has no such route
// (404, 405, 501). It reads once; see the package documentation for the whole procedure.
//
// The lookup route is x402gate's extension of the spec (which has no idempotency key);
// x402gate's own verdict service implements it and refuses a second transaction with the
// same trace id (409).
func (c *Client) Reconcile(ctx context.Context, traceID string) (*verdict.Transaction, error) {
	if len(traceID) < 8 || len(traceID) > 128 || !printableASCII(traceID) {
		return nil, &verdict.InputError{Field: "traceId", Problem: "must be 8 to 128 visible ascii characters"}
	}
	op := "reconcile trace " + traceID
	ans, err := c.t.do(ctx, call{op: op, method: http.MethodGet, url: c.base + "/transactions?traceId=" + url.QueryEscape(traceID), apiKey: c.apiKey})
	if err != nil {
		var se *StatusError
		if errors.As(err, &se) && (se.Status == http.StatusNotFound || se.Status == http.StatusMethodNotAllowed || se.Status == http.StatusNotImplemented) {
			return nil, fmt.Errorf("%s: %w: %w", op, ErrReconcileUnsupported, err)
		}
		return nil, err
	}
	v := validator{op: op}
	tree, err := verdict.ParseJSON(ans.body)
	if err != nil {
		return nil, v.fail("", "malformed json: "+err.Error())
	}
	obj, _ := tree.(map[string]any)
	list, ok := obj["transactions"].([]any)
	if !ok {
		return nil, v.fail("transactions", "must be an array")
	}
	switch len(list) {
	case 0:
		return nil, fmt.Errorf("%s: %w", op, ErrNotCreated)
	case 1:
	default:
		return nil, v.fail("transactions", "more than one transaction carries this trace id")
	}
	rec, err := json.Marshal(list[0])
	if err != nil {
		return nil, v.fail("transactions[0]", "cannot be re-encoded")
	}
	tx, err := verdict.ParseTransaction(rec, traceID)
	if err != nil {
		return nil, v.fail("transactions[0].requestHash", "must be a non-empty string")
	}
	return tx, nil
}
