package paygate

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
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
