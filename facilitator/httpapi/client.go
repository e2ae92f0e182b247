package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"time"

	"github.com/x402gate/x402gate/internal/jsonhttp"
	"github.com/x402gate/x402gate/x402"
)

// Defaults of ClientConfig.
const (
	// DefaultClientTimeout bounds a /verify or /supported call.
	DefaultClientTimeout = 30 * time.Second
	// DefaultSettleTimeout bounds a /settle call, which waits for a receipt on chain.
	DefaultSettleTimeout = 60 * time.Second
	// DefaultMaxResponseBytes caps a facilitator answer the Client reads.
	DefaultMaxResponseBytes = 1 << 20
)

// Errors of the Client. Each error the Client returns wraps at most one of these or is an
// *HTTPError; none ever contains the API key or text chosen by the server.
var (
	// ErrUnauthorized: the facilitator answered 401, the API key is missing or wrong.
	ErrUnauthorized = errors.New("facilitator rejected the api key")
	// ErrRedirectRefused: the facilitator answered with a redirect, which is never followed
	// (a redirect would carry the key and the payment to another origin).
	ErrRedirectRefused = jsonhttp.ErrRedirect
	// ErrResponseTooLarge: the answer exceeded ClientConfig.MaxResponseBytes.
	ErrResponseTooLarge = jsonhttp.ErrTooLarge
	// ErrMalformedResponse: the answer is not the JSON shape of the operation.
	ErrMalformedResponse = errors.New("malformed facilitator response")
	// ErrUnreachable: the request could not be sent or its answer not read (connection
	// refused or reset, a per-call timeout). For /settle the outcome is then unknown: do
	// not retry it blindly (docs/facilitator.md#settle-order).
	ErrUnreachable = jsonhttp.ErrUnreachable
)

// HTTPError is an answer with a status other than 200. When the body still carried an
// x402 result (isValid / success, as a facilitator's 500 does), the Client returns that
// result beside this error, as the reference x402 clients do (docs/facilitator.md#api).
type HTTPError struct {
	// Op is "verify", "settle" or "supported".
	Op string
	// StatusCode is the HTTP status.
	StatusCode int
	// Reason is the invalidReason / errorReason / error code of the body, when it is a
	// short machine identifier; otherwise empty.
	Reason string
}

// Error renders the operation, the status and the reason code.
func (e *HTTPError) Error() string {
	s := fmt.Sprintf("facilitator %s: http %d %s", e.Op, e.StatusCode, http.StatusText(e.StatusCode))
	if e.Reason != "" {
		s += " (" + e.Reason + ")"
	}
	return s
}

// Unwrap returns ErrUnauthorized for a 401, so errors.Is works on either form.
func (e *HTTPError) Unwrap() error {
	if e.StatusCode == http.StatusUnauthorized {
		return ErrUnauthorized
	}
	return nil
}

// ClientConfig configures NewClient.
type ClientConfig struct {
	// URL is the facilitator's base URL; "/verify" etc. are appended. A trailing slash is
	// removed. It must not carry user info, a query or a fragment. It is https, or plain
	// http to a loopback host (127.0.0.0/8, ::1, localhost) unless InsecureHTTP is set.
	URL string
	// APIKey is sent as x-facilitator-key on every call when set. Default: empty.
	APIKey string
	// Timeout bounds /verify and /supported. Default: DefaultClientTimeout (30 s).
	Timeout time.Duration
	// SettleTimeout bounds /settle, which includes the receipt wait. Default:
	// DefaultSettleTimeout (60 s).
	SettleTimeout time.Duration
	// HTTPClient sends the requests; it is copied, and the copy never follows redirects.
	// Default: a client with http.DefaultTransport's settings that keeps up to 256 idle
	// connections to the service (the default keeps 2).
	HTTPClient *http.Client
	// MaxResponseBytes caps an answer. Default: DefaultMaxResponseBytes (1 MiB).
	MaxResponseBytes int64
	// Registry renders networks in the v1 shape; it must know every network the gate
	// uses. Default: nil, the built-in networks.
	Registry *x402.Registry
	// InsecureHTTP allows a plain http URL to a host that is not loopback. Over plain http
	// anyone on the path reads the API key and can forge a settlement's success:true, so
	// only set it on a network that is itself trusted (docs/facilitator.md#api).
	// Default: false.
	InsecureHTTP bool
}

