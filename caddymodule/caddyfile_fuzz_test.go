package caddymodule_test

import (
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"

	"github.com/x402gate/x402gate/caddymodule/logredact"
	"github.com/x402gate/x402gate/caddymodule/paygate"
	"github.com/x402gate/x402gate/caddymodule/verdictapp"
)

// The Caddyfile fuzzers feed any text to each parser of ours: the x402 directive (accept,
// discovery, guardian and pass blocks), the x402 and verdict global options, verdict_api,
// x402_facilitator and the x402_redact encoder, and a whole site through Caddy's adapter.
// Seeds: testdata/fuzz/Fuzz*/ (the blocks of testdata/*.caddyfiletest, and odd cases).
// Each checks, for any input, that the parser returns (no panic, no hang; the fuzzing
// engine reports both) and that:
//   - an error carries its Caddyfile line, and names what it is about: it starts with the
//     option ("api_key: is required") or quotes one of the input's words (the option, its
//     block, or the value it refuses) (docs/caddy.md#errors);
//   - an error never quotes the value of a secret option (docs/caddy.md#secrets);
//   - a config that parses survives a JSON round trip unchanged, as the adapted config
//     Caddy loads.

// payee is a pay_to address of the seeds.
const payee = "0x1111111111111111111111111111111111111111"

// fuzzFile is the file name the fuzzers tokenize under, so that errors say where.
const fuzzFile = "Caddyfile"

var errLine = regexp.MustCompile(`, at ` + fuzzFile + `:(\d+)`)

// errOption is an error that starts with the option it is about, as a missing option's does
// ("api_key: is required…", "accept 2/network: …").
var errOption = regexp.MustCompile(`^([a-z0-9_.-]+ \d+/)?[a-z][a-z0-9_]*(/[a-z0-9_]+)?: `)

// secretOptions take a secret (a placeholder, or a literal that is refused).
var secretOptions = map[string]bool{
	"signer_key": true, "api_key": true, "verdict_key": true, "facilitator_key": true,
	"pass_key": true, "admin_key": true, "rpc": true,
}

// secretValue reports whether toks[i] is the value of a secret option: the argument of a
// key option, or the URL or DSN of a store, journal or database (its second argument, or its
// first when that is not a plain type word). A placeholder is no secret.
func secretValue(toks []caddyfile.Token, i int) bool {
	tok := toks[i]
	if len(tok.Text) < 12 || strings.HasPrefix(tok.Text, "{") {
		return false
	}
	// an option is the first word of its line (in `facilitator rpc …`, rpc is a name)
	startsLine := func(j int) bool { return j == 0 || toks[j-1].Line != toks[j].Line }
	prev := toks[i-1]
	if prev.Line != tok.Line {
		return false
	}
	if startsLine(i - 1) {
		switch prev.Text {
		case "store", "journal", "database":
			return strings.ContainsAny(tok.Text, ":@/=")
		}
		if secretOptions[prev.Text] {
			return true
		}
	}
	if i > 2 && toks[i-2].Line == tok.Line && startsLine(i-2) {
		switch toks[i-2].Text {
		case "store", "journal", "database":
			return true
		}
	}
	return false
}

// fuzzTokens tokenizes input as Caddy does; ok is false for text that is no Caddyfile.
func fuzzTokens(input string) ([]caddyfile.Token, bool) {
	toks, err := caddyfile.Tokenize([]byte(input), fuzzFile)
	return toks, err == nil && len(toks) > 0
}

// checkParseError holds an error of a parser to the rules above.
func checkParseError(t *testing.T, toks []caddyfile.Token, err error) {
	t.Helper()
	msg := err.Error()
	m := errLine.FindStringSubmatch(msg)
	if m == nil {
		t.Fatalf("error without its Caddyfile line: %q", msg)
	}
	line, _ := strconv.Atoi(m[1])
	if last := toks[len(toks)-1].Line; line < 1 || line > last {
		t.Fatalf("error names line %d of %d: %q", line, last, msg)
	}
	named := errOption.MatchString(msg)
	for i, tok := range toks {
		// a brace or an empty word ("") counts only quoted (`subdirective "{"`, `after '}'`)
		if tok.Text != "" && tok.Text != "{" && tok.Text != "}" && strings.Contains(msg, tok.Text) ||
			strings.Contains(msg, strconv.Quote(tok.Text)) || strings.Contains(msg, "'"+tok.Text+"'") {
			named = true
		}
		if i > 1 && secretValue(toks, i) && strings.Contains(msg, tok.Text) {
			t.Fatalf("the error quotes the value of %s: %q", toks[i-1].Text, msg)
		}
	}
	if !named {
		t.Fatalf("the error names nothing of the input: %q", msg)
	}
}

