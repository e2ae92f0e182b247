package verdictapp

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/x402gate/x402gate/verdictserver"
)

// TestAdaptErrorsOfVerdict: every mistake in the verdict global option and the verdict_api
// directive fails `caddy adapt`, names the option and points at its line (marked "# <-").
func TestAdaptErrorsOfVerdict(t *testing.T) {
	verdict := func(body string) string { return "{\n\tverdict {\n" + body + "\t}\n}\n" }
	for _, tc := range []struct {
		name, caddyfile, wantErr string
	}{
		{"admin_key written into the config", verdict("\t\tadmin_key s3cr3t-admin-key-value # <-\n"), "admin_key: must be an {env.*} or {file.*} placeholder"},
		{"a redis url written into the config", verdict("\t\tredis redis://:hunter2@127.0.0.1:6379 # <-\n"), "redis: must be an {env.*} or {file.*} placeholder"},
		{"a postgres dsn written into the config", verdict("\t\tstore postgres postgres://v:hunter2@db/v # <-\n"), "store: must be an {env.*} or {file.*} placeholder"},
		{"an unknown store", verdict("\t\tstore mysql x # <-\n"), `unknown store "mysql"`},
		{"postgres without a dsn", verdict("\t\tstore postgres # <-\n"), "wrong number of values for store"},
		{"listen, the app's own listener that is gone", verdict("\t\tlisten 127.0.0.1:8083 # <-\n"), "listen: the verdict app has no listener of its own; serve its API in a site with the verdict_api directive"},
		{"workers that are not a number", verdict("\t\tworkers many # <-\n"), `workers "many" is not a positive integer`},
		{"a rate limit of an unknown kind", verdict("\t\trate_limit user 1 2 # <-\n"), `rate_limit "user": want key or ip`},
		{"a rate limit that is not a rate", verdict("\t\trate_limit key fast 2 # <-\n"), `rate_limit key: "fast" is not a positive number`},
		{"a price of an asset that is not an address", verdict("\t\tprice 84532 0x12 1 # <-\n"), `price: asset "0x12" is not an address`},
		{"a negative price", verdict("\t\tprice 84532 0x5FbDB2315678afecb367f032d93F642f64180aa3 -1 # <-\n"), `price: usd "-1" is not a price in USD`},
		{"a price on chain zero", verdict("\t\tprice 0 0x5FbDB2315678afecb367f032d93F642f64180aa3 1 # <-\n"), `price: chain id "0" is not a positive integer`},
		{"a sanctions ttl that is not a duration", verdict("\t\tsanctions /x.txt soon # <-\n"), `sanctions ttl "soon" is not a positive duration`},
		{"a fee with both flat and bps", verdict("\t\tfee {\n\t\t\tnetwork base-sepolia\n\t\t\tpay_to 0x209693Bc6afc0C5328bA36FaF03C514EF312287C\n\t\t\tflat 1000\n\t\t\tbps 5\n\t\t} # <-\n"), "fee: give exactly one of flat and bps"},
		{"a flat fee of 0", verdict("\t\tfee {\n\t\t\tnetwork base-sepolia\n\t\t\tpay_to 0x209693Bc6afc0C5328bA36FaF03C514EF312287C\n\t\t\tflat 0\n\t\t} # <-\n"), "fee: flat 0 is no fee"},
		{"an infinite rate limit", verdict("\t\trate_limit key inf 2 # <-\n"), `rate_limit key: "inf" is not a positive number`},
		{"a fee on an unknown network", verdict("\t\tfee {\n\t\t\tnetwork moon\n\t\t\tpay_to 0x209693Bc6afc0C5328bA36FaF03C514EF312287C\n\t\t\tflat 1000\n\t\t} # <-\n"), `fee: unknown network "moon"`},
		{"an unknown option", verdict("\t\tlisten_on :8083 # <-\n"), `unrecognized verdict option "listen_on"`},
		{"a signer key written into the config", verdict("\t\tsigner_key 8b3a350cf5c34c9194ca85829a2df0ec3153be0318b5e2d3348e872092edffba # <-\n"), "signer_key: must be an {env.*} or {file.*} placeholder"},
		{"a signature ttl over 5 minutes", verdict("\t\tsigner_key {env.SIGNER}\n\t\tsignature_ttl 6m # <-\n"), "signature_ttl: must be more than 0 and at most 5m0s"},
		{"a signature ttl without a signer key", verdict("\t\tsignature_ttl 1m # <-\n"), "signature_ttl: needs a signer_key"},
		{"a signature ttl that is not a duration", verdict("\t\tsignature_ttl soon # <-\n"), `signature_ttl "soon" is not a duration`},
		{"an rpc url written into the config", verdict("\t\trpc 8453 https://base.example/v2/k3y # <-\n"), "rpc: must be an {env.*} or {file.*} placeholder"},
		{"an rpc on chain zero", verdict("\t\trpc 0 {env.RPC} # <-\n"), `rpc: chain id "0" is not a positive integer`},
		{"an rpc without its url", verdict("\t\trpc 8453 # <-\n"), "wrong argument count"},
		{"two rpcs for one chain", verdict("\t\trpc 8453 {env.BASE_RPC}\n\t\trpc 8453 {env.OTHER} # <-\n\t\trpc 1 {env.MAINNET}\n"), "rpc: a second rpc for chain 8453"},
		{"a price feed on a chain without rpc", verdict("\t\trpc 8453 {env.BASE_RPC}\n\t\tprice_feed 8453 0x50c5725949A6F0c72E6C4a641F24049A917DB0Cb 0x591e79239a7d679378eC8c847e5038150364C78F\n\t\tprice_feed 1 0x50c5725949A6F0c72E6C4a641F24049A917DB0Cb 0x591e79239a7d679378eC8c847e5038150364C78F # <-\n"), "price_feed: chain 1 has no rpc"},
		{"a price feed of an asset that is not an address", verdict("\t\trpc 8453 {env.BASE_RPC}\n\t\tprice_feed 8453 0x12 0x591e79239a7d679378eC8c847e5038150364C78F # <-\n"), `price_feed: asset "0x12" is not an address`},
		{"a price feed whose feed is not an address", verdict("\t\trpc 8453 {env.BASE_RPC}\n\t\tprice_feed 8453 0x50c5725949A6F0c72E6C4a641F24049A917DB0Cb feed # <-\n"), `price_feed: feed "feed" is not an address`},
		{"a price feed with a max age that is not a duration", verdict("\t\trpc 8453 {env.BASE_RPC}\n\t\tprice_feed 8453 0x50c5725949A6F0c72E6C4a641F24049A917DB0Cb 0x591e79239a7d679378eC8c847e5038150364C78F soon # <-\n"), `price_feed: max age "soon" is not a positive duration`},
		{"two price feeds for one asset", verdict("\t\trpc 8453 {env.BASE_RPC}\n\t\tprice_feed 8453 0x50c5725949A6F0c72E6C4a641F24049A917DB0Cb 0x591e79239a7d679378eC8c847e5038150364C78F\n\t\tprice_feed 8453 0x50c5725949A6F0c72E6C4a641F24049A917DB0Cb 0x591e79239a7d679378eC8c847e5038150364C78F 1h # <-\n"), "price_feed: a second feed for 0x50c5725949A6F0c72E6C4a641F24049A917DB0Cb on chain 8453"},
		{"a sanctions oracle on a chain without rpc", verdict("\t\trpc 8453 {env.BASE_RPC}\n\t\tsanctions_oracle 1 0x40C57923924B5c5c5455c48D93317139ADDaC8fb # <-\n"), "sanctions_oracle: chain 1 has no rpc"},
		{"a sanctions oracle at the zero address", verdict("\t\trpc 8453 {env.BASE_RPC}\n\t\tsanctions_oracle 8453 0x0000000000000000000000000000000000000000 # <-\n"), "sanctions_oracle: \"0x0000000000000000000000000000000000000000\" is not an address"},
		{"two sanctions oracles for one chain", verdict("\t\trpc 8453 {env.BASE_RPC}\n\t\tsanctions_oracle 8453 0x3A91A31cB3dC49b4db9Ce721F50a9D076c8D739B\n\t\tsanctions_oracle 8453 0x40C57923924B5c5c5455c48D93317139ADDaC8fb # <-\n"), "sanctions_oracle: a second oracle for chain 8453"},
		{"a sanctions refresh that is not a duration", verdict("\t\tsanctions /x.txt 24h refresh often # <-\n"), `sanctions refresh "often" is not a duration of at least 1s`},
		{"a sanctions refresh below a second", verdict("\t\tsanctions /x.txt refresh 10ms # <-\n"), `sanctions refresh "10ms" is not a duration of at least 1s`},
		{"verdict_api without the verdict app", ":8083 {\n\tverdict_api # <-\n}\n", "verdict_api needs the verdict global option"},
		{"verdict_api with options", verdict("") + ":8083 {\n\tverdict_api {\n\t\tlisten :2 # <-\n\t}\n}\n", "verdict_api takes one option, console"},
	} {
		t.Run(tc.name, func(t *testing.T) { expectVerdictError(t, tc.caddyfile, tc.wantErr) })
	}
}

