package verdictclient

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/x402gate/x402gate/internal/testenv"
)

func TestTransportRefusesRedirects(t *testing.T) {
	target := newScript(t).on(routeStatus("0xabc"), envelope(testenv.ApprovedVerdict()))
	for _, code := range []int{301, 302, 303, 307, 308} {
		t.Run(strconv.Itoa(code), func(t *testing.T) {
			s := newScript(t).on(routeStatus("0xabc"), reply{status: code, header: map[string]string{
				"Location": target.srv.URL + "/transactions/0xabc/approval-status"}})
			v, err := s.client(t).Await(t.Context(), "0xabc", fast(5))
			if !errors.Is(err, ErrRedirect) || v != nil {
				t.Fatalf("Await = %v, %v; want ErrRedirect", v, err)
			}
			if n := s.count(routeStatus("0xabc")); n != 1 {
				t.Fatalf("redirect retried: %d GETs", n)
			}
		})
	}
	if n := target.count(routeStatus("0xabc")); n != 0 {
		t.Fatalf("redirect target was contacted %d times", n)
	}
}

func TestTransportCapsResponseSize(t *testing.T) {
	big := `{"verdict":null,"pad":"` + strings.Repeat("a", MaxResponseBytes) + `"}`
	cases := []struct {
		name  string
		reply reply
	}{
		{"declared Content-Length over the cap", reply{body: big, header: map[string]string{"Content-Length": strconv.Itoa(len(big))}}},
		{"chunked body over the cap", reply{oversize: MaxResponseBytes + 1}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newScript(t).on(routeStatus("0xabc"), tc.reply)
			_, err := s.client(t).Await(t.Context(), "0xabc", fast(5))
			if !errors.Is(err, ErrResponseTooLarge) {
				t.Fatalf("err = %v, want ErrResponseTooLarge", err)
			}
			if n := s.count(routeStatus("0xabc")); n != 1 {
				t.Fatalf("oversized answer retried: %d GETs", n)
			}
		})
	}
	t.Run("an answer just under the cap is read", func(t *testing.T) {
		pad := MaxResponseBytes - len(`{"verdict":null,"pad":""}`)
		s := newScript(t).on(routeStatus("0xabc"), reply{body: `{"verdict":null,"pad":"` + strings.Repeat("a", pad) + `"}`})
		env, err := s.client(t).Status(t.Context(), "0xabc")
		if err != nil || env.Verdict != nil {
			t.Fatalf("Status = %v, %v", env, err)
		}
	})
}

func TestTransportRequiresJSONContentType(t *testing.T) {
	body := `{"verdict":` + testenv.VerdictJSON(testenv.ApprovedVerdict()) + `}`
	cases := []struct {
		ct string
		ok bool
	}{
		{"application/json", true},
		{"application/json; charset=utf-8", true},
		{"application/json; charset=UTF-8", true},
		{"application/problem+json", true},
		{"application/json; charset=latin1", false},
		{"text/html", false},
		{"text/plain; charset=utf-8", false},
		{"application/octet-stream", false},
		{"", false},
	}
	for _, tc := range cases {
		t.Run("content-type "+tc.ct, func(t *testing.T) {
			rp := reply{body: body, contentType: tc.ct}
			if tc.ct == "" {
				rp.contentType = noContentType
			}
			s := newScript(t).on(routeStatus("0xabc"), rp)
			_, err := s.client(t).Status(t.Context(), "0xabc")
			if tc.ok != (err == nil) {
				t.Fatalf("err = %v, want ok=%v", err, tc.ok)
			}
			if !tc.ok && !errors.Is(err, ErrContentType) {
				t.Fatalf("err = %v, want ErrContentType", err)
			}
		})
	}
}

