package notice

import (
	"os"
	"strings"
	"testing"
)

// TestNoticeListsEveryLinkedModule: NOTICE at the repository's root lists exactly the
// modules linked into ./cmd/caddy, at their versions, with their licences. Regenerate
// the list with `go run ./internal/notice/cmd` after a dependency changes.
func TestNoticeListsEveryLinkedModule(t *testing.T) {
	mods, err := Modules("../..", "./cmd/caddy")
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("../../NOTICE")
	if err != nil {
		t.Fatal(err)
	}
	_, list, ok := strings.Cut(string(b), listStart)
	if !ok {
		t.Fatalf("NOTICE has no line %q", strings.TrimSpace(listStart))
	}
	if want := Render(mods); list != want {
		t.Errorf("NOTICE's module list is stale; run `go run ./internal/notice/cmd` (want %d modules)", len(mods))
	}
	for _, m := range mods {
		if m.Path == "github.com/ethereum/go-ethereum" && !strings.Contains(strings.Join(m.Licenses, ","), "LGPL-3.0") {
			t.Errorf("go-ethereum is read as %v, want LGPL-3.0 among them", m.Licenses)
		}
	}
}

func TestClassify(t *testing.T) {
	for text, want := range map[string]string{
		"GNU LESSER GENERAL PUBLIC LICENSE\n Version 3, 29 June 2007 ... GNU GENERAL PUBLIC LICENSE": "LGPL-3.0",
		"Apache License\nVersion 2.0, January 2004":                                                  "Apache-2.0",
		"Permission is hereby granted, free of charge, to any person":                                "MIT",
		"Redistributions in binary form must reproduce ... Neither the name of Google":               "BSD-3-Clause",
		"Redistributions in binary\n form must reproduce the above":                                  "BSD-2-Clause",
		"All rights reserved, no licence granted":                                                    "",
	} {
		if got := classify([]byte(text)); got != want {
			t.Errorf("classify(%.30q) = %q, want %q", text, got, want)
		}
	}
}
