package paygate

import (
	"errors"
	"fmt"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/x402gate/x402gate/gate"
)

// PassOptions is the directive's `pass <duration> [<scope>]` (docs/caddy.md#access-passes).
type PassOptions struct {
	// Duration is how long one payment lets its payer in. Required.
	Duration caddy.Duration `json:"duration,omitempty"`
	// Scope is the path prefix the pass covers, a directory such as /premium/. Default:
	// the paid request's directory.
	Scope string `json:"scope,omitempty"`
}

// unmarshalPass reads `pass <duration> [<scope>]` and `pass_key <placeholder>...`.
func (h *Handler) unmarshalPass(d *caddyfile.Dispenser) error {
	opt := d.Val()
	args := d.RemainingArgs()
	if opt == "pass_key" {
		if len(args) == 0 {
			return argErr(d)
		}
		h.PassKeys = append(h.PassKeys, args...)
		return nil
	}
	if len(args) == 0 || len(args) > 2 {
		return argErr(d)
	}
	dur, err := caddy.ParseDuration(args[0])
	if err != nil || dur <= 0 {
		return d.Errf("pass %q is not a positive duration", args[0])
	}
	h.Pass = &PassOptions{Duration: caddy.Duration(dur)}
	if len(args) == 2 {
		h.Pass.Scope = args[1]
	}
	return nil
}

// passConfig is the gate's pass configuration, keys unexpanded.
func (h *Handler) passConfig() gate.PassConfig {
	c := gate.PassConfig{Keys: h.PassKeys}
	if h.Pass != nil {
		c.Duration, c.Scope = time.Duration(h.Pass.Duration), h.Pass.Scope
	}
	return c
}

// validatePass checks that every pass key is a placeholder, never the key itself, and
// that keys come with a pass.
func (h *Handler) validatePass() error {
	if h.Pass == nil && len(h.PassKeys) > 0 {
		return &gate.ConfigError{Option: "pass_key", Err: errors.New("is only for a route with pass")}
	}
	for _, k := range h.PassKeys {
		if err := placeholderOnly("pass_key", k); err != nil {
			return &gate.ConfigError{Option: "pass_key", Err: errors.New("must be an {env.*} or {file.*} placeholder, never the key itself")}
		}
	}
	return nil
}

// resolvePassKeys expands the pass keys' placeholders for the gate.
func (h *Handler) resolvePassKeys(cfg *gate.Config) error {
	if len(h.PassKeys) == 0 {
		return nil
	}
	repl := caddy.NewReplacer()
	keys := make([]string, len(h.PassKeys))
	for i, k := range h.PassKeys {
		if keys[i] = resolveSecret(repl, k); keys[i] == "" {
			return fmt.Errorf("pass_key %d resolved to an empty value", i+1)
		}
	}
	cfg.Pass.Keys = keys
	return nil
}

// setPassPlaceholders tells the upstream that a pass let the request in:
// {http.x402.pass} is how it came ("cookie", "header" or "sign-in-with-x"), with the
// pass's payer, network, transaction, scope and expiry.
func setPassPlaceholders(repl *caddy.Replacer, p *gate.Pass) {
	repl.Set("http.x402.pass", p.Via)
	repl.Set("http.x402.payer", p.Payer)
	repl.Set("http.x402.network", p.Network)
	repl.Set("http.x402.tx", p.Transaction)
	repl.Set("http.x402.pass_scope", p.Scope)
	repl.Set("http.x402.pass_expires", p.Expires.UTC().Format(time.RFC3339))
	// Nothing was paid by this request.
	repl.Set("http.x402.amount", "")
	repl.Set("http.x402.retry", false)
}