// Client is a remote facilitator reached over HTTP (docs/facilitator.md#api). It satisfies
// gate.Facilitator, so a resource gate uses it or the in-process engine alike. It is safe
// for concurrent use.
type Client struct {
	base          string
	key           string
	jc            *jsonhttp.Client
	timeout       time.Duration
	settleTimeout time.Duration
	reg           *x402.Registry
}

// CheckURL checks a remote facilitator's base URL without I/O: absolute https, or http to
// a loopback host unless insecure allows any (over plain http a network attacker can forge
// success:true and read x-facilitator-key), with no user info, query or fragment. Its
// errors never quote the URL, which could hold a secret.
func CheckURL(raw string, insecure bool) error {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return errors.New("url must be an absolute http or https url")
	}
	if u.Scheme == "http" && !insecure && !loopbackHost(u.Hostname()) {
		return errors.New("a plain http url must name a loopback host " +
			"(127.0.0.0/8, ::1, localhost); use https, or allow insecure http explicitly")
	}
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" || u.ForceQuery {
		return errors.New("url must not carry user info, a query or a fragment; give the key as APIKey")
	}
	return nil
}

// NewClient checks cfg and returns a Client. Errors never quote the URL, which could hold
// a secret.
func NewClient(cfg ClientConfig) (*Client, error) {
	if err := CheckURL(cfg.URL, cfg.InsecureHTTP); err != nil {
		return nil, fmt.Errorf("facilitator client: %w", err)
	}
	if cfg.APIKey != "" && strings.Contains(cfg.URL, cfg.APIKey) {
		return nil, errors.New("facilitator client: the api key appears in the url")
	}
	if strings.ContainsAny(cfg.APIKey, "\r\n") {
		return nil, errors.New("facilitator client: api key contains a line break")
	}
	c := &Client{
		base:          strings.TrimRight(cfg.URL, "/"),
		key:           cfg.APIKey,
		timeout:       cfg.Timeout,
		settleTimeout: cfg.SettleTimeout,
		reg:           cfg.Registry,
	}
	if c.timeout <= 0 {
		c.timeout = DefaultClientTimeout
	}
	if c.settleTimeout <= 0 {
		c.settleTimeout = DefaultSettleTimeout
	}
	maxBytes := cfg.MaxResponseBytes
	if maxBytes <= 0 {
		maxBytes = DefaultMaxResponseBytes
	}
	c.jc = jsonhttp.New(cfg.HTTPClient, maxBytes, 0)
	return c, nil
}

// loopbackHost reports whether host is localhost or a loopback address. A name other than
// localhost is never resolved: what DNS answers is up to the network the URL avoids trusting.
func loopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}

// clientRequest is the body of /verify and /settle as the Client sends it: every part
// in the payment's original version shape (docs/facilitator.md#api).
type clientRequest struct {
	X402Version              int `json:"x402Version"`
	PaymentPayload           any `json:"paymentPayload"`
	PaymentRequirements      any `json:"paymentRequirements"`
	VerificationRequirements any `json:"verificationRequirements,omitempty"`
	VerificationPayment      any `json:"verificationPayment,omitempty"`
}

// shapes renders p and r in the shape of p's version.
func (c *Client) shapes(p *x402.Payment, r *x402.Requirements) (version int, payload, reqs any, err error) {
	if p == nil || r == nil {
		return 0, nil, nil, errors.New("payment and requirements are required")
	}
	if payload, err = c.payloadShape(p); err != nil {
		return 0, nil, nil, err
	}
	if reqs, err = c.requirementsShape(p.Version, r); err != nil {
		return 0, nil, nil, err
	}
	return p.Version, payload, reqs, nil
}

