package gate

import (
	"os/exec"
	"strings"
	"testing"
)

// TestGateLinksNoHeavyDependency: the gate is the framework-free part a plain net/http
// server embeds, so it imports x402 and nothing heavier: no database driver, no Redis
// client, no chain client and no Caddy (docs/gate.md#packages). Those come in through
// the packages that need them (facilitator, gate/redisretry, caddymodule). Of ours it
// imports x402 and its own subpackages (gate/credit, gate/discovery, gate/payledger, …),
// never their test doubles (gate/gatetest). Its payment ledger's contract,
// gate/payledger, imports only the standard library.
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
	for _, d := range deps {
		for _, f := range forbidden {
			if strings.HasPrefix(d, f) {
				t.Errorf("gate links %s", d)
			}
		}
		if ourDependency(d) {
			t.Errorf("gate links %s: of ours only x402 and gate's subpackages", d)
		}
	}
}

// ourDependency reports whether d is a package of ours that gate may not import: all but
// x402, gate and gate's subpackages other than gatetest.
func ourDependency(d string) bool {
	const mod = "github.com/x402gate/x402gate/"
	rest, ok := strings.CutPrefix(d, mod)
	switch {
	case !ok || rest == "x402" || rest == "gate":
		return false
	case rest == "gate/gatetest" || strings.HasPrefix(rest, "gate/gatetest/"):
		return true
	}
	return !strings.HasPrefix(rest, "gate/")
}