// checkRoundTrip holds a parsed config to a JSON round trip.
func checkRoundTrip[T any](t *testing.T, v *T) {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("a parsed config does not marshal: %v", err)
	}
	var again T
	if err := json.Unmarshal(b, &again); err != nil {
		t.Fatalf("a parsed config does not unmarshal: %v: %s", err, b)
	}
	if b2, _ := json.Marshal(&again); string(b2) != string(b) {
		t.Fatalf("round trip changed the config:\n%s\n%s", b, b2)
	}
}

// fuzzUnmarshal runs one UnmarshalCaddyfile on input and checks its outcome. Caddy hands a
// parser its tokens from its own name on, so an input that starts with another word is not
// one a parser can be given.
func fuzzUnmarshal[T any](t *testing.T, name, input string, parse func(*T, *caddyfile.Dispenser) error) {
	toks, ok := fuzzTokens(input)
	if !ok || toks[0].Text != name {
		return
	}
	v := new(T)
	if err := parse(v, caddyfile.NewDispenser(toks)); err != nil {
		checkParseError(t, toks, err)
		return
	}
	checkRoundTrip(t, v)
}

func FuzzX402Directive(f *testing.F) {
	f.Add("x402 {\n\tprice 0.01 USDC\n\tpay_to " + payee + "\n\tnetwork base-sepolia\n}")
	f.Add("x402 {\n\tpay_to " + payee + "\n\taccept {\n\t\tnetwork base\n\t\tprice 1 USDC\n\t}\n\taccept {\n\t}\n}")
	f.Fuzz(func(t *testing.T, input string) {
		fuzzUnmarshal(t, "x402", input, (*paygate.Handler).UnmarshalCaddyfile)
	})
}

func FuzzX402GlobalOption(f *testing.F) {
	f.Add("x402 {\n\tfacilitator {\n\t\tnetwork base-sepolia {\n\t\t\trpc {env.RPC}\n\t\t}\n\t\tsigner_key {env.K}\n\t}\n}")
	f.Fuzz(func(t *testing.T, input string) {
		fuzzUnmarshal(t, "x402", input, (*paygate.App).UnmarshalCaddyfile)
	})
}

func FuzzVerdictGlobalOption(f *testing.F) {
	f.Add("verdict {\n\tdatabase sqlite /tmp/v.db\n\tadmin_key {env.ADMIN}\n}")
	f.Fuzz(func(t *testing.T, input string) {
		fuzzUnmarshal(t, "verdict", input, (*verdictapp.VerdictApp).UnmarshalCaddyfile)
	})
}

func FuzzVerdictAPIDirective(f *testing.F) {
	f.Add("verdict_api")
	f.Add("verdict_api {\n}")
	f.Fuzz(func(t *testing.T, input string) {
		fuzzUnmarshal(t, "verdict_api", input, (*verdictapp.VerdictAPI).UnmarshalCaddyfile)
	})
}

func FuzzFacilitatorDirective(f *testing.F) {
	f.Add("x402_facilitator {\n\tfacilitator main\n\tapi_key {env.K}\n\thealth_detail on\n\tstrip_prefix /f\n}")
	f.Fuzz(func(t *testing.T, input string) {
		fuzzUnmarshal(t, "x402_facilitator", input, (*paygate.FacilitatorHandler).UnmarshalCaddyfile)
	})
}

func FuzzRedactEncoder(f *testing.F) {
	f.Add("x402_redact json")
	f.Add("x402_redact console {\n\ttime_format iso8601\n}")
	f.Fuzz(func(t *testing.T, input string) {
		fuzzUnmarshal(t, "x402_redact", input, (*logredact.RedactEncoder).UnmarshalCaddyfile)
	})
}

