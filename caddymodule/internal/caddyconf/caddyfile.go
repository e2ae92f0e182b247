// Package caddyconf holds what the Caddy runtimes of x402gate (caddymodule/paygate,
// caddymodule/verdictapp, caddymodule/logredact) parse alike: Caddyfile arguments whose
// errors never quote a secret, secrets given as placeholders, and a SQL database's config.
// It registers no Caddy module.
package caddyconf

import (
	"strings"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
)

// BlockOnly consumes a directive's or global option's name and rejects arguments after
// it: everything is set in its block.
func BlockOnly(d *caddyfile.Dispenser) error {
	d.Next() // directive or option name
	if d.NextArg() {
		return ArgErr(d, nil)
	}
	return nil
}

// ArgErr is d.ArgErr() without the word the dispenser stopped at, which can be the value of
// a secret (a database URL with its password, a key): it names the option, the first word of
// the line that is not a brace (`} journal …` closes a block first), instead, and adds the
// option's syntax from syntax when it has one (docs/caddy.md#errors).
func ArgErr(d *caddyfile.Dispenser, syntax map[string]string) error {
	line, opt, back := d.Line(), d.Val(), 0
	for d.Prev() {
		back++
		if d.Line() != line {
			break
		}
		if v := d.Val(); v != "{" && v != "}" {
			opt = v
		}
	}
	for ; back > 0; back-- {
		d.Next()
	}
	if opt == "{" || opt == "}" {
		return d.Errf("wrong number of values around %q", opt)
	}
	if u, ok := syntax[opt]; ok {
		return d.Errf("wrong number of values for %s; syntax: %s", opt, u)
	}
	return d.Errf("wrong number of values for %s", opt)
}

// OneArg reads the single argument of the current option into dst.
func OneArg(d *caddyfile.Dispenser, dst *string) error {
	if !d.Args(dst) || d.NextArg() {
		return ArgErr(d, nil)
	}
	return nil
}

// OptionTokens remembers where a block sets each option, so a check made once the block
// is read (a Validate) points at the offending option's line, not at the closing brace.
type OptionTokens map[string]caddyfile.Token

// Set records the current token as where option is set.
func (o OptionTokens) Set(option string, d *caddyfile.Dispenser) { o[option] = d.Token() }

// ErrAt wraps err with the file and line of option. When the block does not set it (a
// required option that is missing), the line is that of its network ("<network>/network")
// for a network's option, of its block ("accept 2") for a block's option, else the
// directive's own (""), else d's current token.
func (o OptionTokens) ErrAt(d *caddyfile.Dispenser, option string, err error) error {
	tok, ok := o[option]
	if net, _, isNet := strings.Cut(option, "/"); !ok && isNet {
		// an option a block leaves out: the block's line (accept 2), else its network's
		if tok, ok = o[net]; !ok {
			tok, ok = o[net+"/network"]
		}
	}
	if !ok {
		tok, ok = o[""]
	}
	if !ok {
		return d.WrapErr(err)
	}
	at := caddyfile.NewDispenser([]caddyfile.Token{tok})
	at.Next()
	return at.WrapErr(err)
}
