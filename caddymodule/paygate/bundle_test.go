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

func TestFacilitatorConfigResolve(t *testing.T) {
	t.Setenv("X402_T_KEY", "0x"+devKey)
	t.Setenv("X402_T_BADKEY", "zz"+devKey[2:])
	t.Setenv("X402_T_EMPTY", "")
	t.Setenv("X402_T_RPC", "https://rpc.example/v1/secret-rpc-token-777")
	keyFile := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(keyFile, []byte(devKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	net := []NetworkConfig{{Name: "base-sepolia", RPC: "{env.X402_T_RPC}"}}

	t.Run("placeholders expand and defaults apply", func(t *testing.T) {
		rc, err := (&FacilitatorConfig{Networks: net, SignerKey: "{file." + keyFile + "}"}).resolve("default")
		if err != nil {
			t.Fatal(err)
		}
		if rc.Networks[0].RPCURL != "https://rpc.example/v1/secret-rpc-token-777" || rc.key == nil {
			t.Fatalf("rpc %q, key set %v", rc.Networks[0].RPCURL, rc.key != nil)
		}
		if rc.StoreType != facilitator.StoreMemory || rc.JournalType != facilitator.JournalSQLite || rc.VerdictMode != facilitator.VerdictOff {
			t.Fatalf("defaults: store %s journal %s guardian %s", rc.StoreType, rc.JournalType, rc.VerdictMode)
		}
		if want := filepath.Join(caddy.AppDataDir(), "x402", "journal.db"); rc.JournalPath != want {
			t.Fatalf("journal path %q, want %q", rc.JournalPath, want)
		}
		other, err := (&FacilitatorConfig{Networks: net, SignerKey: "{env.X402_T_KEY}"}).resolve("eu")
		if err != nil {
			t.Fatal(err)
		}
		if want := filepath.Join(caddy.AppDataDir(), "x402", "eu", "journal.db"); other.JournalPath != want {
			t.Fatalf("journal path of a named facilitator %q, want %q", other.JournalPath, want)
		}
		if mustKey(t, rc) == mustKey(t, other) {
			t.Fatal("two facilitators share a pool key")
		}
		again, _ := (&FacilitatorConfig{Networks: net, SignerKey: "{env.X402_T_KEY}"}).resolve("eu")
		if mustKey(t, again) != mustKey(t, other) {
			t.Fatal("the same configuration gave two pool keys: a reload would not reuse the facilitator")
		}
		for _, fc := range []*FacilitatorConfig{
			{Networks: net, SignerKey: "{env.X402_T_KEY}", ReceiptTimeout: caddy.Duration(31 * time.Second)},
			{Networks: net, SignerKey: "{env.X402_T_KEY}", VerdictPoll: &VerdictPollConfig{Interval: caddy.Duration(time.Second), MaxAttempts: 3}},
		} {
			changed, err := fc.resolve("eu")
			if err != nil {
				t.Fatal(err)
			}
			if mustKey(t, changed) == mustKey(t, other) {
				t.Fatalf("a changed configuration %+v kept the pool key: a reload would reuse the old facilitator", fc)
			}
		}
		if strings.Contains(mustKey(t, other), devKey) || strings.Contains(mustKey(t, other), "secret-rpc-token") {
			t.Fatal("the pool key carries a secret")
		}
	})

	for _, tc := range []struct {
		name    string
		fc      FacilitatorConfig
		wantErr string
	}{
		{"literal signer key", FacilitatorConfig{Networks: net, SignerKey: devKey}, "placeholder"},
		{"no signer key", FacilitatorConfig{Networks: net}, "signer_key: is required"},
		{"literal verdict key", FacilitatorConfig{Networks: net, SignerKey: "{env.X402_T_KEY}", VerdictMode: "required",
			VerdictURL: "http://127.0.0.1:1", VerdictKey: "verdict-key-written-inline-0123456789"}, "verdict_key: must be an {env.*} or {file.*} placeholder"},
		{"signer key resolves to nothing", FacilitatorConfig{Networks: net, SignerKey: "{env.X402_T_EMPTY}"}, "signer_key: is empty: {env.X402_T_EMPTY}: the environment variable X402_T_EMPTY is empty"},
		{"signer key of an unset variable", FacilitatorConfig{Networks: net, SignerKey: "{env.X402_T_UNSET_9f1}"}, "signer_key: is empty: {env.X402_T_UNSET_9f1}: the environment variable X402_T_UNSET_9f1 is not set"},
		{"signer key of a missing file", FacilitatorConfig{Networks: net, SignerKey: "{file./nonexistent/x402/signer.key}"}, "signer_key: is empty: {file./nonexistent/x402/signer.key}: the file /nonexistent/x402/signer.key does not exist"},
		{"signer key is not hex", FacilitatorConfig{Networks: net, SignerKey: "{env.X402_T_BADKEY}"}, "not a hex secp256k1 private key"},
		{"no network", FacilitatorConfig{SignerKey: "{env.X402_T_KEY}"}, "network: at least one is required"},
		{"rpc resolves to nothing", FacilitatorConfig{Networks: []NetworkConfig{{Name: "base", RPC: "{env.X402_T_EMPTY}"}}, SignerKey: "{env.X402_T_KEY}"}, "network base: rpc: is empty: {env.X402_T_EMPTY}: the environment variable X402_T_EMPTY is empty"},
		{"guardian required without verdict url", FacilitatorConfig{Networks: net, SignerKey: "{env.X402_T_KEY}", VerdictMode: "required"}, "needs verdict_url"},
		{"guardian optional without verdict url", FacilitatorConfig{Networks: net, SignerKey: "{env.X402_T_KEY}", VerdictMode: "optional"}, "needs verdict_url"},
		{"unknown guardian mode", FacilitatorConfig{Networks: net, SignerKey: "{env.X402_T_KEY}", VerdictMode: "strict"}, "not off, optional or required"},
		{"relative verdict url", FacilitatorConfig{Networks: net, SignerKey: "{env.X402_T_KEY}", VerdictURL: "verdict.local"}, "verdict_url: must be an absolute"},
		{"redis without url", FacilitatorConfig{Networks: net, SignerKey: "{env.X402_T_KEY}", Store: &StoreConfig{Type: "redis", URL: "{env.X402_T_EMPTY}"}}, "store redis: is empty: {env.X402_T_EMPTY}"},
		{"postgres without dsn", FacilitatorConfig{Networks: net, SignerKey: "{env.X402_T_KEY}", Journal: &DatabaseConfig{Type: "postgres"}}, "journal: postgres needs its dsn"},
		{"unknown store", FacilitatorConfig{Networks: net, SignerKey: "{env.X402_T_KEY}", Store: &StoreConfig{Type: "etcd"}}, "unknown type"},
		{"bad factory", FacilitatorConfig{Networks: net, SignerKey: "{env.X402_T_KEY}", ERC6492Factories: []string{"0x12"}}, "is not a 0x-hex address"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.fc.resolve("default")
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
		fc      FacilitatorConfig
		wantErr string
	}{
		{"unreachable rpc", FacilitatorConfig{
			Networks:  []NetworkConfig{{Name: "base-sepolia", RPC: "{env.X402_T_SECRET_RPC}"}},
			SignerKey: "{env.X402_T_KEY}", Journal: &DatabaseConfig{Path: filepath.Join(dir, "a.db")},
		}, ""}, // no I/O on the chain: the network comes up in the background
		{"verdict key too short", FacilitatorConfig{
			Networks:  []NetworkConfig{{Name: "base-sepolia", RPC: "{env.X402_T_SECRET_RPC}"}},
			SignerKey: "{env.X402_T_KEY}", Journal: &DatabaseConfig{Path: filepath.Join(dir, "b.db")},
			VerdictMode: "required", VerdictURL: "http://127.0.0.1:1", VerdictKey: "{env.X402_T_VKEY}",
		}, "verdict_url/verdict_key"},
		{"unreachable redis", FacilitatorConfig{
			Networks:  []NetworkConfig{{Name: "base-sepolia", RPC: "{env.X402_T_SECRET_RPC}"}},
			SignerKey: "{env.X402_T_KEY}", Store: &StoreConfig{Type: "redis", URL: "{env.X402_T_SECRET_REDIS}"},
		}, "approval store"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rc, err := tc.fc.resolve("t")
			if err != nil {
				t.Fatal(err)
			}
			b, err := openBundle(rc, zap.NewNop())
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

func mustKey(t *testing.T, rc *resolved) string {
	t.Helper()
	k, err := rc.poolKey()
	if err != nil {
		t.Fatal(err)
	}
	return k
}
