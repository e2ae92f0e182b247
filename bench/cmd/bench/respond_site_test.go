package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig"
	_ "github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	_ "github.com/caddyserver/caddy/v2/modules/standard"

	_ "github.com/x402gate/x402gate/caddymodule/paygate"
)

// siteRoutes adapts a Caddyfile of one site and lists its routes in order: each route's
// handlers and its path matcher.
func siteRoutes(t *testing.T, caddyfile string) []string {
	t.Helper()
	js, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(caddyfile), nil)
	if err != nil {
		t.Fatalf("adapt: %v\n%s", err, caddyfile)
	}
	var cfg struct {
		Apps struct {
			HTTP struct {
				Servers map[string]struct {
					Routes []struct {
						Handle []struct {
							Routes []struct {
								Match  []struct{ Path []string }  `json:"match"`
								Handle []struct{ Handler string } `json:"handle"`
							} `json:"routes"`
						} `json:"handle"`
					} `json:"routes"`
				} `json:"servers"`
			} `json:"http"`
		} `json:"apps"`
	}
	if err := json.Unmarshal(js, &cfg); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, srv := range cfg.Apps.HTTP.Servers {
		for _, r := range srv.Routes {
			for _, h := range r.Handle {
				for _, sr := range h.Routes {
					var path []string
					for _, m := range sr.Match {
						path = append(path, m.Path...)
					}
					for _, hh := range sr.Handle {
						out = append(out, fmt.Sprintf("%s %v", hh.Handler, path))
					}
				}
			}
		}
	}
	return out
}

// TestRespondSiteIsLikeTheGateSite: the respond site of the 402 comparison sets its headers
// in one handler and answers on the gate site's paths, which Caddy orders as it orders the
// gate's x402 routes: a request for paidPath passes the same path matchers on both sites.
func TestRespondSiteIsLikeTheGateSite(t *testing.T) {
	h := http.Header{
		"Payment-Required": {"eyJ4"}, "Cache-Control": {"no-store"}, "Content-Type": {"application/json"},
		"Content-Length": {"7"}, "Date": {"now"}, "Server": {"Caddy"},
	}
	respond := siteRoutes(t, "{\n\tauto_https off\n}\n"+respondSite(8402, h, []byte(`{"a":1}`), http.StatusPaymentRequired))
	want := []string{"headers []", "static_response [/paid-permit2]", "static_response [/paid-upto]", "static_response [/paid]"}
	if !slices.Equal(respond, want) {
		t.Fatalf("respond site routes %q, want %q", respond, want)
	}
	gate := "{\n\tauto_https off\n}\nhttp://127.0.0.1:8401 {\n"
	for _, p := range []string{paidPath, permit2Path, uptoPath} {
		gate += fmt.Sprintf("\tx402 %s {\n\t\tprice 0.001 USDC\n\t\tpay_to 0x1111111111111111111111111111111111111111\n\t\tnetwork base-sepolia\n\t\tfacilitator http://127.0.0.1:1\n\t}\n", p)
	}
	gate += "\treverse_proxy 127.0.0.1:1\n}\n"
	var gatePaths, respondPaths []string
	for _, r := range siteRoutes(t, gate) {
		var handler, path string
		fmt.Sscanf(r, "%s %s", &handler, &path)
		if handler == "x402" {
			gatePaths = append(gatePaths, path)
		}
	}
	for _, r := range respond[1:] {
		var handler, path string
		fmt.Sscanf(r, "%s %s", &handler, &path)
		respondPaths = append(respondPaths, path)
	}
	if !slices.Equal(gatePaths, respondPaths) {
		t.Fatalf("the gate site's x402 routes match %q in turn, the respond site's %q", gatePaths, respondPaths)
	}
}
