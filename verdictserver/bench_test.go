package verdictserver

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/ethereum/go-ethereum/common"

	"github.com/x402gate/x402gate/internal/testenv"
)

// BenchmarkDecodeSubmit: strict decoding and validation of a payment submit body.
func BenchmarkDecodeSubmit(b *testing.B) {
	body := []byte(testenv.JSON(b, submitBody(common.HexToAddress("0xA11CE00000000000000000000000000000000001"), allowedPay, "0123456789abcdef")))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := decodeSubmit(body); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSubmit: one POST /transactions through the handler on SQLite: rate limits,
// key lookup, decoding, wallet check, the durable write and the queueing (the workers
// evaluate meanwhile).
func BenchmarkSubmit(b *testing.B) {
	e := newEnv(b, nil, nil)
	a := e.agent("alice", common.HexToAddress("0xA11CE00000000000000000000000000000000001"), allowPolicy)
	body := testenv.JSON(b, submitBody(a.Wallet, allowedPay, ""))
	h := e.srv.Handler()
	b.ReportAllocs()
	for b.Loop() {
		req := httptest.NewRequest(http.MethodPost, "/transactions", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("x-api-key", a.Key)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusCreated {
			b.Fatalf("submit = %d %s", rec.Code, rec.Body)
		}
	}
}
