package paygate

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	_ "github.com/caddyserver/caddy/v2/modules/standard"

	"github.com/x402gate/x402gate/facilitator"
	"github.com/x402gate/x402gate/gate"
	"github.com/x402gate/x402gate/internal/testenv"
)

const (
	payee = "0x1111111111111111111111111111111111111111"
	token = "0x2222222222222222222222222222222222222222"
)

func TestHandlerCaddyfile(t *testing.T) {
	three, zero := 3, 0
	for _, tc := range []struct {
		name    string
		input   string
		want    Handler
		wantErr string
	}{
		{
			name: "every option",
			input: `x402 {
				price 0.01 USDC
				pay_to ` + payee + `
				network base-sepolia
				asset ` + token + `
				asset_name USDC
				asset_version 2
				decimals 6
				symbol USDC
				description "weather report"
				mime_type application/json
				max_timeout 90s
				facilitator bundled main
				guardian {
					advertise required
					fee on
				}
				pricing_url https://pricing.example/quote
				retry_max 3
				retry_grace 2m
			}`,
			want: Handler{Price: "0.01 USDC", PayTo: payee, Network: "base-sepolia", Asset: token,
				AssetName: "USDC", AssetVersion: "2", Decimals: 6, Symbol: "USDC",
				Description: "weather report", MimeType: "application/json", MaxTimeout: ms(90_000),
				Facilitator: "main", Guardian: &gate.VerdictConfig{Advertise: "required", Fee: true},
				PricingURL: "https://pricing.example/quote", RetryMax: &three, RetryGrace: ms(120_000)},
		},
		{
			name:  "base units, remote facilitator with a key, guardian off, retries off",
			input: "x402 {\nprice 10000 base\npay_to " + payee + "\nnetwork base\nfacilitator https://f.example\nfacilitator_key {env.FK}\nguardian off\nretry_max 0\n}",
			want: Handler{Price: "10000 base", PayTo: payee, Network: "base", FacilitatorURL: "https://f.example",
				FacilitatorKey: "{env.FK}", RetryMax: &zero},
		},
		{
			name:  "placeholders in price and pay_to",
			input: "x402 {\nprice {http.request.header.X-Price}\npay_to {http.vars.payee}\nnetwork base\n}",
			want:  Handler{Price: "{http.request.header.X-Price}", PayTo: "{http.vars.payee}", Network: "base"},
		},
		{
			name:  "bundled without a name",
			input: "x402 {\nprice $0.5\npay_to " + payee + "\nnetwork base\nfacilitator bundled\n}",
			want:  Handler{Price: "$0.5", PayTo: payee, Network: "base"},
		},
		{name: "price with three words", input: "x402 {\nprice 1 USDC now\npay_to " + payee + "\nnetwork base\n}", wantErr: "wrong number of values for price"},
		{name: "bad guardian word", input: "x402 {\nprice 1\npay_to " + payee + "\nnetwork base\nguardian on\n}", wantErr: "guardian wants `off` or a block"},
		{name: "bad guardian fee", input: "x402 {\nprice 1\npay_to " + payee + "\nnetwork base\nguardian {\nfee maybe\n}\n}", wantErr: "not on or off"},
		{name: "unknown subdirective", input: "x402 {\nprice 1\npay_to " + payee + "\nnetwork base\ncurrency USDC\n}", wantErr: `unrecognized subdirective "currency"`},
		{name: "bad facilitator", input: "x402 {\nprice 1\npay_to " + payee + "\nnetwork base\nfacilitator ftp://x\n}", wantErr: "bundled [<name>]` or an http(s) url"},
		{name: "bad max_timeout", input: "x402 {\nprice 1\npay_to " + payee + "\nnetwork base\nmax_timeout soon\n}", wantErr: "not a positive duration"},
		{name: "argument on the directive", input: "x402 extra {\nprice 1\n}", wantErr: "wrong number of values for x402"},
	} {
		t.Run(tc.name, func(t *testing.T) { checkUnmarshal(t, &Handler{}, tc.input, &tc.want, tc.wantErr) })
	}
}

