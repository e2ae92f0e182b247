package integration_test

import (
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/ethereum/go-ethereum/crypto"

	"github.com/x402gate/x402gate/internal/testenv"
)

// signedVerdictCaddyfile is the verdict tests' Caddyfile with the verdict app signing its
// verdicts with {env.VERDICT_SIGNER_KEY} (when signs) and the bundled facilitator checking
// them against {$VERDICT_SIGNER}.
func signedVerdictCaddyfile(base string, signs bool) string {
	cf := strings.Replace(base, "verdict_key {env.VERDICT_KEY}", "verdict_key {env.VERDICT_KEY}\n\t\t\tverdict_signer {$VERDICT_SIGNER}", 1)
	if signs {
		cf = strings.Replace(cf, "admin_key {env.VERDICT_ADMIN_KEY}", "admin_key {env.VERDICT_ADMIN_KEY}\n\t\tsigner_key {env.VERDICT_SIGNER_KEY}", 1)
	}
	return cf
}

// TestGateRefusesVerdictsSignedByAnotherKey runs the built Caddy with a facilitator whose
// verdict_signer is the verdict service's address (docs/verdict-signing.md#checking-at-the-gate):
// a payment the policy allows passes when the verdict app signs with that key; when it
// signs with another key (a verdict service impersonated in the middle) or does not sign,
// the payer gets a 402, the upstream is not reached and nothing moves. The signer route
// publishes the address, and the signer key is in no log and not in the adapted config.
func TestGateRefusesVerdictsSignedByAnotherKey(t *testing.T) {
	f := newVerdictFleet(t, verdictSetup{})
	service, impostor := testenv.NewAccount(t), testenv.NewAccount(t)
	base, env := f.caddyfile, f.env
	for _, c := range []struct {
		name   string
		key    *testenv.Account
		status int
	}{
		{"signed by the configured signer", &service, http.StatusOK},
		{"signed by another key", &impostor, http.StatusPaymentRequired},
		{"not signed", nil, http.StatusPaymentRequired},
	} {
		t.Run(c.name, func(t *testing.T) {
			f.caddyfile, f.env = signedVerdictCaddyfile(base, c.key != nil), append(append([]string{}, env...), "VERDICT_SIGNER="+service.Address.Hex())
			if c.key != nil {
				key := hex.EncodeToString(crypto.FromECDSA(c.key.Key))
				testenv.AddCanary("verdict signer key ("+c.name+")", key)
				f.env = append(f.env, "VERDICT_SIGNER_KEY="+key)
			}
			in := f.start(t)
			defer func() {
				noSignerKeyIn(t, in, c.key)
				in.caddy.Stop()
			}()
			bal := balances(t, f.tok, f.okPayTo)
			hits := f.up.count("/allowed/report")

			got := payWith(t, payV1Script, f.payer, in.api+"/allowed/report", "X402_TOKEN="+f.tok.Address.Hex())
			if got.Status != c.status {
				t.Fatalf("paying an allowed payee: status %d, want %d: %s", got.Status, c.status, got.Body)
			}
			if c.status == http.StatusOK {
				wantDelta(t, f.tok, f.okPayTo, bal[0], price)
				if f.up.count("/allowed/report") != hits+1 {
					t.Fatal("the upstream did not see the paid request")
				}
				pub := mustDo(t, http.MethodGet, in.verdictAPI+"/.well-known/x402gate-verdict-signer", nil)
				var info struct{ Address string }
				if err := json.Unmarshal([]byte(pub.Body), &info); err != nil || pub.Status != http.StatusOK || info.Address != service.Address.Hex() {
					t.Fatalf("signer route: %d %s", pub.Status, pub.Body)
				}
				return
			}
			if !strings.Contains(got.Body, `"status":"error","reason":"verdict signature: `) {
				t.Errorf("the 402 does not say the verdict's signature failed: %s", got.Body)
			}
			if f.up.count("/allowed/report") != hits {
				t.Fatal("the upstream was reached without a verdict signed by the configured signer")
			}
			wantDelta(t, f.tok, f.okPayTo, bal[0], 0)
		})
	}
}

// noSignerKeyIn fails the test when the adapted config (the admin API's /config/) or a log
// of in holds the signer key, or the config lacks the facilitator's verdict_signer.
func noSignerKeyIn(t *testing.T, in *verdictInstance, key *testenv.Account) {
	t.Helper()
	resp, err := http.Get(in.caddy.AdminURL + "/config/")
	if err != nil {
		t.Fatal(err)
	}
	cfg, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(cfg), `"verdict_signer"`) {
		t.Error("the adapted config lacks the facilitator's verdict_signer")
	}
	if key == nil {
		return
	}
	secret := hex.EncodeToString(crypto.FromECDSA(key.Key))
	if strings.Contains(string(cfg), secret) || strings.Contains(in.caddy.Logs(), secret) {
		t.Error("the signer key is in the adapted config or in Caddy's log")
	}
}
