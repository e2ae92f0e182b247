package x402gate

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig"
)

// caddyfileBlocks are the blocks of our Caddyfile surface, each a Caddyfile that holds
// one option where %s stands: a name docs/caddy.md gives is one a parser of ours knows in
// at least one of them.
var caddyfileBlocks = map[string]string{
	"global option":              "{\n%s\n}\n",
	"directive":                  ":8080 {\n%s\n}\n",
	"x402 global option":         "{\nx402 {\n%s\n}\n}\n",
	"x402 facilitator":           "{\nx402 {\nfacilitator {\n%s\n}\n}\n}\n",
	"x402 facilitator network":   "{\nx402 {\nfacilitator {\nnetwork base-sepolia {\n%s\n}\n}\n}\n}\n",
	"x402 directive":             ":8080 {\nx402 {\n%s\n}\n}\n",
	"x402 directive accept":      ":8080 {\nx402 {\naccept {\n%s\n}\n}\n}\n",
	"x402 directive guardian":    ":8080 {\nx402 {\nguardian {\n%s\n}\n}\n}\n",
	"x402 directive discovery":   ":8080 {\nx402 {\ndiscovery {\n%s\n}\n}\n}\n",
	"x402_facilitator directive": ":8080 {\nx402_facilitator {\n%s\n}\n}\n",
	"verdict global option":      "{\nverdict {\n%s\n}\n}\n",
	"verdict global option fee":  "{\nverdict {\nfee {\n%s\n}\n}\n}\n",
}

// TestCaddyDocNamesOurOptions: every option name that docs/caddy.md's Configuration
// section lists, and every option line of the Caddyfile examples of docs/caddy.md and of
// README.md's Caddy reference inside x402, verdict or x402_facilitator, is an option our
// Caddyfile parsers know. A name is known to a block when adapting it there (with one
// argument) fails, if at all, for another reason than an unrecognized name.
func TestCaddyDocNamesOurOptions(t *testing.T) {
	caddyDoc, err := os.ReadFile("docs/caddy.md")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	names := slices.DeleteFunc(caddyDocOptionNames(t, string(caddyDoc), string(readme)), func(n string) bool {
		// Words the Configuration section quotes that are not options: a value of paths
		// and the reason code of its refusal.
		return n == "strict" || n == "ambiguous_path"
	})
	t.Logf("options named by docs/caddy.md and README.md: %v", names)
	if !slices.Contains(names, "pay_to") || !slices.Contains(names, "rate_limit") || !slices.Contains(names, "health_detail") {
		t.Fatalf("read %v, without pay_to, rate_limit or health_detail: the pages' shape changed", names)
	}
	for _, name := range append(names, "no_such_option") {
		var where []string
		for block, src := range caddyfileBlocks {
			if caddyfileKnows(src, name) {
				where = append(where, block)
			}
		}
		switch {
		case name == "no_such_option" && len(where) > 0:
			t.Errorf("the probe finds a made-up option known in %v: it cannot tell a missing name", where)
		case name != "no_such_option" && len(where) == 0:
			t.Errorf("docs/caddy.md names the option %q, which no Caddyfile parser of ours knows", name)
		}
	}
}

// caddyfileKnows reports whether adapting src with the option name (and one argument)
// fails, if at all, for another reason than an unrecognized name.
func caddyfileKnows(src, name string) bool {
	_, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(fmt.Sprintf(src, name+" 1")), nil)
	if err == nil {
		return true
	}
	unknown := regexp.MustCompile(`unrecognized (directive: |global option: |[a-z0-9_]+ option |subdirective )"?` + regexp.QuoteMeta(name) + `\b`)
	return !unknown.MatchString(err.Error())
}

// caddyDocOptionNames are the option names of docs/caddy.md (page): the names in backquotes
// in the bullets of its Configuration section (with the names inside a `name { … }`
// block); and the first word of each line of the Caddyfile blocks of page and of the other
// pages inside an x402, verdict or x402_facilitator block.
func caddyDocOptionNames(t *testing.T, page string, others ...string) []string {
	t.Helper()
	_, config, ok := strings.Cut(page, "\n## Configuration\n")
	if !ok {
		t.Fatal("docs/caddy.md has no Configuration section")
	}
	config, _, _ = strings.Cut(config, "\n## ")
	seen := map[string]bool{}
	name := regexp.MustCompile(`^[a-z][a-z0-9_]*$`)
	add := func(words ...string) {
		for _, w := range words {
			if w = strings.Trim(w, ",{}"); name.MatchString(w) {
				seen[w] = true
			}
		}
	}
	for _, code := range regexp.MustCompile("`([^`]+)`").FindAllStringSubmatch(config, -1) {
		words := strings.Fields(code[1])
		if len(words) == 0 || strings.HasPrefix(words[0], "{") {
			continue
		}
		add(strings.Split(words[0], "/")...)
		if _, inner, ok := strings.Cut(code[1], "{"); ok {
			add(strings.Fields(strings.ReplaceAll(inner, ",", " "))...)
		}
	}
	for _, p := range append(others, page) {
		for _, line := range ourCaddyfileLines(p) {
			add(strings.Fields(line)[0])
		}
	}
	var names []string
	for n := range seen {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// ourCaddyfileLines are the lines of page's ```caddyfile (or ```caddy) blocks that stand inside an x402,
// verdict or x402_facilitator block, comments cut off.
func ourCaddyfileLines(page string) []string {
	var lines []string
	inBlock, depth, ours := false, 0, 0
	for _, line := range strings.Split(page, "\n") {
		switch {
		case strings.HasPrefix(line, "```caddy"):
			inBlock, depth, ours = true, 0, 0
			continue
		case strings.HasPrefix(line, "```"):
			inBlock = false
		}
		if !inBlock {
			continue
		}
		line, _, _ = strings.Cut(line, "#")
		words := strings.Fields(line)
		if len(words) == 0 {
			continue
		}
		if ours > 0 && depth >= ours && words[0] != "}" {
			lines = append(lines, line)
		}
		if words[len(words)-1] == "{" {
			depth++
			if ours == 0 && slices.Contains([]string{"x402", "verdict", "x402_facilitator"}, words[0]) {
				ours = depth
			}
		}
		if words[0] == "}" {
			if depth--; depth < ours {
				ours = 0
			}
		}
	}
	return lines
}
