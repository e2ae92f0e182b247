package caddymodule

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

func TestPublicResource(t *testing.T) {
	for _, tc := range []struct {
		name     string
		url      string
		tls      bool
		trusted  bool
		headers  map[string]string
		origPath string
		want     string
	}{
		{name: "direct http", url: "http://shop.example/api/x?q=1", want: "http://shop.example/api/x"},
		{name: "direct https", url: "https://shop.example/api/x", tls: true, want: "https://shop.example/api/x"},
		{name: "forwarded headers from an untrusted peer are ignored", url: "http://10.0.0.5:8080/api/x",
			headers: map[string]string{"X-Forwarded-Proto": "https", "X-Forwarded-Host": "evil.example"},
			want:    "http://10.0.0.5:8080/api/x"},
		{name: "a trusted proxy sets scheme and host", url: "http://10.0.0.5:8080/api/x", trusted: true,
			headers: map[string]string{"X-Forwarded-Proto": "https", "X-Forwarded-Host": "shop.example"},
			want:    "https://shop.example/api/x"},
		{name: "the first entry of a forwarded list wins", url: "http://10.0.0.5/api/x", trusted: true,
			headers: map[string]string{"X-Forwarded-Proto": "https, http", "X-Forwarded-Host": "shop.example, inner.local"},
			want:    "https://shop.example/api/x"},
		{name: "a forwarded host that would change the URL is refused", url: "http://10.0.0.5/api/x", trusted: true,
			headers: map[string]string{"X-Forwarded-Host": "evil.example/phish?"},
			want:    "http://10.0.0.5/api/x"},
		{name: "an unknown forwarded scheme is refused", url: "http://10.0.0.5/api/x", trusted: true,
			headers: map[string]string{"X-Forwarded-Proto": "javascript"},
			want:    "http://10.0.0.5/api/x"},
		{name: "the original path before handle_path", url: "http://shop.example/x", origPath: "/api/x",
			want: "http://shop.example/api/x"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, tc.url, nil)
			if tc.tls {
				r.TLS = &tls.ConnectionState{}
			} else {
				r.TLS = nil
			}
			for k, v := range tc.headers {
				r.Header.Set(k, v)
			}
			ctx := context.WithValue(r.Context(), caddyhttp.VarsCtxKey, map[string]any{caddyhttp.TrustedProxyVarKey: tc.trusted})
			if tc.origPath != "" {
				orig := *r
				u := *r.URL
				u.Path = tc.origPath
				orig.URL = &u
				ctx = context.WithValue(ctx, caddyhttp.OriginalRequestCtxKey, orig)
			}
			if got := publicResource(r.WithContext(ctx)); got != tc.want {
				t.Fatalf("publicResource = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestErrorStatusFollowsCaddyHandlerErrors(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want int
	}{
		{caddyhttp.Error(http.StatusBadGateway, errors.New("dial")), http.StatusBadGateway},
		{fmt.Errorf("wrapped: %w", caddyhttp.Error(http.StatusNotFound, nil)), http.StatusNotFound},
		{errors.New("plain"), http.StatusInternalServerError},
	} {
		if got := errorStatus(tc.err); got != tc.want {
			t.Errorf("errorStatus(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
}
