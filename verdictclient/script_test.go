package verdictclient

import (
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/x402gate/x402gate/internal/testenv"
)

// testKey is the API key of every test; no test output may contain it.
const testKey = "vk_test_5f1c0a9e7d3b42c8a6e1"

// Route keys of the scripted server.
const (
	routeSubmit    = "POST /transactions"
	routeReconcile = "GET /transactions"
)

func routeStatus(hash string) string { return "GET /transactions/" + hash + "/approval-status" }

// noContentType makes a reply carry no Content-Type header at all.
const noContentType = "none"

// reply is one scripted answer. The zero value is 200 with an empty JSON object.
type reply struct {
	status      int
	body        string
	contentType string            // default application/json; noContentType sends none
	header      map[string]string // extra headers
	oversize    int               // > 0: stream this many bytes of a JSON string, no Content-Length
	hangUp      bool              // close the connection without answering (network failure)
	block       bool              // wait until the client gives up
}

// recorded is one request the server saw.
type recorded struct {
	method, url      string
	header           http.Header
	body             []byte
	contentLength    int64
	transferEncoding []string
}

// script is an httptest server that answers each route from a queue of replies; the
// last reply of a route repeats. It counts and records every request.
type script struct {
	t      *testing.T
	srv    *httptest.Server
	mu     sync.Mutex
	routes map[string][]reply
	counts map[string]int
	reqs   []recorded
	stop   chan struct{}
}

func newScript(t *testing.T) *script {
	t.Helper()
	s := &script{t: t, routes: map[string][]reply{}, counts: map[string]int{}, stop: make(chan struct{})}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(func() { close(s.stop); s.srv.Close() })
	return s
}

// on appends replies to a route.
func (s *script) on(route string, rs ...reply) *script {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.routes[route] = append(s.routes[route], rs...)
	return s
}

func (s *script) count(route string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.counts[route]
}

func (s *script) requests() []recorded {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]recorded(nil), s.reqs...)
}

func (s *script) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	route := r.Method + " " + r.URL.Path
	s.mu.Lock()
	s.counts[route]++
	s.reqs = append(s.reqs, recorded{method: r.Method, url: r.URL.String(), header: r.Header.Clone(), body: body,
		contentLength: r.ContentLength, transferEncoding: r.TransferEncoding})
	q := s.routes[route]
	var rp reply
	switch {
	case len(q) == 0:
		rp = reply{status: http.StatusNotFound, body: `{"statusCode":404,"message":"no script","error":"Not Found"}`}
	case len(q) == 1:
		rp = q[0]
	default:
		rp, s.routes[route] = q[0], q[1:]
	}
	s.mu.Unlock()

	switch {
	case rp.hangUp:
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close()
		}
		return
	case rp.block:
		select {
		case <-r.Context().Done():
		case <-s.stop:
		}
		return
	}
	ct := rp.contentType
	if ct == "" {
		ct = "application/json"
	}
	if ct == noContentType {
		w.Header()["Content-Type"] = nil // no header, and no sniffing
	} else {
		w.Header().Set("Content-Type", ct)
	}
	for k, v := range rp.header {
		w.Header().Set(k, v)
	}
	st := rp.status
	if st == 0 {
		st = http.StatusOK
	}
	if rp.oversize > 0 {
		w.WriteHeader(st)
		io.WriteString(w, `{"verdict":null,"pad":"`)
		chunk := strings.Repeat("a", 32<<10)
		for n := 0; n < rp.oversize; n += len(chunk) {
			if _, err := io.WriteString(w, chunk); err != nil {
				return
			}
		}
		io.WriteString(w, `"}`)
		return
	}
	w.WriteHeader(st)
	body2 := rp.body
	if body2 == "" && st < 300 {
		body2 = "{}"
	}
	io.WriteString(w, body2)
}

// client returns a Client for the script's server.
func (s *script) client(t *testing.T) *Client {
	t.Helper()
	c, err := New(Config{BaseURL: s.srv.URL + "/", APIKey: testKey})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// guardian returns a Guardian for the script's server.
func (s *script) guardian(t *testing.T, mut ...func(*GuardianOptions)) *Guardian {
	t.Helper()
	cfg := GuardianOptions{BaseURL: s.srv.URL, APIKey: testKey}
	for _, m := range mut {
		m(&cfg)
	}
	g, err := NewGuardian(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// fast is a poll schedule that does not slow tests down: 1 ms waits.
func fast(attempts int) PollOptions {
	return PollOptions{IntervalMs: 1, MaxAttempts: attempts, MaxDelay: 2 * time.Millisecond}
}

// created is a 201 transaction record.
func created(hash string) reply {
	return reply{status: http.StatusCreated, body: `{"id":"6f8a2c1e-0000-4000-8000-000000000001","requestHash":"` + hash +
		`","description":"Pay","status":"PENDING","execution":0}`}
}

// ---- verdict fixtures ----

// envelope wraps a verdict in an approval-status body.
func envelope(v map[string]any) reply {
	return reply{body: `{"status":"PENDING","verdict":` + testenv.VerdictJSON(v) + `}`}
}

// withHeader returns rp with one more header.
func (rp reply) withHeader(k, v string) reply {
	h := map[string]string{}
	maps.Copy(h, rp.header)
	h[k] = v
	rp.header = h
	return rp
}

func statusReply(code int) reply {
	return reply{status: code, body: `{"statusCode":` + strconv.Itoa(code) + `,"message":"scripted","error":"x"}`}
}

func checkAt(v map[string]any, i int) map[string]any { return v["checks"].([]any)[i].(map[string]any) }
