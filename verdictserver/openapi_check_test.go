package verdictserver

import (
	"bytes"
	"encoding/json"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/x402gate/x402gate/docs"
)

// openAPIBase is where docs/openapi.json is registered for the schema compiler, beside
// the policy schema's own $id, so that its relative reference resolves.
const openAPIBase = "https://github.com/x402gate/x402gate/docs/openapi.json"

var (
	oaOnce     sync.Once
	oaErr      error
	oaCompiler *jsonschema.Compiler
	oaDoc      struct {
		Paths map[string]map[string]struct {
			Responses map[string]struct {
				Ref     string `json:"$ref"`
				Content map[string]struct {
					Schema struct {
						Ref string `json:"$ref"`
					} `json:"schema"`
				} `json:"content"`
			} `json:"responses"`
		} `json:"paths"`
	}
	oaPaths   []oaPath
	oaSchemas sync.Map // schema ref -> *jsonschema.Schema
)

type oaPath struct {
	re      *regexp.Regexp
	pattern string
}

func loadOpenAPI() error {
	oaOnce.Do(func() {
		if oaErr = json.Unmarshal(docs.OpenAPI, &oaDoc); oaErr != nil {
			return
		}
		c := jsonschema.NewCompiler()
		c.DefaultDraft(jsonschema.Draft2020)
		for name, raw := range map[string][]byte{openAPIBase: docs.OpenAPI, "https://github.com/x402gate/x402gate/docs/policy.schema.json": docs.PolicySchema} {
			doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
			if err != nil {
				oaErr = err
				return
			}
			if oaErr = c.AddResource(name, doc); oaErr != nil {
				return
			}
		}
		oaCompiler = c
		for p := range oaDoc.Paths {
			re := "^" + regexp.MustCompile(`\\\{[A-Za-z]+\\\}`).ReplaceAllString(regexp.QuoteMeta(p), `[^/]+`) + "$"
			oaPaths = append(oaPaths, oaPath{re: regexp.MustCompile(re), pattern: p})
		}
	})
	return oaErr
}

func oaSchema(ref string) (*jsonschema.Schema, error) {
	if s, ok := oaSchemas.Load(ref); ok {
		return s.(*jsonschema.Schema), nil
	}
	s, err := oaCompiler.Compile(openAPIBase + ref)
	if err != nil {
		return nil, err
	}
	oaSchemas.Store(ref, s)
	return s, nil
}

// checkOpenAPI holds one answer to docs/openapi.json: the operation documents its status,
// and the body validates against the documented schema (the Error schema for every
// failure, also on paths the API does not have). call runs it on every answer of every
// test of this package.
func checkOpenAPI(t testing.TB, method, rawURL string, status int, raw []byte) {
	t.Helper()
	if err := loadOpenAPI(); err != nil {
		t.Fatalf("docs/openapi.json: %v", err)
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	ref := ""
	pattern := ""
	for _, p := range oaPaths {
		if p.re.MatchString(u.Path) && (pattern == "" || strings.Count(p.pattern, "{") < strings.Count(pattern, "{")) {
			pattern = p.pattern
		}
	}
	op, ok := oaDoc.Paths[pattern][strings.ToLower(method)]
	switch {
	case ok:
		resp, documented := op.Responses[strconv.Itoa(status)]
		if !documented {
			t.Errorf("%s %s answered %d, which docs/openapi.json does not document for %s", method, u.Path, status, pattern)
			return
		}
		if resp.Ref != "" {
			ref = "#/components/schemas/Error"
		} else if c, ok := resp.Content["application/json"]; ok {
			ref = c.Schema.Ref
		}
	case status == 404 || status == 405:
		ref = "#/components/schemas/Error"
	default:
		t.Errorf("%s %s answered %d on a route docs/openapi.json does not have", method, u.Path, status)
		return
	}
	if ref == "" {
		if len(raw) != 0 {
			t.Errorf("%s %s %d: documented without a body, answered %q", method, u.Path, status, raw)
		}
		return
	}
	s, err := oaSchema(ref)
	if err != nil {
		t.Fatalf("compile %s: %v", ref, err)
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		t.Errorf("%s %s %d: body is not json: %q", method, u.Path, status, raw)
		return
	}
	if err := s.Validate(v); err != nil {
		t.Errorf("%s %s %d: body does not match %s in docs/openapi.json: %v\n%s", method, u.Path, status, ref, err, raw)
	}
}

// failRecorder is a testing.TB that records failures instead of failing.
type failRecorder struct {
	testing.TB
	failures []string
}

func (f *failRecorder) Helper()                        {}
func (f *failRecorder) Errorf(format string, a ...any) { f.failures = append(f.failures, format) }
func (f *failRecorder) Fatalf(format string, a ...any) { f.failures = append(f.failures, format) }

// TestOpenAPICheckCatchesDrift: the check that call runs on every answer does fail on an
// answer the document does not allow, so its silence elsewhere means something.
func TestOpenAPICheckCatchesDrift(t *testing.T) {
	for name, c := range map[string]struct {
		method, path string
		status       int
		body         string
	}{
		"a record without requestHash": {"POST", "/transactions", 201, `{"id":"6f1c2a7e-9a55-4c8e-8d1e-1f0a4e1b2c3d","description":"d","status":"PENDING","escrowAddress":"0xA11CE00000000000000000000000000000000001","chainId":1,"policyVersion":null,"createdAt":"2026-01-01T00:00:00Z","updatedAt":"2026-01-01T00:00:00Z"}`},
		"an undocumented status":       {"GET", "/health", 418, `{}`},
		"an error body without a code": {"GET", "/transactions/0xab/approval-status", 404, `{"statusCode":404,"error":"Not Found","message":"m"}`},
		"an unknown error code":        {"GET", "/nope", 404, `{"statusCode":404,"error":"Not Found","code":"gone","message":"m"}`},
		"a verdict that is a string":   {"GET", "/transactions/0xab/approval-status", 200, `{"verdict":"approved"}`},
	} {
		f := &failRecorder{TB: t}
		checkOpenAPI(f, c.method, "http://x"+c.path, c.status, []byte(c.body))
		if len(f.failures) == 0 {
			t.Errorf("%s: the check passed it", name)
		}
	}
}
