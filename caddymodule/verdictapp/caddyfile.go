package verdictapp

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/x402gate/x402gate/caddymodule/internal/caddyconf"
	"github.com/x402gate/x402gate/verdictserver"
	"github.com/x402gate/x402gate/verdictserver/engine"
)

// The verdict global option (the verdict app) and the verdict_api directive.

func init() {
	httpcaddyfile.RegisterGlobalOption("verdict", parseVerdictOption)
	httpcaddyfile.RegisterHandlerDirective("verdict_api", parseVerdictAPI)
	httpcaddyfile.RegisterDirectiveOrder("verdict_api", httpcaddyfile.Before, "reverse_proxy")
}

// parseVerdictOption parses the verdict global option into the verdict app. The option
// may appear once.
func parseVerdictOption(d *caddyfile.Dispenser, existing any) (any, error) {
	if existing != nil {
		return nil, d.Err("the verdict option is declared twice")
	}
	app := new(VerdictApp)
	if err := app.UnmarshalCaddyfile(d); err != nil {
		return nil, err
	}
	return httpcaddyfile.App{Name: "verdict", Value: caddyconfig.JSON(app, nil)}, nil
}

// UnmarshalCaddyfile sets up the verdict app from the global option
// (docs/caddy.md#the-verdict-app). Syntax:
//
//	verdict {
//		store sqlite [<path>] | postgres <dsn placeholder>
//		redis <url placeholder>
//		admin_key <placeholder>
//		signer_key <placeholder>
//		signature_ttl <duration>
//		workers <n> [<queue>]
//		rate_limit key|ip <per second> <burst>
//		sanctions <file> [<ttl>] [refresh <interval>]
//		sanctions_oracle <chain id> <address>
//		price <chain id> <asset> <usd> [<decimals> [<symbol>]]
//		price_feed <chain id> <asset> <feed address> [<max age>]
//		rpc <chain id> <url placeholder>
//		fee {
//			network <name>
//			asset <address>
//			pay_to <address>
//			flat <base units> | bps <n> [min <base units>]
//		}
//	}
func (a *VerdictApp) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	if err := caddyconf.BlockOnly(d); err != nil {
		return err
	}
	lines := caddyconf.OptionTokens{"": d.Token()}
	for d.NextBlock(0) {
		opt := d.Val()
		lines.Set(opt, d)
		switch opt {
		case "listen":
			// The app's own listener is gone (docs/caddy.md#the-verdict-app): Caddy is the only
			// web server, so that TLS, logs, trusted proxies and timeouts are Caddy's.
			return d.Err("listen: the verdict app has no listener of its own; serve its API in a site with the verdict_api directive, e.g. a site http://:8083 with bind 127.0.0.1 and verdict_api (docs/caddy.md#the-verdict-app)")
		case "store":
			st, err := caddyconf.ParseDatabase(d, "store")
			if err != nil {
				return err
			}
			a.Store = st
		case "redis":
			if err := caddyconf.OneArg(d, &a.Redis); err != nil {
				return err
			}
		case "admin_key", "signer_key":
			dst := map[string]*string{"admin_key": &a.AdminKey, "signer_key": &a.SignerKey}[opt]
			if err := caddyconf.OneArg(d, dst); err != nil {
				return err
			}
		case "signature_ttl":
			var v string
			if err := caddyconf.OneArg(d, &v); err != nil {
				return err
			}
			ttl, err := caddy.ParseDuration(v)
			if err != nil {
				return d.Errf("signature_ttl %q is not a duration", v)
			}
			a.SignatureTTL = engine.Duration(ttl)
		case "workers":
			args := d.RemainingArgs()
			if len(args) < 1 || len(args) > 2 {
				return caddyconf.ArgErr(d, nil)
			}
			n, err := strconv.Atoi(args[0])
			if err != nil || n <= 0 {
				return d.Errf("workers %q is not a positive integer", args[0])
			}
			a.Workers = n
			if len(args) == 2 {
				q, err := strconv.Atoi(args[1])
				if err != nil || q <= 0 {
					return d.Errf("workers queue %q is not a positive integer", args[1])
				}
				a.Queue = q
			}
		case "rate_limit":
			args := d.RemainingArgs()
			if len(args) != 3 {
				return caddyconf.ArgErr(d, nil)
			}
			r, err := strconv.ParseFloat(args[1], 64)
			if err != nil || !(r > 0) || math.IsInf(r, 0) {
				return d.Errf("rate_limit %s: %q is not a positive number of requests per second", args[0], args[1])
			}
			b, err := strconv.Atoi(args[2])
			if err != nil || b <= 0 {
				return d.Errf("rate_limit %s: burst %q is not a positive integer", args[0], args[2])
			}
			switch args[0] {
			case "key":
				a.RateKey = &verdictserver.RateConfig{Rate: r, Burst: b}
			case "ip":
				a.RateIP = &verdictserver.RateConfig{Rate: r, Burst: b}
			default:
				return d.Errf("rate_limit %q: want key or ip", args[0])
			}
		case "sanctions":
			if err := parseVerdictSanctions(d, a); err != nil {
				return err
			}
		case "sanctions_oracle":
			o, err := parseVerdictOracle(d)
			if err != nil {
				return err
			}
			a.SanctionsOracles = append(a.SanctionsOracles, o)
			lines[fmt.Sprintf("%s#%d", opt, len(a.SanctionsOracles))] = d.Token()
		case "price_feed":
			f, err := parseVerdictPriceFeed(d)
			if err != nil {
				return err
			}
			a.PriceFeeds = append(a.PriceFeeds, f)
			lines[fmt.Sprintf("%s#%d", opt, len(a.PriceFeeds))] = d.Token()
		case "rpc":
			r, err := parseVerdictRPC(d)
			if err != nil {
				return err
			}
			a.RPC = append(a.RPC, r)
			lines[fmt.Sprintf("%s#%d", opt, len(a.RPC))] = d.Token()
		case "price":
			p, err := parseVerdictPrice(d)
			if err != nil {
				return err
			}
			a.Prices = append(a.Prices, p)
		case "fee":
			if d.NextArg() {
				return caddyconf.ArgErr(d, nil)
			}
			f, err := parseVerdictFee(d)
			if err != nil {
				return err
			}
			a.Fee = f
		default:
			return d.Errf("unrecognized verdict option %q", opt)
		}
	}
	if err := a.Validate(); err != nil {
		var ve *verdictserver.ConfigError
		if errors.As(err, &ve) {
			if _, ok := lines[fmt.Sprintf("%s#%d", ve.Option, ve.Index)]; ok && ve.Index > 0 {
				return lines.ErrAt(d, fmt.Sprintf("%s#%d", ve.Option, ve.Index), err)
			}
			return lines.ErrAt(d, ve.Option, err)
		}
		return d.WrapErr(err)
	}
	return nil
}

