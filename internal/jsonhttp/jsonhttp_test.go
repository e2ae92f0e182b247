package jsonhttp

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestDo(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/ok":
			if r.Header.Get("Accept") != "application/json" || r.Header.Get("Content-Type") != "application/json" || r.Header.Get("X-Key") != "k" {
				w.WriteHeader(http.StatusBadRequest)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"ok":true}`))
		case "/status":
			w.WriteHeader(http.StatusTeapot)
			_, _ = w.Write([]byte(`{"error":"teapot"}`))
		case "/redirect":
			http.Redirect(w, r, "/ok", http.StatusFound)
		case "/large":
			_, _ = w.Write([]byte(strings.Repeat("x", 100)))
		case "/slow":
			time.Sleep(200 * time.Millisecond)
		}
	}))
	t.Cleanup(srv.Close)
	c := New(nil, 64, time.Second)
	cases := []struct {
		name       string
		req        Request
		wantStatus int
		wantBody   string
		wantErr    error
	}{
		{"a JSON answer is read with its status and body", Request{Method: http.MethodPost, URL: srv.URL + "/ok",
			Header: http.Header{"X-Key": {"k"}}, Body: []byte(`{}`)}, 200, `{"ok":true}`, nil},
		{"an answer of another status is no error", Request{Method: http.MethodGet, URL: srv.URL + "/status"}, 418, `{"error":"teapot"}`, nil},
		{"a redirect is refused, never followed", Request{Method: http.MethodGet, URL: srv.URL + "/redirect"}, 302, "", ErrRedirect},
		{"an answer over the cap is refused", Request{Method: http.MethodGet, URL: srv.URL + "/large"}, 200, "", ErrTooLarge},
		{"the per-call deadline makes the service unreachable", Request{Method: http.MethodGet, URL: srv.URL + "/slow",
			Timeout: 50 * time.Millisecond}, 0, "", ErrUnreachable},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := c.Do(context.Background(), tc.req)
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil && err != nil) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			if got.Status != tc.wantStatus || string(got.Body) != tc.wantBody {
				t.Fatalf("answer = %d %q, want %d %q", got.Status, got.Body, tc.wantStatus, tc.wantBody)
			}
		})
	}
}

func TestDoErrorsCarryNoURLSecret(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	addr := srv.URL
	srv.Close() // nothing listens now
	c := New(nil, 0, time.Second)
	for _, raw := range []string{
		strings.Replace(addr, "http://", "http://user:pw-5e1@", 1) + "/v1/path-key-91?token=q-7d",
		"http://exa mple/path-key-91?token=q-7d", // does not parse
	} {
		_, err := c.Do(context.Background(), Request{Method: http.MethodGet, URL: raw})
		if err == nil {
			t.Fatalf("%s: no error", raw)
		}
		for _, secret := range []string{"pw-5e1", "path-key-91", "q-7d"} {
			if strings.Contains(err.Error(), secret) {
				t.Fatalf("error %q carries %q", err, secret)
			}
		}
	}
}

func TestDoReportsTheCallersContext(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { time.Sleep(200 * time.Millisecond) }))
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := New(nil, 0, time.Minute).Do(ctx, Request{Method: http.MethodGet, URL: srv.URL})
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrUnreachable) {
		t.Fatalf("err = %v, want the caller's deadline, not ErrUnreachable", err)
	}
}

// TestConcurrentCallsKeepTheirConnections makes rounds of calls at once through a Client
// made without an http.Client: the connections of the first round serve the later ones.
// On http.DefaultTransport, which keeps 2 idle connections to a host, every round but
// the first would open 14 more.
func TestConcurrentCallsKeepTheirConnections(t *testing.T) {
	const conc, rounds = 16, 4
	var opened atomic.Int64
	var (
		mu      sync.Mutex
		release = make(chan struct{})
		arrived sync.WaitGroup
	)
	round := func() chan struct{} { mu.Lock(); defer mu.Unlock(); return release }
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived.Done()
		<-round() // every call of the round is in flight at once
		w.Write([]byte(`{}`))
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			opened.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	c := New(nil, 0, time.Minute)
	for range rounds {
		arrived.Add(conc)
		errs := make(chan error, conc)
		for range conc {
			go func() {
				_, err := c.Do(context.Background(), Request{Method: http.MethodPost, URL: srv.URL, Body: []byte(`{}`)})
				errs <- err
			}()
		}
		arrived.Wait()
		close(round())
		for range conc {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
		mu.Lock()
		release = make(chan struct{})
		mu.Unlock()
	}
	if n := opened.Load(); n != conc {
		t.Errorf("%d rounds of %d calls at once opened %d connections, want %d (one per call of a round, kept)", rounds, conc, n, conc)
	}
}
