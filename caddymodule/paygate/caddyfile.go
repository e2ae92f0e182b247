package paygate

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/x402gate/x402gate/facilitator"
	"github.com/x402gate/x402gate/gate"
	"github.com/x402gate/x402gate/x402"
)

func init() {
	httpcaddyfile.RegisterGlobalOption("x402", parseGlobalOption)
	httpcaddyfile.RegisterHandlerDirective("x402", parseHandler)
	// A security gate fails closed: after forward_auth puts it before every handle and
	// route block, so `handle /api/* { reverse_proxy … }` can never be reached unpaid
	// (docs/caddy.md#configuration).
	httpcaddyfile.RegisterDirectiveOrder("x402", httpcaddyfile.After, "forward_auth")
	httpcaddyfile.RegisterHandlerDirective("x402_facilitator", parseFacilitatorHandler)
	httpcaddyfile.RegisterDirectiveOrder("x402_facilitator", httpcaddyfile.Before, "reverse_proxy")
}

// parseHandler parses the x402 directive and checks it against the networks and the
// guardian_mode of its facilitator, declared in the x402 global option of the same
// Caddyfile (the built-in networks for a remote facilitator).
func parseHandler(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	g := new(Handler)
	if err := g.UnmarshalCaddyfile(h.Dispenser); err != nil {
		return nil, err
	}
	var reg *x402.Registry
	var mode facilitator.VerdictMode
	if g.FacilitatorURL == "" {
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
			return nil, g.lines.errAt(h.Dispenser, "facilitator", fmt.Errorf("no bundled facilitator %q: declare it in the global option `x402 { facilitator %s { ... } }`", name, name))
		}
		r, err := fc.Registry()
		if err != nil {
			return nil, h.WrapErr(err) // checked where the global option is parsed
		}
		reg, mode = r, fc.VerdictMode
		if mode == "" {
			mode = facilitator.VerdictOff
		}
	}
	if err := g.validate(reg, mode); err != nil {
		return nil, g.lines.errAt(h.Dispenser, optionOf(err), err)
	}
	return g, nil
}

