// Command caddy is a custom Caddy build with the standard modules and x402gate's modules.
// It mirrors what `xcaddy build --with github.com/x402gate/x402gate` generates (see xcaddy.json).
package main

import (
	_ "time/tzdata"

	caddycmd "github.com/caddyserver/caddy/v2/cmd"

	_ "github.com/caddyserver/caddy/v2/modules/standard"
	_ "github.com/x402gate/x402gate"
)

func main() { caddycmd.Main() }
