package paygate

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"

	"go.uber.org/zap"

	"github.com/x402gate/x402gate/facilitator"
)

// devKey is anvil's first development key: public, never a real secret.
const devKey = "ac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80"

func TestFacilitatorConfigExpand(t *testing.T) {
	t.Setenv("X402_T_KEY", "0x"+devKey)
	t.Setenv("X402_T_BADKEY", "zz"+devKey[2:])
	t.Setenv("X402_T_EMPTY", "")
	t.Setenv("X402_T_RPC", "https://rpc.example/v1/secret-rpc-token-777")
	keyFile := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(keyFile, []byte(devKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	net := []facilitator.NetworkConfig{{Name: "base-sepolia", RPC: "{env.X402_T_RPC}"}}

	t.Run("placeholders expand and defaults apply", func(t *testing.T) {
		rc, err := expand("default", &facilitator.Config{Networks: net, SignerKey: "{file." + keyFile + "}"})
		if err != nil {
			t.Fatal(err)
		}
		if rc.Networks[0].RPC != "https://rpc.example/v1/secret-rpc-token-777" || rc.SignerKey != devKey {
			t.Fatalf("rpc %q, key expanded %v", rc.Networks[0].RPC, rc.SignerKey == devKey)
		}
		if rc.ApprovalStore.Type != "" || rc.SettlementJournal.Type != "" || rc.VerdictMode != "" {
			t.Fatalf("defaults: store %q journal %q guardian %q, want the facilitator's", rc.ApprovalStore.Type, rc.SettlementJournal.Type, rc.VerdictMode)
		}
		if want := filepath.Join(caddy.AppDataDir(), "x402", "journal.db"); rc.SettlementJournal.Path != want {
			t.Fatalf("journal path %q, want %q", rc.SettlementJournal.Path, want)
		}
		other, err := expand("eu", &facilitator.Config{Networks: net, SignerKey: "{env.X402_T_KEY}"})
		if err != nil {
			t.Fatal(err)
		}
		if want := filepath.Join(caddy.AppDataDir(), "x402", "eu", "journal.db"); other.SettlementJournal.Path != want {
			t.Fatalf("journal path of a named facilitator %q, want %q", other.SettlementJournal.Path, want)
		}
		if mustKey(t, "default", rc) == mustKey(t, "eu", other) {
			t.Fatal("two facilitators share a pool key")
		}
		again, _ := expand("eu", &facilitator.Config{Networks: net, SignerKey: "{env.X402_T_KEY}"})
		if mustKey(t, "eu", again) != mustKey(t, "eu", other) {
			t.Fatal("the same configuration gave two pool keys: a reload would not reuse the facilitator")
		}
		for _, fc := range []*facilitator.Config{
			{Networks: net, SignerKey: "{env.X402_T_KEY}", ReceiptTimeout: facilitator.Duration(31 * time.Second)},
			{Networks: net, SignerKey: "{env.X402_T_KEY}", VerdictPoll: &facilitator.VerdictPollConfig{Interval: facilitator.Duration(time.Second), MaxAttempts: 3}},
		} {
			changed, err := expand("eu", fc)
			if err != nil {
				t.Fatal(err)
			}
			if mustKey(t, "eu", changed) == mustKey(t, "eu", other) {
				t.Fatalf("a changed configuration %+v kept the pool key: a reload would reuse the old facilitator", fc)
			}
		}
		if strings.Contains(mustKey(t, "eu", other), devKey) || strings.Contains(mustKey(t, "eu", other), "secret-rpc-token") {
			t.Fatal("the pool key carries a secret")
		}
	})

	for _, tc := range []struct {
		name    string
		fc      facilitator.Config
		wantErr string
	}{
		{"literal signer key", facilitator.Config{Networks: net, SignerKey: devKey}, "placeholder"},
		{"no signer key", facilitator.Config{Networks: net}, "signer_key: is required"},
		{"literal verdict key", facilitator.Config{Networks: net, SignerKey: "{env.X402_T_KEY}", VerdictMode: "required",
			VerdictURL: "http://127.0.0.1:1", VerdictKey: "verdict-key-written-inline-0123456789"}, "verdict_key: must be an {env.*} or {file.*} placeholder"},
		{"signer key resolves to nothing", facilitator.Config{Networks: net, SignerKey: "{env.X402_T_EMPTY}"}, "signer_key: is empty: {env.X402_T_EMPTY}: the environment variable X402_T_EMPTY is empty"},
		{"signer key of an unset variable", facilitator.Config{Networks: net, SignerKey: "{env.X402_T_UNSET_9f1}"}, "signer_key: is empty: {env.X402_T_UNSET_9f1}: the environment variable X402_T_UNSET_9f1 is not set"},
		{"signer key of a missing file", facilitator.Config{Networks: net, SignerKey: "{file./nonexistent/x402/signer.key}"}, "signer_key: is empty: {file./nonexistent/x402/signer.key}: the file /nonexistent/x402/signer.key does not exist"},
		{"signer key is not hex", facilitator.Config{Networks: net, SignerKey: "{env.X402_T_BADKEY}"}, "not a hex secp256k1 private key"},
		{"no network", facilitator.Config{SignerKey: "{env.X402_T_KEY}"}, "network: at least one is required"},
		{"rpc resolves to nothing", facilitator.Config{Networks: []facilitator.NetworkConfig{{Name: "base", RPC: "{env.X402_T_EMPTY}"}}, SignerKey: "{env.X402_T_KEY}"}, "network base: rpc: is empty: {env.X402_T_EMPTY}: the environment variable X402_T_EMPTY is empty"},
		{"guardian required without verdict url", facilitator.Config{Networks: net, SignerKey: "{env.X402_T_KEY}", VerdictMode: "required"}, "needs verdict_url"},
		{"guardian optional without verdict url", facilitator.Config{Networks: net, SignerKey: "{env.X402_T_KEY}", VerdictMode: "optional"}, "needs verdict_url"},
		{"unknown guardian mode", facilitator.Config{Networks: net, SignerKey: "{env.X402_T_KEY}", VerdictMode: "strict"}, "not off, optional or required"},
		{"relative verdict url", facilitator.Config{Networks: net, SignerKey: "{env.X402_T_KEY}", VerdictURL: "verdict.local"}, "verdict_url: must be an absolute"},
		{"redis without url", facilitator.Config{Networks: net, SignerKey: "{env.X402_T_KEY}", ApprovalStore: &facilitator.StoreConfig{Type: "redis", URL: "{env.X402_T_EMPTY}"}}, "store redis: is empty: {env.X402_T_EMPTY}"},
		{"postgres without dsn", facilitator.Config{Networks: net, SignerKey: "{env.X402_T_KEY}", SettlementJournal: &facilitator.JournalConfig{Type: "postgres"}}, "journal: postgres needs its dsn"},
		{"unknown store", facilitator.Config{Networks: net, SignerKey: "{env.X402_T_KEY}", ApprovalStore: &facilitator.StoreConfig{Type: "etcd"}}, "unknown type"},
		{"bad factory", facilitator.Config{Networks: net, SignerKey: "{env.X402_T_KEY}", ERC6492Factories: []string{"0x12"}}, "is not a 0x-hex address"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := expand("default", &tc.fc)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error = %v, want one containing %q", err, tc.wantErr)
			}
			for _, secret := range []string{devKey, devKey[2:], "secret-rpc-token-777"} {
				if strings.Contains(err.Error(), secret) {
					t.Fatalf("the error quotes a secret: %v", err)
				}
			}
		})
	}
}

