package gate

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/x402gate/x402gate/x402"
)

// The x402 v2 payment-identifier extension (docs/gate.md#payment-identifier) lets a client
// name a payment with an id of its own, so sending the same payment again is safe: the
// same id with the same payment payload is never charged twice, and is served again under
// the rules of a retry credit (one request at a time, holding a lease; a payment buys one
// good answer; at most RetryConfig.Max runs after a failed one). The same id with another
// payload is a conflict (409). A route that requires an id refuses a payment without one
// (400). The gate keeps each id, with the SHA-256 fingerprint of its payment and the
// settlement, in a PaymentIDStore until the authorization expires.

// PaymentIdentifierExtension is the key of the extension in a PaymentRequired's and a
// payment's extensions.
const PaymentIdentifierExtension = "payment-identifier"

// Config.PaymentID values.
const (
	// PaymentIDOptional advertises the extension; a payment may carry an id.
	PaymentIDOptional = "optional"
	// PaymentIDRequired advertises it as required; a payment without an id is refused.
	PaymentIDRequired = "required"
)

// Bounds of an id, as @x402/extensions checks it (isValidPaymentId): 16 to 128 of
// [A-Za-z0-9_-].
const (
	PaymentIDMinLength = 16
	PaymentIDMaxLength = 128
)

// Reasons of a refused payment identifier. They travel as they are: no x402 enum names them.
const (
	// ReasonPaymentIDRequired: the route requires an id and the payment has none (400).
	ReasonPaymentIDRequired x402.Reason = "payment_identifier_required"
	// ReasonPaymentIDConflict: the id names another payment payload (409).
	ReasonPaymentIDConflict x402.Reason = "payment_identifier_conflict"
	// ReasonPaymentIDUsed: the payment named by the id was settled and got its good
	// answer; it buys no other (409).
	ReasonPaymentIDUsed x402.Reason = "payment_identifier_used"
)

// PaymentIDStatus is what PaymentIDStore.Begin found. It is an int, so a store in another
// package (gate/redisretry) implements PaymentIDStore without importing gate.
type PaymentIDStatus = int

// Begin outcomes.
const (
	// PaymentIDNew: the id is new; the caller pays, holding the lease.
	PaymentIDNew PaymentIDStatus = iota
	// PaymentIDReplay: the payment was settled; a credit was taken, the lease is held,
	// and data is the settlement.
	PaymentIDReplay
	// PaymentIDBusy: another request of the id holds the lease; nothing was taken.
	PaymentIDBusy
	// PaymentIDConflict: the id holds another fingerprint; nothing was taken.
	PaymentIDConflict
	// PaymentIDSpent: the payment was settled and its credits are used up (it got its
	// good answer); data is the settlement.
	PaymentIDSpent
	// PaymentIDResumed: an earlier attempt of this id and payment ended, or its process
	// died, without recording a settlement; the caller pays, holding the lease, and a
	// refusal as already settled is checked with the facilitator (payOnce).
	PaymentIDResumed
)

// PaymentIDStore keeps payment identifiers. Every method is atomic across every process
// that shares the store: the in-process MemoryPaymentIDStore, or Redis
// (gate/redisretry.PaymentIDs) for several instances.
type PaymentIDStore interface {
	// Begin looks key up. An absent key is created with fingerprint, credits and the
	// lease held, and lives for ttl: PaymentIDNew. Otherwise see PaymentIDStatus; a
	// replay takes one credit and the lease.
	Begin(ctx context.Context, key string, fingerprint []byte, ttl, lease time.Duration, credits int) (data []byte, status PaymentIDStatus, err error)
	// Settled keeps data, the settlement, for the replays of key.
	Settled(ctx context.Context, key string, data []byte) error
	// End ends the lease of key. answered (a good answer was given) spends its credits.
	End(ctx context.Context, key string, answered bool) error
	// Forget deletes key: its payment was refused before money moved.
	Forget(ctx context.Context, key string) error
}

// setExtensions builds the v2 extensions every 402 of the route carries.
func (route *routeConfig) setExtensions(cfg Config) error {
	route.extensions = map[string]any{}
	switch cfg.PaymentID {
	case "":
	case PaymentIDOptional, PaymentIDRequired:
		route.paymentID = cfg.PaymentID
		route.extensions[PaymentIdentifierExtension] = paymentIDDeclaration(cfg.PaymentID == PaymentIDRequired)
	default:
		return configErr("payment_id", "%q is not %s or %s", cfg.PaymentID, PaymentIDOptional, PaymentIDRequired)
	}
	if err := route.setDiscovery(cfg); err != nil {
		return err
	}
	if len(route.extensions) == 0 {
		route.extensions = nil
	}
	return nil
}

