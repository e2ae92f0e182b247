package x402gate

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// module is the import path prefix of our packages.
const module = "github.com/x402gate/x402gate/"

// layer is one rule of the layering: a package in tree (a package path relative to the
// module, and every package under it) imports, of our packages, only those in mayImport
// (each with the packages under it) and those in its own tree. Imports from outside the
// module are not its business.
type layer struct {
	tree      string
	mayImport []string
	why       string
}

// layers are the floors of the house, bottom first (docs/README.md#layering): imports point
// down only. internal/* is plumbing with no domain in it, so it imports no package of ours
// outside internal/ (integration neither); the wire protocol and the verdict vocabulary stand
// on x402 alone; the gate is the framework-free part a plain net/http server embeds; and the
// client of the verdict service carries only the vocabulary and the shared transport.
var layers = []layer{
	{"internal", nil, "internal/* is plumbing: it imports no domain package and no integration package"},
	{"x402", nil, "x402 is the bottom floor: it imports nothing of ours"},
	{"verdict", []string{"x402"}, "verdict imports only x402 of ours"},
	{"gate", []string{"x402"}, "gate imports only x402 of ours (and its own subpackages)"},
	{"verdictclient", []string{"x402", "verdict", "internal/jsonhttp"}, "verdictclient imports only x402, verdict and the shared transport internal/jsonhttp of ours"},
	{"console", []string{"x402", "verdict", "verdictserver", "facilitator/journal", "internal"}, "console reads the verdict service and the settlement journal only: no Caddy adapter, gate or facilitator engine"},
}

// TestLayering checks the non-test imports of every package of the module against layers,
// in the manner of Go's own go/build/deps_test.go, and that no package outside
// integration/... imports it.
func TestLayering(t *testing.T) {
	graph := importGraph(t)
	pkgs := slices.Sorted(maps.Keys(graph))
	for _, l := range layers {
		matched := false
		for _, pkg := range pkgs {
			if !under(pkg, l.tree) {
				continue
			}
			matched = true
			for _, imp := range graph[pkg] {
				if !l.allows(imp) {
					t.Errorf("%s imports %s: %s", pkg, imp, l.why)
				}
			}
		}
		if !matched {
			t.Errorf("no package is %s or under it: the layering names a package that is gone; update layers", l.tree)
		}
	}
	for _, pkg := range pkgs {
		for _, imp := range graph[pkg] {
			if under(imp, "integration") && !under(pkg, "integration") {
				t.Errorf("%s imports %s: integration/... holds the end-to-end tests and their tools, and nothing builds on it", pkg, imp)
			}
		}
	}
}

// allows reports whether a package in l's tree may import imp, one of ours.
func (l layer) allows(imp string) bool {
	return under(imp, l.tree) || slices.ContainsFunc(l.mayImport, func(m string) bool { return under(imp, m) })
}

// under reports whether pkg is tree or a package below it.
func under(pkg, tree string) bool {
	return pkg == tree || strings.HasPrefix(pkg, tree+"/")
}

// importGraph lists every package of the module (`go list -json ./...`) with its non-test
// imports of our packages, both relative to the module ("." is the root package).
func importGraph(t *testing.T) map[string][]string {
	t.Helper()
	cmd := exec.Command("go", "list", "-json", "./...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -json ./...: %v\n%s", err, stderr.Bytes())
	}
	graph := map[string][]string{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p struct {
			ImportPath string
			Imports    []string
		}
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("go list -json: %v", err)
		}
		pkg := ours(p.ImportPath)
		graph[pkg] = nil
		for _, imp := range p.Imports {
			if strings.HasPrefix(imp, module) {
				graph[pkg] = append(graph[pkg], ours(imp))
			}
		}
	}
	if len(graph) < len(layers) {
		t.Fatalf("go list found %d packages", len(graph))
	}
	return graph
}

// ours is pkg's path relative to the module.
func ours(pkg string) string {
	if pkg == strings.TrimSuffix(module, "/") {
		return "."
	}
	return strings.TrimPrefix(pkg, module)
}
