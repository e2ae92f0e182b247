package console

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"reflect"
	"strconv"
	"strings"

	"github.com/x402gate/x402gate/verdictserver"
	"github.com/x402gate/x402gate/verdictserver/policy"
	"github.com/x402gate/x402gate/verdictserver/store"
)

// policySections are the top-level members of a policy document in the order
// policy.Document declares them (docs/policy.md#sections): the edit form has one field
// for each.
var policySections = func() []string {
	t := reflect.TypeFor[policy.Document]()
	out := make([]string, 0, t.NumField())
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		out = append(out, name)
	}
	return out
}()

// policiesPage lists an agent's policy versions and shows one of them (the active one
// by default); without an agent, it lists the agents.
func (c *Console) policiesPage(w http.ResponseWriter, r *http.Request, s *session) {
	agentID := r.URL.Query().Get("agent")
	if agentID == "" {
		agents, err := c.op.Agents(r.Context())
		if err != nil {
			c.failed(w, r, s, "listing agents", err)
			return
		}
		c.render(w, r, s, http.StatusOK, "policies", "Policies", map[string]any{"Agents": agents})
		return
	}
	versions, err := c.op.PolicyVersions(r.Context(), agentID)
	if err != nil {
		c.failed(w, r, s, "listing policy versions", err)
		return
	}
	data := map[string]any{"Agent": agentID, "Versions": versions}
	if len(versions) > 0 {
		v, ok := version(r, "version")
		if !ok {
			c.fail(w, r, s, http.StatusBadRequest, "version must be a positive integer")
			return
		}
		pv, err := c.op.Policy(r.Context(), agentID, v)
		if err != nil {
			c.failed(w, r, s, "reading policy version", err)
			return
		}
		data["Shown"], data["Document"] = pv, pretty(pv.Document)
	}
	c.render(w, r, s, http.StatusOK, "policies", "Policies of "+agentID, data)
}

// version reads a version number from the query; absent is 0, the active version.
func version(r *http.Request, name string) (int64, bool) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return 0, true
	}
	n, err := strconv.ParseInt(v, 10, 64)
	return n, err == nil && n > 0
}

// diffPage shows the line diff of two versions of an agent's policy, each indented.
func (c *Console) diffPage(w http.ResponseWriter, r *http.Request, s *session) {
	agentID := r.URL.Query().Get("agent")
	a, okA := version(r, "a")
	b, okB := version(r, "b")
	if !okA || !okB || a == 0 || b == 0 {
		c.fail(w, r, s, http.StatusBadRequest, "choose two versions, a and b")
		return
	}
	pa, err := c.op.Policy(r.Context(), agentID, a)
	if err != nil {
		c.failed(w, r, s, "reading policy version "+strconv.FormatInt(a, 10), err)
		return
	}
	pb, err := c.op.Policy(r.Context(), agentID, b)
	if err != nil {
		c.failed(w, r, s, "reading policy version "+strconv.FormatInt(b, 10), err)
		return
	}
	lines := diffLines(strings.Split(pretty(pa.Document), "\n"), strings.Split(pretty(pb.Document), "\n"))
	c.render(w, r, s, http.StatusOK, "diff", "Policy of "+agentID+": version "+strconv.FormatInt(a, 10)+" → "+strconv.FormatInt(b, 10),
		map[string]any{"Agent": agentID, "A": pa, "B": pb, "Lines": lines})
}

// section is one field of the edit form: a top-level member of the document as JSON,
// and the problems the schema found in it.
type section struct {
	Name     string
	Value    string
	Problems []policy.Problem
}

// editForm is the policy edit form: the sections, and the problems that name no section.
type editForm struct {
	Agent    string
	Base     int64 // the version the form started from; 0: none
	Sections []section
	Problems []policy.Problem
	Saved    bool
}

