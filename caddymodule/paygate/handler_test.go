package paygate

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/x402gate/x402gate/gate"
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
		{name: "no host gives no resource", url: "http:///api/x", want: ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, tc.url, nil)
			r.Host = r.URL.Host
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

// TestPublicResourceIsTheURLsString: the resource is, byte for byte, what url.URL.String()
// writes for the request's scheme, host and path, the plain ones it builds itself included.
func TestPublicResourceIsTheURLsString(t *testing.T) {
	hosts := []string{"shop.example", "127.0.0.1:8080", "Shop-1.example_~", "[::1]:8080", "xn--bcher-kva.example"}
	paths := []string{"/", "/paid", "/a/b.c/~d_e-f", "/a b", "/caf\u00e9", "/a%2Fb", "/a;b", "/a:b", "/a@b", "/a+b",
		"/a!$&'()*,=", "/a?b", "/a#b", "/a\\b", "/[x]", "/{x}", "/a|b", "/a^b", "/a`b", "/a\"b", "/a<b>", "/\x7f", "/a\tb"}
	for _, host := range hosts {
		for _, path := range paths {
			for _, rawPath := range []string{"", path} {
				r := httptest.NewRequest(http.MethodGet, "http://shop.example/", nil)
				r.Host, r.URL.Path, r.URL.RawPath = host, path, rawPath
				r = r.WithContext(context.WithValue(r.Context(), caddyhttp.VarsCtxKey, map[string]any{}))
				want := (&url.URL{Scheme: "http", Host: host, Path: path, RawPath: rawPath}).String()
				if got := publicResource(r); got != want {
					t.Errorf("host %q, path %q, raw path %q: publicResource = %q, want %q", host, path, rawPath, got, want)
				}
			}
		}
	}
}

func TestRequestWithoutHostIs400AndNeverReachesTheUpstream(t *testing.T) {
	r := httptest.NewRequest(http.MethodGet, "http://shop.example/api/x", nil)
	r.Host = ""
	ctx := context.WithValue(r.Context(), caddyhttp.VarsCtxKey, map[string]any{})
	w := httptest.NewRecorder()
	next := caddyhttp.HandlerFunc(func(http.ResponseWriter, *http.Request) error {
		t.Fatal("the upstream ran for a request without a host")
		return nil
	})
	// A Caddy error, so handle_errors can answer it: the status and the reason first.
	err := (&Handler{}).ServeHTTP(w, r.WithContext(ctx), next)
	he, ok := errors.AsType[caddyhttp.HandlerError](err)
	if !ok || he.StatusCode != http.StatusBadRequest || !strings.HasPrefix(he.Err.Error(), "missing_host:") {
		t.Fatalf("ServeHTTP = %v, want a caddyhttp.Error 400 whose message starts with missing_host", err)
	}
	if w.Body.Len() != 0 {
		t.Fatalf("the handler wrote %q itself", w.Body.String())
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

// provisionRemote provisions a gate in front of a remote facilitator that is never
// reached: unpaid requests and configuration errors need no facilitator call.
func provisionRemote(t testing.TB, h *Handler) error {
	t.Helper()
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	t.Cleanup(cancel)
	h.FacilitatorURL = "http://127.0.0.1:1"
	if err := h.Provision(ctx); err != nil {
		return err
	}
	t.Cleanup(func() { _ = h.Cleanup() })
	return nil
}

func TestHandlerExpandsPriceAndPayToPerRequest(t *testing.T) {
	h := &Handler{Price: "{http.request.header.X-Quote} base", PayTo: "{http.request.header.X-Payee}", Network: "base-sepolia",
		PriceMin: "5 base", PriceMax: "10000 base", PayToAllowed: []string{payee}}
	if err := provisionRemote(t, h); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, quote, payee string
		status             int
		amount             string
	}{
		{"a quoted price", "2500", payee, http.StatusPaymentRequired, "2500"},
		{"another quoted price", "7", payee, http.StatusPaymentRequired, "7"},
		{"a price that does not parse is a route error, not a free pass", "-3", payee, http.StatusInternalServerError, ""},
		{"a payee that is not an address", "10", "nobody", http.StatusInternalServerError, ""},
		{"a client-chosen price below price_min", "1", payee, http.StatusInternalServerError, ""},
		{"a price above price_max", "10001", payee, http.StatusInternalServerError, ""},
		{"a payee not in pay_to_allowed", "10", token, http.StatusInternalServerError, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, "http://shop.example/api/x", nil)
			r.Header.Set("X-Quote", tc.quote)
			r.Header.Set("X-Payee", tc.payee)
			w := httptest.NewRecorder()
			r = caddyhttp.PrepareRequest(r, caddy.NewReplacer(), w, nil)
			called := false
			err := h.ServeHTTP(w, r, caddyhttp.HandlerFunc(func(http.ResponseWriter, *http.Request) error {
				called = true
				return nil
			}))
			if err != nil || called || w.Code != tc.status {
				t.Fatalf("status %d, err %v, next called %v; want %d and no next", w.Code, err, called, tc.status)
			}
			if tc.amount != "" && !strings.Contains(w.Body.String(), `"maxAmountRequired":"`+tc.amount+`"`) {
				t.Fatalf("402 body does not ask for %s: %s", tc.amount, w.Body.String())
			}
			if tc.amount != "" && !strings.Contains(strings.ToLower(w.Body.String()), strings.ToLower(payee)) {
				t.Fatalf("402 body does not pay %s: %s", payee, w.Body.String())
			}
		})
	}
}

func TestHandlerProvisionErrors(t *testing.T) {
	zero := 0
	for _, tc := range []struct {
		name    string
		h       Handler
		wantErr string
	}{
		{"a symbol that is not the asset's", Handler{Price: "0.01 EUR", PayTo: payee, Network: "base-sepolia"}, `unit "EUR"`},
		{"a network the remote facilitator cannot know", Handler{Price: "1", PayTo: payee, Network: "devnet"}, `network: "devnet" is not one of base, base-sepolia`},
		{"a non-default asset without its EIP-712 domain", Handler{Price: "1 base", PayTo: payee, Network: "base", Asset: token}, "EIP-712 asset_name and asset_version are required"},
		{"too many decimals", Handler{Price: "0.0000001", PayTo: payee, Network: "base"}, "more than 6 decimals"},
		{"fee without a pricing service", Handler{Price: "1", PayTo: payee, Network: "base", Guardian: &gate.VerdictConfig{Advertise: "required", Fee: true}}, "pricing"},
		{"a key that resolves to nothing", Handler{Price: "1", PayTo: payee, Network: "base", FacilitatorKey: "{env.X402_T_UNSET_KEY}"}, "facilitator_key resolved to an empty value"},
		{"a key written into the config", Handler{Price: "1", PayTo: payee, Network: "base", FacilitatorKey: "facilitator-key-inline-0123456789"}, "facilitator_key: must be an {env.*} or {file.*} placeholder"},
		{"a bundled name with a url", Handler{Price: "1", PayTo: payee, Network: "base", Facilitator: "main"}, "not both"},
		{"max_timeout under a second", Handler{Price: "1", PayTo: payee, Network: "base", MaxTimeout: caddy.Duration(time.Millisecond)}, "at least 1s"},
		{"retries off is accepted", Handler{Price: "1", PayTo: payee, Network: "base", RetryMax: &zero}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := tc.h
			err := provisionRemote(t, &h)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error = %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}
