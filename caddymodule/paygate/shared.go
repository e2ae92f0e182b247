package paygate

import (
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/x402gate/x402gate/caddymodule/internal/caddyconf"
	"github.com/x402gate/x402gate/facilitator"
	"github.com/x402gate/x402gate/internal/redact"
)

// The Caddyfile and secret helpers paygate shares with the other runtimes
// (caddymodule/internal/caddyconf), under the names paygate's files use.
var (
	resolveSecret = caddyconf.ResolveSecret
	expanded      = caddyconf.Expanded
	plainWord     = redact.PlainWord
	kindArgs      = caddyconf.KindArgs
	parseDatabase = caddyconf.ParseDatabase
	blockOnly     = caddyconf.BlockOnly
)

// placeholderOnly refuses a secret written into the config itself (caddyconf.PlaceholderOnly),
// as a facilitator.ConfigError of option.
func placeholderOnly(option, v string) error {
	if err := caddyconf.PlaceholderOnly(v); err != nil {
		return &facilitator.ConfigError{Option: option, Err: err}
	}
	return nil
}

// argErr is caddyconf.ArgErr with the syntax of the x402 directive's options.
func argErr(d *caddyfile.Dispenser) error { return caddyconf.ArgErr(d, optionSyntax) }

// optionTokens is caddyconf.OptionTokens: where a block sets each option.
type optionTokens caddyconf.OptionTokens

// set records the current token as where option is set.
func (o optionTokens) set(option string, d *caddyfile.Dispenser) {
	caddyconf.OptionTokens(o).Set(option, d)
}

// errAt wraps err with the file and line of option (caddyconf.OptionTokens.ErrAt).
func (o optionTokens) errAt(d *caddyfile.Dispenser, option string, err error) error {
	return caddyconf.OptionTokens(o).ErrAt(d, option, err)
}
