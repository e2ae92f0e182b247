package console

import (
	"bytes"
	"embed"
	"html/template"
	"io/fs"
	"net/http"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/x402gate/x402gate/verdictserver"
)

// files are the console's templates and its stylesheet: embedded, so the console needs no
// build step and loads nothing from elsewhere.
//
//go:embed templates/*.html static/*
var files embed.FS

// funcs are the helpers the templates use.
var funcs = template.FuncMap{
	"when": func(t time.Time) string {
		if t.IsZero() {
			return "—"
		}
		return t.UTC().Format("2006-01-02 15:04:05 UTC")
	},
	"path":  func(parts ...string) string { return Path + strings.Join(parts, "") },
	"json":  pretty,
	"short": shortHash,
	"list":  func(s ...string) []string { return s },
}

// pages are the parsed templates, one set per page: the layout and the page's content.
var pages = func() map[string]*template.Template {
	names, err := fs.Glob(files, "templates/*.html")
	if err != nil {
		panic(err)
	}
	out := map[string]*template.Template{}
	for _, n := range names {
		name := strings.TrimSuffix(strings.TrimPrefix(n, "templates/"), ".html")
		if name == "layout" {
			continue
		}
		out[name] = template.Must(template.New("layout.html").Funcs(funcs).ParseFS(files, "templates/layout.html", n))
	}
	return out
}()

// view is what every page's template gets.
type view struct {
	Title    string
	Page     string
	Session  *session
	Caller   *verdictserver.Caller // nil: not signed in
	Payments bool                  // the Payments page is configured
	Data     any
}

// CSRF is the session's token for the page's forms.
func (v view) CSRF() string {
	if v.Session == nil {
		return ""
	}
	return v.Session.csrf
}

// render writes page with status. A template that fails renders nothing of the page.
func (c *Console) render(w http.ResponseWriter, r *http.Request, s *session, status int, page, title string, data any) {
	var b bytes.Buffer
	v := view{Title: title, Page: page, Session: s, Payments: c.journal != nil, Data: data}
	if s != nil {
		v.Caller = s.caller
	}
	if err := pages[page].Execute(&b, v); err != nil {
		c.log.Error("rendering a console page", zap.String("page", page), zap.Error(err))
		http.Error(w, "the page could not be rendered; see the server log", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	if r.Method != http.MethodHead {
		_, _ = w.Write(b.Bytes())
	}
}

// staticFiles serves the embedded stylesheet under Path/static/.
func staticFiles() http.Handler {
	sub, _ := fs.Sub(files, "static") // "static" exists: embedded above
	return http.StripPrefix(Path+"/static/", http.FileServerFS(sub))
}
