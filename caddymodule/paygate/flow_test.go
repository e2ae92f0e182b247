package paygate

import "testing"

// TestAdaptErrorsOfFlowAndPreflight: flow and preflight take only their values, and the
// authorization flow does not combine with pass; each mistake fails at adapt with the
// option's name and line.
func TestAdaptErrorsOfFlowAndPreflight(t *testing.T) {
	for _, tc := range []struct {
		name, caddyfile, wantErr string
	}{
		{"an unknown flow", site("\t\tflow escrow # <-\n"), `flow: "escrow" is not upfront or authorization`},
		{"flow without its value", site("\t\tflow # <-\n"), "wrong number of values for flow"},
		{"the authorization flow with a pass", site("\t\tpass 1h\n\t\tpass_key {env.K}\n\t\tflow authorization # <-\n"),
			"flow: authorization does not combine with pass"},
		{"an unknown preflight", site("\t\tpreflight free # <-\n"), `preflight: "free" is not pass or charge`},
	} {
		t.Run(tc.name, func(t *testing.T) { expectAdaptError(t, tc.caddyfile, tc.wantErr) })
	}
}

// site is a Caddyfile whose one x402 route (0.01 to a payee on base-sepolia) adds body's
// options, under the adapt-time global option.
func site(body string) string {
	return adaptGlobal + "\nexample.com {\n\tx402 {\n\t\tpay_to 0x1111111111111111111111111111111111111111\n\t\tprice 0.01\n\t\tnetwork base-sepolia\n" + body + "\t}\n}\n"
}
