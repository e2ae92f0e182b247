package credit

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// HeaderPaymentRetry carries the retry token. The gate sets it on the failed answer of a
// paid request that earned retry credits; the client sends it back, with the same payment
// header, to retry. It is a secret of the payer: the gate strips it from the request before
// the upstream and never logs it.
const HeaderPaymentRetry = "X-PAYMENT-RETRY"

// TokenBytes is the entropy of a retry token; it travels as lowercase hex.
const TokenBytes = 32

// MaxTTL bounds a grant when the authorization's validBefore is far away.
const MaxTTL = 24 * time.Hour

// NewToken returns a fresh retry token (hex of 32 random bytes) and its hash.
func NewToken() (token string, hash []byte, err error) {
	raw := make([]byte, TokenBytes)
	if _, err := rand.Read(raw); err != nil {
		return "", nil, fmt.Errorf("retry token: %w", err)
	}
	sum := sha256.Sum256(raw)
	return hex.EncodeToString(raw), sum[:], nil
}

// TokenHash returns the hash of the retry token a request presents; ok is false when
// it presents none, more than one, or one that is not 64 hex digits.
func TokenHash(h http.Header) (hash []byte, ok bool) {
	vs := h.Values(HeaderPaymentRetry)
	if len(vs) != 1 {
		return nil, false
	}
	v := strings.TrimSpace(vs[0])
	if len(v) != 2*TokenBytes {
		return nil, false
	}
	raw, err := hex.DecodeString(v)
	if err != nil {
		return nil, false
	}
	sum := sha256.Sum256(raw)
	return sum[:], true
}
