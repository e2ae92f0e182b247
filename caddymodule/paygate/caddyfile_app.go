package paygate

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"

	"github.com/x402gate/x402gate/facilitator"
)

// The x402 global option (the x402 app). Registered in caddyfile.go.

// parseGlobalOption parses the x402 global option into the x402 app. Repeated x402
// blocks merge; a facilitator name may appear once.
func parseGlobalOption(d *caddyfile.Dispenser, existing any) (any, error) {
	app := new(App)
	if ex, ok := existing.(httpcaddyfile.App); ok {
		if err := json.Unmarshal(ex.Value, app); err != nil {
			return nil, fmt.Errorf("merging x402 options: %w", err)
		}
	}
	if err := app.UnmarshalCaddyfile(d); err != nil {
		return nil, err
	}
	return httpcaddyfile.App{Name: "x402", Value: caddyconfig.JSON(app, nil)}, nil
}

// UnmarshalCaddyfile sets up the x402 app from the global option. Syntax:
//
//	x402 {
//		facilitator [<name>] {
//			network <name> {
//				chain_id <id>
//				rpc <url>
//				asset <address>
//				asset_name <eip712 name>
//				asset_version <eip712 version>
//				decimals <n>
//				symbol <sym>
//				min_amount <base units>
//				permit2_tokens <address>...
//			}
//			signer_key <placeholder>...
//			min_gas_balance <wei>
//			balance_check_interval <duration>
//			max_pending_per_signer <n>
//			store memory [<max entries>] | redis <url>
//			journal sqlite [<path>] | postgres <dsn>
//			guardian_mode off|optional|required
//			verdict_url <url>
//			verdict_key <placeholder>
//			verdict_signer <address>
//			pricing_url <url>
//			approval_ttl <duration>
//			receipt_timeout <duration>
//			verdict_poll <interval> <max attempts> [<max delay>]
//			verdict_rate <per second> <burst>
//			reconcile_interval <duration>
//			erc6492_factories <address>...
//		}
//	}
func (a *App) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	if err := blockOnly(d); err != nil {
		return err
	}
	for d.NextBlock(0) {
		if d.Val() != "facilitator" {
			return d.Errf("unrecognized x402 option %q", d.Val())
		}
		name := DefaultFacilitatorName
		if d.NextArg() {
			name = d.Val()
		}
		if d.NextArg() {
			return argErr(d)
		}
		if _, dup := a.Facilitators[name]; dup {
			return d.Errf("facilitator %q is declared twice", name)
		}
		fc := new(facilitator.Config)
		lines := optionTokens{"": d.Token()}
		if err := unmarshalFacilitator(fc, d, lines); err != nil {
			return err
		}
		if err := validateFacilitator(fc); err != nil {
			return lines.errAt(d, optionOf(err), fmt.Errorf("facilitator %q: %w", name, err))
		}
		if a.Facilitators == nil {
			a.Facilitators = map[string]*facilitator.Config{}
		}
		a.Facilitators[name] = fc
	}
	return nil
}

