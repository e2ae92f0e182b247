package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/x402gate/x402gate"
)

// xcaddyManifest mirrors the JSON field names of xcaddy's Builder (our convention; xcaddy
// itself reads no config file).
type xcaddyManifest struct {
	CaddyVersion string `json:"caddy_version"`
	Plugins      []struct {
		ModulePath string `json:"module_path"`
		Version    string `json:"version"`
	} `json:"plugins"`
}

// TestManifestMatchesBuild checks that xcaddy.json, go.mod and this main.go describe the
// same build: the Caddy version we require, and a blank import of every plugin module.
func TestManifestMatchesBuild(t *testing.T) {
	root := filepath.Join("..", "..")
	raw, err := os.ReadFile(filepath.Join(root, "xcaddy.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m xcaddyManifest
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("xcaddy.json: %v", err)
	}
	gomod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	modulePath, caddyVersion := "", ""
	for _, line := range strings.Split(string(gomod), "\n") {
		f := strings.Fields(strings.TrimPrefix(strings.TrimSpace(line), "require "))
		switch {
		case len(f) == 2 && f[0] == "module":
			modulePath = f[1]
		case len(f) >= 2 && f[0] == "github.com/caddyserver/caddy/v2":
			caddyVersion = f[1]
		}
	}
	if caddyVersion == "" || caddyVersion != m.CaddyVersion {
		t.Errorf("xcaddy.json caddy_version %q, go.mod requires %q", m.CaddyVersion, caddyVersion)
	}
	mainSrc, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Plugins) == 0 {
		t.Fatal("xcaddy.json lists no plugin")
	}
	for _, p := range m.Plugins {
		if p.ModulePath != modulePath {
			t.Errorf("plugin %q is not this module %q", p.ModulePath, modulePath)
		}
		if p.Version != x402gate.Version {
			t.Errorf("xcaddy.json pins %s %s, the source says %s", p.ModulePath, p.Version, x402gate.Version)
		}
		if !strings.Contains(string(mainSrc), `_ "`+p.ModulePath+`"`) {
			t.Errorf("cmd/caddy/main.go does not import plugin %q", p.ModulePath)
		}
	}
	if !strings.Contains(string(mainSrc), `_ "github.com/caddyserver/caddy/v2/modules/standard"`) {
		t.Error("cmd/caddy/main.go does not import Caddy's standard modules")
	}
}
