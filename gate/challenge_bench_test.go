package gate

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/x402gate/x402gate/facilitator/httpapi"
)

// benchWriter is a ResponseWriter that keeps nothing but the status and the byte count,
// and whose header map is cleared before each request, as a server's is per request.
type benchWriter struct {
	h      http.Header
	status int
	n      int
}

func (w *benchWriter) Header() http.Header  { return w.h }
func (w *benchWriter) WriteHeader(code int) { w.status = code }
func (w *benchWriter) Write(b []byte) (int, error) {
	w.n += len(b)
	return len(b), nil
}

// httpapiClient is a remote facilitator that the unpaid requests of these tests and
// benchmarks never call.
func httpapiClient() (*httpapi.Client, error) {
	return httpapi.NewClient(httpapi.ClientConfig{URL: "https://facilitator.example.com"})
}

func benchConfig() Config {
	return Config{
		Network:  "base-sepolia",
		PayTo:    "0x1111111111111111111111111111111111111111",
		Price:    testPrice,
		Resource: ResourceConfig{Description: "A weather report", MimeType: "application/json"},
	}
}

// BenchmarkChallenge is an unpaid request through the plain net/http middleware: the 402
// with its JSON body and PAYMENT-REQUIRED header (docs/gate.md#results).
func BenchmarkChallenge(b *testing.B) {
	for _, c := range []struct {
		name string
		path func(i int) string
	}{
		{"one URL", func(int) string { return "/weather/today" }},
		{"a new URL each time", func(i int) string { return "/weather/" + string(rune('a'+i%26)) + "/" + itoa(i) }},
	} {
		b.Run(c.name, func(b *testing.B) {
			h := newBenchGate(b, benchConfig()).Middleware(MiddlewareOptions{})(http.NotFoundHandler())
			r := httptest.NewRequest(http.MethodGet, "http://api.example.com/weather/today", nil)
			r.Header.Set("User-Agent", "x402-fetch")
			w := &benchWriter{h: http.Header{}}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				r.URL.Path = c.path(i)
				i++
				clear(w.h)
				w.status, w.n = 0, 0
				h.ServeHTTP(w, r)
				if w.status != http.StatusPaymentRequired || w.n == 0 {
					b.Fatalf("status %d, %d bytes", w.status, w.n)
				}
			}
		})
	}
}

func itoa(i int) string {
	var b [20]byte
	n := len(b)
	for {
		n--
		b[n] = byte('0' + i%10)
		i /= 10
		if i == 0 {
			return string(b[n:])
		}
	}
}
