package discovery

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/x402gate/x402gate/gate/setting"
)

// TestExtensionObeysItsSchema: the extension declares the route's method and schemas in
// the shape of @x402/extensions, the user's $defs move to the root under their prefix, and
// the info obeys the schema, as a discovery service checks it.
func TestExtensionObeysItsSchema(t *testing.T) {
	for _, c := range []struct {
		method string
		want   []string
	}{
		{"", []string{`"method":"GET"`, `"type":"http"`, `"queryParams"`, `"#/$defs/input_city"`, `"temp"`}},
		{"POST", []string{`"method":"POST"`, `"bodyType":"json"`, `"body"`, `"#/$defs/input_city"`}},
	} {
		t.Run("method "+c.method, func(t *testing.T) {
			cfg := &Config{
				ServiceName: "Weather", Tags: []string{"weather", "forecast"}, Method: c.method,
				InputSchema:  json.RawMessage(`{"type":"object","properties":{"city":{"$ref":"#/$defs/city"}},"required":["city"],"$defs":{"city":{"type":"string"}}}`),
				OutputSchema: json.RawMessage(`{"type":"object","properties":{"temp":{"type":"number"}}}`),
			}
			ext, err := cfg.Extension()
			if err != nil {
				t.Fatal(err)
			}
			raw, _ := json.Marshal(ext)
			for _, want := range c.want {
				if !strings.Contains(string(raw), want) {
					t.Errorf("extension %s lacks %s", raw, want)
				}
			}
			// Round-trip through JSON, as a client receives it.
			var m map[string]any
			if err := json.Unmarshal(raw, &m); err != nil {
				t.Fatal(err)
			}
			sch, err := compileSchema(m["schema"])
			if err != nil {
				t.Fatal(err)
			}
			if err := sch.Validate(m["info"]); err != nil {
				t.Errorf("info does not obey the schema: %v", err)
			}
		})
	}
}

// TestValidateNamesTheOption: each mistake is a *setting.Error naming the option as a
// configuration file spells it.
func TestValidateNamesTheOption(t *testing.T) {
	for _, tc := range []struct {
		name   string
		c      Config
		option string
		msg    string
	}{
		{"an external $ref", Config{InputSchema: json.RawMessage(`{"type":"object","properties":{"a":{"$ref":"https://example.com/a.json"}}}`)}, "input_schema", "outside"},
		{"a $ref to another file", Config{OutputSchema: json.RawMessage(`{"$ref":"other.json#/x"}`)}, "output_schema", "outside"},
		{"an $id", Config{InputSchema: json.RawMessage(`{"$id":"https://example.com/s","type":"object"}`)}, "input_schema", "$id"},
		{"not a JSON Schema", Config{InputSchema: json.RawMessage(`{"type":"objekt"}`)}, "input_schema", "valid JSON Schema"},
		{"not JSON", Config{InputSchema: json.RawMessage(`{"type":`)}, "input_schema", "JSON"},
		{"not an object", Config{InputSchema: json.RawMessage(`[]`)}, "input_schema", "object"},
		{"a long service name", Config{ServiceName: strings.Repeat("s", 33)}, "service_name", "32"},
		{"a service name with a control character", Config{ServiceName: "a\nb"}, "service_name", "printable"},
		{"six tags", Config{Tags: []string{"a", "b", "c", "d", "e", "f"}}, "tags", "at most"},
		{"a tag twice", Config{Tags: []string{"a", "A"}}, "tags", "twice"},
		{"an empty tag", Config{Tags: []string{""}}, "tags", "printable"},
		{"an unknown method", Config{Method: "TRACE"}, "method", "TRACE"},
		{"an extension over 8 KiB", Config{OutputSchema: json.RawMessage(`{"description":"` + strings.Repeat("x", 9000) + `"}`)}, "input_schema", "bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.c.Validate()
			e, ok := errors.AsType[*setting.Error](err)
			if !ok || e.Option != tc.option || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("Validate = %v, want a *setting.Error of %q saying %q", err, tc.option, tc.msg)
			}
		})
	}
	if err := (&Config{}).Validate(); err != nil {
		t.Errorf("the empty Config: %v", err)
	}
}