// UnmarshalCaddyfile sets up the gate from Caddyfile tokens. Syntax:
//
//	x402 [<matcher>] {
//		price <amount> [<SYMBOL>] | <n> base
//		price_min <amount> [<SYMBOL>] | <n> base
//		price_max <amount> [<SYMBOL>] | <n> base
//		pay_to <address>
//		pay_to_allowed <address>...
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
//		insecure_http
//		guardian off | {
//			advertise required|optional
//			fee on|off
//		}
//		pricing_url <url>
//		retry_max <n>
//		retry_grace <duration>
//		accept {
//			network <name>
//			asset <address>
//			asset_name <eip712 name>
//			asset_version <eip712 version>
//			decimals <n>
//			symbol <sym>
//			price <amount> [<SYMBOL>] | <n> base
//			pay_to <address>
//			transfer eip3009|permit2
//		}
//		payment_id optional|required
//		discovery {
//			service_name <name>
//			tags <tag>...
//			description <text>
//			method GET|HEAD|DELETE|POST|PUT|PATCH
//			input_schema <file>
//			output_schema <file>
//		}
//		pass <duration> [<scope>]
//		pass_key <placeholder> [<placeholder>...]
//		paths strict|lenient
//		flow upfront|authorization
//		preflight pass|charge
//		scheme exact|upto
//		transfer eip3009|permit2
//		unmetered max|free
//	}
//
// price and pay_to may hold placeholders, expanded per request; then price_min (and
// optionally price_max) or pay_to_allowed must bound what a request may bring.
//
// paths lenient lets through a path that an upstream could read as another, which the
// gate otherwise answers 400 ambiguous_path (docs/caddy.md#path-matching).
//
// flow authorization settles only after the next handler answered below 400, with its
// answer buffered until then; preflight charge answers a CORS preflight the 402
// challenge instead of passing it on uncharged (docs/gate.md#payment-flows,
// docs/gate.md#cors-preflights).
//
// transfer permit2 takes the payment by Permit2, for any ERC-20 (docs/gate.md#permit2);
// scheme upto meters: price is the most a request costs, the next handler reports the
// cost in the X402-Cost header or trailer, and unmetered says what an answer without one
// is charged (docs/gate.md#metering).
//
// Each accept block is one way to pay (docs/gate.md#several-ways-to-pay): with
// blocks, network, asset, price and pay_to above are only their defaults. The schema
// files of discovery are read when the Caddyfile is adapted.
func (h *Handler) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	if err := blockOnly(d); err != nil {
		return err
	}
	h.lines = optionTokens{"": d.Token()}
	for d.NextBlock(0) {
		opt := d.Val()
		h.lines.set(opt, d)
		switch opt {
		case "price", "price_min", "price_max":
			args := d.RemainingArgs()
			if len(args) == 0 || len(args) > 2 {
				return argErr(d)
			}
			*map[string]*string{"price": &h.Price, "price_min": &h.PriceMin, "price_max": &h.PriceMax}[opt] = strings.Join(args, " ")
		case "pay_to_allowed":
			args := d.RemainingArgs()
			if len(args) == 0 {
				return argErr(d)
			}
			h.PayToAllowed = append(h.PayToAllowed, args...)
		case "pay_to":
			if err := oneArg(d, &h.PayTo); err != nil {
				return err
			}
		case "network":
			if err := oneArg(d, &h.Network); err != nil {
				return err
			}
		case "asset":
			if err := oneArg(d, &h.Asset); err != nil {
				return err
			}
		case "asset_name", "asset_version", "symbol", "description", "mime_type", "facilitator_key", "pricing_url":
			dst := map[string]*string{
				"asset_name": &h.AssetName, "asset_version": &h.AssetVersion, "symbol": &h.Symbol,
				"description": &h.Description, "mime_type": &h.MimeType,
				"facilitator_key": &h.FacilitatorKey, "pricing_url": &h.PricingURL,
			}[opt]
			if err := oneArg(d, dst); err != nil {
				return err
			}
		case "decimals":
			if err := intArg(d, &h.Decimals); err != nil {
				return err
			}
		case "max_timeout", "retry_grace":
			dst := &h.MaxTimeout
			if opt == "retry_grace" {
				dst = &h.RetryGrace
			}
			if err := durationArg(d, dst); err != nil {
				return err
			}
		case "facilitator":
			args := d.RemainingArgs()
			switch {
			case len(args) == 0 || len(args) > 2:
				return argErr(d)
			case args[0] == "bundled":
				if len(args) == 2 {
					h.Facilitator = args[1]
				}
			case len(args) == 1 && (strings.HasPrefix(args[0], "http://") || strings.HasPrefix(args[0], "https://")):
				h.FacilitatorURL = args[0]
			default:
				return d.Errf("facilitator wants `bundled [<name>]` or an http(s) url")
			}
		case "insecure_http":
			if d.NextArg() {
				return argErr(d)
			}
			h.InsecureHTTP = true
		case "guardian":
			if err := h.unmarshalGuardian(d); err != nil {
				return err
			}
		case "accept":
			if err := h.unmarshalAccept(d); err != nil {
				return err
			}
		case "discovery":
			if err := h.unmarshalDiscovery(d); err != nil {
				return err
			}
		case "payment_id", "paths", "flow", "preflight", "scheme", "transfer", "unmetered":
			dst := map[string]*string{"payment_id": &h.PaymentID, "paths": &h.Paths, "flow": &h.Flow, "preflight": &h.Preflight,
				"scheme": &h.Scheme, "transfer": &h.Transfer, "unmetered": &h.Unmetered}[opt]
			if err := oneArg(d, dst); err != nil {
				return err
			}
		case "pass", "pass_key":
			if err := h.unmarshalPass(d); err != nil {
				return err
			}
		case "retry_max":
			var v string
			if err := oneArg(d, &v); err != nil {
				return err
			}
			n, err := strconv.Atoi(v)
			if err != nil {
				return d.Errf("retry_max %q is not an integer", v)
			}
			h.RetryMax = &n
		default:
			return d.Errf("unrecognized subdirective %q", opt)
		}
	}
	return nil
}