// FuzzAdaptSite adapts a whole Caddyfile through Caddy's own adapter, so the httpcaddyfile
// parse functions run as in `caddy adapt` (the directive reads the global options it
// depends on). The input must carry an x402 word; `import` is left out (it reads files,
// which is Caddy's parser, not ours).
func FuzzAdaptSite(f *testing.F) {
	f.Add("{\n\tx402 {\n\t\tfacilitator {\n\t\t\tnetwork base-sepolia {\n\t\t\t\trpc {env.RPC}\n\t\t\t}\n\t\t\tsigner_key {env.K}\n\t\t\tguardian_mode required\n\t\t}\n\t}\n}\n:8080 {\n\tx402 /api/* {\n\t\tprice 0.01 USDC\n\t\tpay_to " + payee + "\n\t\tnetwork base-sepolia\n\t}\n\trespond ok\n}\n")
	adapter := caddyfile.Adapter{ServerType: httpcaddyfile.ServerType{}}
	f.Fuzz(func(t *testing.T, input string) {
		toks, ok := fuzzTokens(input)
		if !ok || !strings.Contains(input, "x402") {
			return
		}
		for _, tok := range toks {
			if tok.Text == "import" {
				return
			}
		}
		out, _, err := adapter.Adapt([]byte(input), map[string]any{"filename": fuzzFile})
		if err != nil {
			return // Caddy's own errors have their own form; ours are held to it above
		}
		var cfg map[string]any
		if err := json.Unmarshal(out, &cfg); err != nil {
			t.Fatalf("adapted config is not JSON: %v", err)
		}
	})
}

// TestSchemaFileIsARegularFile: a discovery schema that names a device fails adapt at once,
// with the option's line; /dev/zero states no size and used to be read for ever (found by
// FuzzX402Directive's seed corpus).
func TestSchemaFileIsARegularFile(t *testing.T) {
	for _, dev := range []string{"/dev/zero", "/dev/null", t.TempDir()} {
		var h paygate.Handler
		err := h.UnmarshalCaddyfile(caddyfile.NewTestDispenser("x402 {\n\tdiscovery {\n\t\tinput_schema " + dev + "\n\t}\n}"))
		if err == nil || !strings.Contains(err.Error(), dev) || !strings.Contains(err.Error(), "Caddyfile:3") && !strings.Contains(err.Error(), "Testfile:3") {
			t.Errorf("input_schema %s: error %v, want one naming the file and line 3", dev, err)
		}
	}
}

