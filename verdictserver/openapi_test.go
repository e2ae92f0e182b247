package verdictserver

import (
	"encoding/json"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/x402gate/x402gate/docs"
)

// allStatuses is every status a route can answer: its own, and those of its kind
// (authentication, rate limits, the store).
func (rt route) allStatuses() []int {
	st := slices.Clone(rt.statuses)
	switch {
	case rt.auth != authNone:
		st = append(st, agentStatuses...)
	case rt.limited:
		st = append(st, openStatuses...)
	default:
		st = append(st, 500)
	}
	sort.Ints(st)
	return slices.Compact(st)
}

type openAPIDoc struct {
	Paths      map[string]map[string]json.RawMessage `json:"paths"`
	Components struct {
		Schemas struct {
			Error struct {
				Properties struct {
					Code struct {
						Enum []string `json:"enum"`
					} `json:"code"`
				} `json:"properties"`
			} `json:"Error"`
		} `json:"schemas"`
		Responses map[string]json.RawMessage `json:"responses"`
	} `json:"components"`
}

// TestOpenAPIMatchesRoutes: docs/openapi.json documents exactly the routes the public and
// admin handlers serve (paths and methods, both ways), each with exactly the statuses the
// route can answer; every error status it documents has error codes, and the Error
// schema's codes and docs/verdict-api.md list exactly the codes the server uses.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	var doc openAPIDoc
	if err := json.Unmarshal(docs.OpenAPI, &doc); err != nil {
		t.Fatal(err)
	}
	s := &Server{}
	served := map[string]route{}
	for _, rt := range append(s.publicRoutes(), s.adminRoutes()...) {
		served[strings.ToLower(rt.method)+" "+rt.path] = rt
	}
	documented := map[string]bool{}
	for path, ops := range doc.Paths {
		for method, raw := range ops {
			key := method + " " + path
			documented[key] = true
			rt, ok := served[key]
			if !ok {
				t.Errorf("openapi documents %s, which no handler serves", key)
				continue
			}
			var op struct {
				Responses map[string]json.RawMessage `json:"responses"`
			}
			if err := json.Unmarshal(raw, &op); err != nil {
				t.Fatal(err)
			}
			var got []int
			for code := range op.Responses {
				n, err := strconv.Atoi(code)
				if err != nil {
					t.Errorf("%s: response %q is not a status", key, code)
				}
				got = append(got, n)
				if n >= 400 {
					if _, ok := doc.Components.Responses["E"+code]; !ok {
						t.Errorf("%s: status %d has no error response", key, n)
					}
				}
			}
			sort.Ints(got)
			if want := rt.allStatuses(); !slices.Equal(got, want) {
				t.Errorf("%s: openapi statuses %v, the route answers %v", key, got, want)
			}
		}
	}
	for key := range served {
		if !documented[key] {
			t.Errorf("%s is served but not in docs/openapi.json", key)
		}
	}

	var codes []string
	for c := range errorCodes {
		codes = append(codes, c)
	}
	sort.Strings(codes)
	enum := slices.Sorted(slices.Values(doc.Components.Schemas.Error.Properties.Code.Enum))
	if !slices.Equal(enum, codes) {
		t.Errorf("openapi Error.code enum %v, the server uses %v", enum, codes)
	}
	for name := range doc.Components.Responses {
		st, _ := strconv.Atoi(strings.TrimPrefix(name, "E"))
		has := false
		for _, v := range errorCodes {
			has = has || v == st
		}
		if !has {
			t.Errorf("openapi documents error status %d, which has no error code", st)
		}
	}
	page, err := os.ReadFile("../docs/verdict-api.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range codes {
		if !strings.Contains(string(page), "`"+c+"`") {
			t.Errorf("docs/verdict-api.md does not name error code %s", c)
		}
	}
}
