package x402gate

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// maxFileLines bounds a Go source file that is not a test: a file longer than this holds
// more than one concern and is split by concern (docs/README.md#layering).
const maxFileLines = 500

// TestNoFileOverMaxLines fails on every Go file of the repository, tests aside, that runs
// over maxFileLines lines.
func TestNoFileOverMaxLines(t *testing.T) {
	out, err := exec.Command("git", "ls-files", "*.go").Output()
	if err != nil {
		t.Skipf("git ls-files: %v (not a git checkout)", err)
	}
	files := strings.Fields(string(out))
	if len(files) == 0 {
		t.Fatal("git ls-files lists no Go file")
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if n := bytes.Count(b, []byte("\n")); n > maxFileLines {
			t.Errorf("%s has %d lines, over %d: split it by concern", f, n, maxFileLines)
		}
	}
}
