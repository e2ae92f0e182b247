package x402gate

import (
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestCommentsCiteOurDocs: code comments cite pages of docs/ (and bench/, README.md) by
// heading anchor or by a quoted heading, and every section they cite exists; none cites a
// file outside this repository (a design note, a research page, a spec section) that a
// reader of the repository does not have.
func TestCommentsCiteOurDocs(t *testing.T) {
	anchors := docAnchors(t)
	cite := regexp.MustCompile(`(?:(?:docs|bench)/[A-Za-z0-9_-]+\.md|\bREADME\.md)(#[A-Za-z0-9_-]+| "[^"]+")?`)
	outside := regexp.MustCompile(`spec §|DESIGN(\.md| ")|research/[a-z]+\.md|\.\./shared`)
	walkFiles(t, ".go", func(file string, src []byte) {
		if file == "docs_test.go" {
			return
		}
		for _, c := range comments(string(src)) {
			for _, o := range outside.FindAllString(c.text, -1) {
				t.Errorf("%s:%d cites %s…, a file outside the repository", file, c.line, o)
			}
			for _, cited := range cite.FindAllString(c.text, -1) {
				if !anchors[citation(cited)] {
					t.Errorf("%s:%d cites %s, which the repository does not have", file, c.line, cited)
				}
			}
		}
	})
}

// TestDocsLinksResolve: every link of docs/, README.md and bench/ to a page of ours, and
// every docs/X.md#section they name in their text, leads to a page that exists and to a
// heading of that page.
func TestDocsLinksResolve(t *testing.T) {
	anchors := docAnchors(t)
	link := regexp.MustCompile(`\]\(([^)#:\s]*)(#[^)\s]*)?\)`)
	named := regexp.MustCompile(`(?:docs|bench)/[A-Za-z0-9_-]+\.md#[A-Za-z0-9_-]+`)
	for _, page := range slices.Sorted(maps.Keys(anchors)) {
		if strings.Contains(page, "#") {
			continue
		}
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		text := prose(string(b))
		for _, m := range link.FindAllStringSubmatch(text, -1) {
			target := page
			if m[1] != "" {
				target = path.Join(path.Dir(page), m[1])
			}
			if !strings.HasSuffix(target, ".md") {
				if _, err := os.Stat(target); err != nil {
					t.Errorf("%s links to %s, which does not exist", page, m[0])
				}
				continue
			}
			if !anchors[target+m[2]] {
				t.Errorf("%s links to %s: no such page or heading", page, m[0])
			}
		}
		for _, c := range named.FindAllString(text, -1) {
			if !anchors[c] {
				t.Errorf("%s names %s: no such page or heading", page, c)
			}
		}
	}
}

// TestDocsIndexListsEveryPage: docs/README.md links every page of docs/.
func TestDocsIndexListsEveryPage(t *testing.T) {
	index, err := os.ReadFile("docs/README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, page := range docPages(t, "docs/*.md") {
		if name := filepath.Base(page); name != "README.md" && !strings.Contains(string(index), "]("+name+")") {
			t.Errorf("docs/README.md does not link %s", name)
		}
	}
}

// docAnchors is every page of docs/ and bench/ and README.md, each alone and with the
// anchor of each of its headings ("docs/gate.md", "docs/gate.md#payment-ledger"), as GitHub
// makes them: a repeated heading gets -1, -2 and so on.
func docAnchors(t *testing.T) map[string]bool {
	t.Helper()
	anchors := map[string]bool{}
	for _, p := range docPages(t, "docs/*.md", "bench/*.md", "README.md") {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		p = filepath.ToSlash(p)
		anchors[p] = true
		seen := map[string]int{}
		for _, h := range headings(string(b)) {
			a := slug(h)
			if n := seen[a]; n > 0 {
				anchors[fmt.Sprintf("%s#%s-%d", p, a, n)] = true
			} else {
				anchors[p+"#"+a] = true
			}
			seen[a]++
		}
	}
	return anchors
}

// headings are the Markdown headings of text, outside fenced code blocks.
func headings(text string) []string {
	var hs []string
	for _, line := range strings.Split(prose(text), "\n") {
		if h, ok := strings.CutPrefix(line, "#"); ok {
			hs = append(hs, strings.TrimLeft(h, "# "))
		}
	}
	return hs
}

// prose is Markdown text with the lines of its fenced code blocks emptied.
func prose(text string) string {
	lines := strings.Split(text, "\n")
	fenced := false
	for i, line := range lines {
		if strings.HasPrefix(line, "```") {
			fenced = !fenced
		}
		if fenced || strings.HasPrefix(line, "```") {
			lines[i] = ""
		}
	}
	return strings.Join(lines, "\n")
}

// comment is one run of consecutive // comment lines of a Go file, joined by spaces, and
// the line it starts on.
type comment struct {
	line int
	text string
}

// comments are the // comments of a Go source, each run of consecutive lines as one, so a
// citation broken over two lines is read whole.
func comments(src string) []comment {
	var cs []comment
	prev := -1
	for i, line := range strings.Split(src, "\n") {
		_, text, ok := strings.Cut(line, "//")
		if !ok {
			continue
		}
		text = strings.TrimSpace(text)
		if prev == i-1 && len(cs) > 0 {
			cs[len(cs)-1].text += " " + text
		} else {
			cs = append(cs, comment{line: i + 1, text: text})
		}
		prev = i
	}
	return cs
}

// citation is the key in docAnchors of a citation in a comment: docs/gate.md#x as it is,
// docs/README.md "A heading" with the heading as its anchor.
func citation(c string) string {
	if page, heading, ok := strings.Cut(c, ` "`); ok {
		return page + "#" + slug(strings.TrimSuffix(heading, `"`))
	}
	return c
}

// walkFiles calls fn with each file of the repository whose name ends in suffix, and its
// content; node_modules and hidden directories are left out.
func walkFiles(t *testing.T, suffix string, fn func(file string, content []byte)) {
	t.Helper()
	err := filepath.WalkDir(".", func(file string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case d.IsDir() && file != "." && (d.Name() == "node_modules" || strings.HasPrefix(d.Name(), ".")):
			return filepath.SkipDir
		case d.IsDir() || !strings.HasSuffix(file, suffix):
			return nil
		}
		b, err := os.ReadFile(file)
		if err == nil {
			fn(filepath.ToSlash(file), b)
		}
		return err
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
