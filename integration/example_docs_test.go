package integration_test

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/x402gate/x402gate/internal/sqldb"
	"github.com/x402gate/x402gate/internal/testenv"
	"github.com/x402gate/x402gate/verdictserver"
	"github.com/x402gate/x402gate/verdictserver/store"
)

// commandBound bounds one command a docs test runs; it only turns a hang into a failure.
const commandBound = 2 * time.Minute

// readmeCommands returns the commands of README.md's ```sh blocks whose text contains want,
// with backslash-continued lines joined and comments dropped. A ```sh script block is one
// command: its lines run together, in one shell.
func readmeCommands(t *testing.T, want string) []string {
	t.Helper()
	var cmds []string
	for _, ex := range readmeExamples(t) {
		if strings.Contains(ex.command, want) {
			cmds = append(cmds, ex.command)
		}
	}
	return cmds
}

// readmeExample is one command of README.md and the ```json block that shows its output: the
// first one after the command's block and before the next ```sh block ("" when none).
type readmeExample struct {
	command, output string
}

// readmeExamples returns every command of README.md's ```sh blocks, in order, as
// readmeCommands describes them, each with the output the README shows for it.
func readmeExamples(t *testing.T) []readmeExample {
	t.Helper()
	root, err := testenv.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var (
		exs            []readmeExample
		block, cur     string // the fence's info string inside a block; a continued line
		script, output []string
		pending        []int // examples of the last ```sh block, waiting for their output
	)
	for _, line := range strings.Split(string(readme), "\n") {
		if info, ok := strings.CutPrefix(line, "```"); ok {
			switch {
			case block == "" && strings.HasPrefix(info, "sh"):
				block, pending = info, nil
			case block == "" && info != "":
				block = info
			case block == "sh script":
				exs = append(exs, readmeExample{command: strings.Join(script, "\n")})
				pending, script = []int{len(exs) - 1}, nil
				block = ""
			case block == "json":
				for _, i := range pending {
					exs[i].output = strings.Join(output, "\n")
				}
				pending, output, block = nil, nil, ""
			default:
				block = ""
			}
			continue
		}
		switch block {
		case "json":
			output = append(output, line)
			continue
		case "sh", "sh script":
		default:
			continue
		}
		if i := strings.Index(line, " #"); i >= 0 {
			line = line[:i]
		}
		line = strings.TrimSpace(line)
		if block == "sh script" {
			if line != "" {
				script = append(script, line)
			}
			continue
		}
		if strings.HasSuffix(line, `\`) {
			cur += strings.TrimSuffix(line, `\`)
			continue
		}
		cmd := strings.Join(strings.Fields(cur+line), " ")
		cur = ""
		if cmd != "" {
			exs = append(exs, readmeExample{command: cmd})
			pending = append(pending, len(exs)-1)
		}
	}
	return exs
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
// the $NAME variables of env expanded as the README's shell does, and
// .devchain/ (what scripts/run writes) replaced by devchain.
func caddyArgs(t *testing.T, command, devchain string, env ...string) []string {
	t.Helper()
	vars := map[string]string{}
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok {
			vars[k] = v
		}
	}
	f := strings.Fields(os.Expand(command, func(k string) string { return vars[k] }))
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
	verdict  int
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
	fac, up := testenv.FreePort(t), testenv.FreePort(t)
	d.verdict = testenv.FreePort(t)
	verdict := d.verdict
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
	outputs := map[string]string{}
	for _, ex := range readmeExamples(t) {
		outputs[ex.command] = ex.output
	}
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
			if shown, ok := outputs[command]; ok && shown != "" {
				checkShownOutput(t, shown, stdout.String())
			}
			// A call on the pass, or signed in with sign-in-with-x, comes in without paying.
			if strings.Contains(command, "X402_PASS=") || strings.Contains(command, "X402_SIWX=1") {
				if out.Status != http.StatusOK || out.PaymentResponseHeader != nil {
					t.Errorf("status %d, paymentResponseHeader %v: want 200 without a payment: %s", out.Status, out.PaymentResponseHeader, out.Body)
				}
				return
			}
			// The site on :8080 sells a pass: its paid answer carries it, and its expiry.
			if strings.Contains(command, "127.0.0.1:8080") && out.Status == http.StatusOK && (out.Pass == "" || out.PassExpires == "") {
				t.Errorf("a paid answer of the site printed no pass and expiry")
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
		command = strings.ReplaceAll(command, "127.0.0.1:8083", "127.0.0.1:"+strconv.Itoa(ex.verdict))
		cmd := exec.CommandContext(ctx, testenv.CaddyBinary(t), caddyArgs(t, command, ex.devchain, env...)...)
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
	// The operator's loop: a tip outside the policy, submitted as the agent, is refused with
	// its reason, and the agent's list shows it.
	if !strings.Contains(outputs["submit"], "verdict       rejected (recipient_not_allowed)") || !strings.Contains(outputs["submit"], "recipients.allowed") {
		t.Errorf("tx submit printed %q, want the rejection and its reason", outputs["submit"])
	}
	if !strings.Contains(outputs["list"], "rejected\trecipient_not_allowed") {
		t.Errorf("tx list printed %q, want the rejected tip", outputs["list"])
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

// errorField finds the "error" member of a 402 body, as the README shows it escaped in the
// output's "body" string or as the body holds it.
var errorField = regexp.MustCompile(`\\?"error\\?":\\?"([a-z_]+)`)

// checkShownOutput compares what a pay script printed with the output README.md shows for
// it, where the README elides long values with "…": the same members, the same status,
// null where the README shows null, and the same x402 "error" in the body.
func checkShownOutput(t *testing.T, shown, printed string) {
	t.Helper()
	var want, got map[string]json.RawMessage
	if err := json.Unmarshal([]byte(shown), &want); err != nil {
		t.Fatalf("README shows output that is not JSON: %v\n%s", err, shown)
	}
	if err := json.Unmarshal([]byte(printed), &got); err != nil {
		t.Fatalf("printed no JSON: %v", err)
	}
	for k, v := range want {
		g, ok := got[k]
		switch {
		case !ok:
			t.Errorf("README shows %q, which the script does not print", k)
		case k == "status" && string(g) != string(v):
			t.Errorf("README shows status %s, the script printed %s", v, g)
		case string(v) == "null" && string(g) != "null":
			t.Errorf("README shows %q null, the script printed %.60s", k, g)
		case k == "body":
			if m := errorField.FindStringSubmatch(string(v)); m != nil {
				if n := errorField.FindStringSubmatch(string(g)); n == nil || n[1] != m[1] {
					t.Errorf("README shows the body's error %q, the script printed %.200s", m[1], g)
				}
			}
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("the script prints %q, which README does not show", k)
		}
	}
}

// TestDevchainKeepsTheVerdictStore: scripts/run's devchain, run again on a fresh chain, keeps
// the verdict store an operator worked on (an agent they added, a policy version they set,
// the demo key), says so, and still leaves the demo ready: the key file holds a key the
// store takes.
func TestDevchainKeepsTheVerdictStore(t *testing.T) {
	dir, _ := startDevchain(t)
	ctx := context.Background()
	dbPath := filepath.Join(dir, "verdict.db")
	db, err := sqldb.OpenSQLite(ctx, dbPath)
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	op := verdictserver.NewOperator(st)
	if _, err := op.CreateAgent(ctx, "operator-made"); err != nil {
		t.Fatal(err)
	}
	demo, err := st.AgentByName(ctx, "demo")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join(dir, "policy.json"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := op.SetPolicy(ctx, demo.ID, doc, "operator"); err != nil {
		t.Fatal(err)
	}
	st.Close()
	key, err := os.ReadFile(filepath.Join(dir, "verdict.key"))
	if err != nil {
		t.Fatal(err)
	}

	chain := testenv.StartAnvil(t)
	root, err := testenv.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	dc := exec.Command("go", "run", "./integration/cmd/devchain", "-rpc", chain.RPCURL, "-out", dir)
	dc.Dir = root
	out, err := dc.CombinedOutput()
	if err != nil {
		t.Fatalf("devchain again: %v: %s", err, out)
	}
	if !strings.Contains(string(out), "kept from an earlier run") || !strings.Contains(string(out), "policy version 2") {
		t.Errorf("devchain printed %q, want it to say the store and policy version 2 were kept", out)
	}
	if again, _ := os.ReadFile(filepath.Join(dir, "verdict.key")); string(again) != string(key) {
		t.Errorf("the demo key file changed although the store still takes its key")
	}
	db, err = sqldb.OpenSQLite(ctx, dbPath)
	if err != nil {
		t.Fatal(err)
	}
	st, err = store.Open(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.AgentByName(ctx, "operator-made"); err != nil {
		t.Errorf("the operator's agent is gone: %v", err)
	}
	if p, err := st.ActivePolicy(ctx, demo.ID); err != nil || p.Version != 2 {
		t.Errorf("active policy %d, %v; want the operator's version 2", p.Version, err)
	}
}