// unmarshalFacilitator reads the block of one `facilitator` into fc.
func unmarshalFacilitator(fc *facilitator.Config, d *caddyfile.Dispenser, lines optionTokens) error {
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		opt := d.Val()
		if opt != "network" {
			lines.set(opt, d)
		}
		switch opt {
		case "network":
			var n facilitator.NetworkConfig
			if err := oneArg(d, &n.Name); err != nil {
				return err
			}
			lines.set(n.Name+"/network", d) // the last one: a duplicate is reported there
			if err := unmarshalNetwork(&n, d, lines); err != nil {
				return err
			}
			fc.Networks = append(fc.Networks, n)
		case "signer_key":
			// one key, or a pool of several (docs/facilitator.md#signer-pool)
			keys := d.RemainingArgs()
			if len(keys) == 0 {
				return argErr(d)
			}
			fc.SignerKey, fc.SignerKeys = keys[0], keys[1:]
			if len(fc.SignerKeys) == 0 {
				fc.SignerKeys = nil
			}
		case "min_gas_balance":
			if err := oneArg(d, &fc.MinGasBalance); err != nil {
				return err
			}
		case "max_pending_per_signer":
			if err := intArg(d, &fc.MaxPendingPerSigner); err != nil {
				return err
			}
		case "store":
			args, err := kindArgs(d, "store", facilitator.StoreMemory, facilitator.StoreRedis)
			if err != nil {
				return err
			}
			s := &facilitator.StoreConfig{Type: args[0]}
			switch {
			case args[0] == facilitator.StoreRedis:
				s.URL = args[1]
			case len(args) == 2:
				n, err := strconv.Atoi(args[1])
				if err != nil || n <= 0 {
					return d.Errf("store memory: max entries %q is not a positive integer", args[1])
				}
				s.MaxEntries = n
			}
			fc.ApprovalStore = s
		case "journal":
			j, err := parseDatabase(d, "journal")
			if err != nil {
				return err
			}
			fc.SettlementJournal = (*facilitator.JournalConfig)(j)
		case "guardian_mode":
			var mode string
			if err := oneArg(d, &mode); err != nil {
				return err
			}
			fc.VerdictMode = facilitator.VerdictMode(mode)
		case "verdict_url", "verdict_key", "verdict_signer", "pricing_url":
			dst := map[string]*string{"verdict_url": &fc.VerdictURL, "verdict_key": &fc.VerdictKey, "verdict_signer": &fc.VerdictSigner, "pricing_url": &fc.PricingURL}[opt]
			if err := oneArg(d, dst); err != nil {
				return err
			}
		case "approval_ttl", "receipt_timeout", "reconcile_interval", "balance_check_interval":
			dst := map[string]*facilitator.Duration{
				"approval_ttl": &fc.ApprovalTTL, "receipt_timeout": &fc.ReceiptTimeout, "reconcile_interval": &fc.ReconcileInterval,
				"balance_check_interval": &fc.BalanceCheckInterval,
			}[opt]
			var v caddy.Duration
			if err := durationArg(d, &v); err != nil {
				return err
			}
			*dst = facilitator.Duration(v)
		case "verdict_rate":
			args := d.RemainingArgs()
			if len(args) != 2 {
				return argErr(d)
			}
			r, err := strconv.ParseFloat(args[0], 64)
			if err != nil || !(r > 0) || math.IsInf(r, 0) {
				return d.Errf("verdict_rate %q is not a positive number of requests per second", args[0])
			}
			b, err := strconv.Atoi(args[1])
			if err != nil || b <= 0 {
				return d.Errf("verdict_rate burst %q is not a positive integer", args[1])
			}
			fc.VerdictRate = &facilitator.RateConfig{Rate: r, Burst: b}
		case "verdict_poll":
			vp, err := parseVerdictPoll(d)
			if err != nil {
				return err
			}
			fc.VerdictPoll = vp
		case "erc6492_factories":
			args := d.RemainingArgs()
			if len(args) == 0 {
				return argErr(d)
			}
			fc.ERC6492Factories = append(fc.ERC6492Factories, args...)
		default:
			return d.Errf("unrecognized facilitator option %q", opt)
		}
	}
	return nil
}

// unmarshalNetwork reads the block of one facilitator `network` into n.
func unmarshalNetwork(n *facilitator.NetworkConfig, d *caddyfile.Dispenser, lines optionTokens) error {
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		opt := d.Val()
		lines.set(n.Name+"/"+opt, d)
		if opt == "permit2_tokens" {
			args := d.RemainingArgs()
			if len(args) == 0 {
				return argErr(d)
			}
			n.Permit2Tokens = append(n.Permit2Tokens, args...)
			continue
		}
		var v string
		if err := oneArg(d, &v); err != nil {
			return err
		}
		switch opt {
		case "chain_id":
			id, err := strconv.ParseUint(v, 10, 64)
			if err != nil || id == 0 {
				return d.Errf("network %s: chain_id %q is not a positive integer", n.Name, v)
			}
			n.ChainID = id
		case "rpc":
			n.RPC = v
		case "asset":
			n.Asset = v
		case "asset_name":
			n.AssetName = v
		case "asset_version":
			n.AssetVersion = v
		case "decimals":
			dec, err := strconv.Atoi(v)
			if err != nil {
				return d.Errf("network %s: decimals %q is not an integer", n.Name, v)
			}
			n.Decimals = dec
		case "symbol":
			n.Symbol = v
		case "min_amount":
			n.MinAmount = v
		default:
			return d.Errf("unrecognized network option %q", opt)
		}
	}
	return nil
}

// parseVerdictPoll reads `verdict_poll <interval> <max attempts> [<max delay>]`.
func parseVerdictPoll(d *caddyfile.Dispenser) (*facilitator.VerdictPollConfig, error) {
	args := d.RemainingArgs()
	if len(args) < 2 || len(args) > 3 {
		return nil, argErr(d)
	}
	interval, err := caddy.ParseDuration(args[0])
	if err != nil || interval <= 0 {
		return nil, d.Errf("verdict_poll interval %q is not a positive duration", args[0])
	}
	attempts, err := strconv.Atoi(args[1])
	if err != nil || attempts <= 0 {
		return nil, d.Errf("verdict_poll max attempts %q is not a positive integer", args[1])
	}
	vp := &facilitator.VerdictPollConfig{Interval: facilitator.Duration(interval), MaxAttempts: attempts}
	if len(args) == 3 {
		maxDelay, err := caddy.ParseDuration(args[2])
		if err != nil || maxDelay <= 0 {
			return nil, d.Errf("verdict_poll max delay %q is not a positive duration", args[2])
		}
		vp.MaxDelay = facilitator.Duration(maxDelay)
	}
	return vp, nil
}
