package integration_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/x402gate/x402gate/internal/testenv"
)

// TestVerdictCommandsNeverCreateAStore: `caddy verdict` run where the config's store does not
// exist (here: from another directory, with a relative store path) refuses, names the path
// it looked at, and leaves no file behind; with the store there, it names the store it
// opened on stderr.
func TestVerdictCommandsNeverCreateAStore(t *testing.T) {
	dir := t.TempDir()
	caddyfile := filepath.Join(dir, "Caddyfile")
	if err := os.WriteFile(caddyfile, []byte("{\n\tverdict {\n\t\tstore sqlite state/verdict.db\n\t}\n}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	elsewhere := t.TempDir()
	run := func(wd string) (stdout, stderr string, err error) {
		cmd := exec.Command(testenv.CaddyBinary(t), "verdict", "agent", "list", "--config", caddyfile, "--adapter", "caddyfile")
		cmd.Dir = wd
		cmd.Env = []string{"HOME=" + dir, "XDG_DATA_HOME=" + filepath.Join(dir, "data"), "XDG_CONFIG_HOME=" + filepath.Join(dir, "config")}
		var o, e bytes.Buffer
		cmd.Stdout, cmd.Stderr = &o, &e
		err = cmd.Run()
		return o.String(), e.String(), err
	}
	_, stderr, err := run(elsewhere)
	want := filepath.Join(elsewhere, "state", "verdict.db")
	if err == nil || !strings.Contains(stderr, "no verdict store at "+want) {
		t.Fatalf("err %v, stderr %q: want a refusal naming %s", err, stderr, want)
	}
	if _, err := os.Stat(filepath.Join(elsewhere, "state")); !os.IsNotExist(err) {
		t.Errorf("the command created %s (stat: %v)", filepath.Join(elsewhere, "state"), err)
	}

	initVerdictStore(t, filepath.Join(dir, "state", "verdict.db"))
	if _, stderr, err = run(dir); err != nil || !strings.Contains(stderr, "verdict store: "+filepath.Join(dir, "state", "verdict.db")) {
		t.Errorf("err %v, stderr %q: want the store it opened named", err, stderr)
	}
}
