package paygate

import (
	"fmt"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig"
)

// adaptGlobal is the x402 global option the adapt-time error cases share: a facilitator
// "default" on base-sepolia and devnet, one "off" whose guardian_mode is off, and one
// "optional".
const adaptGlobal = `{
	x402 {
		facilitator {
			network base-sepolia {
				rpc {env.BASE_SEPOLIA_RPC}
			}
			network devnet {
				chain_id 31337
				rpc http://127.0.0.1:8545
				asset 0x5FbDB2315678afecb367f032d93F642f64180aa3
				asset_name "Test Token"
			}
			signer_key {env.X402_SIGNER}
			guardian_mode required
			verdict_url https://verdict.example
		}
		facilitator off {
			network base-sepolia {
				rpc {env.BASE_SEPOLIA_RPC}
			}
			signer_key {env.X402_SIGNER_OFF}
		}
		facilitator optional {
			network base-sepolia {
				rpc {env.BASE_SEPOLIA_RPC}
			}
			signer_key {env.X402_SIGNER_OPTIONAL}
			guardian_mode optional
			verdict_url https://verdict.example
			pricing_url https://pricing.example
		}
	}
}
`

// TestAdaptErrors: every mistake that needs no I/O fails `caddy adapt`, names the option
// as the Caddyfile spells it and points at the line that sets it (marked "# <-" here), or
// at the block that lacks it.
func TestAdaptErrors(t *testing.T) {
	site := func(body string) string {
		return adaptGlobal + "\nexample.com {\n\tx402 {\n" + body + "\t}\n}\n"
	}
	const good = "\t\tprice 0.01\n\t\tpay_to 0x1111111111111111111111111111111111111111\n\t\tnetwork base-sepolia\n"
	route := func(replace, with string) string {
		return site(strings.Replace(good, replace, with, 1))
	}
	facilitator := func(body string) string {
		return "{\n\tx402 {\n\t\tfacilitator {\n" + body + "\t\t}\n\t}\n}\n"
	}
	const net = "\t\t\tnetwork base-sepolia {\n\t\t\t\trpc {env.RPC}\n\t\t\t}\n"
	for _, tc := range []struct {
		name, caddyfile, wantErr string
	}{
		{"pay_to failing its EIP-55 checksum", route("0x1111111111111111111111111111111111111111", "0x5aaeb6053F3E94C9b9A09f33669435E7Ef1BeAed # <-"), "pay_to: \"0x5aaeb6053F3E94C9b9A09f33669435E7Ef1BeAed\" fails its EIP-55 checksum (want 0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed)"},
		{"pay_to is the zero address", route("0x1111111111111111111111111111111111111111", "0x0000000000000000000000000000000000000000 # <-"), "pay_to: the zero address cannot be used"},
		{"pay_to is not an address", route("0x1111111111111111111111111111111111111111", "0x1234 # <-"), `pay_to: "0x1234" is not a 0x-hex address`},
		{"a price unit that is not the asset's", route("price 0.01", "price 0.01 DAI # <-"), `price: price "0.01 DAI": unit "DAI" is not USDC or base`},
		{"more decimals than the asset has", route("price 0.01", "price 0.0000001 USDC # <-"), `price: price "0.0000001 USDC"`},
		{"a price of zero", route("price 0.01", "price 0 # <-"), "must be positive"},
		{"a network the facilitator does not serve", route("network base-sepolia", "network polygon # <-"), `network: "polygon" is not one of base-sepolia, devnet`},
		{"a remote facilitator on a network that is not built in", route("network base-sepolia", "network devnet # <-\n\t\tfacilitator https://f.example"), `network: "devnet" is not one of base, base-sepolia`},
		{"an asset failing its EIP-55 checksum", route("network base-sepolia", "network base-sepolia\n\t\tasset 0x036cbD53842c5426634e7929541eC2318f3dCF7e # <-"), "asset: \"0x036cbD53842c5426634e7929541eC2318f3dCF7e\" fails its EIP-55 checksum"},
		{"a foreign asset without its EIP-712 domain", route("network base-sepolia", "network base-sepolia\n\t\tasset 0x2222222222222222222222222222222222222222 # <-"), "asset: 0x2222222222222222222222222222222222222222 is not the network's default: its EIP-712 asset_name and asset_version are required"},
		{"decimals over 36", route("network base-sepolia", "network base-sepolia\n\t\tasset 0x2222222222222222222222222222222222222222\n\t\tasset_name T\n\t\tasset_version 1\n\t\tdecimals 40 # <-"), "decimals: 40 is not in 0..36"},
		{"a placeholder price without price_min", route("price 0.01", "price {http.request.header.X-Quote} base # <-"), "price: holds a placeholder, so price_min is required"},
		{"a placeholder pay_to without pay_to_allowed", route("pay_to 0x1111111111111111111111111111111111111111", "pay_to {http.request.header.X-Payee} # <-"), "pay_to: holds a placeholder, so pay_to_allowed is required"},
		{"price_max below price_min", route("price 0.01", "price {http.vars.q} base\n\t\tprice_min 0.01\n\t\tprice_max 0.001 # <-"), "price_max: 0.001 is below price_min 0.01"},
		{"a remote facilitator over plain http to another host", route("network base-sepolia", "network base\n\t\tfacilitator http://facilitator.example # <-"), "facilitator: a plain http url must name a loopback host"},
		{"insecure_http without a remote facilitator", route("network base-sepolia", "network base-sepolia\n\t\tinsecure_http # <-"), "insecure_http: is only for a remote facilitator url"},
		{"price is required", site("\t\tpay_to 0x1111111111111111111111111111111111111111\n\t\tnetwork base-sepolia\n"), "price: is required"},
		{"network is required", site("\t\tprice 0.01\n\t\tpay_to 0x1111111111111111111111111111111111111111\n"), "network: is required"},
		{"an unknown guardian advertisement", route("network base-sepolia", "network base-sepolia\n\t\tguardian { # <-\n\t\t\tadvertise always\n\t\t}"), `guardian: advertise "always" is not required or optional`},
		{"advertise required to a facilitator in guardian_mode optional", route("network base-sepolia", "network base-sepolia\n\t\tfacilitator bundled optional\n\t\tguardian { # <-\n\t\t\tadvertise required\n\t\t\tfee on\n\t\t}"), "guardian: advertise required needs the facilitator's guardian_mode required"},
		{"a guardian advertisement its facilitator would not keep", route("network base-sepolia", "network base-sepolia\n\t\tfacilitator bundled off\n\t\tguardian { # <-\n\t\t\tadvertise required\n\t\t}"), "guardian: advertise required, but the facilitator's guardian_mode is off"},
		{"facilitator_key without a url", route("network base-sepolia", "network base-sepolia\n\t\tfacilitator_key {env.K} # <-"), "facilitator_key: is only for a remote facilitator url"},
		{"facilitator_key written into the config", route("network base-sepolia", "network base-sepolia\n\t\tfacilitator https://f.example\n\t\tfacilitator_key inline-key # <-"), "facilitator_key: must be an {env.*} or {file.*} placeholder"},
		{"a bundled facilitator that is not declared", route("network base-sepolia", "network base-sepolia\n\t\tfacilitator bundled nope # <-"), `no bundled facilitator "nope"`},
		{"a negative retry_max", route("network base-sepolia", "network base-sepolia\n\t\tretry_max -1 # <-"), "retry_max: -1 must not be negative"},
		{"max_timeout under a second", route("network base-sepolia", "network base-sepolia\n\t\tmax_timeout 500ms # <-"), "max_timeout: must be at least 1s"},
		{"pass_key written into the config", route("network base-sepolia", "network base-sepolia\n\t\tpass 1h\n\t\tpass_key 0123456789abcdef0123456789abcdef # <-"), "pass_key: must be an {env.*} or {file.*} placeholder"},
		{"a pass without pass_key", route("network base-sepolia", "network base-sepolia\n\t\tpass 1h /premium/ # <-"), "pass: needs pass_key"},
		{"pass_key without pass", route("network base-sepolia", "network base-sepolia\n\t\tpass_key {env.K} # <-"), "pass_key: is only for a route with pass"},
		{"a pass duration that is not one", route("network base-sepolia", "network base-sepolia\n\t\tpass forever # <-\n\t\tpass_key {env.K}"), `pass "forever" is not a positive duration`},
		{"a pass scope that is not a directory", route("network base-sepolia", "network base-sepolia\n\t\tpass 1h /premium # <-\n\t\tpass_key {env.K}"), `pass: scope "/premium" must be a clean directory path that starts and ends with /`},
		{"a pass with too many arguments", route("network base-sepolia", "network base-sepolia\n\t\tpass 1h /a/ /b/ # <-\n\t\tpass_key {env.K}"), "wrong number of values for pass"},
		{"a pass whose duration is two words", route("network base-sepolia", "network base-sepolia\n\t\tpass 1 hour / # <-\n\t\tpass_key {env.K}"), "wrong number of values for pass; syntax: pass <duration> [<path scope>], e.g. pass 1h /"},

		{"an unknown guardian_mode", facilitator(net + "\t\t\tsigner_key {env.K}\n\t\t\tguardian_mode sometimes # <-\n"), `guardian_mode: "sometimes" is not off, optional or required`},
		{"an rpc url with its key in the clear", facilitator("\t\t\tnetwork base-sepolia {\n\t\t\t\trpc https://base-sepolia.g.alchemy.com/v2/a1B2c3D4e5F6g7H8i9J0 # <-\n\t\t\t}\n\t\t\tsigner_key {env.K}\n"), "rpc: carries a key-looking path segment; give the secret as an {env.*} or {file.*} placeholder"},
		{"a redis url with its password in the clear", facilitator(net + "\t\t\tsigner_key {env.K}\n\t\t\tstore redis redis://:hunter2@127.0.0.1:6379/0 # <-\n"), "store: carries a password in its user info"},
		{"a postgres dsn with its password in the clear", facilitator(net + "\t\t\tsigner_key {env.K}\n\t\t\tjournal postgres postgres://x402:hunter2@db.example/x402 # <-\n"), "journal: carries a password in its user info"},
		{"a placeholder followed by the secret itself", facilitator(net + "\t\t\tsigner_key {env.UNSET}deadbeefdeadbeefdeadbeef # <-\n"), "signer_key: must be an {env.*} or {file.*} placeholder"},
		{"a verdict_rate that is not a rate", facilitator(net + "\t\t\tsigner_key {env.K}\n\t\t\tverdict_rate fast 10 # <-\n"), `verdict_rate "fast" is not a positive number of requests per second`},
		{"a verdict_signer without verdict_url", facilitator(net + "\t\t\tsigner_key {env.K}\n\t\t\tverdict_signer 0x9965507D1a55bcC2695C58ba16FB37d819B0A4dc # <-\n"), "verdict_signer: needs verdict_url"},
		{"a verdict_signer that is not an address", facilitator(net + "\t\t\tsigner_key {env.K}\n\t\t\tverdict_signer 0x1234 # <-\n"), "verdict_signer: must be a non-zero address"},
		{"guardian_mode without verdict_url", facilitator(net + "\t\t\tsigner_key {env.K}\n\t\t\tguardian_mode optional # <-\n"), "guardian_mode: optional needs verdict_url"},
		{"signer_key written into the config", facilitator(net + "\t\t\tsigner_key ac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80 # <-\n"), "signer_key: must be an {env.*} or {file.*} placeholder"},
		{"a pool key written into the config", facilitator(net + "\t\t\tsigner_key {env.K} 59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d # <-\n"), "signer_key: must be an {env.*} or {file.*} placeholder"},
		{"signer_key without a key", facilitator(net + "\t\t\tsigner_key # <-\n"), "wrong number of values for signer_key"},
		{"a min_gas_balance that is not wei", facilitator(net + "\t\t\tsigner_key {env.K} {env.K2}\n\t\t\tmin_gas_balance 0.1eth # <-\n"), `min_gas_balance: "0.1eth" is not a non-negative integer of wei`},
		{"a max_pending_per_signer that is not a number", facilitator(net + "\t\t\tsigner_key {env.K}\n\t\t\tmax_pending_per_signer many # <-\n"), `max_pending_per_signer "many" is not an integer`},
		{"a negative max_pending_per_signer", facilitator(net + "\t\t\tsigner_key {env.K}\n\t\t\tmax_pending_per_signer -1 # <-\n"), "max_pending_per_signer: -1 is not a positive number"},
		{"a balance_check_interval that is not a duration", facilitator(net + "\t\t\tsigner_key {env.K}\n\t\t\tbalance_check_interval often # <-\n"), `balance_check_interval "often" is not a positive duration`},
		{"signer_key is required", "{\n\tx402 {\n\t\tfacilitator { # <-\n" + net + "\t\t}\n\t}\n}\n", "signer_key: is required"},
		{"rpc is required", facilitator("\t\t\tnetwork base-sepolia # <-\n\t\t\tsigner_key {env.K}\n"), "network base-sepolia: rpc: is required"},
		{"a negative min_amount", facilitator("\t\t\tnetwork base-sepolia {\n\t\t\t\trpc {env.RPC}\n\t\t\t\tmin_amount -5 # <-\n\t\t\t}\n\t\t\tsigner_key {env.K}\n"), `network base-sepolia: min_amount: "-5" is not a non-negative integer`},
		{"network decimals over 36", facilitator("\t\t\tnetwork base-sepolia {\n\t\t\t\trpc {env.RPC}\n\t\t\t\tdecimals 37 # <-\n\t\t\t}\n\t\t\tsigner_key {env.K}\n"), "network base-sepolia: decimals: 37 is not in 0..36"},
		{"a chain_id that is not the built-in network's", facilitator("\t\t\tnetwork base {\n\t\t\t\trpc {env.RPC}\n\t\t\t\tchain_id 1 # <-\n\t\t\t}\n\t\t\tsigner_key {env.K}\n"), "network base: chain_id: 1 is not the built-in network's 8453"},
		{"a network that is not built in, without chain_id", facilitator("\t\t\tnetwork polygon { # <-\n\t\t\t\trpc {env.RPC}\n\t\t\t}\n\t\t\tsigner_key {env.K}\n"), "network polygon: chain_id: is required for a network that is not one of base, base-sepolia"},
		{"a network asset failing its EIP-55 checksum", facilitator("\t\t\tnetwork base {\n\t\t\t\trpc {env.RPC}\n\t\t\t\tasset 0x833589fcd6eDb6E08f4c7C32D4f71b54bdA02913 # <-\n\t\t\t}\n\t\t\tsigner_key {env.K}\n"), "network base: asset: \"0x833589fcd6eDb6E08f4c7C32D4f71b54bdA02913\" fails its EIP-55 checksum"},
		{"a network listed twice", facilitator(net + "\t\t\tnetwork base-sepolia { # <-\n\t\t\t\trpc {env.RPC}\n\t\t\t}\n\t\t\tsigner_key {env.K}\n"), "network base-sepolia: network: is listed twice"},
		{"a factory that is not an address", facilitator(net + "\t\t\tsigner_key {env.K}\n\t\t\terc6492_factories 0x12 # <-\n"), `erc6492_factories: "0x12" is not a 0x-hex address`},
		{"reconcile_interval under a second", facilitator(net + "\t\t\tsigner_key {env.K}\n\t\t\treconcile_interval 10ms # <-\n"), "reconcile_interval: must be at least 1s"},

		{"api_key written into the config", adaptGlobal + ":4021 {\n\tx402_facilitator {\n\t\tapi_key inline-key # <-\n\t}\n}\n", "api_key: must be an {env.*} or {file.*} placeholder"},
		{"a relative strip_prefix", adaptGlobal + ":4021 {\n\tx402_facilitator {\n\t\tstrip_prefix facilitator # <-\n\t}\n}\n", "strip_prefix: wants a path starting with /"},
	} {
		t.Run(tc.name, func(t *testing.T) { expectAdaptError(t, tc.caddyfile, tc.wantErr) })
	}
}