// expectVerdictError adapts caddyfile and expects an error containing wantErr at the line
// marked "# <-".
func expectVerdictError(t *testing.T, caddyfile, wantErr string) {
	t.Helper()
	_, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(caddyfile), nil)
	if err == nil || !strings.Contains(err.Error(), wantErr) {
		t.Fatalf("error = %v\nwant one containing %q", err, wantErr)
	}
	for i, l := range strings.Split(caddyfile, "\n") {
		if at := fmt.Sprintf("Caddyfile:%d", i+1); strings.HasSuffix(l, "# <-") && !strings.Contains(err.Error(), at) {
			t.Errorf("error = %v\nwant it at %s", err, at)
		}
	}
}

// TestVerdictSecretsStayOutOfTheAdaptedConfig: placeholders are kept as written; their
// values are read at provision only.
func TestVerdictSecretsStayOutOfTheAdaptedConfig(t *testing.T) {
	t.Setenv("VERDICT_ADMIN", "admin-secret-value-0123456789")
	out, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte("{\n\tverdict {\n\t\tadmin_key {env.VERDICT_ADMIN}\n\t}\n}\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg := string(out); strings.Contains(cfg, "admin-secret-value") || !strings.Contains(cfg, "{env.VERDICT_ADMIN}") {
		t.Fatalf("adapted config: %s", cfg)
	}
}

