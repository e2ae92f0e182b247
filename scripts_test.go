package x402gate

import (
	"os/exec"
	"strings"
	"testing"
)

// TestScriptsTestHelp: `scripts/test --help` prints our usage and exits 0, without
// running go vet or any test first.
func TestScriptsTestHelp(t *testing.T) {
	for _, arg := range []string{"--help", "-h"} {
		out, err := exec.Command("bash", "scripts/test", arg).CombinedOutput()
		if err != nil {
			t.Fatalf("scripts/test %s: %v\n%s", arg, err, out)
		}
		if !strings.HasPrefix(string(out), "usage: scripts/test") || !strings.Contains(string(out), "go help testflag") {
			t.Errorf("scripts/test %s printed:\n%s", arg, out)
		}
	}
}
