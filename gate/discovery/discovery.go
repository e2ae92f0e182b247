// Package discovery describes a route to discovery services: the x402 v2 bazaar
// extension of every 402 (docs/gate.md#discovery). A discovery service that fetches the
// route unpaid, or a facilitator that sees the extension echoed in a payment, learns what
// the route takes and answers, in the shape @x402/extensions declares
// (declareDiscoveryExtension). The schemas are the operator's files, checked when the
// configuration is: valid JSON Schema (draft 2020-12), no reference outside the document.
package discovery

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/x402gate/x402gate/gate/setting"
)

// BazaarExtension is the key of the discovery extension in a PaymentRequired's extensions.
const BazaarExtension = "bazaar"

// Limits of the discovery metadata, as @x402/extensions sanitizes it
// (sanitizeResourceServiceMetadata), and of the whole extension, which v2 clients echo
// in their PAYMENT-SIGNATURE header.
const (
	maxServiceName    = 32
	maxTags           = 5
	maxTag            = 32
	maxBazaarJSON     = 8 << 10
	bazaarSchemaDraft = "https://json-schema.org/draft/2020-12/schema"
)

// Config describes a route to discovery services (a `discovery { … }` block). It is the
// configuration of the gate's Config.Discovery and of the Caddy handler's discovery, in
// the Caddyfile's names; the schemas are the files' JSON.
type Config struct {
	// ServiceName names the service: 1 to 32 printable ASCII characters. Default: none.
	ServiceName string `json:"service_name,omitempty"`
	// Tags are up to 5 keywords of 1 to 32 printable ASCII characters, distinct without
	// regard to case. Default: none.
	Tags []string `json:"tags,omitempty"`
	// Description says what the route sells; it is the resource's description, so it may
	// not differ from the route's description. Default: that description.
	Description string `json:"description,omitempty"`
	// Method is the HTTP method the route is called with: GET, HEAD or DELETE take query
	// parameters, POST, PUT or PATCH a JSON body. Default: GET.
	Method string `json:"method,omitempty"`
	// InputSchema is the JSON Schema of the query parameters (GET, HEAD, DELETE) or of the
	// JSON body (POST, PUT, PATCH). Default: none.
	InputSchema json.RawMessage `json:"input_schema,omitempty"`
	// OutputSchema is the JSON Schema of the answer's JSON body. Default: none.
	OutputSchema json.RawMessage `json:"output_schema,omitempty"`
}

// Validate checks c without I/O. Its errors are *setting.Error, named as a
// configuration file spells the option (service_name, tags, method, input_schema,
// output_schema).
func (c *Config) Validate() error {
	_, err := c.Extension()
	return err
}

// Extension checks c and builds the bazaar extension {info, schema} it declares. Its
// errors are *setting.Error.
func (c *Config) Extension() (map[string]any, error) {
	if c.ServiceName != "" && !printableASCII(c.ServiceName, maxServiceName) {
		return nil, setting.Errorf("service_name", "must be 1 to %d printable ASCII characters", maxServiceName)
	}
	if len(c.Tags) > maxTags {
		return nil, setting.Errorf("tags", "are %d; at most %d are listed", len(c.Tags), maxTags)
	}
	seen := map[string]bool{}
	for _, t := range c.Tags {
		if !printableASCII(t, maxTag) {
			return nil, setting.Errorf("tags", "%q must be 1 to %d printable ASCII characters", t, maxTag)
		}
		if seen[strings.ToLower(t)] {
			return nil, setting.Errorf("tags", "%q is given twice", t)
		}
		seen[strings.ToLower(t)] = true
	}
	method := c.Method
	if method == "" {
		method = "GET"
	}
	var body bool
	switch method {
	case "GET", "HEAD", "DELETE":
	case "POST", "PUT", "PATCH":
		body = true
	default:
		return nil, setting.Errorf("method", "%q is not GET, HEAD, DELETE, POST, PUT or PATCH", method)
	}
	in, defs, err := userSchema("input", c.InputSchema)
	if err != nil {
		return nil, setting.Errorf("input_schema", "%v", err)
	}
	out, outDefs, err := userSchema("output", c.OutputSchema)
	if err != nil {
		return nil, setting.Errorf("output_schema", "%v", err)
	}
	for k, v := range outDefs {
		defs[k] = v
	}
	ext, err := bazaar(method, body, in, out, defs)
	if err != nil {
		return nil, setting.Errorf("input_schema", "%v", err)
	}
	return ext, nil
}