// TestVerdictClientIPFollowsCaddy: the per-IP limit counts the client Caddy determined
// (trusted_proxies), not the proxy in front of it; without it, the connection's peer.
func TestVerdictClientIPFollowsCaddy(t *testing.T) {
	r := httptest.NewRequest("GET", "/health", nil)
	r.RemoteAddr = "10.0.0.7:41000"
	if got := clientIP(r); got != "10.0.0.7" {
		t.Fatalf("without a client Caddy determined: client %q, want the peer 10.0.0.7", got)
	}
	vars := map[string]any{caddyhttp.ClientIPVarKey: "203.0.113.9"}
	r = r.WithContext(context.WithValue(r.Context(), caddyhttp.VarsCtxKey, vars))
	if got := clientIP(r); got != "203.0.113.9" {
		t.Fatalf("in a site behind a trusted proxy: client %q, want 203.0.113.9", got)
	}
}

// TestVerdictAdminKeyIsCheckedOnceExpanded: the admin key's placeholder must expand to at
// least verdictserver.MinAdminKeyLen characters, checked before the service opens anything;
// the error never quotes the key.
func TestVerdictAdminKeyIsCheckedOnceExpanded(t *testing.T) {
	for _, tc := range []struct{ name, value, wantErr string }{
		{"a short key", "short-k3y", "admin_key: resolved to fewer than 16 characters"},
		{"an empty key", "", "admin_key: resolved to an empty value"},
		{"a key of 16 characters", "0123456789abcdef", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("VERDICT_ADMIN", tc.value)
			a := &VerdictApp{Config: verdictserver.Config{AdminKey: "{env.VERDICT_ADMIN}"}}
			_, err := a.resolve()
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("resolve() = %v, want %q", err, tc.wantErr)
			}
			if err != nil && tc.value != "" && strings.Contains(err.Error(), tc.value) {
				t.Fatalf("the error quotes the key: %v", err)
			}
		})
	}
}
