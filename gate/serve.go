package gate

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/x402gate/x402gate/gate/pass"
	"github.com/x402gate/x402gate/x402"
)

// reportTimeout bounds the retry-store write after an upstream call; it runs even when
// the client has gone away.
const reportTimeout = 5 * time.Second

// NextFunc runs the upstream of a gated request. Caddy's next.ServeHTTP has this
// signature; a plain http.Handler is wrapped to return nil.
type NextFunc func(w http.ResponseWriter, r *http.Request) error

// Paid is what a settled request carries in its context for the upstream (docs/gate.md#results
// paymentGate: "attaches { settlement, guardian } to request.x402").
type Paid struct {
	Settlement *Settlement
	Verdict    *VerdictOutcome
	// Retry is true when this request was let through by a retry credit (no new charge).
	Retry bool
	// Pass is set, and Settlement nil, when an access pass let the request in without a
	// payment (docs/gate.md#access-passes).
	Pass *Pass
	// PassIssued is the pass this payment bought, when the route issues passes.
	PassIssued *Pass
	// Authorized is set, and Settlement nil, on a route of the authorization flow: the
	// verified payment (payer, amount, network, asset), not settled yet (Success false, no
	// Transaction); the gate settles it after a good answer (docs/gate.md#payment-flows).
	Authorized *Settlement
}

type paidKey struct{}

// FromContext returns the Paid of a request that the gate let through.
func FromContext(ctx context.Context) (*Paid, bool) {
	p, ok := ctx.Value(paidKey{}).(*Paid)
	return p, ok
}

// Serve runs the gate for r and, on settled, next (docs/gate.md#settle-before-proxy): any other
// result is written to w and next is not called. An ambiguous path (of in.Resource or of
// r.URL) is refused first, before any pass or payment is looked at
// (docs/gate.md#ambiguous-paths); then a CORS preflight goes to next uncharged, unless the
// route charges preflights (docs/gate.md#cors-preflights). On a route of the authorization
// flow next runs for a verified payment, which is settled after its good answer
// (docs/gate.md#payment-flows). The settle response header is set before next runs, and
// the request's context carries Paid. Serve watches next: a status >= 500,
// an error that Options.ErrorStatus maps to >= 500, or a panic counts as an upstream
// failure and earns the payment its retry credits, granted before the failed answer is
// passed on, with the retry token in its X-PAYMENT-RETRY header (see ReportUpstream; a
// panic that drops the connection delivers no token, so it cannot be retried). A nil in.Header is r.Header; an empty in.Resource is
// DefaultResource(r). Serve returns next's error, and re-panics next's panic.
func (g *Gate) Serve(w http.ResponseWriter, r *http.Request, in Input, next NextFunc) error {
	if in.Header == nil {
		in.Header = r.Header
	}
	if in.Resource == "" {
		in.Resource = DefaultResource(r)
	}
	if res := g.refuseAmbiguousPath(in.Resource, r.URL.Path); res != nil {
		if g.onResult != nil {
			g.onResult(res)
		}
		res.Write(w, r)
		return nil
	}
	if g.passPreflight(r) {
		stripPaymentHeaders(r.Header)
		return next(w, r)
	}
	if res := g.cachedChallenge(r, in); res != nil {
		if g.onResult != nil {
			g.onResult(res)
		}
		res.writeCached(w, r)
		return nil
	}
	if in.Method == "" {
		in.Method = r.Method
	}
	if in.RequestURI == "" {
		in.RequestURI = r.URL.RequestURI()
	}
	var refused PassRefusal
	if g.pass != nil {
		var p *Pass
		if p, refused = g.admit(r.Context(), in, r.Header); p != nil {
			return g.servePass(w, r, in, p, next)
		}
	}
	res := g.handle(r.Context(), in)
	if lost := g.leaseLost(r.Context(), res); lost != nil {
		res = lost
	}
	if g.pass != nil {
		g.passChallengeHeaders(res, in, refused)
	}
	if g.onResult != nil {
		g.onResult(res)
	}
	if res.Kind == KindAuthorized {
		return g.serveAuthorized(w, r, res, next)
	}
	if res.Kind != KindSettled {
		res.Write(w, r)
		return nil
	}
	res.SetHeaders(w.Header())
	var issued *Pass
	if g.pass != nil && (!res.Retry || res.resumed) {
		issued = g.issuePass(in, res, w.Header())
	}
	// The signed authorizations and the retry token have done their work: the upstream
	// does not get them, and no later log line of this request (an upstream's error log,
	// say) can record them.
	// Deleting in place also clears them from Caddy's shallow copy of the original request.
	stripPaymentHeaders(r.Header)
	stripPass(r.Header)
	if issued != nil {
		if s, ok := pass.SiteOf(in.Resource); ok {
			g.recordPass(r.Context(), s.Host, issued)
		}
	}
	ctx := context.WithValue(r.Context(), paidKey{}, &Paid{Settlement: res.Settlement, Verdict: res.Verdict, Retry: res.Retry, PassIssued: issued})
	ww := &watchWriter{ResponseWriter: w, g: g, res: res, ctx: ctx}
	if res.hold != nil {
		// The upstream runs under the lease: a Go upstream (reverse_proxy) stops when it is lost.
		var stop func()
		ctx, stop = res.hold.Bound(ctx)
		defer stop()
	}
	r = r.WithContext(ctx)
	done := false
	defer func() {
		if !done {
			ww.report(true) // next panicked (http.ErrAbortHandler included)
		}
	}()
	err := next(ww, r)
	done = true
	failed := ww.status >= 500 || (err != nil && g.errStatus(err) >= 500)
	if !failed && !ww.hijacked {
		// A good answer reaches the client before the ledger records it as given: a process
		// killed in between leaves a payment whose answer the client has, never one recorded
		// as answered whose answer it never got (docs/gate.md#payment-ledger).
		_ = http.NewResponseController(ww.ResponseWriter).Flush()
	}
	ww.report(failed)
	return err
}

