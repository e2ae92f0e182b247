// Package caddymodule_test pins the Caddy surface of every runtime at once: the golden
// Caddyfile-to-JSON adapt tests and the Caddyfile fuzzers. The runtimes are the packages
// paygate, verdictapp and logredact beside it.
package caddymodule_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig"
	_ "github.com/caddyserver/caddy/v2/modules/standard"

	_ "github.com/x402gate/x402gate" // every module of ours
)

var updateGolden = flag.Bool("update", false, "rewrite the JSON half of testdata/*.caddyfiletest from the adapter's output")

// goldenSeparator splits a .caddyfiletest into its Caddyfile and its adapted JSON, as in
// Caddy's caddytest/integration/caddyfile_adapt.
const goldenSeparator = "----------"

// TestCaddyfileAdapt pins the config surface (docs/caddy.md): every testdata/*.caddyfiletest
// is a Caddyfile and the JSON `caddy adapt` makes of it. A change to an option's name, its
// JSON key or its default shows up here as a diff.
func TestCaddyfileAdapt(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.caddyfiletest"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no testdata/*.caddyfiletest")
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".caddyfiletest"), func(t *testing.T) {
			raw, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			caddyfileText, wantJSON, ok := strings.Cut(string(raw), "\n"+goldenSeparator+"\n")
			if !ok {
				t.Fatalf("%s has no %q line", file, goldenSeparator)
			}
			out, warnings, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(caddyfileText+"\n"), map[string]any{"filename": file})
			if err != nil {
				t.Fatalf("adapt: %v", err)
			}
			for _, w := range warnings {
				t.Errorf("adapt warning: %s", w)
			}
			got, err := indentJSON(out)
			if err != nil {
				t.Fatal(err)
			}
			if *updateGolden {
				if err := os.WriteFile(file, []byte(caddyfileText+"\n"+goldenSeparator+"\n"+got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := indentJSON([]byte(wantJSON))
			if err != nil {
				t.Fatalf("the expected JSON does not parse: %v", err)
			}
			if got != want {
				t.Errorf("adapted JSON differs (go test -run TestCaddyfileAdapt -update rewrites it)\n got:\n%s\nwant:\n%s", got, want)
			}
		})
	}
}

// indentJSON normalises JSON: compacted, then indented with tabs, with a final newline.
func indentJSON(b []byte) (string, error) {
	var compact, out bytes.Buffer
	if err := json.Compact(&compact, b); err != nil {
		return "", err
	}
	if err := json.Indent(&out, compact.Bytes(), "", "\t"); err != nil {
		return "", err
	}
	return out.String() + "\n", nil
}

// TestCaddyfileExampleIsPinned keeps testdata/caddyfile_example.caddyfiletest's Caddyfile
// the repository's Caddyfile.example, so that the demo's adapted JSON is pinned too.
func TestCaddyfileExampleIsPinned(t *testing.T) {
	example, err := os.ReadFile(filepath.Join("..", "Caddyfile.example"))
	if err != nil {
		t.Fatal(err)
	}
	golden, err := os.ReadFile(filepath.Join("testdata", "caddyfile_example.caddyfiletest"))
	if err != nil {
		t.Fatal(err)
	}
	pinned, _, _ := strings.Cut(string(golden), "\n"+goldenSeparator+"\n")
	if pinned+"\n" != string(example) {
		t.Error("testdata/caddyfile_example.caddyfiletest does not start with Caddyfile.example: copy it there, then go test -run TestCaddyfileAdapt -update")
	}
}