func (h *Handler) unmarshalGuardian(d *caddyfile.Dispenser) error {
	if d.NextArg() {
		if d.Val() != "off" || d.NextArg() {
			return d.Errf("guardian wants `off` or a block")
		}
		h.Guardian = nil
		return nil
	}
	gc := new(gate.VerdictConfig)
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		opt := d.Val()
		var v string
		if err := oneArg(d, &v); err != nil {
			return err
		}
		switch opt {
		case "advertise":
			gc.Advertise = v
		case "fee":
			switch v {
			case "on":
				gc.Fee = true
			case "off":
				gc.Fee = false
			default:
				return d.Errf("guardian fee %q is not on or off", v)
			}
		default:
			return d.Errf("unrecognized guardian option %q", opt)
		}
	}
	h.Guardian = gc
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
//		api_key <placeholder> | off
//		health_detail on|off
//		strip_prefix <path>
//	}
func (f *FacilitatorHandler) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	if err := blockOnly(d); err != nil {
		return err
	}
	lines := optionTokens{"": d.Token()}
	for d.NextBlock(0) {
		opt := d.Val()
		lines.set(opt, d)
		args := d.RemainingArgs()
		switch opt {
		case "facilitator":
			if len(args) > 1 {
				return argErr(d)
			}
			f.Facilitator = DefaultFacilitatorName
			if len(args) == 1 {
				f.Facilitator = args[0]
			}
		case "api_key":
			if len(args) != 1 {
				return argErr(d)
			}
			f.APIKey = args[0]
		case "health_detail":
			if len(args) != 1 || (args[0] != "on" && args[0] != "off") {
				return d.Errf("health_detail wants on or off")
			}
			f.HealthDetail = args[0] == "on"
		case "strip_prefix":
			if len(args) != 1 {
				return argErr(d)
			}
			f.StripPrefix = args[0]
		default:
			return d.Errf("unrecognized subdirective %q", opt)
		}
	}
	if err := f.Validate(); err != nil {
		return lines.errAt(d, optionOf(err), err)
	}
	return nil
}

// optionSyntax is the syntax of the x402 directive's options whose values are easy to
// miscount, quoted by a wrong-number-of-values error (docs/caddy.md#errors).
var optionSyntax = map[string]string{
	"price":       "price <amount> [<unit>], e.g. price 0.01 USDC",
	"pay_to":      "pay_to <address>",
	"network":     "network <name>, e.g. network base-sepolia",
	"pass":        "pass <duration> [<path scope>], e.g. pass 1h / (a duration is one word: 1h, 30m, 24h)",
	"pass_key":    "pass_key <key> [<older key>…], e.g. pass_key {env.X402_PASS_KEY}",
	"retry_max":   "retry_max <count>",
	"retry_grace": "retry_grace <duration>, e.g. retry_grace 10m",
	"max_timeout": "max_timeout <duration>, e.g. max_timeout 60s",
	"facilitator": "facilitator bundled [<name>] | facilitator <http(s) url>",
	"payment_id":  "payment_id optional|required",
	"paths":       "paths strict|lenient",
	"flow":        "flow upfront|authorization",
	"preflight":   "preflight pass|charge",
	"scheme":      "scheme exact|upto",
	"transfer":    "transfer eip3009|permit2",
	"unmetered":   "unmetered max|free",
	"description": `description "<text>"`,
	"mime_type":   "mime_type <type>, e.g. mime_type application/json",
}

// oneArg reads the single argument of the current option into dst.
func oneArg(d *caddyfile.Dispenser, dst *string) error {
	if !d.Args(dst) || d.NextArg() {
		return argErr(d)
	}
	return nil
}

// intArg reads the single argument of the current option, an integer, into dst.
func intArg(d *caddyfile.Dispenser, dst *int) error {
	opt := d.Val()
	var v string
	if err := oneArg(d, &v); err != nil {
		return err
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return d.Errf("%s %q is not an integer", opt, v)
	}
	*dst = n
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

// optionOf is the option a configuration error names, as its Caddyfile spells it:
// "<network>/<option>" for an option of a facilitator's network.
func optionOf(err error) string {
	if ce, ok := errors.AsType[*gate.ConfigError](err); ok {
		return ce.Option
	}
	if se, ok := errors.AsType[*facilitator.ConfigError](err); ok {
		if se.Network != "" {
			return se.Network + "/" + se.Option
		}
		return se.Option
	}
	return ""
}

// Interface guards
var (
	_ caddyfile.Unmarshaler = (*App)(nil)
	_ caddyfile.Unmarshaler = (*Handler)(nil)
	_ caddyfile.Unmarshaler = (*FacilitatorHandler)(nil)
)