// parseVerdictPrice reads `price <chain id> <asset> <usd> [<decimals> [<symbol>]]`.
func parseVerdictPrice(d *caddyfile.Dispenser) (verdictserver.PriceConfig, error) {
	args := d.RemainingArgs()
	if len(args) < 3 || len(args) > 5 {
		return verdictserver.PriceConfig{}, caddyconf.ArgErr(d, nil)
	}
	id, err := strconv.ParseInt(args[0], 10, 64)
	if err != nil || id <= 0 {
		return verdictserver.PriceConfig{}, d.Errf("price: chain id %q is not a positive integer", args[0])
	}
	p := verdictserver.PriceConfig{ChainID: id, Asset: args[1], USD: args[2]}
	if len(args) >= 4 {
		dec, err := strconv.Atoi(args[3])
		if err != nil || dec < 0 || dec > 77 {
			return verdictserver.PriceConfig{}, d.Errf("price: decimals %q is not an integer in 0..77", args[3])
		}
		p.Decimals = &dec
	}
	if len(args) == 5 {
		p.Symbol = args[4]
	}
	if err := p.Validate(); err != nil {
		return verdictserver.PriceConfig{}, d.Errf("price: %v", err)
	}
	return p, nil
}

// parseVerdictFee reads the fee block.
func parseVerdictFee(d *caddyfile.Dispenser) (*verdictserver.FeeConfig, error) {
	f := new(verdictserver.FeeConfig)
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		opt := d.Val()
		switch opt {
		case "network", "asset", "pay_to", "flat", "min":
			dst := map[string]*string{"network": &f.Network, "asset": &f.Asset, "pay_to": &f.PayTo, "flat": &f.Flat, "min": &f.Min}[opt]
			if err := caddyconf.OneArg(d, dst); err != nil {
				return nil, err
			}
		case "bps":
			var v string
			if err := caddyconf.OneArg(d, &v); err != nil {
				return nil, err
			}
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n <= 0 || n > 10_000 {
				return nil, d.Errf("fee bps %q is not an integer in 1..10000", v)
			}
			f.BPS = n
		default:
			return nil, d.Errf("unrecognized fee option %q", opt)
		}
	}
	if err := f.Validate(); err != nil {
		return nil, d.Errf("fee: %v", err)
	}
	return f, nil
}

// parseVerdictAPI parses the verdict_api directive, which takes no arguments.
func parseVerdictAPI(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	v := new(VerdictAPI)
	if err := v.UnmarshalCaddyfile(h.Dispenser); err != nil {
		return nil, err
	}
	if _, ok := h.Option("verdict").(httpcaddyfile.App); !ok {
		return nil, h.Err("verdict_api needs the verdict global option: declare `verdict { ... }`")
	}
	return v, nil
}

// UnmarshalCaddyfile reads `verdict_api`, which takes no arguments; its block may turn on
// the console (docs/console.md#configuration):
//
//	verdict_api {
//		console {
//			explorer <url with {tx}>
//			journal sqlite [<path>] | postgres <dsn placeholder>
//			session_ttl <duration>
//		}
//	}
func (v *VerdictAPI) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next()
	if d.NextArg() {
		return caddyconf.ArgErr(d, nil)
	}
	for d.NextBlock(0) {
		if d.Val() != "console" || v.Console != nil {
			return d.Errf("verdict_api takes one option, console; configure the service in the verdict global option")
		}
		c, err := parseConsole(d)
		if err != nil {
			return err
		}
		v.Console = c
	}
	return nil
}

// verdictAppOf reads the verdict app out of an adapted config, for the CLI.
func verdictAppOf(cfgJSON []byte) (*VerdictApp, error) {
	var cfg struct {
		Apps map[string]json.RawMessage `json:"apps"`
	}
	if err := json.Unmarshal(cfgJSON, &cfg); err != nil {
		return nil, fmt.Errorf("reading the config: %w", err)
	}
	raw, ok := cfg.Apps["verdict"]
	if !ok {
		return nil, fmt.Errorf("the config has no verdict app: add the `verdict { ... }` global option")
	}
	a := new(VerdictApp)
	if err := json.Unmarshal(raw, a); err != nil {
		return nil, fmt.Errorf("reading the verdict app: %w", err)
	}
	return a, nil
}

// Interface guards
var (
	_ caddyfile.Unmarshaler = (*VerdictApp)(nil)
	_ caddyfile.Unmarshaler = (*VerdictAPI)(nil)
)
