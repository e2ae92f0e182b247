package gate

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strconv"

	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/x402gate/x402gate/x402"
)

// The unpaid 402 of a route whose price and payee are fixed differs from one request to the
// next only in the resource URL (docs/gate.md#the-cached-challenge). So the gate builds it once, with a
// marker in place of the URL, keeps the JSON of the v1 body and of the v2 PAYMENT-REQUIRED
// header split around the marker, and splices each request's URL in, JSON-escaped by
// encoding/json as the full build escapes it. The finished answers of the most recent URLs
// are kept in an LRU. The answer is byte for byte the one the full build gives
// (TestCachedChallengeIsTheBuiltOne). A browser (the paywall page), an access-pass route (its
// sign-in-with-x challenge is fresh each time), an advertised verdict check (its fee is
// priced per request), a per-request price or payee and an upto route (its facilitator's
// address is read when the first request comes) take the full build.

const (
	// challengeCacheSize bounds the cached answers of one route.
	challengeCacheSize = 256
	// maxCachedResource is the longest resource URL whose answer is cached; a longer one
	// is spliced for each request.
	maxCachedResource = 512
	// resourceMarker stands for the resource URL in the template. It JSON-encodes as
	// itself quoted, and no route configuration holds it (checked when it is split).
	resourceMarker = "http://resource.x402gate.invalid/4b1e0c9f7d2a"
)

// Canonical header keys of the 402, written into the header map directly.
var (
	keyPaymentRequired = http.CanonicalHeaderKey(x402.HeaderPaymentRequired)
	keyCacheControl    = http.CanonicalHeaderKey("Cache-Control")
	keyExposeHeaders   = http.CanonicalHeaderKey("Access-Control-Expose-Headers")
	keyContentType     = http.CanonicalHeaderKey("Content-Type")
	keyContentLength   = http.CanonicalHeaderKey("Content-Length")
	keyPaymentSig      = http.CanonicalHeaderKey(x402.HeaderPaymentSignature)
	keyPayment         = http.CanonicalHeaderKey(x402.HeaderPayment)
)

// challengeTemplate is a route's unpaid 402 with the resource URL cut out.
type challengeTemplate struct {
	body    [][]byte // the v1 body around each accepts entry's resource
	v2      [2][]byte
	answers *lru.Cache[string, *challengeAnswer]
}

// challengeAnswer is the 402 for one resource URL.
type challengeAnswer struct {
	header string // PAYMENT-REQUIRED
	length string // Content-Length of the body (res.Body)
	// res is the result of every request answered from this entry, with the route's
	// requirement for the URL and the 402's headers, shared (Options.OnResult must not
	// modify a result); writeCached gives each response its own header values.
	res Result
}

// newChallengeTemplate builds g's template, or returns nil when the route's 402 cannot be
// cached.
func newChallengeTemplate(g *Gate) *challengeTemplate {
	route := g.route
	if g.pass != nil || (route.verdict != nil && route.verdict.Advertise != "") || route.price == nil || route.payTo == ([20]byte{}) || route.scheme == SchemeUpto {
		return nil
	}
	req := route.requirement(&route.option, route.price, route.payTo, resourceMarker)
	res := g.answer402(req, "", unpaidErrorV1, unpaidErrorV2, nil, nil)
	if res.Kind == KindError {
		return nil
	}
	v2, err := base64.StdEncoding.DecodeString(res.Header.Get(x402.HeaderPaymentRequired))
	if err != nil {
		return nil
	}
	marker, _ := json.Marshal(resourceMarker)
	t := &challengeTemplate{body: bytes.Split(res.Body, marker)}
	parts := bytes.Split(v2, marker)
	v1 := 0
	for _, o := range g.offersFor(req) {
		if paysV1(o) {
			v1++
		}
	}
	if len(t.body) != v1+1 || len(parts) != 2 {
		return nil // the marker is in the configuration too: build each 402 in full
	}
	t.v2 = [2][]byte{parts[0], parts[1]}
	t.answers, err = lru.New[string, *challengeAnswer](challengeCacheSize)
	if err != nil {
		return nil
	}
	return t
}

// answer is route's 402 for resource, spliced from t; nil when it would not fit a header
// (the full build then answers with its error).
func (t *challengeTemplate) answer(route *routeConfig, resource string) *challengeAnswer {
	if a, ok := t.answers.Get(resource); ok {
		return a
	}
	if checkResourceURL(resource) != nil {
		return nil
	}
	u := jsonString(resource)
	n := len(t.v2[0]) + len(u) + len(t.v2[1])
	if base64.StdEncoding.EncodedLen(n) > x402.MaxHeaderBytes {
		return nil
	}
	v2 := make([]byte, 0, n)
	v2 = append(append(append(v2, t.v2[0]...), u...), t.v2[1]...)
	size := len(t.body[0])
	for _, p := range t.body[1:] {
		size += len(u) + len(p)
	}
	body := append(make([]byte, 0, size), t.body[0]...)
	for _, p := range t.body[1:] {
		body = append(append(body, u...), p...)
	}
	a := &challengeAnswer{header: base64.StdEncoding.EncodeToString(v2), length: strconv.Itoa(len(body))}
	vals := &[3]string{a.header, "no-store", exposeHeaders}
	a.res = Result{
		Kind:         KindPaymentRequired,
		Status:       http.StatusPaymentRequired,
		Header:       http.Header{keyPaymentRequired: vals[0:1:1], keyCacheControl: vals[1:2:2], keyExposeHeaders: vals[2:3:3]},
		Body:         body,
		Requirements: route.requirement(&route.option, route.price, route.payTo, resource),
		cached:       a,
	}
	if len(resource) <= maxCachedResource {
		t.answers.Add(resource, a)
	}
	return a
}

// jsonString is s as encoding/json writes a string: as it is, quoted, when every byte is
// printable ASCII that json.Marshal leaves alone, else as json.Marshal writes it.
func jsonString(s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			b, _ := json.Marshal(s)
			return b
		}
	}
	b := make([]byte, 0, len(s)+2)
	return append(append(append(b, '"'), s...), '"')
}

// cachedChallenge answers an unpaid request of a cacheable route from the template, as
// Handle would; nil means Handle must.
func (g *Gate) cachedChallenge(r *http.Request, in Input) *Result {
	t := g.challenges
	if t == nil || in.Price != "" || in.PayTo != "" || len(in.Header[keyPaymentSig]) != 0 || len(in.Header[keyPayment]) != 0 ||
		(r != nil && IsBrowser(r.Header)) {
		return nil
	}
	a := t.answer(g.route, in.Resource)
	if a == nil {
		return nil
	}
	return &a.res
}

// writeCached sends a result of cachedChallenge. It is shared with the other requests of
// its URL, so the response gets its own header values, all five in one array.
func (r *Result) writeCached(w http.ResponseWriter, req *http.Request) {
	a := r.cached
	vals := &[5]string{a.header, "no-store", exposeHeaders, "application/json", a.length}
	h := w.Header()
	h[keyPaymentRequired], h[keyCacheControl], h[keyExposeHeaders] = vals[0:1:1], vals[1:2:2], vals[2:3:3]
	h[keyContentType], h[keyContentLength] = vals[3:4:4], vals[4:5:5]
	w.WriteHeader(r.Status)
	if req.Method != http.MethodHead {
		_, _ = w.Write(r.Body)
	}
}