// paymentIDDeclaration is the extension as declarePaymentIdentifierExtension builds it.
func paymentIDDeclaration(required bool) map[string]any {
	return map[string]any{
		"info": map[string]any{"required": required},
		"schema": map[string]any{
			"$schema": bazaarSchemaDraft,
			"type":    "object",
			"properties": map[string]any{
				"required": map[string]any{"type": "boolean"},
				"id": map[string]any{
					"type": "string", "minLength": PaymentIDMinLength, "maxLength": PaymentIDMaxLength,
					"pattern": "^[a-zA-Z0-9_-]+$",
				},
			},
			"required": []any{"required"},
		},
	}
}

// paymentIDOf reads the id a v2 payment carries in extensions["payment-identifier"].info.id;
// "" when it carries none. A malformed one is an error.
func paymentIDOf(p *x402.Payment) (string, error) {
	ext, ok := p.Extensions[PaymentIdentifierExtension]
	if !ok || ext == nil {
		return "", nil
	}
	m, ok := ext.(map[string]any)
	if !ok {
		return "", errors.New("payment-identifier is not an object")
	}
	info, ok := m["info"].(map[string]any)
	if !ok {
		return "", errors.New("payment-identifier has no info object")
	}
	v, ok := info["id"]
	if !ok || v == nil {
		return "", nil
	}
	id, ok := v.(string)
	if !ok || !validPaymentID(id) {
		return "", fmt.Errorf("payment-identifier id must be %d to %d characters of A-Z, a-z, 0-9, _ and -", PaymentIDMinLength, PaymentIDMaxLength)
	}
	return id, nil
}