func TestFacilitatorHandlerCaddyfile(t *testing.T) {
	for _, tc := range []struct {
		name, input string
		want        FacilitatorHandler
		wantErr     string
	}{
		{
			name:  "every option",
			input: "x402_facilitator {\nfacilitator main\napi_key {env.FACILITATOR_API_KEY}\nhealth_detail on\nstrip_prefix /facilitator\n}",
			want:  FacilitatorHandler{Facilitator: "main", APIKey: "{env.FACILITATOR_API_KEY}", HealthDetail: true, StripPrefix: "/facilitator"},
		},
		{name: "bare has no api_key", input: "x402_facilitator", wantErr: "api_key: is required"},
		{name: "an open API on purpose", input: "x402_facilitator {\napi_key off\n}", want: FacilitatorHandler{APIKey: "off"}},
		{name: "facilitator without a name is the default", input: "x402_facilitator {\nfacilitator\napi_key {env.K}\nhealth_detail off\n}", want: FacilitatorHandler{Facilitator: "default", APIKey: "{env.K}"}},
		{name: "bad health_detail", input: "x402_facilitator {\nhealth_detail yes\n}", wantErr: "health_detail wants on or off"},
		{name: "relative strip_prefix", input: "x402_facilitator {\nstrip_prefix facilitator\n}", wantErr: "strip_prefix: wants a path starting with /, at Testfile:2"},
		{name: "api_key without value", input: "x402_facilitator {\napi_key\n}", wantErr: "wrong number of values for api_key"},
		{name: "unknown subdirective", input: "x402_facilitator {\nlisten :9000\n}", wantErr: `unrecognized subdirective "listen"`},
	} {
		t.Run(tc.name, func(t *testing.T) { checkUnmarshal(t, &FacilitatorHandler{}, tc.input, &tc.want, tc.wantErr) })
	}
}