func TestOpenBundleFailsClosedWithoutLeakingSecrets(t *testing.T) {
	isolateCaddy(t)
	t.Setenv("X402_T_KEY", devKey)
	t.Setenv("X402_T_VKEY", "short")
	// Secrets come through placeholders (a literal one is refused before any I/O); the
	// errors of what they open must not quote them either.
	t.Setenv("X402_T_SECRET_RPC", "http://127.0.0.1:1/secret-rpc-token-777")
	t.Setenv("X402_T_SECRET_REDIS", "redis://:redis-secret-pw@127.0.0.1:1/0")
	dir := t.TempDir()
	for _, tc := range []struct {
		name    string
		fc      facilitator.Config
		wantErr string
	}{
		{"unreachable rpc", facilitator.Config{
			Networks:  []facilitator.NetworkConfig{{Name: "base-sepolia", RPC: "{env.X402_T_SECRET_RPC}"}},
			SignerKey: "{env.X402_T_KEY}", SettlementJournal: &facilitator.JournalConfig{Path: filepath.Join(dir, "a.db")},
		}, ""}, // no I/O on the chain: the network comes up in the background
		{"verdict key too short", facilitator.Config{
			Networks:  []facilitator.NetworkConfig{{Name: "base-sepolia", RPC: "{env.X402_T_SECRET_RPC}"}},
			SignerKey: "{env.X402_T_KEY}", SettlementJournal: &facilitator.JournalConfig{Path: filepath.Join(dir, "b.db")},
			VerdictMode: "required", VerdictURL: "http://127.0.0.1:1", VerdictKey: "{env.X402_T_VKEY}",
		}, "verdict_url/verdict_key"},
		{"unreachable redis", facilitator.Config{
			Networks:  []facilitator.NetworkConfig{{Name: "base-sepolia", RPC: "{env.X402_T_SECRET_RPC}"}},
			SignerKey: "{env.X402_T_KEY}", ApprovalStore: &facilitator.StoreConfig{Type: "redis", URL: "{env.X402_T_SECRET_REDIS}"},
		}, "approval store"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rc, err := expand("t", &tc.fc)
			if err != nil {
				t.Fatal(err)
			}
			b, err := openBundle("t", rc, zap.NewNop())
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("open: %v", err)
				}
				defer b.Destruct()
				if s := b.engine.NetworkState("eip155:84532"); s != facilitator.NetworkStarting {
					t.Fatalf("network state %q before start, want %q", s, facilitator.NetworkStarting)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error = %v, want one containing %q", err, tc.wantErr)
			}
			for _, secret := range []string{devKey, "secret-rpc-token-777", "redis-secret-pw", "short"} {
				if strings.Contains(err.Error(), secret) {
					t.Fatalf("the error quotes a secret: %v", err)
				}
			}
		})
	}
}

func TestMetricsRegisterOnEveryConfigLoad(t *testing.T) {
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	defer cancel()
	for i := 0; i < 2; i++ { // a second handler in the same config
		if err := registerMetrics(ctx); err != nil {
			t.Fatalf("registration %d: %v", i, err)
		}
	}
	challengesTotal.Inc()
	families, err := ctx.GetMetricsRegistry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, f := range families {
		names[f.GetName()] = true
	}
	for _, want := range []string{"caddy_x402_challenges_total"} {
		if !names[want] {
			t.Errorf("registry lacks %s; has %v", want, names)
		}
	}
}

func mustKey(t *testing.T, name string, rc *facilitator.Config) string {
	t.Helper()
	k, err := poolKey(name, rc)
	if err != nil {
		t.Fatal(err)
	}
	return k
}
