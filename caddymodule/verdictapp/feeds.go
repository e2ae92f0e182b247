package verdictapp

import (
	"context"
	"strconv"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/ethclient"
	"go.uber.org/zap"

	"github.com/x402gate/x402gate/caddymodule/internal/caddyconf"
	"github.com/x402gate/x402gate/internal/redact"
	"github.com/x402gate/x402gate/verdictserver"
	"github.com/x402gate/x402gate/verdictserver/engine"
	"github.com/x402gate/x402gate/verdictserver/engine/prices"
	"github.com/x402gate/x402gate/verdictserver/engine/sanctions"
)

// The verdict app's on-chain data: the RPC endpoints, the price feeds and the sanctions
// oracles (docs/policy.md#price-feeds, docs/policy.md#sanctions-oracle), and the schedule of
// the sanctions list's refresh (docs/policy.md#refreshing-the-list).

// resolveRPC expands the RPC URLs of the chains a feed or an oracle uses.
func resolveRPC(repl *caddy.Replacer, cd *verdictserver.ChainData) (map[int64]string, error) {
	out := map[int64]string{}
	for id, ph := range cd.UsedRPC() {
		if out[id] = caddyconf.ResolveSecret(repl, ph); out[id] == "" {
			return nil, verdictserver.ConfigErr("rpc", "the url of chain %d resolved to an empty value", id)
		}
	}
	return out, nil
}

// openChainData dials the RPCs and builds the engine's feeds and oracles into deps. The
// returned clients are the service's to close.
func openChainData(ctx context.Context, cd *verdictserver.ChainData, urls map[int64]string, deps *engine.Deps) ([]*ethclient.Client, error) {
	clients := map[int64]*ethclient.Client{}
	var all []*ethclient.Client
	fail := func(err error) ([]*ethclient.Client, error) {
		for _, c := range all {
			c.Close()
		}
		return nil, err
	}
	for id, u := range urls {
		c, err := ethclient.DialContext(ctx, u)
		if err != nil {
			return fail(verdictserver.ConfigErr("rpc", "chain %d: the url is not a usable JSON-RPC endpoint", id)) // never quote it
		}
		clients[id] = c
		all = append(all, c)
	}
	if len(cd.Feeds) > 0 {
		callers := map[int64]ethereum.ContractCaller{}
		for id, c := range clients {
			callers[id] = c
		}
		feeds, err := prices.NewFeeds(prices.FeedOptions{Callers: callers}, cd.Feeds...)
		if err != nil {
			return fail(&verdictserver.ConfigError{Option: "price_feed", Err: err})
		}
		deps.PriceFeeds = feeds
	}
	for _, o := range cd.Oracles {
		or, err := sanctions.NewOracle(sanctions.OracleOptions{ChainID: o.ChainID, Address: common.HexToAddress(o.Address), Caller: clients[o.ChainID]})
		if err != nil {
			return fail(&verdictserver.ConfigError{Option: "sanctions_oracle", Err: err})
		}
		deps.SanctionsOracles = append(deps.SanctionsOracles, or)
	}
	return all, nil
}

// refreshSanctions runs the scheduled refresh of the sanctions file until ctx is done; a
// failed refresh keeps the list in use and is logged (docs/policy.md#refreshing-the-list).
func refreshSanctions(ctx context.Context, e *engine.Evaluator, every time.Duration, log *zap.Logger) {
	e.RefreshSanctionsEvery(ctx, every, func(changed bool, err error) {
		switch {
		case err != nil:
			log.Warn("sanctions list not refreshed; the previous one stays", zap.Error(err))
		case changed:
			log.Info("sanctions list refreshed")
		}
	})
}

// parseChainID reads a positive chain id argument of option.
func parseChainID(d *caddyfile.Dispenser, option, s string) (int64, error) {
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id <= 0 {
		if !redact.PlainWord(s) { // an rpc URL in the chain id's place: never echo it (docs/caddy.md#secrets)
			return 0, d.Errf("%s: the chain id comes first, as a positive integer", option)
		}
		return 0, d.Errf("%s: chain id %q is not a positive integer", option, s)
	}
	return id, nil
}

// parseVerdictRPC reads `rpc <chain id> <url placeholder>`.
func parseVerdictRPC(d *caddyfile.Dispenser) (verdictserver.RPCConfig, error) {
	args := d.RemainingArgs()
	if len(args) != 2 {
		// not ArgErr, which quotes the last word: that may be the URL with its key
		return verdictserver.RPCConfig{}, d.Errf("rpc wants <chain id> <url placeholder>: wrong argument count (%d)", len(args))
	}
	id, err := parseChainID(d, "rpc", args[0])
	if err != nil {
		return verdictserver.RPCConfig{}, err
	}
	return verdictserver.RPCConfig{ChainID: id, URL: args[1]}, nil
}

// parseVerdictPriceFeed reads `price_feed <chain id> <asset> <feed> [<max age>]`.
func parseVerdictPriceFeed(d *caddyfile.Dispenser) (verdictserver.PriceFeedConfig, error) {
	args := d.RemainingArgs()
	if len(args) < 3 || len(args) > 4 {
		return verdictserver.PriceFeedConfig{}, caddyconf.ArgErr(d, nil)
	}
	id, err := parseChainID(d, "price_feed", args[0])
	if err != nil {
		return verdictserver.PriceFeedConfig{}, err
	}
	f := verdictserver.PriceFeedConfig{ChainID: id, Asset: args[1], Feed: args[2]}
	if len(args) == 4 {
		age, err := caddy.ParseDuration(args[3])
		if err != nil || age <= 0 {
			return verdictserver.PriceFeedConfig{}, d.Errf("price_feed: max age %q is not a positive duration", args[3])
		}
		f.MaxAge = engine.Duration(age)
	}
	return f, nil
}

// parseVerdictOracle reads `sanctions_oracle <chain id> <address>`.
func parseVerdictOracle(d *caddyfile.Dispenser) (verdictserver.OracleConfig, error) {
	args := d.RemainingArgs()
	if len(args) != 2 {
		return verdictserver.OracleConfig{}, caddyconf.ArgErr(d, nil)
	}
	id, err := parseChainID(d, "sanctions_oracle", args[0])
	if err != nil {
		return verdictserver.OracleConfig{}, err
	}
	return verdictserver.OracleConfig{ChainID: id, Address: args[1]}, nil
}

// parseVerdictSanctions reads `sanctions <file> [<ttl>] [refresh <interval>]` into a.
func parseVerdictSanctions(d *caddyfile.Dispenser, a *VerdictApp) error {
	args := d.RemainingArgs()
	if len(args) >= 2 && args[len(args)-2] == "refresh" {
		every, err := caddy.ParseDuration(args[len(args)-1])
		if err != nil || every < time.Second {
			return d.Errf("sanctions refresh %q is not a duration of at least 1s", args[len(args)-1])
		}
		a.SanctionsRefresh = engine.Duration(every)
		args = args[:len(args)-2]
	}
	if len(args) < 1 || len(args) > 2 {
		return caddyconf.ArgErr(d, nil)
	}
	a.Sanctions = args[0]
	if len(args) == 2 {
		ttl, err := caddy.ParseDuration(args[1])
		if err != nil || ttl <= 0 {
			return d.Errf("sanctions ttl %q is not a positive duration", args[1])
		}
		a.SanctionsTTL = engine.Duration(ttl)
	}
	return nil
}
