package x402gate

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestCommentsCiteOurDocs: code comments cite pages of docs/ by heading anchor, and
// every anchor they cite exists; none cites a file outside this repository (a design
// note, a research page, a spec section) that a reader of the repository does not have.
func TestCommentsCiteOurDocs(t *testing.T) {
	anchors := map[string]bool{}
	heading := regexp.MustCompile(`(?m)^#+\s+(.+)$`)
	pages, err := filepath.Glob("docs/*.md")
	if err != nil || len(pages) == 0 {
		t.Fatalf("no docs/*.md: %v", err)
	}
	for _, p := range pages {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		anchors[filepath.ToSlash(p)] = true
		for _, m := range heading.FindAllStringSubmatch(string(b), -1) {
			anchors[filepath.ToSlash(p)+"#"+slug(m[1])] = true
		}
	}
	cite := regexp.MustCompile(`docs/[a-z-]+\.md(#[a-z0-9-]+)?`)
	outside := regexp.MustCompile(`spec §|DESIGN\.md|research/[a-z]+\.md|\.\./shared`)
	err = filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "node_modules" || strings.HasPrefix(d.Name(), ".")) && path != "." {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || path == "docs_test.go" {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for i, line := range strings.Split(string(b), "\n") {
			_, comment, ok := strings.Cut(line, "//")
			if !ok {
				continue
			}
			if outside.MatchString(comment) {
				t.Errorf("%s:%d cites a file outside the repository: %s", path, i+1, strings.TrimSpace(comment))
			}
			for _, c := range cite.FindAllString(comment, -1) {
				if !anchors[c] {
					t.Errorf("%s:%d cites %s, which docs/ does not have", path, i+1, c)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// slug is a heading's anchor as GitHub makes it: lower case, spaces to hyphens, other
// punctuation dropped.
func slug(h string) string {
	h = strings.ToLower(strings.TrimSpace(h))
	var b strings.Builder
	for _, r := range h {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-', r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}
