package paygate

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/x402gate/x402gate/internal/testenv"
)

// countWriter is a ResponseWriter that keeps the status and the bytes written; its header
// map is cleared before each request, as a server's is per request.
type countWriter struct {
	hdr       http.Header
	status, n int
}

func (w *countWriter) Header() http.Header         { return w.hdr }
func (w *countWriter) WriteHeader(code int)        { w.status = code }
func (w *countWriter) Write(b []byte) (int, error) { w.n += len(b); return len(b), nil }

// BenchmarkHandlerChallenge is an unpaid request through the Caddy handler, with the
// context values Caddy's server sets (replacer, vars, original request): the 402 path that
// bench/run compares with Caddy's respond.
func BenchmarkHandlerChallenge(b *testing.B) {
	h := &Handler{Price: "0.001 USDC", PayTo: payee, Network: "base-sepolia", Description: "bench", MimeType: "application/json"}
	if err := provisionRemote(b, h); err != nil {
		b.Fatal(err)
	}
	r := httptest.NewRequest(http.MethodGet, "http://127.0.0.1:8080/paid", nil)
	r.Header.Set("User-Agent", "wrk")
	ctx := context.WithValue(r.Context(), caddy.ReplacerCtxKey, caddy.NewReplacer())
	ctx = context.WithValue(ctx, caddyhttp.OriginalRequestCtxKey, *r)
	ctx = context.WithValue(ctx, caddyhttp.VarsCtxKey, map[string]any{})
	r = r.WithContext(ctx)
	next := caddyhttp.HandlerFunc(func(http.ResponseWriter, *http.Request) error {
		b.Fatal("the upstream ran for an unpaid request")
		return nil
	})
	w := &countWriter{hdr: http.Header{}}
	b.ReportAllocs()
	for b.Loop() {
		clear(w.hdr)
		w.status, w.n = 0, 0
		if err := h.ServeHTTP(w, r, next); err != nil || w.status != http.StatusPaymentRequired || w.n == 0 {
			b.Fatalf("status %d, %d bytes, %v", w.status, w.n, err)
		}
	}
}

// BenchmarkChallengeAgainstRespond is issue 27's 402 row without the load that moves wrk's
// rates: an unpaid request through our handler (x402) and through Caddy's respond
// (caddyhttp.StaticResponse) provisioned with exactly the same status, body and headers
// (respond), as bench/run's respond site answers. Both are loaded the way Caddy loads a
// handler, by module ID from their JSON in a caddy.Context (Provision, Validate), and the
// request carries what Caddy's server gives a request: a replacer with the HTTP
// placeholders, the vars and the original request. Both answers are checked byte for byte
// equal before the timing. Each reports ns/op, B/op, allocs/op and cpu-ns/op (the process's
// getrusage CPU per op, which the load of other jobs moves less than ns/op). bench/run calls
// it by this name.
func BenchmarkChallengeAgainstRespond(b *testing.B) {
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	b.Cleanup(cancel)
	x402h := loadHandler(b, ctx, "http.handlers.x402", map[string]any{"price": "0.001 USDC", "pay_to": payee, "network": "base-sepolia",
		"description": "bench", "mime_type": "application/json", "facilitator_url": "http://127.0.0.1:1"})
	ours := httptest.NewRecorder()
	if err := x402h.ServeHTTP(ours, caddyRequest(), unreachable(b)); err != nil || ours.Code != http.StatusPaymentRequired {
		b.Fatalf("our answer: %d, %v", ours.Code, err)
	}
	respond := loadHandler(b, ctx, "http.handlers.static_response", map[string]any{"status_code": ours.Code,
		"body": ours.Body.String(), "headers": ours.Header()})
	theirs := httptest.NewRecorder()
	if err := respond.ServeHTTP(theirs, caddyRequest(), unreachable(b)); err != nil {
		b.Fatal(err)
	}
	if theirs.Code != ours.Code || !bytes.Equal(theirs.Body.Bytes(), ours.Body.Bytes()) || !maps.EqualFunc(theirs.Header(), ours.Header(), slices.Equal) {
		b.Fatalf("respond does not answer as we do: %d %v %q against %d %v %q", theirs.Code, theirs.Header(), theirs.Body, ours.Code, ours.Header(), ours.Body)
	}
	for _, h := range []struct {
		name string
		h    caddyhttp.MiddlewareHandler
	}{{"x402", x402h}, {"respond", respond}} {
		b.Run(h.name, func(b *testing.B) {
			r, next := caddyRequest(), unreachable(b)
			w := &countWriter{hdr: http.Header{}}
			b.ReportAllocs()
			defer testenv.ReportCPU(b, testenv.SelfCPU())
			for b.Loop() {
				clear(w.hdr)
				w.status, w.n = 0, 0
				if err := h.h.ServeHTTP(w, r, next); err != nil || w.status != ours.Code || w.n != ours.Body.Len() {
					b.Fatalf("status %d, %d bytes, %v", w.status, w.n, err)
				}
			}
		})
	}
}

// loadHandler loads the HTTP handler module id from config in ctx, as Caddy loads a route's.
func loadHandler(b *testing.B, ctx caddy.Context, id string, config map[string]any) caddyhttp.MiddlewareHandler {
	raw, err := json.Marshal(config)
	if err != nil {
		b.Fatal(err)
	}
	m, err := ctx.LoadModuleByID(id, raw)
	if err != nil {
		b.Fatalf("loading %s: %v", id, err)
	}
	return m.(caddyhttp.MiddlewareHandler)
}

// caddyRequest is an unpaid request as Caddy's server hands it to a route's handlers: the
// vars, the original request and a replacer with the HTTP placeholders in its context.
func caddyRequest() *http.Request {
	r := httptest.NewRequest(http.MethodGet, "http://127.0.0.1:8080/paid", nil)
	r.Header.Set("User-Agent", "wrk")
	ctx := context.WithValue(r.Context(), caddyhttp.VarsCtxKey, map[string]any{})
	ctx = context.WithValue(ctx, caddyhttp.OriginalRequestCtxKey, *r)
	r = r.WithContext(ctx)
	caddyhttp.NewTestReplacer(r)
	return r
}

// unreachable is the next handler of a route whose handler answers every request itself.
func unreachable(b *testing.B) caddyhttp.Handler {
	return caddyhttp.HandlerFunc(func(http.ResponseWriter, *http.Request) error {
		b.Fatal("the next handler ran for an unpaid request")
		return nil
	})
}
