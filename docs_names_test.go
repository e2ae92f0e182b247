package x402gate

import (
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestDocsNameGoIdentifiersThatExist: every Go name of ours that docs/ or README.md quote
// in backquotes (`gate.Config`, `engine.Config.SanctionsTTL`, `*facilitator.Engine`) is an
// exported name of that package: a type, function, variable or constant, or a field or
// method of one of its types. A member quoted without its package (`Config.Logger`) is a
// member of some type of ours by that name, when we have one.
func TestDocsNameGoIdentifiersThatExist(t *testing.T) {
	names := goNames(t)
	anyPackage := map[string]bool{} // "Type" and "Type.Member" of every package
	for _, set := range names {
		maps.Copy(anyPackage, set)
	}
	quoted := regexp.MustCompile("`\\*?(?:([a-z][a-z0-9]*)\\.)?([A-Z][A-Za-z0-9_]*)(\\.[A-Z][A-Za-z0-9_]*)?")
	for _, page := range docPages(t, "docs/*.md", "README.md") { // bench/ records the past
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range quoted.FindAllStringSubmatch(prose(string(b)), -1) {
			pkg, name := m[1], m[2]+m[3]
			switch set, ours := names[pkg]; {
			case pkg == "" && m[3] != "" && anyPackage[m[2]] && !anyPackage[name]:
				t.Errorf("%s names %s, which no type %s of ours has", page, name, m[2])
			case ours && !set[name]:
				t.Errorf("%s names %s.%s, which package %s does not have", page, pkg, name, pkg)
			}
		}
	}
}

// TestDocsNameTestsThatExist: every test, fuzz target, benchmark or example that docs/ or
// README.md name in backquotes (`TestX`, `TestX/subtest`) is a function of a _test.go file.
func TestDocsNameTestsThatExist(t *testing.T) {
	funcs := map[string]bool{}
	decl := regexp.MustCompile(`(?m)^func ((?:Test|Fuzz|Benchmark|Example)\w*)\(`)
	walkFiles(t, "_test.go", func(_ string, src []byte) {
		for _, m := range decl.FindAllStringSubmatch(string(src), -1) {
			funcs[m[1]] = true
		}
	})
	named := regexp.MustCompile("`((?:Test|Fuzz|Benchmark|Example)[A-Z][A-Za-z0-9_]*)(/[^`]*)?`")
	for _, page := range docPages(t, "docs/*.md", "README.md") {
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range named.FindAllStringSubmatch(string(b), -1) {
			if !funcs[m[1]] {
				t.Errorf("%s names %s, which no _test.go file has", page, m[1])
			}
		}
	}
}

// goNames maps each of our packages' names to its exported names: "Config" and
// "Config.Network" (a field), "Engine.Ready" (a method). Commands and tests are left out.
func goNames(t *testing.T) map[string]map[string]bool {
	t.Helper()
	names := map[string]map[string]bool{}
	fset := token.NewFileSet()
	for pkg := range importGraph(t) {
		files, err := filepath.Glob(filepath.Join(pkg, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			file, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			if file.Name.Name == "main" {
				break
			}
			if names[file.Name.Name] == nil {
				names[file.Name.Name] = map[string]bool{}
			}
			addNames(names[file.Name.Name], file)
		}
	}
	return names
}

// addNames adds the exported names that file declares to set.
func addNames(set map[string]bool, file *ast.File) {
	add := func(prefix string, ids ...*ast.Ident) {
		for _, id := range ids {
			if id.IsExported() {
				set[prefix+id.Name] = true
			}
		}
	}
	for _, d := range file.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if d.Recv == nil {
				add("", d.Name)
			} else if recv := receiverName(d.Recv.List[0].Type); recv != "" {
				add(recv+".", d.Name)
			}
		case *ast.GenDecl:
			for _, s := range d.Specs {
				switch s := s.(type) {
				case *ast.ValueSpec:
					add("", s.Names...)
				case *ast.TypeSpec:
					add("", s.Name)
					addMembers(set, s.Name.Name, s.Type)
				}
			}
		}
	}
}

// addMembers adds the fields of a struct type and the methods of an interface type.
func addMembers(set map[string]bool, typ string, expr ast.Expr) {
	var fields *ast.FieldList
	switch e := expr.(type) {
	case *ast.StructType:
		fields = e.Fields
	case *ast.InterfaceType:
		fields = e.Methods
	default:
		return
	}
	for _, f := range fields.List {
		for _, id := range f.Names {
			if id.IsExported() {
				set[typ+"."+id.Name] = true
			}
		}
		if len(f.Names) == 0 { // embedded: the type's name is the field's
			if name := receiverName(f.Type); name != "" {
				set[typ+"."+name] = true
			}
		}
	}
}

// receiverName is the type name of a receiver or embedded field: T, *T, T[P], pkg.T.
func receiverName(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.StarExpr:
		return receiverName(e.X)
	case *ast.IndexExpr:
		return receiverName(e.X)
	case *ast.IndexListExpr:
		return receiverName(e.X)
	case *ast.SelectorExpr:
		return e.Sel.Name
	case *ast.Ident:
		return e.Name
	}
	return ""
}

// docPages are the Markdown pages the patterns match, each pattern at least one.
func docPages(t *testing.T, patterns ...string) []string {
	t.Helper()
	var pages []string
	for _, pattern := range patterns {
		m, err := filepath.Glob(pattern)
		if err != nil || len(m) == 0 {
			t.Fatalf("no %s: %v", pattern, err)
		}
		pages = append(pages, m...)
	}
	return pages
}