// stripPaymentHeaders deletes the headers that carry signed authorizations and the retry
// token.
func stripPaymentHeaders(h http.Header) {
	for _, name := range []string{x402.HeaderPaymentSignature, x402.HeaderPayment, HeaderVerificationPayment, HeaderPaymentRetry} {
		h.Del(name)
	}
}

// watchWriter passes a response through and reports an upstream failure before the
// failed status reaches the client, with the retry token the failure earned.
type watchWriter struct {
	http.ResponseWriter
	g      *Gate
	res    *Result
	ctx    context.Context
	status int
	// hijacked is set once the upstream took the connection over (a protocol upgrade):
	// nothing may write to or flush the response after that.
	hijacked bool
	once     sync.Once
}

func (w *watchWriter) report(failed bool) {
	w.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(w.ctx), reportTimeout)
		defer cancel()
		token, _ := w.g.ReportUpstream(ctx, w.res, failed) // logged by ReportUpstream; fail closed
		if token != "" {
			w.ResponseWriter.Header().Set(HeaderPaymentRetry, token)
		}
	})
}

// WriteHeader records the status; a 5xx is reported before it is sent.
func (w *watchWriter) WriteHeader(code int) {
	if w.status == 0 && code >= 200 {
		w.status = code
		if code >= 500 {
			w.report(true)
		}
	}
	w.ResponseWriter.WriteHeader(code)
}

// Write sends body bytes, with an implicit 200 first.
func (w *watchWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// ReadFrom lets io.Copy use the underlying writer's fast path (sendfile).
func (w *watchWriter) ReadFrom(src io.Reader) (int64, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	if rf, ok := w.ResponseWriter.(io.ReaderFrom); ok {
		return rf.ReadFrom(src)
	}
	return io.Copy(writerOnly{w.ResponseWriter}, src)
}

// Flush implements http.Flusher for streaming upstreams.
func (w *watchWriter) Flush() {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

// Hijack implements http.Hijacker for protocol upgrades.
// Once hijacked, the upgraded connection is the answer: the gate flushes nothing after it.
func (w *watchWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, buf, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err == nil {
		w.hijacked = true
		if w.status == 0 {
			w.status = http.StatusSwitchingProtocols
		}
	}
	return conn, buf, err
}

// Unwrap returns the underlying writer, for http.ResponseController.
func (w *watchWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

type writerOnly struct{ io.Writer }

// DefaultResource is the resource URL of r as this server sees it: https when r came over
// TLS, r.Host, and the path without the query (as x402-express builds it,
// docs/protocol.md#requirements). Behind a proxy, pass the public URL instead.
func DefaultResource(r *http.Request) string {
	u := url.URL{Scheme: "http", Host: r.Host, Path: r.URL.Path, RawPath: r.URL.RawPath}
	if r.TLS != nil {
		u.Scheme = "https"
	}
	if u.Host == "" {
		u.Host = r.URL.Host
	}
	if u.Path == "" {
		u.Path = "/"
	}
	return u.String()
}

// MiddlewareOptions configure Middleware: per-request mappers, the spec's ctx(request).
type MiddlewareOptions struct {
	// Resource returns the public resource URL of a request. Default: DefaultResource.
	Resource func(r *http.Request) string
	// Price returns a per-request price (ParsePrice's grammar), "" for Config.Price.
	// Default: nil.
	Price func(r *http.Request) string
	// PayTo returns a per-request payee, "" for Config.PayTo. Default: nil.
	PayTo func(r *http.Request) string
}

// Middleware is the plain net/http payment gate (docs/gate.md#results): it reads
// PAYMENT-SIGNATURE or X-PAYMENT, and on settled sets X-PAYMENT-RESPONSE (and
// PAYMENT-RESPONSE for v2), puts Paid in the request context and calls next. Every other
// result is answered at once with its status and body.
func (g *Gate) Middleware(opts MiddlewareOptions) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			in := Input{Header: r.Header}
			if opts.Resource != nil {
				in.Resource = opts.Resource(r)
			}
			if opts.Price != nil {
				in.Price = opts.Price(r)
			}
			if opts.PayTo != nil {
				in.PayTo = opts.PayTo(r)
			}
			_ = g.Serve(w, r, in, func(w http.ResponseWriter, r *http.Request) error {
				next.ServeHTTP(w, r)
				return nil
			})
		})
	}
}
