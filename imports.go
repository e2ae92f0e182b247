// Package x402gate is the root of x402gate, an x402 payment gate for Caddy. Importing it
// registers every x402gate Caddy module, so that
//
//	xcaddy build --with github.com/x402gate/x402gate@v0.1.0=.
//
// builds a Caddy with them. cmd/caddy is the same build without xcaddy.
package x402gate

import (
	// The Caddy modules, one package per runtime: the x402 app with the x402 and
	// x402_facilitator handlers; the verdict app with the verdict_api handler and the
	// `caddy verdict` commands; the x402_redact log encoder.
	_ "github.com/x402gate/x402gate/caddymodule/logredact"
	_ "github.com/x402gate/x402gate/caddymodule/paygate"
	_ "github.com/x402gate/x402gate/caddymodule/verdictapp"
)

// Version is the x402gate release this source tree is. xcaddy.json pins the same version.
const Version = "v0.1.0"