func validPaymentID(id string) bool {
	if len(id) < PaymentIDMinLength || len(id) > PaymentIDMaxLength {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// paymentIDKey names an id of one payer for one request: the resource URL, the method and
// the request URI, as a retry credit is bound (retryKey), but not the payment, so another
// payment under the same id is seen as a conflict.
func paymentIDKey(in Input, req *x402.Requirements, p *x402.Payment, id string) string {
	sum := sha256.Sum256([]byte("payment-id\n" + p.Authorization.From.Hex() + "\n" + req.Resource.URL + "\n" +
		in.Method + " " + in.RequestURI + "\n" + id))
	return "payid:" + hex.EncodeToString(sum[:])
}

// paymentFingerprint identifies a payment payload: what it pays (x402.PaymentKey), its
// time window and its signature. The same header sent again has the same fingerprint.
func paymentFingerprint(p *x402.Payment, req *x402.Requirements) []byte {
	a := p.Authorization
	sum := sha256.Sum256([]byte(x402.KeyOf(p, req).String() + "\n" + bigString(a.ValidAfter) + "\n" +
		bigString(a.ValidBefore) + "\n" + hex.EncodeToString(p.Signature)))
	return sum[:]
}

// payOnce pays p, or serves it again, under its payment identifier when the route
// advertises the extension; otherwise it is pay.
func (g *Gate) payOnce(ctx context.Context, in Input, req *x402.Requirements, header string, p *x402.Payment) *Result {
	if g.route.paymentID == "" {
		return g.pay(ctx, in, req, header, p)
	}
	id, err := paymentIDOf(p)
	if err != nil {
		return g.errorResult(req, p.Version, http.StatusBadRequest, x402.ReasonInvalidPayload, err.Error())
	}
	if id == "" {
		if g.route.paymentID == PaymentIDRequired {
			return g.errorResult(req, p.Version, http.StatusBadRequest, ReasonPaymentIDRequired,
				"this route requires a payment-identifier id in the payment's extensions (x402 v2)")
		}
		return g.pay(ctx, in, req, header, p)
	}
	ttl := min(g.remaining(p), maxRetryTTL)
	if req.Matches(p) != nil || ttl < time.Millisecond {
		return g.pay(ctx, in, req, header, p) // refused there, and nothing to remember
	}
	key := paymentIDKey(in, req, p, id)
	credits := max(g.route.retryMax, 0)
	data, status, err := g.paymentIDs.Begin(ctx, key, paymentFingerprint(p, req), ttl, g.retryLease, credits)
	switch {
	case err != nil:
		g.log.Error("x402 payment id store unavailable", zap.Error(err))
		return g.errorResult(req, p.Version, http.StatusServiceUnavailable, ReasonRetryStoreUnavailable, "the payment id store is unavailable")
	case status == PaymentIDConflict:
		return g.errorResult(req, p.Version, http.StatusConflict, ReasonPaymentIDConflict, "this payment-identifier id names another payment")
	case status == PaymentIDBusy:
		res := g.errorResult(req, p.Version, http.StatusConflict, ReasonRetryInProgress, "this payment is being served; try again when it has answered")
		res.Header.Set("Retry-After", "1")
		return res
	case status == PaymentIDSpent:
		res := g.errorResult(req, p.Version, http.StatusConflict, ReasonPaymentIDUsed, "this payment was settled and answered; it buys one good answer")
		if s, ok := g.storedSettlement(data, p); ok {
			res.Settlement = s
			setResponseHeaders(res.Header, s)
		}
		return res
	case status == PaymentIDReplay:
		s, ok := g.storedSettlement(data, p)
		if !ok {
			_ = g.paymentIDs.End(context.WithoutCancel(ctx), key, false)
			g.log.Error("x402 payment id holds no settlement")
			return g.errorResult(req, p.Version, http.StatusServiceUnavailable, ReasonRetryStoreUnavailable, "the payment id store is unavailable")
		}
		res := g.settled(req, p, s, nil)
		res.Retry, res.retryKey, res.paymentIDKey = true, retryKey(in, req, p), key
		g.log.Info("x402 paid request served again under its payment id", zap.String("payer", s.Payer), zap.String("tx", s.Transaction))
		return res
	}
	res := g.pay(ctx, in, req, header, p)
	if status == PaymentIDResumed && res.Kind == KindRejected && retryable(res.Reason) {
		res = g.resumeSettled(ctx, req, p, res)
	}
	bg := context.WithoutCancel(ctx)
	switch {
	case res.Kind == KindSettled && res.Settlement != nil:
		b, err := json.Marshal(res.Settlement)
		if err == nil {
			err = g.paymentIDs.Settled(bg, key, b)
		}
		if err != nil {
			g.log.Error("x402 payment id store unavailable", zap.Error(err))
		}
		res.paymentIDKey = key
	case res.Kind == KindRejected || res.Status < 500:
		// Refused before money moved: the id may name a new payment.
		if err := g.paymentIDs.Forget(bg, key); err != nil {
			g.log.Error("x402 payment id store unavailable", zap.Error(err))
		}
	default:
		// The settlement's outcome is unknown: a repeat pays again, and the facilitator
		// and the pending credit decide (docs/gate.md#pending-settlements).
		if err := g.paymentIDs.End(bg, key, false); err != nil {
			g.log.Error("x402 payment id store unavailable", zap.Error(err))
		}
	}
	return res
}

// resumeSettled handles a payment refused as already settled (refused, the rejection)
// when an earlier attempt under its id ended without recording a settlement: the process
// that served it died between the settle and the answer, or its outcome was unknown. The
// facilitator's journal decides (docs/gate.md#payment-identifier): a settlement of this
// exact payment confirmed → the paid result, served now as the answer that was lost;
// still pending → 502, the id kept for a later repeat; otherwise the rejection stands.
func (g *Gate) resumeSettled(ctx context.Context, req *x402.Requirements, p *x402.Payment, refused *Result) *Result {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), g.settleTimeout)
	sr, err := g.f.SettlementStatus(sctx, p, req)
	cancel()
	s := g.settlement(req, p, sr)
	reason := x402.ReasonFromWire(sr.ErrorReason)
	payer := p.Authorization.From.Hex()
	switch {
	case errors.Is(err, errors.ErrUnsupported):
		return refused
	case err != nil:
		g.log.Warn("x402 settlement status unavailable", zap.String("payer", payer), zap.Error(err))
		s.ErrorReason = ""
		return g.settleUnknown(req, p, s, nil, "the settlement's outcome is unknown; retry later with the same payment and id")
	case sr.Success && isTxHash(s.Transaction):
		g.log.Info("x402 settlement of an unanswered payment id confirmed; paid request proceeds", zap.String("payer", payer), zap.String("tx", s.Transaction))
		res := g.settled(req, p, s, nil)
		res.Retry, res.resumed = true, true
		return res
	case reason == x402.ReasonSettlementPending:
		return g.settleUnknown(req, p, s, nil, "the settlement is still pending; retry later with the same payment and id")
	}
	return refused
}

