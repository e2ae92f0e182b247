package facilitator

import (
	"strings"
	"testing"
)

func TestVerdictModeKeepsWhatAGateAdvertises(t *testing.T) {
	for _, tc := range []struct {
		mode      VerdictMode
		advertise string
		fee       bool
		wantErr   string
	}{
		{VerdictOff, "", false, ""},
		{VerdictOff, "required", false, "guardian_mode is off"},
		{VerdictOff, "optional", true, "guardian_mode is off"},
		{VerdictOptional, "required", false, "needs the facilitator's guardian_mode required"},
		{VerdictOptional, "required", true, "needs the facilitator's guardian_mode required"},
		{VerdictOptional, "optional", false, "needs fee on"},
		{VerdictOptional, "optional", true, ""},
		{VerdictRequired, "required", false, ""},
		{VerdictRequired, "optional", false, ""},
	} {
		err := tc.mode.CheckAdvertise(tc.advertise, tc.fee)
		if (tc.wantErr == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("%s.CheckAdvertise(%q, %v) = %v, want %q", tc.mode, tc.advertise, tc.fee, err, tc.wantErr)
		}
	}
}

func TestSettingsValidate(t *testing.T) {
	net := []NetworkSettings{{Name: "base-sepolia", RPC: "{env.RPC}"}}
	for _, tc := range []struct {
		name    string
		s       Settings
		wantErr string
	}{
		{"valid", Settings{Networks: net, SignerKey: "{env.K}"}, ""},
		{"no network", Settings{SignerKey: "{env.K}"}, "network: at least one is required"},
		{"a network listed twice", Settings{Networks: append(net, net...), SignerKey: "{env.K}"}, "listed twice"},
		{"no rpc", Settings{Networks: []NetworkSettings{{Name: "base"}}, SignerKey: "{env.K}"}, "network base: rpc: is required"},
		{"no signer key", Settings{Networks: net}, "signer_key: is required"},
		{"unknown guardian mode", Settings{Networks: net, SignerKey: "{env.K}", VerdictMode: "strict"}, "not off, optional or required"},
		{"guardian without verdict url", Settings{Networks: net, SignerKey: "{env.K}", VerdictMode: VerdictRequired}, "needs verdict_url"},
		{"negative min_amount", Settings{Networks: []NetworkSettings{{Name: "base", RPC: "x", MinAmount: "-1"}}, SignerKey: "{env.K}"}, "min_amount"},
		{"decimals over 36", Settings{Networks: []NetworkSettings{{Name: "base", RPC: "x", Decimals: 37}}, SignerKey: "{env.K}"}, "decimals: 37 is not in 0..36"},
		{"custom network without chain id", Settings{Networks: []NetworkSettings{{Name: "devnet", RPC: "x"}}, SignerKey: "{env.K}"}, "chain_id: is required for a network that is not one of base, base-sepolia"},
		{"custom network without asset", Settings{Networks: []NetworkSettings{{Name: "devnet", ChainID: 31337, RPC: "x"}}, SignerKey: "{env.K}"}, "asset: is required"},
		{"asset with a bad checksum", Settings{Networks: []NetworkSettings{{Name: "base", RPC: "x", Asset: "0x833589fcd6eDb6E08f4c7C32D4f71b54bdA02913", AssetName: "X"}}, SignerKey: "{env.K}"}, "EIP-55"},
		{"redis without url", Settings{Networks: net, SignerKey: "{env.K}", StoreType: StoreRedis}, "redis needs its url"},
		{"reconcile under a second", Settings{Networks: net, SignerKey: "{env.K}", ReconcileInterval: 1}, "at least 1s"},
		{"bad factory", Settings{Networks: net, SignerKey: "{env.K}", ERC6492Factories: []string{"0x12"}}, "erc6492_factories"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.s.Validate()
			if (tc.wantErr == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("Validate() = %v, want %q", err, tc.wantErr)
			}
		})
	}
}
