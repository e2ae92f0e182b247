package caddymodule

import (
	"encoding/json"
	"strconv"
	"strings"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/ethereum/go-ethereum/common"

	"github.com/x402gate/x402gate/gate"
)

func init() {
	httpcaddyfile.RegisterGlobalOption("x402", parseGlobalOption)
	httpcaddyfile.RegisterHandlerDirective("x402", parseHandler)
	// A security gate fails closed: after forward_auth puts it before every handle and
	// route block, so `handle /api/* { reverse_proxy … }` can never be reached unpaid
	// (research/caddy.md §1.3).
	httpcaddyfile.RegisterDirectiveOrder("x402", httpcaddyfile.After, "forward_auth")
	httpcaddyfile.RegisterHandlerDirective("x402_facilitator", parseFacilitatorHandler)
	httpcaddyfile.RegisterDirectiveOrder("x402_facilitator", httpcaddyfile.Before, "reverse_proxy")
}

// parseHandler parses the x402 directive and checks its network against the x402
// global option of the same Caddyfile.
func parseHandler(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	g := new(Handler)
	if err := g.UnmarshalCaddyfile(h.Dispenser); err != nil {
		return nil, err
	}
	known := builtinNetworks
	if g.FacilitatorURL != "" {
		// A gate in front of a remote facilitator knows the built-in networks only.
		if _, ok := known.Lookup(g.Network); !ok {
			return nil, h.Errf("x402: network %q is not built in (base, base-sepolia); a remote facilitator needs one of them", g.Network)
		}
		return g, nil
	}
	var app App
	if opt, ok := h.Option("x402").(httpcaddyfile.App); ok {
		if err := json.Unmarshal(opt.Value, &app); err != nil {
			return nil, err
		}
	}
	name := g.Facilitator
	if name == "" {
		name = DefaultFacilitatorName
	}
	fc, ok := app.Facilitators[name]
	if !ok {
		return nil, h.Errf("x402: no bundled facilitator %q: declare it in the global option `x402 { facilitator %s { ... } }`", name, name)
	}
	for _, nc := range fc.Networks {
		n, err := nc.network()
		if err != nil {
			return nil, h.Err(err.Error())
		}
		if m, ok := known.Lookup(g.Network); (ok && m.CAIP2 == n.CAIP2) || g.Network == nc.Name || g.Network == n.Name || g.Network == n.CAIP2 || g.Network == n.ChainID.String() {
			return g, nil
		}
	}
	return nil, h.Errf("x402: network %q is not one of facilitator %q's networks", g.Network, name)
}

// UnmarshalCaddyfile sets up the gate from Caddyfile tokens. Syntax:
//
//	x402 [<matcher>] {
//		price <amount> [<SYMBOL>] | <n> base
//		pay_to <address>
//		network <name>
//		asset <address>
//		asset_name <eip712 name>
//		asset_version <eip712 version>
//		decimals <n>
//		symbol <sym>
//		description <text>
//		mime_type <type>
//		max_timeout <duration>
//		facilitator bundled [<name>] | <url>
//		facilitator_key <placeholder>
//		guardian off | {
//			advertise required|optional
//			fee on|off
//		}
//		pricing_url <url>
//		retry_max <n>
//		retry_grace <duration>
//	}
//
// price and pay_to may hold placeholders, expanded per request.
func (g *Handler) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	if err := blockOnly(d); err != nil {
		return err
	}
	for d.NextBlock(0) {
		opt := d.Val()
		switch opt {
		case "price":
			args := d.RemainingArgs()
			if len(args) == 0 || len(args) > 2 {
				return d.ArgErr()
			}
			g.Price = strings.Join(args, " ")
			if !strings.Contains(g.Price, "{") {
				// The asset's decimals and symbol are known at Provision, which checks
				// them; here the form and the sign are checked.
				symbol := ""
				if len(args) == 2 && !strings.EqualFold(args[1], "base") {
					symbol = args[1]
				}
				if _, err := gate.ParsePrice(g.Price, 36, symbol); err != nil {
					return d.Errf("x402: %v", err)
				}
			}
		case "pay_to":
			if err := oneArg(d, &g.PayTo); err != nil {
				return err
			}
			if !strings.Contains(g.PayTo, "{") && !isAddress(g.PayTo) {
				return d.Errf("x402: pay_to %q is not a 0x address", g.PayTo)
			}
		case "network":
			if err := oneArg(d, &g.Network); err != nil {
				return err
			}
		case "asset":
			if err := oneArg(d, &g.Asset); err != nil {
				return err
			}
			if !isAddress(g.Asset) {
				return d.Errf("x402: asset %q is not a 0x address", g.Asset)
			}
		case "asset_name", "asset_version", "symbol", "description", "mime_type", "facilitator_key", "pricing_url":
			dst := map[string]*string{
				"asset_name": &g.AssetName, "asset_version": &g.AssetVersion, "symbol": &g.Symbol,
				"description": &g.Description, "mime_type": &g.MimeType,
				"facilitator_key": &g.FacilitatorKey, "pricing_url": &g.PricingURL,
			}[opt]
			if err := oneArg(d, dst); err != nil {
				return err
			}
		case "decimals":
			var v string
			if err := oneArg(d, &v); err != nil {
				return err
			}
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 || n > 36 {
				return d.Errf("x402: decimals %q is not in 0..36", v)
			}
			g.Decimals = n
		case "max_timeout", "retry_grace":
			dst := &g.MaxTimeout
			if opt == "retry_grace" {
				dst = &g.RetryGrace
			}
			if err := durationArg(d, dst); err != nil {
				return err
			}
		case "facilitator":
			args := d.RemainingArgs()
			switch {
			case len(args) == 0 || len(args) > 2:
				return d.ArgErr()
			case args[0] == "bundled":
				if len(args) == 2 {
					g.Facilitator = args[1]
				}
			case len(args) == 1 && (strings.HasPrefix(args[0], "http://") || strings.HasPrefix(args[0], "https://")):
				g.FacilitatorURL = args[0]
			default:
				return d.Errf("x402: facilitator wants `bundled [<name>]` or an http(s) url")
			}
		case "guardian":
			if err := g.unmarshalGuardian(d); err != nil {
				return err
			}
		case "retry_max":
			var v string
			if err := oneArg(d, &v); err != nil {
				return err
			}
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				return d.Errf("x402: retry_max %q is not a non-negative integer", v)
			}
			g.RetryMax = &n
		default:
			return d.Errf("x402: unrecognized subdirective %q", opt)
		}
	}
	switch {
	case g.PayTo == "":
		return d.Err("x402: pay_to is required")
	case g.Price == "":
		return d.Err("x402: price is required")
	case g.Network == "":
		return d.Err("x402: network is required")
	case g.FacilitatorKey != "" && g.FacilitatorURL == "":
		return d.Err("x402: facilitator_key is only for a remote facilitator url")
	}
	return nil
}

