package integration_test

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
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

// startDevchain starts anvil and prepares it as scripts/run does (go run
// ./integration/cmd/devchain): our token, the funded demo payer, and the env file and key files,
// in a temporary directory it returns with the env file's variables.
func startDevchain(t *testing.T) (dir string, env map[string]string) {
	t.Helper()
	chain := testenv.StartAnvil(t)
	dir = filepath.Join(t.TempDir(), "devchain")
	root, err := testenv.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), commandBound)
	defer cancel()
	dc := exec.CommandContext(ctx, "go", "run", "./integration/cmd/devchain", "-rpc", chain.RPCURL, "-out", dir)
	dc.Dir = root
	if out, err := dc.CombinedOutput(); err != nil {
		t.Fatalf("go run ./integration/cmd/devchain: %v: %s", err, out)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "env"))
	if err != nil {
		t.Fatal(err)
	}
	env = map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		name, value, _ := strings.Cut(line, "=")
		env[name] = value
	}
	return dir, env
}

// demoExample is Caddyfile.example running on a devchain, with its ports moved.
type demoExample struct {
	devchain string
	site     int
	api      int
}

// startExample runs Caddyfile.example, as scripts/run does, on a chain prepared by devchain:
// the env file's variables, and free ports for the four sites.
func startExample(t *testing.T) demoExample {
	t.Helper()
	root, err := testenv.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	example, err := os.ReadFile(filepath.Join(root, "Caddyfile.example"))
	if err != nil {
		t.Fatal(err)
	}
	devchain, env := startDevchain(t)
	d := demoExample{devchain: devchain, site: testenv.FreePort(t), api: testenv.FreePort(t)}
	fac, up, verdict := testenv.FreePort(t), testenv.FreePort(t), testenv.FreePort(t)
	opts := testenv.CaddyOptions{
		Env: []string{
			"X402_DEMO_SITE_PORT=" + strconv.Itoa(d.site),
			"X402_DEMO_API_PORT=" + strconv.Itoa(d.api),
			"X402_DEMO_FACILITATOR_PORT=" + strconv.Itoa(fac),
			"X402_DEMO_UPSTREAM_PORT=" + strconv.Itoa(up),
			"X402_DEMO_VERDICT_PORT=" + strconv.Itoa(verdict),
			"X402_DEMO_ROOT=" + filepath.Join(root, "integration", "demo", "site"),
		},
		WaitPorts: []int{d.site, d.api, fac, up, verdict},
	}
	for name, value := range env {
		opts.Env = append(opts.Env, name+"="+value)
	}
	testenv.StartCaddy(t, string(example), opts)
	return d
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

	devchain, env := startDevchain(t)

	t.Run("caddy adapt needs no environment, and its defaults are the demo's", func(t *testing.T) {
		stdout, stderr, err := runCaddy(t, caddyArgs(t, adapt[0], devchain)...)
		if err != nil {
			t.Fatalf("%s with an empty environment: %v: %s", adapt[0], err, stderr)
		}
		for _, name := range []string{"X402_TOKEN", "X402_PAY_TO"} {
			if value := env[name]; value == "" || !strings.Contains(strings.ToLower(stdout), strings.ToLower(value)) {
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

// payCommands returns the `node integration/scripts/…` commands that Caddyfile.example's usage
// comment and README.md's sh blocks show.
func payCommands(t *testing.T) []string {
	t.Helper()
	const script = "node integration/scripts/"
	root, err := testenv.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	example, err := os.ReadFile(filepath.Join(root, "Caddyfile.example"))
	if err != nil {
		t.Fatal(err)
	}
	var cmds []string
	for _, line := range strings.Split(string(example), "\n") {
		if c, ok := strings.CutPrefix(line, "#"); ok && strings.Contains(c, script) {
			c, _, _ = strings.Cut(c, " #")
			cmds = append(cmds, strings.TrimSpace(c))
		}
	}
	if len(cmds) == 0 {
		t.Fatalf("Caddyfile.example shows no %q command", script)
	}
	readme := readmeCommands(t, script)
	if len(readme) == 0 {
		t.Fatalf("README.md shows no %q command", script)
	}
	return append(cmds, readme...)
}

// TestDocumentedPayCommandsPay runs every `node integration/scripts/pay-*.mjs` command that
// Caddyfile.example and README.md show, as a user pastes it into a shell in the repository
// (bash, an environment with nothing but PATH and HOME, .devchain/ written by devchain), against
// Caddyfile.example on that chain. Only the ports move. Each must pay: status 200.
func TestDocumentedPayCommandsPay(t *testing.T) {
	cmds := payCommands(t)
	ex := startExample(t)
	root, err := testenv.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	// The user's checkout: integration/ holds the scripts and node_modules, .devchain/ the files
	// scripts/run writes.
	repo := t.TempDir()
	for link, target := range map[string]string{"integration": filepath.Join(root, "integration"), ".devchain": ex.devchain} {
		if err := os.Symlink(target, filepath.Join(repo, link)); err != nil {
			t.Fatal(err)
		}
	}
	ports := strings.NewReplacer(
		"127.0.0.1:8080", "127.0.0.1:"+strconv.Itoa(ex.site),
		"127.0.0.1:8081", "127.0.0.1:"+strconv.Itoa(ex.api),
	)
	for _, command := range cmds {
		t.Run(command, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), commandBound)
			defer cancel()
			cmd := exec.CommandContext(ctx, "bash", "-c", ports.Replace(command))
			cmd.Dir = repo
			cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
			var stdout, stderr strings.Builder
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Run(); err != nil {
				t.Fatalf("%v: %s", err, strings.TrimSpace(stderr.String()))
			}
			var out payOutput
			if err := json.Unmarshal([]byte(stdout.String()), &out); err != nil {
				t.Fatalf("printed no JSON: %v: %q", err, stdout.String())
			}
			// /api/tip pays a payee the demo policy does not allow: the verdict refuses it.
			if strings.Contains(command, "/api/tip") {
				if out.Status != http.StatusPaymentRequired || !strings.Contains(out.Body, `"reasonCode":"recipient_not_allowed"`) {
					t.Errorf("status %d, want 402 with reasonCode recipient_not_allowed: %s", out.Status, out.Body)
				}
				return
			}
			if out.Status != http.StatusOK {
				t.Errorf("status %d, want 200: %s", out.Status, out.Body)
			}
		})
	}
}

// TestDocumentedVerdictCommandsRun runs the README's `./caddy verdict` commands against the
// demo's verdict store, with the env file scripts/run writes, while the demo runs: the
// operator reads the policy versions, validates the demo policy and sets it again as version 2.
func TestDocumentedVerdictCommandsRun(t *testing.T) {
	cmds := readmeCommands(t, "./caddy verdict")
	if len(cmds) < 3 {
		t.Fatalf("README.md shows %d `./caddy verdict` commands, want the three of the demo", len(cmds))
	}
	ex := startExample(t)
	raw, err := os.ReadFile(filepath.Join(ex.devchain, "env"))
	if err != nil {
		t.Fatal(err)
	}
	env := strings.Fields(string(raw))
	root, err := testenv.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	outputs := map[string]string{}
	for _, command := range cmds {
		ctx, cancel := context.WithTimeout(context.Background(), commandBound)
		cmd := exec.CommandContext(ctx, testenv.CaddyBinary(t), caddyArgs(t, command, ex.devchain)...)
		cmd.Dir = root
		cmd.Env = append(env, "HOME="+t.TempDir(), "XDG_DATA_HOME="+t.TempDir(), "XDG_CONFIG_HOME="+t.TempDir())
		var stdout, stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		cancel()
		if err != nil {
			t.Fatalf("%s: %v: %s", command, err, stderr.String())
		}
		outputs[strings.Fields(command)[3]] = stdout.String()
	}
	if !strings.HasPrefix(outputs["versions"], "1\t") {
		t.Errorf("policy versions printed %q, want version 1 first", outputs["versions"])
	}
	if !strings.Contains(outputs["validate"], "valid") {
		t.Errorf("policy validate printed %q", outputs["validate"])
	}
	if !strings.Contains(outputs["set"], "version 2") {
		t.Errorf("policy set printed %q, want version 2", outputs["set"])
	}
}

// TestCaddyfileExampleLeavesFaviconFree asks Caddyfile.example's static paywall, unpaid, for
// what a browser fetches on its own: /favicon.ico and /robots.txt are not paid for (the demo
// site has neither, so file_server answers 404), while every other path still answers 402,
// including ones that only look like the free paths, or 400 when it is ambiguous.
func TestCaddyfileExampleLeavesFaviconFree(t *testing.T) {
	ex := startExample(t)
	base := "http://127.0.0.1:" + strconv.Itoa(ex.site)
	for _, tc := range []struct {
		name    string
		rawPath string
		want    int
	}{
		{"the page costs", "/", http.StatusPaymentRequired},
		{"a file costs", "/data.json", http.StatusPaymentRequired},
		{"the favicon is free", "/favicon.ico", http.StatusNotFound},
		{"robots.txt is free", "/robots.txt", http.StatusNotFound},
		{"a path below the favicon costs", "/favicon.ico/index.html", http.StatusPaymentRequired},
		{"a path that climbs out of the favicon is refused (docs/gate.md#ambiguous-paths)", "/favicon.ico/../data.json", http.StatusBadRequest},
		{"an escaped path to the page costs", "/%69ndex.html", http.StatusPaymentRequired},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := do(t, http.MethodGet, base+tc.rawPath, tc.rawPath, nil)
			if err != nil {
				t.Fatal(err)
			}
			if r.Status != tc.want {
				t.Errorf("GET %s: status %d, want %d", tc.rawPath, r.Status, tc.want)
			}
		})
	}
}
