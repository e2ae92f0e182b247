package integration_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/x402gate/x402gate/internal/testenv"
)

// commandBound bounds one command a docs test runs; it only turns a hang into a failure.
const commandBound = 2 * time.Minute

// readmeCommands returns the commands of README.md's ```sh blocks whose text contains want,
// with backslash-continued lines joined and comments dropped.
func readmeCommands(t *testing.T, want string) []string {
	t.Helper()
	root, err := testenv.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var cmds []string
	inSh, cur := false, ""
	for _, line := range strings.Split(string(readme), "\n") {
		switch {
		case strings.HasPrefix(line, "```sh"):
			inSh = true
			continue
		case strings.HasPrefix(line, "```"):
			inSh = false
			continue
		case !inSh:
			continue
		}
		if i := strings.Index(line, " #"); i >= 0 {
			line = line[:i]
		}
		line = strings.TrimSpace(line)
		if strings.HasSuffix(line, `\`) {
			cur += strings.TrimSuffix(line, `\`)
			continue
		}
		cmd := strings.Join(strings.Fields(cur+line), " ")
		cur = ""
		if strings.Contains(cmd, want) {
			cmds = append(cmds, cmd)
		}
	}
	return cmds
}

// runCaddy runs the built Caddy with args in the module root and an environment that holds
// nothing but temporary HOME and XDG directories, and returns its stdout and stderr.
func runCaddy(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	root, rerr := testenv.ModuleRoot()
	if rerr != nil {
		t.Fatal(rerr)
	}
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), commandBound)
	defer cancel()
	cmd := exec.CommandContext(ctx, testenv.CaddyBinary(t), args...)
	cmd.Dir = root
	cmd.Env = []string{
		"HOME=" + dir,
		"XDG_CONFIG_HOME=" + filepath.Join(dir, "config"),
		"XDG_DATA_HOME=" + filepath.Join(dir, "data"),
	}
	var out, errOut strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	return out.String(), errOut.String(), err
}

// caddyArgs turns a README command `./caddy <args>` into the built Caddy's arguments, with
// .devchain/ (what scripts/run writes) replaced by devchain.
func caddyArgs(t *testing.T, command, devchain string) []string {
	t.Helper()
	f := strings.Fields(command)
	if len(f) == 0 || f[0] != "./caddy" {
		t.Fatalf("README command %q does not run ./caddy", command)
	}
	args := f[1:]
	for i, a := range args {
		args[i] = strings.ReplaceAll(a, ".devchain/", devchain+"/")
	}
	return args
}

// TestCaddyfileExampleAdaptsAndValidatesAsTheReadmeSays runs the README's `caddy adapt` and
// `caddy validate` commands for Caddyfile.example. adapt gets no environment at all: the
// example's defaults must make it a valid Caddyfile, and they are what scripts/run sets on a
// fresh chain (devchain's token and payee). validate provisions the bundled facilitator, which
// reads its key file and asks the RPC for the chain id: it gets the env file devchain writes,
// with that chain running, as the README says.
func TestCaddyfileExampleAdaptsAndValidatesAsTheReadmeSays(t *testing.T) {
	adapt := readmeCommands(t, "./caddy adapt --config Caddyfile.example")
	validate := readmeCommands(t, "./caddy validate --envfile .devchain/env --config Caddyfile.example")
	if len(adapt) != 1 || len(validate) != 1 {
		t.Fatalf("README shows %d `./caddy adapt … Caddyfile.example` and %d `./caddy validate --envfile .devchain/env …` commands, want one of each", len(adapt), len(validate))
	}

	chain := testenv.StartAnvil(t)
	devchain := filepath.Join(t.TempDir(), "devchain")
	root, err := testenv.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), commandBound)
	defer cancel()
	dc := exec.CommandContext(ctx, "go", "run", "./integration/cmd/devchain", "-rpc", chain.RPCURL, "-out", devchain)
	dc.Dir = root
	if out, err := dc.CombinedOutput(); err != nil {
		t.Fatalf("go run ./integration/cmd/devchain: %v: %s", err, out)
	}
	env, err := os.ReadFile(filepath.Join(devchain, "env"))
	if err != nil {
		t.Fatal(err)
	}

	t.Run("caddy adapt needs no environment, and its defaults are the demo's", func(t *testing.T) {
		stdout, stderr, err := runCaddy(t, caddyArgs(t, adapt[0], devchain)...)
		if err != nil {
			t.Fatalf("%s with an empty environment: %v: %s", adapt[0], err, stderr)
		}
		for _, line := range strings.Split(string(env), "\n") {
			name, value, _ := strings.Cut(line, "=")
			if name != "X402_TOKEN" && name != "X402_PAY_TO" {
				continue
			}
			if !strings.Contains(strings.ToLower(stdout), strings.ToLower(value)) {
				t.Errorf("the adapted example lacks %s=%s, what devchain writes on a fresh chain", name, value)
			}
		}
	})
	t.Run("caddy validate with the env file of scripts/run and its chain running", func(t *testing.T) {
		if _, stderr, err := runCaddy(t, caddyArgs(t, validate[0], devchain)...); err != nil {
			t.Fatalf("%s: %v: %s", validate[0], err, stderr)
		}
	})
}
