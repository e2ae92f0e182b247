package logredact

import (
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
)

func TestRedactEncoderCaddyfile(t *testing.T) {
	for _, tc := range []struct{ input, wrap, wantErr string }{
		{input: "x402_redact"},
		{input: "x402_redact json", wrap: `{"format":"json"}`},
		{input: "x402_redact console", wrap: `{"format":"console"}`},
		{input: "x402_redact logfmt", wantErr: "unknown format"},
		{input: "x402_redact json console", wantErr: "wrong number of values for x402_redact"},
	} {
		var e RedactEncoder
		err := e.UnmarshalCaddyfile(caddyfile.NewTestDispenser(tc.input))
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%q: error = %v, want %q", tc.input, err, tc.wantErr)
			}
			continue
		}
		if err != nil || string(e.WrappedRaw) != tc.wrap {
			t.Errorf("%q: wrap = %s, err = %v; want %s", tc.input, e.WrappedRaw, err, tc.wrap)
		}
	}
}
