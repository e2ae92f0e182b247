package gate_test

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/x402gate/x402gate/gate"
	"github.com/x402gate/x402gate/x402"
)

// TestDiscoveryFillsTheBazaarExtension: a route's discovery block names the service and
// its tags in every v2 resource and declares the bazaar extension in every 402; each
// mistake in the block is a ConfigError named after it.
func TestDiscoveryFillsTheBazaarExtension(t *testing.T) {
	cfg := rulesRoute()
	cfg.Discovery = &gate.DiscoveryConfig{
		ServiceName: "Weather", Tags: []string{"weather", "forecast"}, Method: "GET",
		InputSchema:  json.RawMessage(`{"type":"object","properties":{"city":{"$ref":"#/$defs/city"}},"required":["city"],"$defs":{"city":{"type":"string"}}}`),
		OutputSchema: json.RawMessage(`{"type":"object","properties":{"temp":{"type":"number"}}}`),
	}
	s := newRulesServer(t, cfg, gate.Options{})
	res, _ := s.get(t, "/weather")
	raw, err := base64.StdEncoding.DecodeString(res.Header.Get(x402.HeaderPaymentRequired))
	if err != nil {
		t.Fatal(err)
	}
	var pr struct {
		Resource   map[string]any `json:"resource"`
		Extensions map[string]any `json:"extensions"`
	}
	if err := json.Unmarshal(raw, &pr); err != nil {
		t.Fatal(err)
	}
	if pr.Resource["serviceName"] != "Weather" || len(pr.Resource["tags"].([]any)) != 2 {
		t.Errorf("resource %v lacks the service name and tags", pr.Resource)
	}
	ext, ok := pr.Extensions[gate.BazaarExtension].(map[string]any)
	if !ok {
		t.Fatalf("no bazaar extension in %v", pr.Extensions)
	}
	raw, _ = json.Marshal(ext)
	for _, want := range []string{`"method":"GET"`, `"type":"http"`, `"queryParams"`, `"#/$defs/input_city"`, `"temp"`} {
		if !strings.Contains(string(raw), want) {
			t.Errorf("bazaar extension %s lacks %s", raw, want)
		}
	}
	// That the info obeys the schema is discovery.TestExtensionObeysItsSchema.

	bad := []struct {
		name   string
		d      gate.DiscoveryConfig
		option string
		msg    string
	}{
		// Each rule of the block is discovery's (discovery.TestValidateNamesTheOption); the
		// gate names its option after the block.
		{"not a JSON Schema", gate.DiscoveryConfig{InputSchema: json.RawMessage(`{"type":"objekt"}`)}, "discovery/input_schema", "valid JSON Schema"},
		{"a tag twice", gate.DiscoveryConfig{Tags: []string{"a", "A"}}, "discovery/tags", "twice"},
		{"another description", gate.DiscoveryConfig{Description: "other"}, "discovery/description", "differs"},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			cfg := rulesRoute()
			d := tc.d
			cfg.Discovery = &d
			err := cfg.Validate(nil)
			ce, ok := errors.AsType[*gate.ConfigError](err)
			if !ok || ce.Option != tc.option || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("Validate = %v, want a ConfigError of %q saying %q", err, tc.option, tc.msg)
			}
		})
	}
}