// editPage shows the edit form filled with the active version.
func (c *Console) editPage(w http.ResponseWriter, r *http.Request, s *session) {
	agentID := r.URL.Query().Get("agent")
	if _, err := c.op.PolicyVersions(r.Context(), agentID); err != nil {
		c.failed(w, r, s, "reading the agent", err)
		return
	}
	f := editForm{Agent: agentID}
	doc := map[string]json.RawMessage{}
	pv, err := c.op.Policy(r.Context(), agentID, 0)
	switch {
	case err == nil:
		f.Base = pv.Version
		_ = json.Unmarshal(pv.Document, &doc) // a stored version is a valid document
	case !errors.Is(err, store.ErrNotFound):
		c.failed(w, r, s, "reading the active policy", err)
		return
	}
	for _, name := range policySections {
		f.Sections = append(f.Sections, section{Name: name, Value: pretty(doc[name])})
	}
	c.render(w, r, s, http.StatusOK, "edit", "Edit the policy of "+agentID, f)
}

// savePolicy assembles the document from the form's sections and stores it as a new
// version; a document the schema refuses is shown again with each problem beside its
// section, and nothing is stored.
func (c *Console) savePolicy(w http.ResponseWriter, r *http.Request, s *session) {
	f := editForm{Agent: r.PostForm.Get("agent")}
	f.Base, _ = strconv.ParseInt(r.PostForm.Get("base"), 10, 64)
	var doc bytes.Buffer
	doc.WriteByte('{')
	for _, name := range policySections {
		v := strings.TrimSpace(r.PostForm.Get("section." + name))
		sec := section{Name: name, Value: v}
		if v != "" {
			if !json.Valid([]byte(v)) {
				sec.Problems = []policy.Problem{{Field: name, Problem: "is not a json value"}}
			} else {
				if doc.Len() > 1 {
					doc.WriteByte(',')
				}
				n, _ := json.Marshal(name)
				doc.Write(n)
				doc.WriteByte(':')
				doc.WriteString(v)
			}
		}
		f.Sections = append(f.Sections, sec)
	}
	doc.WriteByte('}')
	if f.invalid() {
		c.render(w, r, s, http.StatusUnprocessableEntity, "edit", "Edit the policy of "+f.Agent, f)
		return
	}
	pv, err := c.op.SetPolicy(r.Context(), f.Agent, doc.Bytes(), s.caller.Actor())
	var pe *policy.Errors
	var ie *verdictserver.InputError
	switch {
	case errors.As(err, &pe):
		f.place(pe.Problems)
		c.render(w, r, s, http.StatusUnprocessableEntity, "edit", "Edit the policy of "+f.Agent, f)
		return
	case errors.As(err, &ie):
		f.Problems = []policy.Problem{{Field: ie.Field, Problem: ie.Problem}}
		c.render(w, r, s, http.StatusUnprocessableEntity, "edit", "Edit the policy of "+f.Agent, f)
		return
	case err != nil:
		c.failed(w, r, s, "saving the policy", err)
		return
	}
	http.Redirect(w, r, Path+"/policies?agent="+url.QueryEscape(f.Agent)+"&version="+strconv.FormatInt(pv.Version, 10), http.StatusSeeOther)
}

// invalid reports whether a section holds a problem already.
func (f *editForm) invalid() bool {
	for _, s := range f.Sections {
		if len(s.Problems) > 0 {
			return true
		}
	}
	return false
}

// place puts each problem beside the section its field is in; the rest (the document
// itself, a member the form has no field for) go above the form.
func (f *editForm) place(ps []policy.Problem) {
	for _, p := range ps {
		top, _, _ := strings.Cut(p.Field, ".")
		placed := false
		for i := range f.Sections {
			if f.Sections[i].Name == top && top != "" {
				f.Sections[i].Problems = append(f.Sections[i].Problems, p)
				placed = true
			}
		}
		if !placed {
			f.Problems = append(f.Problems, p)
		}
	}
}
