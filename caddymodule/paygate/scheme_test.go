package paygate

import "testing"

// TestAdaptErrorsOfSchemeAndTransfer: scheme, transfer and unmetered take only their
// values, upto moves the asset by Permit2 in the authorization flow only, and unmetered
// is for upto; each mistake fails at adapt with the option's name and line, in an accept
// block too.
func TestAdaptErrorsOfSchemeAndTransfer(t *testing.T) {
	for _, tc := range []struct {
		name, caddyfile, wantErr string
	}{
		{"an unknown scheme", site("\t\tscheme escrow # <-\n"), `scheme: "escrow" is not exact or upto`},
		{"scheme without its value", site("\t\tscheme # <-\n"), "wrong number of values for scheme"},
		{"an unknown transfer", site("\t\ttransfer erc20 # <-\n"), `transfer: "erc20" is not eip3009 or permit2`},
		{"upto by EIP-3009", site("\t\tscheme upto\n\t\ttransfer eip3009 # <-\n"), "transfer: eip3009 does not combine with scheme upto"},
		{"upto settled upfront", site("\t\tscheme upto\n\t\tflow upfront # <-\n"), "flow: upfront does not combine with scheme upto"},
		{"upto with a pass", site("\t\tscheme upto\n\t\tpass 1h # <-\n\t\tpass_key {env.K}\n"), "pass: does not combine with scheme upto"},
		{"unmetered on an exact route", site("\t\tunmetered free # <-\n"), "unmetered: is for scheme upto only"},
		{"an unknown unmetered", site("\t\tscheme upto\n\t\tunmetered zero # <-\n"), `unmetered: "zero" is not max or free`},
		{"an accept block's transfer", site("\t\taccept {\n\t\t\tprice 0.02\n\t\t\ttransfer erc20 # <-\n\t\t}\n"), `accept 1/transfer: "erc20" is not eip3009 or permit2`},
		{"a plain ERC-20 by EIP-3009", site("\t\tasset 0x2222222222222222222222222222222222222222 # <-\n\t\tdecimals 18\n"), "asset_name and asset_version are required (or transfer permit2)"},
	} {
		t.Run(tc.name, func(t *testing.T) { expectAdaptError(t, tc.caddyfile, tc.wantErr) })
	}
}
