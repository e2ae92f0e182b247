package testenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// npmInstallHint is the command that installs the npm packages the tests use.
const npmInstallHint = "cd integration && npm ci"

// nodeScriptTimeout bounds one RunNode call; a script that hangs fails the test instead.
const nodeScriptTimeout = 2 * time.Minute

// IntegrationDir returns the absolute path of the module's integration/ directory, which
// holds package.json, node_modules and the Node scripts.
func IntegrationDir() (string, error) {
	root, err := ModuleRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "integration"), nil
}

// AnvilPath returns the anvil binary to run: $ANVIL when set, else the native binary that the
// npm package @foundry-rs/anvil-linux-amd64 installed under integration/node_modules (or its node wrapper
// node_modules/.bin/anvil). The error names the install command.
func AnvilPath() (string, error) {
	if p := os.Getenv("ANVIL"); p != "" {
		if !isExecutable(p) {
			return "", fmt.Errorf("$ANVIL=%s is not an executable file", p)
		}
		return p, nil
	}
	dir, err := IntegrationDir()
	if err != nil {
		return "", err
	}
	arch := runtime.GOARCH
	candidates := []string{
		// The platform package holds the real binary; running it directly spares a node process.
		filepath.Join(dir, "node_modules", "@foundry-rs", "anvil-"+runtime.GOOS+"-"+arch, "bin", "anvil"),
		filepath.Join(dir, "node_modules", ".bin", "anvil"),
	}
	for _, p := range candidates {
		if isExecutable(p) {
			return p, nil
		}
	}
	return "", fmt.Errorf("anvil not found under %s (npm package @foundry-rs/anvil-linux-amd64); run: %s, or set $ANVIL",
		filepath.Join(dir, "node_modules"), npmInstallHint)
}

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}

// RunNode runs `node <script>` in the integration directory with stdin as its standard input
// and returns its standard output. env entries ("NAME=value") are added to the environment;
// pass secrets such as private keys this way, never as arguments, so they stay out of process
// listings. A script that fails or runs longer than two minutes fails the test; its stderr is
// quoted in the failure, so scripts must never print a secret.
func RunNode(t testing.TB, script string, env []string, stdin []byte, args ...string) []byte {
	t.Helper()
	out, err := RunNodeContext(context.Background(), script, env, stdin, args...)
	if err != nil {
		t.Fatalf("%v", err)
	}
	return out
}

// RunNodeContext is RunNode returning an error instead of failing a test, for scripts that are
// expected to fail. The error quotes the script's stderr.
func RunNodeContext(ctx context.Context, script string, env []string, stdin []byte, args ...string) ([]byte, error) {
	dir, err := IntegrationDir()
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules")); err != nil {
		return nil, fmt.Errorf("integration/node_modules is missing; run: %s", npmInstallHint)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		return nil, fmt.Errorf("node is not on PATH (Node.js 20 or newer runs the x402 client scripts): %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, nodeScriptTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, append([]string{script}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdin = bytes.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			err = fmt.Errorf("%w (after %s)", err, nodeScriptTimeout)
		}
		return stdout.Bytes(), fmt.Errorf("node %s: %w: %s", script, err, strings.TrimSpace(stderr.String()))
	}
	return stdout.Bytes(), nil
}
