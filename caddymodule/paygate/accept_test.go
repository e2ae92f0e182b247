package paygate

import "testing"

// TestAdaptErrorsOfAcceptAndDiscovery: a mistake in an accept block names the block and
// the option (accept 2/network) at its line, or the block's line when the block leaves the
// option to the directive; a discovery schema that is not a JSON Schema, or refers outside
// its file, fails at adapt time at its line.
func TestAdaptErrorsOfAcceptAndDiscovery(t *testing.T) {
	site := func(body string) string {
		return adaptGlobal + "\nexample.com {\n\tx402 {\n\t\tpay_to 0x1111111111111111111111111111111111111111\n\t\tprice 0.01\n" + body + "\t}\n}\n"
	}
	for _, tc := range []struct {
		name, caddyfile, wantErr string
	}{
		{"a network the facilitator does not serve, in the second block", site("\t\taccept {\n\t\t\tnetwork base-sepolia\n\t\t}\n\t\taccept {\n\t\t\tnetwork polygon # <-\n\t\t}\n"),
			`accept 2/network: "polygon" is not one of base-sepolia, devnet`},
		{"a block price in another unit", site("\t\taccept {\n\t\t\tnetwork base-sepolia\n\t\t\tprice 0.01 DAI # <-\n\t\t}\n"),
			`accept 1/price: price "0.01 DAI": unit "DAI" is not USDC or base`},
		{"a block price inherited from the directive, below price_min", site("\t\tprice_min 0.02\n\t\taccept { # <-\n\t\t\tnetwork base-sepolia\n\t\t}\n"),
			"accept 1/price: 0.01 is outside price_min 0.02"},
		{"a block whose token has no EIP-712 domain", site("\t\taccept {\n\t\t\tnetwork devnet\n\t\t\tasset 0x2222222222222222222222222222222222222222 # <-\n\t\t}\n"),
			"accept 1/asset: 0x2222222222222222222222222222222222222222 is not the network's default"},
		{"two blocks a v1 payment cannot tell apart", site("\t\taccept {\n\t\t\tnetwork base-sepolia\n\t\t}\n\t\taccept { # <-\n\t\t\tnetwork base-sepolia\n\t\t\tasset 0x2222222222222222222222222222222222222222\n\t\t\tasset_name T\n\t\t\tasset_version 1\n\t\t\tdecimals 6\n\t\t}\n"),
			"accept 2: pays the same network, payee and amount as accept 1"},
		{"an unknown option in a block", site("\t\taccept {\n\t\t\tnetwork base-sepolia\n\t\t\tchain 1 # <-\n\t\t}\n"), `unrecognized accept option "chain"`},
		{"an unknown payment_id mode", site("\t\tnetwork base-sepolia\n\t\tpayment_id always # <-\n"), `payment_id: "always" is not optional or required`},
		{"an unknown paths mode", site("\t\tnetwork base-sepolia\n\t\tpaths loose # <-\n"), `paths: "loose" is not strict or lenient`},
		{"paths without its mode", site("\t\tnetwork base-sepolia\n\t\tpaths # <-\n"), `wrong number of values for paths`},
		{"a discovery schema with an external $ref", site("\t\tnetwork base-sepolia\n\t\tdiscovery {\n\t\t\tinput_schema testdata/external_ref.schema.json # <-\n\t\t}\n"),
			`discovery/input_schema: $ref "https://schemas.example/city.json" refers outside the file`},
		{"a discovery schema file that is missing", site("\t\tnetwork base-sepolia\n\t\tdiscovery {\n\t\t\toutput_schema testdata/none.json # <-\n\t\t}\n"),
			"output_schema: cannot read testdata/none.json"},
		{"a discovery service name too long", site("\t\tnetwork base-sepolia\n\t\tdiscovery {\n\t\t\tservice_name abcdefghijklmnopqrstuvwxyz0123456789 # <-\n\t\t}\n"),
			"discovery/service_name: must be 1 to 32 printable ASCII characters"},
		{"a discovery method that is not HTTP's", site("\t\tnetwork base-sepolia\n\t\tdiscovery {\n\t\t\tmethod FETCH # <-\n\t\t}\n"),
			`discovery/method: "FETCH" is not GET`},
	} {
		t.Run(tc.name, func(t *testing.T) { expectAdaptError(t, tc.caddyfile, tc.wantErr) })
	}
}