// bazaar builds the extension {info, schema} the way declareDiscoveryExtension does for
// an HTTP route, and checks that its info obeys its schema.
func bazaar(method string, body bool, in, out map[string]any, defs map[string]any) (map[string]any, error) {
	input := map[string]any{"type": "http", "method": method}
	props := map[string]any{
		"type":   map[string]any{"type": "string", "const": "http"},
		"method": map[string]any{"type": "string", "enum": []any{method}},
	}
	required := []any{"type", "method"}
	if body {
		input["bodyType"] = "json"
		props["bodyType"] = map[string]any{"type": "string", "enum": []any{"json", "form-data", "text"}}
		required = append(required, "bodyType")
		if in != nil {
			props["body"] = in
		}
	} else if in != nil {
		props["queryParams"] = withType(in)
	}
	info := map[string]any{"input": input}
	schemaProps := map[string]any{
		"input": map[string]any{"type": "object", "properties": props, "required": required, "additionalProperties": false},
	}
	if out != nil {
		info["output"] = map[string]any{"type": "json"}
		schemaProps["output"] = map[string]any{
			"type": "object",
			"properties": map[string]any{
				"type":    map[string]any{"type": "string"},
				"example": withType(out),
			},
			"required": []any{"type"},
		}
	}
	schema := map[string]any{
		"$schema":    bazaarSchemaDraft,
		"type":       "object",
		"properties": schemaProps,
		"required":   []any{"input"},
	}
	if len(defs) > 0 {
		schema["$defs"] = defs
	}
	ext := map[string]any{"info": info, "schema": schema}
	raw, err := json.Marshal(ext)
	if err != nil {
		return nil, err
	}
	if len(raw) > maxBazaarJSON {
		return nil, fmt.Errorf("the discovery extension is %d bytes; at most %d fit the headers that carry it", len(raw), maxBazaarJSON)
	}
	// Round-trip through JSON, so the schema is checked in the form clients receive.
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, err
	}
	m := doc.(map[string]any)
	sch, err := compileSchema(m["schema"])
	if err != nil {
		return nil, err
	}
	if err := sch.Validate(m["info"]); err != nil {
		return nil, fmt.Errorf("the discovery info does not obey its schema: %v", err)
	}
	return ext, nil
}

// withType is {"type": "object"} overlaid with s, as @x402/extensions embeds a schema.
func withType(s map[string]any) map[string]any {
	out := map[string]any{"type": "object"}
	for k, v := range s {
		out[k] = v
	}
	return out
}

// userSchema reads one schema file's content: a JSON object that is a valid JSON Schema
// and refers to nothing outside itself. Its $defs move to the extension's root under
// "<prefix>_<name>", and its references are rewritten to match, since the schema is
// embedded in the extension's. nil raw is no schema.
func userSchema(prefix string, raw json.RawMessage) (schema, defs map[string]any, err error) {
	defs = map[string]any{}
	if len(raw) == 0 {
		return nil, defs, nil
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, nil, fmt.Errorf("is not JSON: %v", err)
	}
	m, ok := doc.(map[string]any)
	if !ok {
		return nil, nil, errors.New("is not a JSON object")
	}
	if err := checkRefs(m); err != nil {
		return nil, nil, err
	}
	if _, err := compileSchema(m); err != nil {
		return nil, nil, err
	}
	delete(m, "$schema")
	if d, ok := m["$defs"].(map[string]any); ok {
		for k, v := range d {
			defs[prefix+"_"+k] = v
		}
		delete(m, "$defs")
	}
	rewriteRefs(m, "#/$defs/", "#/$defs/"+prefix+"_")
	return m, defs, nil
}

// checkRefs refuses every $ref that leaves the document, and every $id and
// $dynamicRef (which name other documents): only "#/$defs/…" references are kept, as
// discovery services refuse the rest (@x402/extensions hasExternalSchemaReference).
func checkRefs(node any) error {
	switch v := node.(type) {
	case []any:
		for _, e := range v {
			if err := checkRefs(e); err != nil {
				return err
			}
		}
	case map[string]any:
		for k, e := range v {
			switch k {
			case "$ref":
				s, _ := e.(string)
				if !strings.HasPrefix(s, "#/$defs/") {
					return fmt.Errorf("$ref %q refers outside the file: only \"#/$defs/…\" references are allowed", clipString(s))
				}
			case "$id", "$dynamicRef", "$anchor", "$dynamicAnchor":
				return fmt.Errorf("%s is not allowed: a discovery schema is one document without identifiers", k)
			}
			if err := checkRefs(e); err != nil {
				return err
			}
		}
	}
	return nil
}

func rewriteRefs(node any, from, to string) {
	switch v := node.(type) {
	case []any:
		for _, e := range v {
			rewriteRefs(e, from, to)
		}
	case map[string]any:
		for k, e := range v {
			if s, ok := e.(string); ok && k == "$ref" && strings.HasPrefix(s, from) {
				v[k] = to + strings.TrimPrefix(s, from)
				continue
			}
			rewriteRefs(e, from, to)
		}
	}
}

// noLoader refuses to load any document: a schema is checked on its own.
type noLoader struct{}

func (noLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("%s is outside the schema", clipString(url))
}

// compileSchema compiles doc as a draft 2020-12 schema, checked against its meta-schema,
// with nothing loaded from outside.
func compileSchema(doc any) (*jsonschema.Schema, error) {
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.UseLoader(noLoader{})
	const loc = "urn:x402gate:discovery-schema"
	if err := c.AddResource(loc, doc); err != nil {
		return nil, fmt.Errorf("is not a valid JSON Schema: %v", err)
	}
	s, err := c.Compile(loc)
	if err != nil {
		return nil, fmt.Errorf("is not a valid JSON Schema: %v", err)
	}
	return s, nil
}

func printableASCII(s string, max int) bool {
	if s == "" || len(s) > max {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// clipString shortens a configured value for an error message.
func clipString(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}
