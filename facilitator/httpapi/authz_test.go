package httpapi

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/x402gate/x402gate/gate/gatetest"
	"github.com/x402gate/x402gate/internal/testenv"
)

// TestFacilitatorKeyIsRequiredWhereTheSpecSays: with FACILITATOR_API_KEY set, /verify,
// /settle, /verification/quote (and /supported) take only the one right x-facilitator-key;
// every other way to present it, or something like it, is 401 and never reaches the engine.
// /health stays open (docs/facilitator.md#api). TestHandlerAPIKeyGuardsEveryRouteButHealth
// covers a missing, a wrong and a prefix key; these are the other spellings.
func TestFacilitatorKeyIsRequiredWhereTheSpecSays(t *testing.T) {
	verifyBody := testenv.JSON(t, apiTestBody(t, 2))
	routes := []struct {
		name, method, path, body string
	}{
		{"verify", http.MethodPost, "/verify", verifyBody},
		{"settle", http.MethodPost, "/settle", verifyBody},
		{"verification quote", http.MethodPost, "/verification/quote", `{"resource":{"scheme":"exact","network":"eip155:84532","amount":"10000"}}`},
		{"supported", http.MethodGet, "/supported", ""},
		{"supported by HEAD", http.MethodHead, "/supported", ""},
	}
	keys := []struct {
		name   string
		header http.Header
		status int
	}{
		{"the right key", http.Header{"X-Facilitator-Key": {apiTestKey}}, http.StatusOK},
		{"the right key, header name in another case", http.Header{"x-FACILITATOR-key": {apiTestKey}}, http.StatusOK},
		{"the key in upper case", http.Header{"X-Facilitator-Key": {strings.ToUpper(apiTestKey)}}, http.StatusUnauthorized},
		{"the key with a suffix", http.Header{"X-Facilitator-Key": {apiTestKey + "0"}}, http.StatusUnauthorized},
		{"the key in x-api-key", http.Header{"X-Api-Key": {apiTestKey}}, http.StatusUnauthorized},
		{"the key as a bearer token", http.Header{"Authorization": {"Bearer " + apiTestKey}}, http.StatusUnauthorized},
		{"an empty key", http.Header{"X-Facilitator-Key": {""}}, http.StatusUnauthorized},
		{"the right key, then a wrong one", http.Header{"X-Facilitator-Key": {apiTestKey, "wrong"}}, http.StatusUnauthorized},
		{"a wrong key, then the right one", http.Header{"X-Facilitator-Key": {"wrong", apiTestKey}}, http.StatusUnauthorized},
		{"the right key twice", http.Header{"X-Facilitator-Key": {apiTestKey, apiTestKey}}, http.StatusUnauthorized},
		{"the key in the query", nil, http.StatusUnauthorized},
	}
	for _, rt := range routes {
		for _, k := range keys {
			t.Run(rt.name+" with "+k.name, func(t *testing.T) {
				svc := gatetest.NewFacilitator()
				srv := httptest.NewServer(NewHandler(svc, HandlerOptions{APIKey: apiTestKey, PathPrefix: "/fac"}))
				defer srv.Close()
				url := srv.URL + "/fac" + rt.path
				if k.header == nil {
					url += "?x-facilitator-key=" + apiTestKey
				}
				req, err := http.NewRequest(rt.method, url, strings.NewReader(rt.body))
				if err != nil {
					t.Fatal(err)
				}
				req.Header.Set("Content-Type", "application/json")
				for name, vals := range k.header {
					req.Header[name] = vals // as given: a non-canonical name is sent as written
				}
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != k.status {
					t.Fatalf("status %d, want %d", resp.StatusCode, k.status)
				}
				if k.status == http.StatusUnauthorized && len(svc.Calls()) != 0 {
					t.Fatal("an unauthorized request reached the engine")
				}
			})
		}
	}
	t.Run("health is open with any key or none", func(t *testing.T) {
		h := NewHandler(gatetest.NewFacilitator(), HandlerOptions{APIKey: apiTestKey})
		for _, hdr := range []map[string]string{nil, {HeaderFacilitatorKey: "wrong"}} {
			if status, _, body := apiDo(t, h, http.MethodGet, "/health", "", "", hdr); status != http.StatusOK {
				t.Fatalf("health with %v: %d %s", hdr, status, body)
			}
		}
	})
}
