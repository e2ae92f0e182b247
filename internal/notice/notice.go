// Package notice lists the licences of the modules linked into our Caddy binary, for the
// NOTICE file at the repository's root (docs/licensing.md). It reads each module's
// licence file from the module cache and names its licence by the licence's own words.
package notice

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// Module is one module linked into the binary and the licences its files name.
type Module struct {
	Path     string
	Version  string
	Licenses []string // SPDX identifiers, sorted
}

// licenseFile matches the names of licence files at a module's root.
var licenseFile = regexp.MustCompile(`(?i)^(licen[cs]e|copying|copying\.lesser|unlicense)(\.(md|txt))?$`)

// markers name a licence by a phrase of its text. The first match wins, so the more
// specific texts come first (the MPL names the LGPL as a secondary licence, the LGPL
// quotes the GPL, BSD-3 contains BSD-2's clauses).
var markers = []struct{ spdx, phrase string }{
	{"MPL-2.0", "Mozilla Public License"},
	{"LGPL-3.0", "GNU LESSER GENERAL PUBLIC LICENSE"},
	{"GPL-3.0", "GNU GENERAL PUBLIC LICENSE"},
	{"Apache-2.0", "Apache License"},
	{"BSD-3-Clause", "Neither the name"},
	{"BSD-3-Clause", "names of its contributors may be used"},
	{"BSD-2-Clause", "Redistributions in binary form must reproduce"},
	{"MIT", "Permission is hereby granted, free of charge"},
	{"ISC", "Permission to use, copy, modify, and/or distribute this software for any"},
	{"ISC", "Permission to use, copy, modify, and distribute this software for any"},
	{"Unlicense", "This is free and unencumbered software released into the public domain"},
	{"CC0-1.0", "Creative Commons"},
}

// classify names the licence of one licence file's text, or "" when it is none we know.
func classify(text []byte) string {
	t := bytes.Join(bytes.Fields(text), []byte(" "))
	for _, m := range markers {
		if bytes.Contains(bytes.ToLower(t), bytes.ToLower([]byte(m.phrase))) {
			return m.spdx
		}
	}
	return ""
}

// Modules lists the modules that `go list -deps pkg` links, run in dir, except the main
// module, with the licences of their root's licence files. A module without a licence
// file, or with one we cannot name, is an error: it must be looked at by hand.
func Modules(dir, pkg string) ([]Module, error) {
	cmd := exec.Command("go", "list", "-deps", "-f", "{{with .Module}}{{if not .Main}}{{.Path}}|{{.Version}}|{{.Dir}}{{end}}{{end}}", pkg)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list: %w", err)
	}
	seen := map[string]bool{}
	var mods []Module
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if line == "" || seen[line] {
			continue
		}
		seen[line] = true
		parts := strings.SplitN(line, "|", 3)
		if len(parts) != 3 {
			return nil, fmt.Errorf("go list: unexpected line %q", line)
		}
		lic, err := licenses(parts[2])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", parts[0], err)
		}
		mods = append(mods, Module{Path: parts[0], Version: parts[1], Licenses: lic})
	}
	sort.Slice(mods, func(i, j int) bool { return mods[i].Path < mods[j].Path })
	return mods, nil
}

// licenses names the licences of the licence files at a module's root.
func licenses(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	set := map[string]bool{}
	for _, e := range entries {
		if e.IsDir() || !licenseFile.MatchString(e.Name()) {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		if l := classify(b); l != "" {
			set[l] = true
		}
	}
	if len(set) == 0 {
		return nil, fmt.Errorf("no licence file we can name in %s", dir)
	}
	if set["LGPL-3.0"] {
		delete(set, "GPL-3.0") // the LGPL's COPYING.LESSER adds its permissions to the GPL's COPYING
	}
	out := make([]string, 0, len(set))
	for l := range set {
		out = append(out, l)
	}
	sort.Strings(out)
	return out, nil
}

// Render writes the module table of NOTICE: one line per module, its path, version and
// licences.
func Render(mods []Module) string {
	var b strings.Builder
	for _, m := range mods {
		fmt.Fprintf(&b, "%s %s: %s\n", m.Path, m.Version, strings.Join(m.Licenses, ", "))
	}
	return b.String()
}

// listStart is the line of NOTICE after which the module list starts.
const listStart = "Modules linked into cmd/caddy (path version: licences):\n"

// Header is NOTICE's text above the module list.
const Header = `x402gate
Copyright 2026 The x402gate Authors

This product is licensed under the Apache License, Version 2.0 (LICENSE).

A binary built from it (cmd/caddy, or xcaddy with our module) also contains the modules
listed below, each under its own licence. Most are permissive (Apache-2.0, MIT, BSD, ISC,
MPL-2.0). One is not:

go-ethereum (github.com/ethereum/go-ethereum) is licensed under the GNU Lesser General
Public License v3.0 (LGPL-3.0) for its library packages, which are all that x402gate
links; its command-line programs are GPL-3.0 and are not linked. Go links statically, so a
binary that you distribute contains go-ethereum's code. LGPL-3.0 section 4 then asks you to:
  - say that the binary uses go-ethereum and that go-ethereum is under LGPL-3.0, and ship
    the texts of the GPL-3.0 and the LGPL-3.0 with it (go-ethereum's COPYING and
    COPYING.LESSER, in its module);
  - give the recipients go-ethereum's source at the version you linked, or point to it;
  - let them relink the binary with a modified go-ethereum. x402gate's source is public
    under Apache-2.0, so this holds when you ship or point to the source of your build
    (our module and go.mod): a recipient adds a replace directive for go-ethereum and runs
    go build again.
Using x402gate as a service over a network, without distributing the binary, asks none of
this. docs/licensing.md says the same at greater length; this is not legal advice.

`

// Text is the whole NOTICE for mods.
func Text(mods []Module) string { return Header + listStart + Render(mods) }