func (g *Handler) unmarshalGuardian(d *caddyfile.Dispenser) error {
	if d.NextArg() {
		if d.Val() != "off" || d.NextArg() {
			return d.Errf("x402: guardian wants `off` or a block")
		}
		g.Guardian = nil
		return nil
	}
	gc := new(GuardianConfig)
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		opt := d.Val()
		var v string
		if err := oneArg(d, &v); err != nil {
			return err
		}
		switch opt {
		case "advertise":
			if v != gate.AdvertiseRequired && v != gate.AdvertiseOptional {
				return d.Errf("x402: guardian advertise %q is not required or optional", v)
			}
			gc.Advertise = v
		case "fee":
			switch v {
			case "on":
				gc.Fee = true
			case "off":
				gc.Fee = false
			default:
				return d.Errf("x402: guardian fee %q is not on or off", v)
			}
		default:
			return d.Errf("x402: unrecognized guardian option %q", opt)
		}
	}
	g.Guardian = gc
	return nil
}

// parseFacilitatorHandler parses the x402_facilitator directive.
func parseFacilitatorHandler(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	f := new(FacilitatorHandler)
	return f, f.UnmarshalCaddyfile(h.Dispenser)
}

// UnmarshalCaddyfile sets up the facilitator API handler. Syntax:
//
//	x402_facilitator [<matcher>] {
//		facilitator [<name>]
//		api_key <placeholder>
//		health_detail on|off
//		strip_prefix <path>
//	}
func (f *FacilitatorHandler) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	if err := blockOnly(d); err != nil {
		return err
	}
	for d.NextBlock(0) {
		opt := d.Val()
		args := d.RemainingArgs()
		switch opt {
		case "facilitator":
			if len(args) > 1 {
				return d.ArgErr()
			}
			f.Facilitator = DefaultFacilitatorName
			if len(args) == 1 {
				f.Facilitator = args[0]
			}
		case "api_key":
			if len(args) != 1 {
				return d.ArgErr()
			}
			f.APIKey = args[0]
		case "health_detail":
			if len(args) != 1 || (args[0] != "on" && args[0] != "off") {
				return d.Errf("x402_facilitator: health_detail wants on or off")
			}
			f.HealthDetail = args[0] == "on"
		case "strip_prefix":
			if len(args) != 1 || !strings.HasPrefix(args[0], "/") {
				return d.Errf("x402_facilitator: strip_prefix wants a path starting with /")
			}
			f.StripPrefix = args[0]
		default:
			return d.Errf("x402_facilitator: unrecognized subdirective %q", opt)
		}
	}
	return nil
}

// blockOnly consumes a directive's or global option's name and rejects arguments after
// it: everything is set in its block.
func blockOnly(d *caddyfile.Dispenser) error {
	d.Next() // directive or option name
	if d.NextArg() {
		return d.ArgErr()
	}
	return nil
}

// oneArg reads the single argument of the current option into dst.
func oneArg(d *caddyfile.Dispenser, dst *string) error {
	if !d.Args(dst) || d.NextArg() {
		return d.ArgErr()
	}
	return nil
}

// durationArg reads the single argument of the current option, a positive duration,
// into dst.
func durationArg(d *caddyfile.Dispenser, dst *caddy.Duration) error {
	opt := d.Val()
	var v string
	if err := oneArg(d, &v); err != nil {
		return err
	}
	dur, err := caddy.ParseDuration(v)
	if err != nil || dur <= 0 {
		return d.Errf("%s %q is not a positive duration", opt, v)
	}
	*dst = caddy.Duration(dur)
	return nil
}

func isAddress(s string) bool {
	return strings.HasPrefix(s, "0x") && common.IsHexAddress(s)
}

// Interface guards
var (
	_ caddyfile.Unmarshaler = (*App)(nil)
	_ caddyfile.Unmarshaler = (*Handler)(nil)
	_ caddyfile.Unmarshaler = (*FacilitatorHandler)(nil)
)