// storedSettlement decodes the settlement kept for a payment id, in p's version.
func (g *Gate) storedSettlement(data []byte, p *x402.Payment) (*Settlement, bool) {
	var s Settlement
	if err := json.Unmarshal(data, &s); err != nil || !s.Success || !sameAddress(s.Payer, p.Authorization.From) {
		return nil, false
	}
	s.Version = p.Version
	g.rebuildResponseHeader(&s)
	return &s, true
}

// endPaymentID ends the lease of a settled request's payment id: a good answer spends the
// id's credits, a failed one leaves them for a repeat.
func (g *Gate) endPaymentID(ctx context.Context, res *Result, failed bool) error {
	if res.paymentIDKey == "" || g.paymentIDs == nil {
		return nil
	}
	if err := g.paymentIDs.End(ctx, res.paymentIDKey, !failed); err != nil {
		g.log.Error("x402 payment id store unavailable", zap.Error(err))
		return fmt.Errorf("gate: report upstream: %w", err)
	}
	return nil
}

// DefaultMemoryPaymentIDs bounds a MemoryPaymentIDStore made with
// NewMemoryPaymentIDStore(0).
const DefaultMemoryPaymentIDs = 100_000

// MemoryPaymentIDStore is the in-process PaymentIDStore of one instance. It is safe for
// concurrent use.
type MemoryPaymentIDStore struct {
	mu  sync.Mutex
	m   map[string]*paymentIDEntry
	max int
	now func() time.Time
}

type paymentIDEntry struct {
	fp    []byte
	n     int
	data  []byte
	exp   time.Time
	lease time.Time
}

// NewMemoryPaymentIDStore returns an empty store holding at most maxEntries ids (0 means
// DefaultMemoryPaymentIDs). When it is full of unexpired ids, Begin fails with
// ErrRetryStoreUnavailable rather than forget a settled payment.
func NewMemoryPaymentIDStore(maxEntries int) *MemoryPaymentIDStore {
	if maxEntries <= 0 {
		maxEntries = DefaultMemoryPaymentIDs
	}
	return &MemoryPaymentIDStore{m: map[string]*paymentIDEntry{}, max: maxEntries, now: time.Now}
}

// Begin implements PaymentIDStore.
func (s *MemoryPaymentIDStore) Begin(_ context.Context, key string, fp []byte, ttl, lease time.Duration, credits int) ([]byte, PaymentIDStatus, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	e, ok := s.m[key]
	if ok && !now.Before(e.exp) {
		delete(s.m, key)
		ok = false
	}
	if !ok {
		if len(s.m) >= s.max {
			for k, e := range s.m {
				if !now.Before(e.exp) {
					delete(s.m, k)
				}
			}
			if len(s.m) >= s.max {
				return nil, PaymentIDNew, fmt.Errorf("memory payment id store holds %d ids: %w", s.max, ErrRetryStoreUnavailable)
			}
		}
		s.m[key] = &paymentIDEntry{fp: append([]byte(nil), fp...), n: credits, exp: now.Add(ttl), lease: now.Add(lease)}
		return nil, PaymentIDNew, nil
	}
	switch {
	case subtle.ConstantTimeCompare(e.fp, fp) != 1:
		return nil, PaymentIDConflict, nil
	case now.Before(e.lease):
		return nil, PaymentIDBusy, nil
	case e.data == nil:
		e.lease = now.Add(lease)
		return nil, PaymentIDResumed, nil
	case e.n <= 0:
		return append([]byte(nil), e.data...), PaymentIDSpent, nil
	}
	e.n--
	e.lease = now.Add(lease)
	return append([]byte(nil), e.data...), PaymentIDReplay, nil
}

// Settled implements PaymentIDStore.
func (s *MemoryPaymentIDStore) Settled(_ context.Context, key string, data []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.m[key]; ok {
		e.data = append([]byte{}, data...)
	}
	return nil
}

// End implements PaymentIDStore.
func (s *MemoryPaymentIDStore) End(_ context.Context, key string, answered bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.m[key]; ok {
		e.lease = time.Time{}
		if answered {
			e.n = 0
		}
	}
	return nil
}

// Forget implements PaymentIDStore.
func (s *MemoryPaymentIDStore) Forget(_ context.Context, key string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, key)
	return nil
}
