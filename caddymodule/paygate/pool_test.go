package paygate

import (
	"strings"
	"testing"

	"github.com/ethereum/go-ethereum/common"
	dto "github.com/prometheus/client_model/go"

	"github.com/x402gate/x402gate/facilitator"
)

// devKey2 is anvil's second development key: public, never a real secret.
const devKey2 = "59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d"

// TestFacilitatorConfigExpandsPoolKeys: every key of a signer pool is a placeholder,
// expanded like signer_key; a pool key that expands to nothing or to something that is
// not a key is refused naming signer_key, never quoting the value.
func TestFacilitatorConfigExpandsPoolKeys(t *testing.T) {
	t.Setenv("X402_T_KEY", devKey)
	t.Setenv("X402_T_KEY2", "0x"+devKey2)
	t.Setenv("X402_T_BADKEY", "zz"+devKey2[2:])
	t.Setenv("X402_T_EMPTY", "")
	net := []facilitator.NetworkConfig{{Name: "base-sepolia", RPC: "https://rpc.example"}}
	fc := &facilitator.Config{Networks: net, SignerKey: "{env.X402_T_KEY}", SignerKeys: []string{"{env.X402_T_KEY2}"}}
	rc, err := expand("default", fc)
	if err != nil {
		t.Fatal(err)
	}
	if rc.SignerKey != devKey || len(rc.SignerKeys) != 1 || rc.SignerKeys[0] != "0x"+devKey2 {
		t.Fatal("the pool keys did not expand")
	}
	if fc.SignerKeys[0] != "{env.X402_T_KEY2}" {
		t.Fatal("expand wrote the secret into the configuration it was given")
	}
	for _, bad := range []string{"{env.X402_T_BADKEY}", "{env.X402_T_EMPTY}", "0x" + devKey2} {
		_, err := expand("default", &facilitator.Config{Networks: net, SignerKey: "{env.X402_T_KEY}", SignerKeys: []string{bad}})
		if err == nil || !strings.Contains(err.Error(), "signer_key") {
			t.Fatalf("pool key %q: error %v, want one naming signer_key", bad, err)
		}
		if strings.Contains(err.Error(), devKey2[2:]) {
			t.Fatalf("the error quotes the key: %v", err)
		}
	}
}

// TestRelayerInsufficientFundsGauge: caddy_x402_relayer_insufficient_funds counts the
// signer lanes out of the pool, and a closed bundle takes its lanes out of the count.
func TestRelayerInsufficientFundsGauge(t *testing.T) {
	before := gaugeValue(t)
	b := &bundle{}
	a1, a2 := common.HexToAddress("0x01"), common.HexToAddress("0x02")
	b.laneFunds("eip155:84532", a1, false)
	b.laneFunds("eip155:84532", a2, false)
	if got := gaugeValue(t) - before; got != 2 {
		t.Fatalf("gauge +%v with two lanes out, want +2", got)
	}
	b.laneFunds("eip155:84532", a1, true)
	if got := gaugeValue(t) - before; got != 1 {
		t.Fatalf("gauge +%v with one lane back, want +1", got)
	}
	if err := b.dropLanesOut(); err != nil {
		t.Fatal(err)
	}
	if got := gaugeValue(t) - before; got != 0 {
		t.Fatalf("gauge +%v after the bundle closed, want +0", got)
	}
}

// gaugeValue reads the relayer_insufficient_funds gauge.
func gaugeValue(t *testing.T) float64 {
	t.Helper()
	var m dto.Metric
	if err := relayerInsufficientFunds.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetGauge().GetValue()
}
