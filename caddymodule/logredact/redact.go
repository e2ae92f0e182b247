// Package logredact keeps secrets out of Caddy's logs: the caddy.logging.encoders.x402_redact
// encoder, and the Caddyfile log directive that uses it by default (docs/caddy.md#secrets).
package logredact

import (
	"encoding/json"
	"fmt"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/modules/logging"

	"github.com/x402gate/x402gate/caddymodule/internal/caddyconf"
	"go.uber.org/zap/zapcore"
)

func init() {
	caddy.RegisterModule(RedactEncoder{})
}

// RedactedHeaders are the request headers the x402_redact encoder deletes from log
// entries: the payment authorizations, the retry token, the access pass, the sign-in-with-x
// proof, the API keys and the verdict app's admin key. Caddy's access log only redacts
// Cookie and Authorization on its own.
var RedactedHeaders = []string{"X-Payment", "Payment-Signature", "X-Verification-Payment", "X-Payment-Retry", "X-Api-Key", "X-Facilitator-Key", "X-Admin-Key", "X-402-Pass", "Sign-In-With-X"}

// RedactEncoder (caddy.logging.encoders.x402_redact) is Caddy's filter encoder with a
// delete filter on request>headers>H for every H of RedactedHeaders. It wraps another
// encoder, json by default.
//
//	log {
//		format x402_redact [json|console]
//	}
type RedactEncoder struct {
	logging.FilterEncoder
}

// CaddyModule returns the Caddy module information.
func (RedactEncoder) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "caddy.logging.encoders.x402_redact",
		New: func() caddy.Module { return new(RedactEncoder) },
	}
}

// RedactedFields are the access log fields the x402_redact encoder deletes: the request
// headers of RedactedHeaders, and the response headers that carry a secret. The retry
// token is issued on a failed answer and an access pass on the paid one (Caddy redacts
// the pass cookie's Set-Cookie itself, unless log_credentials is on).
func RedactedFields() []string {
	fields := make([]string, 0, len(RedactedHeaders)+2)
	for _, h := range RedactedHeaders {
		fields = append(fields, "request>headers>"+h)
	}
	return append(fields, "resp_headers>X-Payment-Retry", "resp_headers>X-402-Pass")
}

// Provision adds the delete filters to any configured ones and provisions the filter
// encoder.
func (e *RedactEncoder) Provision(ctx caddy.Context) error {
	if e.FieldsRaw == nil {
		e.FieldsRaw = map[string]json.RawMessage{}
	}
	for _, f := range RedactedFields() {
		e.FieldsRaw[f] = json.RawMessage(`{"filter":"delete"}`)
	}
	return e.FilterEncoder.Provision(ctx)
}

// UnmarshalCaddyfile sets up the encoder from Caddyfile tokens. Syntax:
//
//	x402_redact [json|console]
func (e *RedactEncoder) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // encoder name
	if d.NextArg() {
		switch format := d.Val(); format {
		case "json", "console":
			e.WrappedRaw = json.RawMessage(fmt.Sprintf(`{"format":%q}`, format))
		default:
			return d.Errf("x402_redact: unknown format %q (want json or console)", format)
		}
	}
	if d.NextArg() {
		return caddyconf.ArgErr(d, nil)
	}
	if d.NextBlock(0) {
		return d.Errf("x402_redact: unexpected block")
	}
	return nil
}

// Interface guards
var (
	_ zapcore.Encoder                  = (*RedactEncoder)(nil)
	_ caddy.Provisioner                = (*RedactEncoder)(nil)
	_ caddyfile.Unmarshaler            = (*RedactEncoder)(nil)
	_ caddy.ConfiguresFormatterDefault = (*RedactEncoder)(nil)
)