func TestSlowResponseIsCancelledByTheContext(t *testing.T) {
	t.Run("await", func(t *testing.T) {
		s := newScript(t).on(routeStatus("0xabc"), reply{block: true})
		ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
		defer cancel()
		v, err := s.client(t).Await(ctx, "0xabc", fast(5))
		if !errors.Is(err, context.DeadlineExceeded) || v != nil || IsTransient(err) {
			t.Fatalf("Await = %v, %v; want the context's deadline", v, err)
		}
		if n := s.count(routeStatus("0xabc")); n != 1 {
			t.Fatalf("GETs after the context ended: %d", n)
		}
	})
	t.Run("cancel during a backoff wait", func(t *testing.T) {
		s := newScript(t).on(routeStatus("0xabc"), envelope(testenv.PendingVerdict()))
		ctx, cancel := context.WithCancel(t.Context())
		opts := PollOptions{IntervalMs: 1, MaxAttempts: 10, Sleep: func(ctx context.Context, d time.Duration) error {
			cancel()
			<-ctx.Done()
			return ctx.Err()
		}}
		_, err := s.client(t).Await(ctx, "0xabc", opts)
		if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "0xabc") {
			t.Fatalf("err = %v", err)
		}
		if n := s.count(routeStatus("0xabc")); n != 1 {
			t.Fatalf("GETs = %d, want 1", n)
		}
	})
	t.Run("submit", func(t *testing.T) {
		s := newScript(t).on(routeSubmit, reply{block: true})
		ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
		defer cancel()
		_, err := s.client(t).Submit(ctx, paymentSubmit())
		var ue *UncertainSubmitError
		if !errors.As(err, &ue) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v; a submit cut off mid-request is uncertain", err)
		}
	})
	t.Run("per-request timeout is a transient network failure", func(t *testing.T) {
		s := newScript(t).on(routeStatus("0xabc"), reply{block: true}, envelope(testenv.ApprovedVerdict()))
		c, err := New(Config{BaseURL: s.srv.URL, APIKey: testKey, Timeout: 30 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		v, err := c.Await(t.Context(), "0xabc", fast(3))
		if err != nil || !v.Approved() {
			t.Fatalf("Await = %v, %v", v, err)
		}
		if n := s.count(routeStatus("0xabc")); n != 2 {
			t.Fatalf("GETs = %d, want 2", n)
		}
	})
}

func TestCallerHTTPClientIsNotModified(t *testing.T) {
	hc := &http.Client{}
	s := newScript(t).on(routeStatus("0xabc"), reply{status: 302, header: map[string]string{"Location": "/"}})
	c, err := New(Config{BaseURL: s.srv.URL, APIKey: testKey, HTTPClient: hc})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Status(t.Context(), "0xabc"); !errors.Is(err, ErrRedirect) {
		t.Fatalf("err = %v", err)
	}
	if hc.CheckRedirect != nil {
		t.Fatal("caller's http.Client was modified")
	}
}

func TestNewValidatesConfig(t *testing.T) {
	cases := []struct {
		name string
		cfg  Config
		base string // "" means New must fail
	}{
		{"trailing slash removed", Config{BaseURL: "https://v.example/", APIKey: testKey}, "https://v.example"},
		{"path prefix kept", Config{BaseURL: "https://v.example/api/v1/", APIKey: testKey}, "https://v.example/api/v1"},
		{"missing base url", Config{APIKey: testKey}, ""},
		{"ftp scheme", Config{BaseURL: "ftp://v.example", APIKey: testKey}, ""},
		{"user info in url", Config{BaseURL: "https://u:p@v.example", APIKey: testKey}, ""},
		{"query in url", Config{BaseURL: "https://v.example/?key=x", APIKey: testKey}, ""},
		{"missing key", Config{BaseURL: "https://v.example"}, ""},
		{"short key", Config{BaseURL: "https://v.example", APIKey: "short"}, ""},
		{"key with a newline", Config{BaseURL: "https://v.example", APIKey: testKey + "\n"}, ""},
		{"negative timeout", Config{BaseURL: "https://v.example", APIKey: testKey, Timeout: -1}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := New(tc.cfg)
			if tc.base == "" {
				if !errors.Is(err, ErrInvalidInput) {
					t.Fatalf("New = %v, want ErrInvalidInput", err)
				}
				return
			}
			if err != nil || c.BaseURL() != tc.base {
				t.Fatalf("New = %v, %v; want base %q", c, err, tc.base)
			}
		})
	}
}
