package facilitator

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
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

func TestConfigValidate(t *testing.T) {
	net := []NetworkConfig{{Name: "base-sepolia", RPC: "{env.RPC}"}}
	for _, tc := range []struct {
		name    string
		c       Config
		wantErr string
	}{
		{"valid", Config{Networks: net, SignerKey: "{env.K}"}, ""},
		{"no network", Config{SignerKey: "{env.K}"}, "network: at least one is required"},
		{"a network listed twice", Config{Networks: append(net, net...), SignerKey: "{env.K}"}, "listed twice"},
		{"a network listed twice by two names", Config{Networks: append(net, NetworkConfig{Name: "eip155:84532", RPC: "x"}), SignerKey: "{env.K}"}, "listed twice"},
		{"no rpc", Config{Networks: []NetworkConfig{{Name: "base"}}, SignerKey: "{env.K}"}, "network base: rpc: is required"},
		{"no signer key", Config{Networks: net}, "signer_key: is required"},
		{"unknown guardian mode", Config{Networks: net, SignerKey: "{env.K}", VerdictMode: "strict"}, "not off, optional or required"},
		{"guardian without verdict url", Config{Networks: net, SignerKey: "{env.K}", VerdictMode: VerdictRequired}, "needs verdict_url"},
		{"verdict url not http", Config{Networks: net, SignerKey: "{env.K}", VerdictURL: "ftp://v.example"}, "verdict_url: must be an absolute http(s) url"},
		{"verdict url a placeholder", Config{Networks: net, SignerKey: "{env.K}", VerdictURL: "{env.VERDICT_URL}"}, ""},
		{"negative min_amount", Config{Networks: []NetworkConfig{{Name: "base", RPC: "x", MinAmount: "-1"}}, SignerKey: "{env.K}"}, "min_amount"},
		{"decimals over 36", Config{Networks: []NetworkConfig{{Name: "base", RPC: "x", Decimals: 37}}, SignerKey: "{env.K}"}, "decimals: 37 is not in 0..36"},
		{"custom network without chain id", Config{Networks: []NetworkConfig{{Name: "devnet", RPC: "x"}}, SignerKey: "{env.K}"}, "chain_id: is required for a network that is not one of base, base-sepolia"},
		{"custom network without asset", Config{Networks: []NetworkConfig{{Name: "devnet", ChainID: 31337, RPC: "x"}}, SignerKey: "{env.K}"}, "asset: is required"},
		{"asset with a bad checksum", Config{Networks: []NetworkConfig{{Name: "base", RPC: "x", Asset: "0x833589fcd6eDb6E08f4c7C32D4f71b54bdA02913", AssetName: "X"}}, SignerKey: "{env.K}"}, "EIP-55"},
		{"redis without url", Config{Networks: net, SignerKey: "{env.K}", ApprovalStore: &StoreConfig{Type: StoreRedis}}, "redis needs its url"},
		{"postgres without dsn", Config{Networks: net, SignerKey: "{env.K}", SettlementJournal: &JournalConfig{Type: JournalPostgres}}, "postgres needs its dsn"},
		{"reconcile under a second", Config{Networks: net, SignerKey: "{env.K}", ReconcileInterval: 1}, "at least 1s"},
		{"bad factory", Config{Networks: net, SignerKey: "{env.K}", ERC6492Factories: []string{"0x12"}}, "erc6492_factories"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.c.Validate()
			if (tc.wantErr == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("Validate() = %v, want %q", err, tc.wantErr)
			}
		})
	}
}

// TestDurationReadsNumbersAndStrings: a duration in a configuration's JSON is nanoseconds or
// a string, days included, as Caddy reads its own; it is written as nanoseconds.
func TestDurationReadsNumbersAndStrings(t *testing.T) {
	for in, want := range map[string]time.Duration{`300000000000`: 5 * time.Minute, `"5m"`: 5 * time.Minute, `"1d12h"`: 36 * time.Hour, `"0.5d"`: 12 * time.Hour} {
		var d Duration
		if err := json.Unmarshal([]byte(in), &d); err != nil || time.Duration(d) != want {
			t.Errorf("%s = %v, %v; want %v", in, time.Duration(d), err, want)
		}
	}
	for _, in := range []string{`"5 minutes"`, `true`, `"d"`} {
		var d Duration
		if err := json.Unmarshal([]byte(in), &d); err == nil {
			t.Errorf("%s = %v, want an error", in, time.Duration(d))
		}
	}
	if b, _ := json.Marshal(Config{ApprovalTTL: Duration(time.Minute)}); !strings.Contains(string(b), `"approval_ttl":60000000000`) {
		t.Errorf("marshalled %s", b)
	}
}