// payloadShape renders p in the shape of its own version.
func (c *Client) payloadShape(p *x402.Payment) (any, error) {
	switch p.Version {
	case x402.Version1:
		pv, err := p.PayloadV1(c.reg)
		if err != nil {
			return nil, fmt.Errorf("payload v1: %w", err)
		}
		return pv, nil
	case x402.Version2:
		return p.PayloadV2(), nil
	}
	return nil, fmt.Errorf("payment version %d is not 1 or 2", p.Version)
}

// requirementsShape renders r in the shape of version v.
func (c *Client) requirementsShape(v int, r *x402.Requirements) (any, error) {
	switch v {
	case x402.Version1:
		rv, err := r.V1(c.reg)
		if err != nil {
			return nil, fmt.Errorf("requirements v1: %w", err)
		}
		return rv, nil
	case x402.Version2:
		return r.V2(), nil
	}
	return nil, fmt.Errorf("requirements version %d is not 1 or 2", v)
}

// Verify POSTs /verify. A 200 answer is returned as it is; a non-200 answer that carries
// isValid is returned with an *HTTPError.
func (c *Client) Verify(ctx context.Context, in x402.VerifyInput) (x402.VerifyResponse, error) {
	var out x402.VerifyResponse
	v, payload, reqs, err := c.shapes(in.Payment, in.Requirements)
	if err != nil {
		return out, fmt.Errorf("facilitator verify: %w", err)
	}
	body := clientRequest{X402Version: v, PaymentPayload: payload, PaymentRequirements: reqs}
	// The fee parts travel in the fee payment's version, as the handler decodes them.
	feeVersion := v
	if in.VerificationPayment != nil {
		if body.VerificationPayment, err = c.payloadShape(in.VerificationPayment); err != nil {
			return out, fmt.Errorf("facilitator verify: verification payment: %w", err)
		}
		feeVersion = in.VerificationPayment.Version
	}
	if in.VerificationRequirements != nil {
		if body.VerificationRequirements, err = c.requirementsShape(feeVersion, in.VerificationRequirements); err != nil {
			return out, fmt.Errorf("facilitator verify: verification requirements: %w", err)
		}
	}
	reply, err := c.call(ctx, "verify", http.MethodPost, "/verify", body, c.timeout)
	if err != nil {
		return out, err
	}
	var wire struct {
		x402.VerifyResponse
		IsValid *bool `json:"isValid"`
	}
	parsed := json.Unmarshal(reply.Body, &wire) == nil && wire.IsValid != nil
	if parsed {
		out = wire.VerifyResponse
		out.IsValid = *wire.IsValid
	}
	return out, c.result("verify", reply, parsed, out.InvalidReason)
}

// Settle POSTs /settle. A 200 answer is returned as it is, with Transaction and TxHash
// both filled from whichever the facilitator sent; a non-200 answer that carries success
// is returned with an *HTTPError. A timeout or transport failure (ErrUnreachable) leaves
// the outcome unknown.
func (c *Client) Settle(ctx context.Context, p *x402.Payment, r *x402.Requirements) (x402.SettleResponse, error) {
	var out x402.SettleResponse
	v, payload, reqs, err := c.shapes(p, r)
	if err != nil {
		return out, fmt.Errorf("facilitator settle: %w", err)
	}
	body := clientRequest{X402Version: v, PaymentPayload: payload, PaymentRequirements: reqs}
	reply, err := c.call(ctx, "settle", http.MethodPost, "/settle", body, c.settleTimeout)
	if err != nil {
		return out, err
	}
	var wire struct {
		x402.SettleResponse
		Success *bool `json:"success"`
	}
	parsed := json.Unmarshal(reply.Body, &wire) == nil && wire.Success != nil
	if parsed {
		out = wire.SettleResponse
		out.Success = *wire.Success
		if out.Transaction == "" {
			out.Transaction = out.TxHash
		}
		out.TxHash = out.Transaction
		// A success without a transaction hash cannot be reconciled or shown to the payer.
		if out.Success && out.Transaction == "" {
			parsed, out = false, x402.SettleResponse{}
		}
	}
	return out, c.result("settle", reply, parsed, out.ErrorReason)
}

