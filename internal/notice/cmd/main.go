// Command notice writes NOTICE at the repository's root from the modules that cmd/caddy
// links (docs/licensing.md). Run it from the root: go run ./internal/notice/cmd
package main

import (
	"fmt"
	"os"

	"github.com/x402gate/x402gate/internal/notice"
)

func main() {
	mods, err := notice.Modules(".", "./cmd/caddy")
	if err != nil {
		fmt.Fprintln(os.Stderr, "notice:", err)
		os.Exit(1)
	}
	if err := os.WriteFile("NOTICE", []byte(notice.Text(mods)), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "notice:", err)
		os.Exit(1)
	}
}
