package gate_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/x402gate/x402gate/gate"
)

// TestAcceptConfigJSONIsTheCaddyfileShape: an accept block's JSON is flat and in the
// Caddyfile's names, as the Caddy handler's adapted config holds it; it reads back the
// same, and an unknown field is refused as Caddy's strict decoding refuses it.
func TestAcceptConfigJSONIsTheCaddyfileShape(t *testing.T) {
	a := gate.AcceptConfig{Network: "base", Price: "0.02", PayTo: rulesPayTo2, Asset: gate.AssetConfig{
		Address: "0x3333333333333333333333333333333333333333", Name: "Token", Version: "1", Decimals: 18, Symbol: "TOK"}, Transfer: gate.TransferPermit2}
	b, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"network":"base","asset":"0x3333333333333333333333333333333333333333","asset_name":"Token","asset_version":"1","decimals":18,"symbol":"TOK","price":"0.02","pay_to":"0x1111111111111111111111111111111111111111","transfer":"permit2"}`
	if string(b) != want {
		t.Fatalf("JSON %s\nwant %s", b, want)
	}
	var back gate.AcceptConfig
	if err := json.Unmarshal(b, &back); err != nil || back != a {
		t.Fatalf("read back %+v %v, want %+v", back, err, a)
	}
	if b, _ := json.Marshal(gate.AcceptConfig{}); string(b) != `{}` {
		t.Errorf("the empty block is %s, want {}", b)
	}
	err = json.Unmarshal([]byte(`{"network":"base","payTo":"0x1111111111111111111111111111111111111111"}`), &back)
	if err == nil || !strings.Contains(err.Error(), "payTo") {
		t.Errorf("an unknown field: %v, want an error naming it", err)
	}
}