// expectAdaptError adapts caddyfile and expects an error containing wantErr at the line
// marked "# <-", or else at the x402 directive that lacks an option.
func expectAdaptError(t *testing.T, caddyfile, wantErr string) {
	t.Helper()
	wantLine := 0
	for i, l := range strings.Split(caddyfile, "\n") {
		if strings.HasSuffix(l, "# <-") {
			wantLine = i + 1
		}
	}
	if wantLine == 0 {
		for i, l := range strings.Split(caddyfile, "\n") {
			if strings.TrimSpace(l) == "x402 {" && strings.HasPrefix(l, "\tx402") { // the directive that lacks an option
				wantLine = i + 1
			}
		}
	}
	_, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(caddyfile), nil)
	if err == nil {
		t.Fatalf("adapt succeeded; want an error containing %q", wantErr)
	}
	if !strings.Contains(err.Error(), wantErr) {
		t.Errorf("error = %v\nwant one containing %q", err, wantErr)
	}
	if at := fmt.Sprintf("Caddyfile:%d", wantLine); !strings.Contains(err.Error(), at) {
		t.Errorf("error = %v\nwant it at %s", err, at)
	}
	if strings.Contains(err.Error(), "x402: gate config") || strings.Contains(err.Error(), "payTo") {
		t.Errorf("error = %v: it repeats a prefix or uses a JSON name", err)
	}
}
