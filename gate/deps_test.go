package gate

import (
	"os/exec"
	"strings"
	"testing"
)

// TestGateLinksNoHeavyDependency: the gate is the framework-free part a plain net/http
// server embeds, so it imports x402 and nothing heavier: no database driver, no Redis
// client, no chain client and no Caddy (docs/gate.md#packages). Those come in through
// the packages that need them (facilitator, gate/redisretry, caddymodule). Its payment
// ledger's contract, gate/payledger, imports only the standard library.
func TestGateLinksNoHeavyDependency(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	forbidden := []string{
		"github.com/jackc/pgx",
		"modernc.org/sqlite",
		"github.com/redis/go-redis",
		"github.com/ethereum/go-ethereum/ethclient",
		"github.com/ethereum/go-ethereum/rpc",
		"github.com/caddyserver/caddy",
		"github.com/x402gate/x402gate/facilitator",
		"github.com/x402gate/x402gate/verdictclient",
	}
	var ours []string
	for _, d := range deps {
		for _, f := range forbidden {
			if strings.HasPrefix(d, f) {
				t.Errorf("gate links %s", d)
			}
		}
		if strings.HasPrefix(d, "github.com/x402gate/x402gate/") {
			ours = append(ours, d)
		}
	}
	if want := []string{"github.com/x402gate/x402gate/gate/payledger", "github.com/x402gate/x402gate/x402", "github.com/x402gate/x402gate/gate"}; strings.Join(ours, " ") != strings.Join(want, " ") {
		t.Errorf("gate's own dependencies are %v, want %v", ours, want)
	}
}