func TestGlobalOptionCaddyfile(t *testing.T) {
	full := `x402 {
		facilitator {
			network base-sepolia {
				rpc {env.RPC}
				asset ` + token + `
				asset_name USDC
				asset_version 2
				decimals 6
				symbol USDC
				min_amount 1000
			}
			network local {
				chain_id 31337
				rpc http://127.0.0.1:8545
				asset ` + token + `
				asset_name Token
			}
			signer_key {file./run/secrets/signer}
			store redis {env.REDIS_URL}
			journal postgres {env.PG_DSN}
			guardian_mode required
			verdict_url https://verdict.example
			verdict_key {env.VERDICT_KEY}
			pricing_url https://pricing.example/quote
			approval_ttl 10m
			receipt_timeout 45s
			verdict_poll 250ms 8 2s
			reconcile_interval 30s
			erc6492_factories 0x3333333333333333333333333333333333333333 0x4444444444444444444444444444444444444444
		}
		facilitator second {
			network base {
				rpc {env.BASE_RPC}
			}
			signer_key {env.SECOND_KEY} {env.SECOND_KEY_2} {file./run/secrets/third}
			min_gas_balance 50000000000000000
			balance_check_interval 10s
			max_pending_per_signer 12
			store memory 500
			journal sqlite /var/lib/x402/second.db
		}
	}`
	want := App{Facilitators: map[string]*facilitator.Config{
		"default": {
			Networks: []facilitator.NetworkConfig{
				{Name: "base-sepolia", RPC: "{env.RPC}", Asset: token, AssetName: "USDC", AssetVersion: "2", Decimals: 6, Symbol: "USDC", MinAmount: "1000"},
				{Name: "local", ChainID: 31337, RPC: "http://127.0.0.1:8545", Asset: token, AssetName: "Token"},
			},
			SignerKey:         "{file./run/secrets/signer}",
			ApprovalStore:     &facilitator.StoreConfig{Type: "redis", URL: "{env.REDIS_URL}"},
			SettlementJournal: &facilitator.JournalConfig{Type: "postgres", DSN: "{env.PG_DSN}"},
			VerdictMode:       "required", VerdictURL: "https://verdict.example", VerdictKey: "{env.VERDICT_KEY}",
			PricingURL: "https://pricing.example/quote", ApprovalTTL: facilitator.Duration(ms(600_000)), ReceiptTimeout: facilitator.Duration(ms(45_000)),
			VerdictPoll:       &facilitator.VerdictPollConfig{Interval: facilitator.Duration(ms(250)), MaxAttempts: 8, MaxDelay: facilitator.Duration(ms(2000))},
			ReconcileInterval: facilitator.Duration(ms(30_000)),
			ERC6492Factories:  []string{"0x3333333333333333333333333333333333333333", "0x4444444444444444444444444444444444444444"},
		},
		"second": {
			Networks:      []facilitator.NetworkConfig{{Name: "base", RPC: "{env.BASE_RPC}"}},
			SignerKey:     "{env.SECOND_KEY}",
			SignerKeys:    []string{"{env.SECOND_KEY_2}", "{file./run/secrets/third}"},
			MinGasBalance: "50000000000000000", BalanceCheckInterval: facilitator.Duration(ms(10_000)), MaxPendingPerSigner: 12,
			ApprovalStore:     &facilitator.StoreConfig{Type: "memory", MaxEntries: 500},
			SettlementJournal: &facilitator.JournalConfig{Type: "sqlite", Path: "/var/lib/x402/second.db"},
		},
	}}
	v, err := parseGlobalOption(caddyfile.NewTestDispenser(full), nil)
	if err != nil {
		t.Fatal(err)
	}
	ha, ok := v.(httpcaddyfile.App)
	if !ok || ha.Name != "x402" {
		t.Fatalf("global option value = %#v, want an httpcaddyfile.App named x402", v)
	}
	var got App
	if err := json.Unmarshal(ha.Value, &got); err != nil {
		t.Fatal(err)
	}
	if g, w := testenv.JSON(t, got), testenv.JSON(t, want); g != w {
		t.Fatalf("got  %s\nwant %s", g, w)
	}

	t.Run("repeated blocks merge", func(t *testing.T) {
		first, err := parseGlobalOption(caddyfile.NewTestDispenser("x402 {\nfacilitator a {\nnetwork base {\nrpc {env.R}\n}\nsigner_key {env.K}\n}\n}"), nil)
		if err != nil {
			t.Fatal(err)
		}
		both, err := parseGlobalOption(caddyfile.NewTestDispenser("x402 {\nfacilitator b {\nnetwork base {\nrpc {env.R}\n}\nsigner_key {env.K}\n}\n}"), first)
		if err != nil {
			t.Fatal(err)
		}
		var app App
		if err := json.Unmarshal(both.(httpcaddyfile.App).Value, &app); err != nil {
			t.Fatal(err)
		}
		if len(app.Facilitators) != 2 || app.Facilitators["a"] == nil || app.Facilitators["b"] == nil {
			t.Fatalf("facilitators = %v, want a and b", app.Facilitators)
		}
		if _, err := parseGlobalOption(caddyfile.NewTestDispenser("x402 {\nfacilitator a {\nnetwork base {\nrpc {env.R}\n}\nsigner_key {env.K}\n}\n}"), both); err == nil || !strings.Contains(err.Error(), "declared twice") {
			t.Fatalf("redeclaring a: error = %v, want declared twice", err)
		}
	})

	const net = "network base {\nrpc {env.R}\n}\n"
	for _, tc := range []struct{ name, input, wantErr string }{
		{"unknown network", "x402 {\nfacilitator {\nnetwork solana {\nrpc {env.R}\n}\nsigner_key {env.K}\n}\n}", `chain_id: is required for a network that is not one of base, base-sepolia, at Testfile:3`},
		{"custom network without asset", "x402 {\nfacilitator {\nnetwork local {\nchain_id 31337\nrpc {env.R}\n}\nsigner_key {env.K}\n}\n}", "network local: asset: is required for a network that is not built in, at Testfile:3"},
		{"non-default asset without name", "x402 {\nfacilitator {\nnetwork base {\nrpc {env.R}\nasset " + token + "\n}\nsigner_key {env.K}\n}\n}", "asset_name"},
		{"chain id contradicts a built-in network", "x402 {\nfacilitator {\nnetwork base {\nchain_id 1\nrpc {env.R}\n}\nsigner_key {env.K}\n}\n}", "is not the built-in network's"},
		{"missing rpc", "x402 {\nfacilitator {\nnetwork base\nsigner_key {env.K}\n}\n}", "network base: rpc: is required, at Testfile:3"},
		{"bad asset address", "x402 {\nfacilitator {\nnetwork base {\nrpc {env.R}\nasset 0xabc\n}\nsigner_key {env.K}\n}\n}", "is not a 0x-hex address, at Testfile:5"},
		{"negative min_amount", "x402 {\nfacilitator {\nnetwork base {\nrpc {env.R}\nmin_amount -5\n}\nsigner_key {env.K}\n}\n}", "min_amount"},
		{"unknown network option", "x402 {\nfacilitator {\nnetwork base {\nrpc {env.R}\ngas_price 5\n}\nsigner_key {env.K}\n}\n}", `unrecognized network option "gas_price"`},
		{"literal signer key", "x402 {\nfacilitator {\n" + net + "signer_key ac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80\n}\n}", "placeholder"},
		{"missing signer key", "x402 {\nfacilitator {\n" + net + "}\n}", "signer_key: is required, at Testfile:2"},
		{"no network", "x402 {\nfacilitator {\nsigner_key {env.K}\n}\n}", "network: at least one is required, at Testfile:2"},
		{"bad guardian mode", "x402 {\nfacilitator {\n" + net + "signer_key {env.K}\nguardian_mode sometimes\n}\n}", "not off, optional or required"},
		{"verdict_poll without attempts", "x402 {\nfacilitator {\n" + net + "signer_key {env.K}\nverdict_poll 1s\n}\n}", "wrong number of values for verdict_poll"},
		{"verdict_poll zero attempts", "x402 {\nfacilitator {\n" + net + "signer_key {env.K}\nverdict_poll 1s 0\n}\n}", "not a positive integer"},
		{"verdict_poll negative interval", "x402 {\nfacilitator {\n" + net + "signer_key {env.K}\nverdict_poll -1s 3\n}\n}", "not a positive duration"},
		{"guardian without verdict url", "x402 {\nfacilitator {\n" + net + "signer_key {env.K}\nguardian_mode optional\n}\n}", "needs verdict_url"},
		{"unknown store", "x402 {\nfacilitator {\n" + net + "signer_key {env.K}\nstore etcd x\n}\n}", `unknown store "etcd"`},
		{"redis without url", "x402 {\nfacilitator {\n" + net + "signer_key {env.K}\nstore redis\n}\n}", "wrong number of values for store"},
		{"unknown journal", "x402 {\nfacilitator {\n" + net + "signer_key {env.K}\njournal mysql x\n}\n}", `unknown journal "mysql"`},
		{"bad duration", "x402 {\nfacilitator {\n" + net + "signer_key {env.K}\napproval_ttl -1s\n}\n}", "not a positive duration"},
		{"bad factory", "x402 {\nfacilitator {\n" + net + "signer_key {env.K}\nerc6492_factories nope\n}\n}", `erc6492_factories: "nope" is not a 0x-hex address, at Testfile:7`},
		{"unknown facilitator option", "x402 {\nfacilitator {\n" + net + "signer_key {env.K}\nmnemonic {env.M}\n}\n}", `unrecognized facilitator option "mnemonic"`},
		{"unknown x402 option", "x402 {\nverdict {\n}\n}", `unrecognized x402 option "verdict"`},
		{"duplicate network", "x402 {\nfacilitator {\n" + net + net + "signer_key {env.K}\n}\n}", "listed twice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseGlobalOption(caddyfile.NewTestDispenser(tc.input), nil)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error = %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}

// globalBlock is the x402 option of the adapt tests: a bundled default facilitator on
// base-sepolia and one named "local" on a custom chain.
const globalBlock = `{
	x402 {
		facilitator {
			network base-sepolia {
				rpc {env.X402_RPC}
			}
			signer_key {env.X402_SIGNER}
		}
		facilitator local {
			network devnet {
				chain_id 31337
				rpc {env.X402_RPC}
				asset ` + token + `
				asset_name USDC
			}
			signer_key {env.X402_SIGNER}
		}
	}
}
`

func adapt(t *testing.T, caddyfileText string) (map[string]any, error) {
	t.Helper()
	out, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(caddyfileText), nil)
	if err != nil {
		return nil, err
	}
	var cfg map[string]any
	if err := json.Unmarshal(out, &cfg); err != nil {
		t.Fatal(err)
	}
	return cfg, nil
}

func TestAdaptWholeCaddyfile(t *testing.T) {
	cfg, err := adapt(t, globalBlock+`
example.com {
	x402 /paid/* {
		price 0.01 USDC
		pay_to `+payee+`
		network base-sepolia
	}
	x402 /dev/* {
		price 5 base
		pay_to `+payee+`
		network devnet
		facilitator bundled local
	}
	x402 /remote/* {
		price 0.01
		pay_to `+payee+`
		network base
		facilitator https://facilitator.example
		facilitator_key {env.FACILITATOR_KEY}
	}
	handle_path /facilitator/* {
		x402_facilitator {
			api_key {env.FACILITATOR_API_KEY}
		}
	}
	log {
		format x402_redact json
	}
	file_server
}`)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(cfg)
	s := string(raw)
	for _, want := range []string{
		`"x402":{"facilitators":{"default":`,
		`"chain_id":31337,"name":"devnet"`,
		`"signer_key":"{env.X402_SIGNER}"`,
		`"handler":"x402","network":"base-sepolia","pay_to":"` + payee + `","price":"0.01 USDC"`,
		`"facilitator":"local","handler":"x402","network":"devnet"`,
		`"facilitator_key":"{env.FACILITATOR_KEY}","facilitator_url":"https://facilitator.example"`,
		`"api_key":"{env.FACILITATOR_API_KEY}","handler":"x402_facilitator"`,
		`"encoder":{"format":"x402_redact","wrap":{"format":"json"}}`,
	} {
		if !strings.Contains(s, want) {
			t.Errorf("adapted config lacks %s\n%s", want, s)
		}
	}

	for _, tc := range []struct{ name, site, wantErr string }{
		{"unknown network", "x402 {\nprice 1\npay_to " + payee + "\nnetwork polygon\n}", `network: "polygon" is not one of base-sepolia, at Caddyfile:24`},
		{"network of another facilitator", "x402 {\nprice 1\npay_to " + payee + "\nnetwork devnet\n}", `network: "devnet" is not one of base-sepolia, at Caddyfile:24`},
		{"undeclared facilitator", "x402 {\nprice 1\npay_to " + payee + "\nnetwork base-sepolia\nfacilitator bundled nope\n}", `no bundled facilitator "nope"`},
		{"bad address", "x402 {\nprice 1\npay_to 0xZZ11111111111111111111111111111111111111\nnetwork base-sepolia\n}", "is not a 0x-hex address, at Caddyfile:23"},
		{"negative price", "x402 {\nprice -1 USDC\npay_to " + payee + "\nnetwork base-sepolia\n}", "invalid price"},
		{"missing pay_to", "x402 {\nprice 1\nnetwork base-sepolia\n}", "pay_to: is required, at Caddyfile:21"},
		{"remote facilitator on a custom network", "x402 {\nprice 1\npay_to " + payee + "\nnetwork devnet\nfacilitator https://f.example\n}", `network: "devnet" is not one of base, base-sepolia, at Caddyfile:24`},
		{"unknown subdirective", "x402 {\nprice 1\npay_to " + payee + "\nnetwork base-sepolia\nfoo bar\n}", `unrecognized subdirective "foo"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := adapt(t, globalBlock+"example.com {\n"+tc.site+"\n}\n")
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error = %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
	t.Run("no x402 global option", func(t *testing.T) {
		_, err := adapt(t, "example.com {\nx402 {\nprice 1\npay_to "+payee+"\nnetwork base-sepolia\n}\n}\n")
		if err == nil || !strings.Contains(err.Error(), `no bundled facilitator "default"`) {
			t.Fatalf("error = %v, want no bundled facilitator", err)
		}
	})
}

// TestBareX402GatesHandleBlocks proves the directive order: a bare x402 comes before a
// handle block in the route list, so `handle /api/* { reverse_proxy }` is never reached
// unpaid, whatever order the Caddyfile lists them in.
func TestBareX402GatesHandleBlocks(t *testing.T) {
	cfg, err := adapt(t, globalBlock+`
example.com {
	handle /api/* {
		reverse_proxy localhost:9000
	}
	x402 {
		price 0.01
		pay_to `+payee+`
		network base-sepolia
	}
	route /r/* {
		respond "r"
	}
	forward_auth localhost:9100 {
		uri /auth
	}
}`)
	if err != nil {
		t.Fatal(err)
	}
	servers := cfg["apps"].(map[string]any)["http"].(map[string]any)["servers"].(map[string]any)
	var routes []any
	for _, srv := range servers {
		routes = srv.(map[string]any)["routes"].([]any)
	}
	// The site's routes sit in one subroute under the host matcher.
	site := routes[0].(map[string]any)["handle"].([]any)[0].(map[string]any)["routes"].([]any)
	// Consecutive routes without matchers are merged, so classify each handler in order.
	var kind []string
	for _, r := range site {
		for _, h := range r.(map[string]any)["handle"].([]any) {
			b, _ := json.Marshal(h)
			s := string(b)
			switch {
			case strings.Contains(s, `"handler":"x402"`):
				kind = append(kind, "x402")
			case strings.Contains(s, `localhost:9100`):
				kind = append(kind, "forward_auth")
			case strings.Contains(s, `localhost:9000`):
				kind = append(kind, "handle")
			case strings.Contains(s, `"body":"r"`):
				kind = append(kind, "route")
			default:
				kind = append(kind, s)
			}
		}
	}
	want := []string{"forward_auth", "x402", "handle", "route"}
	if strings.Join(kind, ",") != strings.Join(want, ",") {
		t.Fatalf("handler order = %v, want %v", kind, want)
	}
}

func ms(n int64) caddy.Duration { return caddy.Duration(n * 1e6) }

// checkUnmarshal reads input into got: with wantErr, it must fail with an error containing
// it; otherwise got must come out as want, compared as JSON.
func checkUnmarshal(t *testing.T, got caddyfile.Unmarshaler, input string, want any, wantErr string) {
	t.Helper()
	err := got.UnmarshalCaddyfile(caddyfile.NewTestDispenser(input))
	if wantErr != "" {
		if err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Fatalf("error = %v, want one containing %q", err, wantErr)
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	if g, w := testenv.JSON(t, got), testenv.JSON(t, want); g != w {
		t.Fatalf("got  %s\nwant %s", g, w)
	}
}