// TestATypelessDSNIsNotEchoed: a store or journal written as its URL or DSN, without the type
// in front, and a verdict rpc URL without its chain id or in its place, are refused without
// quoting them, since they may hold a password or key (found by FuzzVerdictGlobalOption); an
// unknown plain word is still quoted.
func TestATypelessDSNIsNotEchoed(t *testing.T) {
	const pw = "hunter2-canary-pw"
	for _, c := range []struct {
		input string
		parse func(*caddyfile.Dispenser) error
		want  string
	}{
		{"verdict {\n\tstore postgres://verdict:" + pw + "@db/verdict\n}", func(d *caddyfile.Dispenser) error { return new(verdictapp.VerdictApp).UnmarshalCaddyfile(d) }, "store wants a type first"},
		{"x402 {\n\tfacilitator {\n\t\tjournal postgres://x402:" + pw + "@db/x402\n\t}\n}", func(d *caddyfile.Dispenser) error { return new(paygate.App).UnmarshalCaddyfile(d) }, "journal wants a type first"},
		{"x402 {\n\tfacilitator {\n\t\tstore redis://:" + pw + "@cache:6379\n\t}\n}", func(d *caddyfile.Dispenser) error { return new(paygate.App).UnmarshalCaddyfile(d) }, "store wants a type first"},
		{"verdict {\n\trpc https://rpc.example/v3/" + pw + "\n}", func(d *caddyfile.Dispenser) error { return new(verdictapp.VerdictApp).UnmarshalCaddyfile(d) }, "rpc wants <chain id> <url placeholder>"},
		{"verdict {\n\trpc https://rpc.example/v3/" + pw + " 8453\n}", func(d *caddyfile.Dispenser) error { return new(verdictapp.VerdictApp).UnmarshalCaddyfile(d) }, "the chain id comes first"},
		{"verdict {\n\tstore mysql x\n}", func(d *caddyfile.Dispenser) error { return new(verdictapp.VerdictApp).UnmarshalCaddyfile(d) }, `unknown store "mysql"`},
		// A wrong number of values names the option, never the word it stopped at, which can be
		// the secret itself (FuzzX402GlobalOption found `journal 0 <value>` in a network block,
		// whose error quoted the value).
		{"x402 {\n\tfacilitator {\n\t\tjournal postgres postgres://x402:" + pw + "@db/x402 extra\n\t}\n}", func(d *caddyfile.Dispenser) error { return new(paygate.App).UnmarshalCaddyfile(d) }, "wrong number of values for journal"},
		{"x402 {\n\tfacilitator {\n\t\tnetwork base {\n\t\t\trpc https://rpc.example/v3/" + pw + " extra\n\t\t}\n\t}\n}", func(d *caddyfile.Dispenser) error { return new(paygate.App).UnmarshalCaddyfile(d) }, "wrong number of values for rpc"},
		{"x402 {\n\tfacilitator {\n\t\tnetwork base {\n\t\t\tjournal postgres postgres://x402:" + pw + "@db/x402\n\t\t}\n\t}\n}", func(d *caddyfile.Dispenser) error { return new(paygate.App).UnmarshalCaddyfile(d) }, "wrong number of values for journal"},
		{"x402_facilitator {\n\tapi_key {env.K} " + pw + "\n}", func(d *caddyfile.Dispenser) error { return new(paygate.FacilitatorHandler).UnmarshalCaddyfile(d) }, "wrong number of values for api_key"},
		{"verdict {\n\tstore postgres postgres://verdict:" + pw + "@db/verdict extra\n}", func(d *caddyfile.Dispenser) error { return new(verdictapp.VerdictApp).UnmarshalCaddyfile(d) }, "wrong number of values for store"},
	} {
		err := c.parse(caddyfile.NewTestDispenser(c.input))
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), pw) {
			t.Errorf("%q: error %v, want one containing %q and no password", c.input, err, c.want)
		}
	}
}

// FuzzLogDirective adapts a site whose log block is the input: whatever Caddy accepts,
// no access log is left without an encoder, so none falls back to Caddy's plain one
// (docs/caddy.md#secrets).
func FuzzLogDirective(f *testing.F) {
	for _, seed := range []string{"log", "log named", "log {\n\toutput stderr\n}", "log {\n\tformat json\n}",
		"log {\n\tformat console\n\tlevel INFO\n}", "log {\n\tformat filter {\n\t\trequest>uri delete\n\t}\n}",
		"log {\n\toutput file /tmp/x {\n\t\troll_keep 3\n\t}\n}", "log {\n\tformat x402_redact json\n}"} {
		f.Add(seed)
	}
	adapter := caddyfile.Adapter{ServerType: httpcaddyfile.ServerType{}}
	f.Fuzz(func(t *testing.T, input string) {
		toks, ok := fuzzTokens(input)
		if !ok || len(toks) == 0 || toks[0].Text != "log" {
			return
		}
		for _, tok := range toks {
			if tok.Text == "import" {
				return
			}
		}
		out, _, err := adapter.Adapt([]byte(":8080 {\n"+input+"\nrespond ok\n}\n"), map[string]any{"filename": fuzzFile})
		if err != nil {
			return
		}
		var cfg struct {
			Logging struct {
				Logs map[string]struct {
					Encoder map[string]any `json:"encoder"`
					Include []string       `json:"include"`
				} `json:"logs"`
			} `json:"logging"`
		}
		if err := json.Unmarshal(out, &cfg); err != nil {
			t.Fatalf("adapted config is not JSON: %v", err)
		}
		for name, l := range cfg.Logging.Logs {
			if len(l.Include) > 0 && l.Encoder == nil {
				t.Fatalf("access log %s has Caddy's default encoder:\n%s", name, out)
			}
		}
	})
}