// Supported GETs /supported.
func (c *Client) Supported(ctx context.Context) (x402.SupportedResponse, error) {
	var out x402.SupportedResponse
	reply, err := c.call(ctx, "supported", http.MethodGet, "/supported", nil, c.timeout)
	if err != nil {
		return out, err
	}
	var wire struct {
		x402.SupportedResponse
		Kinds *[]x402.SupportedKind `json:"kinds"`
	}
	parsed := json.Unmarshal(reply.Body, &wire) == nil && wire.Kinds != nil
	if parsed {
		out = wire.SupportedResponse
		out.Kinds = *wire.Kinds
	}
	if reply.Status != http.StatusOK {
		return x402.SupportedResponse{}, c.result("supported", reply, false, "")
	}
	return out, c.result("supported", reply, parsed, "")
}

// SettlementStatus implements gate.Facilitator. The facilitator API has no route that
// reports a settlement's outcome, so a remote facilitator cannot tell: it answers with an
// error wrapping errors.ErrUnsupported, and a gate grants no pending credits.
func (c *Client) SettlementStatus(context.Context, *x402.Payment, *x402.Requirements) (x402.SettleResponse, error) {
	return x402.SettleResponse{}, fmt.Errorf("facilitator client: settlement status: %w", errors.ErrUnsupported)
}

// result maps an answer to the error beside the parsed response: nil for a parsed 200,
// ErrMalformedResponse for an unparsable 200, an *HTTPError otherwise.
func (c *Client) result(op string, reply jsonhttp.Response, parsed bool, reason string) error {
	if reply.Status == http.StatusOK {
		if !parsed {
			return fmt.Errorf("facilitator %s: %w", op, ErrMalformedResponse)
		}
		return nil
	}
	if reason == "" {
		var e apiError
		if json.Unmarshal(reply.Body, &e) == nil {
			reason = e.Error
		}
	}
	return &HTTPError{Op: op, StatusCode: reply.Status, Reason: machineReason(reason, c.key)}
}

// machineReason keeps s only when it is a short identifier ([a-z0-9_], at most 64
// bytes) and not the key, so server text never reaches an error message.
func machineReason(s, key string) string {
	if s == "" || len(s) > 64 || (key != "" && strings.Contains(s, key)) {
		return ""
	}
	for i := 0; i < len(s); i++ {
		ch := s[i]
		if !(ch >= 'a' && ch <= 'z' || ch >= '0' && ch <= '9' || ch == '_') {
			return ""
		}
	}
	return s
}

// call sends one request and returns the raw answer. Only transport failures, refused
// redirects and oversized answers are errors here.
func (c *Client) call(ctx context.Context, op, method, path string, body any, timeout time.Duration) (jsonhttp.Response, error) {
	var data []byte
	if body != nil {
		var err error
		if data, err = json.Marshal(body); err != nil {
			return jsonhttp.Response{}, fmt.Errorf("facilitator %s: encode request: %w", op, err)
		}
	}
	hdr := http.Header{}
	if c.key != "" {
		hdr.Set(HeaderFacilitatorKey, c.key)
	}
	reply, err := c.jc.Do(ctx, jsonhttp.Request{Method: method, URL: c.base + path, Header: hdr, Body: data, Timeout: timeout})
	if err != nil {
		return jsonhttp.Response{}, fmt.Errorf("facilitator %s: %w", op, err)
	}
	return reply, nil
}
