package verdictapp

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/ethclient"
	"go.uber.org/zap"

	"github.com/x402gate/x402gate/caddymodule/internal/caddyconf"
	"github.com/x402gate/x402gate/verdictserver/engine"
	"github.com/x402gate/x402gate/verdictserver/engine/prices"
	"github.com/x402gate/x402gate/verdictserver/engine/sanctions"
)

// The verdict app's on-chain data: the RPC endpoints, the price feeds and the sanctions
// oracles (docs/policy.md#price-feeds, docs/policy.md#sanctions-oracle), and the schedule of
// the sanctions list's refresh (docs/policy.md#refreshing-the-list).

// DefaultSanctionsRefresh is how often the verdict app checks its sanctions file.
const DefaultSanctionsRefresh = time.Hour

// VerdictRPCConfig is the JSON-RPC endpoint of one chain, which the app's price feeds and
// sanctions oracle on that chain are read through.
type VerdictRPCConfig struct {
	// ChainID is the chain. Required.
	ChainID int64 `json:"chain_id"`
	// URL is the endpoint, an {env.*} or {file.*} placeholder (an RPC URL often carries an
	// API key). Required.
	URL string `json:"url"`
}

// VerdictPriceFeedConfig is a Chainlink-style price feed that prices one asset.
type VerdictPriceFeedConfig struct {
	// ChainID is the chain of the asset and the feed; it needs an rpc. Required.
	ChainID int64 `json:"chain_id"`
	// Asset is the token the feed prices. Required.
	Asset string `json:"asset"`
	// Feed is the aggregator contract. Required.
	Feed string `json:"feed"`
	// MaxAge is how old the feed's latest round may be. Default: 1h.
	MaxAge caddy.Duration `json:"max_age,omitempty"`
}

// VerdictOracleConfig is a Chainalysis-style sanctions oracle on one chain.
type VerdictOracleConfig struct {
	// ChainID is the chain whose actions the oracle screens; it needs an rpc. Required.
	ChainID int64 `json:"chain_id"`
	// Address is the oracle contract. Required.
	Address string `json:"address"`
}

// chainData is what the app's rpc, price_feed and sanctions_oracle options configure,
// checked, with the RPC URLs still placeholders.
type chainData struct {
	rpc     map[int64]string
	feeds   []prices.Feed
	oracles []VerdictOracleConfig
}

// verdictErrAt is a VerdictConfigError of the index-th (from 1) line of a repeated option.
func verdictErrAt(option string, index int, format string, args ...any) error {
	return &VerdictConfigError{Option: option, Index: index, Err: fmt.Errorf(format, args...)}
}

// chainData checks the rpc, price_feed and sanctions_oracle options.
func (a *VerdictApp) chainData() (*chainData, error) {
	cd := &chainData{rpc: map[int64]string{}}
	for i, r := range a.RPC {
		switch {
		case r.ChainID <= 0:
			return nil, verdictErrAt("rpc", i+1, "chain id %d is not positive", r.ChainID)
		case r.URL == "":
			return nil, verdictErrAt("rpc", i+1, "needs a url placeholder")
		}
		if err := caddyconf.PlaceholderOnly(r.URL); err != nil {
			return nil, &VerdictConfigError{Option: "rpc", Index: i + 1, Err: err}
		}
		if _, dup := cd.rpc[r.ChainID]; dup {
			return nil, verdictErrAt("rpc", i+1, "a second rpc for chain %d", r.ChainID)
		}
		cd.rpc[r.ChainID] = r.URL
	}
	seen := map[[2]string]bool{}
	for i, f := range a.PriceFeeds {
		switch {
		case f.ChainID <= 0:
			return nil, verdictErrAt("price_feed", i+1, "chain id %d is not positive", f.ChainID)
		case !common.IsHexAddress(f.Asset):
			return nil, verdictErrAt("price_feed", i+1, "asset %q is not an address", f.Asset)
		case !common.IsHexAddress(f.Feed):
			return nil, verdictErrAt("price_feed", i+1, "feed %q is not an address", f.Feed)
		case f.MaxAge < 0:
			return nil, verdictErrAt("price_feed", i+1, "max age is negative")
		case cd.rpc[f.ChainID] == "":
			return nil, verdictErrAt("price_feed", i+1, "chain %d has no rpc: add `rpc %d {env.…}`", f.ChainID, f.ChainID)
		}
		asset := common.HexToAddress(f.Asset)
		k := [2]string{strconv.FormatInt(f.ChainID, 10), asset.Hex()}
		if seen[k] {
			return nil, verdictErrAt("price_feed", i+1, "a second feed for %s on chain %d", asset.Hex(), f.ChainID)
		}
		seen[k] = true
		cd.feeds = append(cd.feeds, prices.Feed{ChainID: f.ChainID, Asset: asset, Address: common.HexToAddress(f.Feed), MaxAge: time.Duration(f.MaxAge)})
	}
	oracleChains := map[int64]bool{}
	for i, o := range a.SanctionsOracles {
		switch {
		case o.ChainID <= 0:
			return nil, verdictErrAt("sanctions_oracle", i+1, "chain id %d is not positive", o.ChainID)
		case !common.IsHexAddress(o.Address) || common.HexToAddress(o.Address) == (common.Address{}):
			return nil, verdictErrAt("sanctions_oracle", i+1, "%q is not an address", o.Address)
		case cd.rpc[o.ChainID] == "":
			return nil, verdictErrAt("sanctions_oracle", i+1, "chain %d has no rpc: add `rpc %d {env.…}`", o.ChainID, o.ChainID)
		case oracleChains[o.ChainID]:
			return nil, verdictErrAt("sanctions_oracle", i+1, "a second oracle for chain %d", o.ChainID)
		}
		oracleChains[o.ChainID] = true
		cd.oracles = append(cd.oracles, o)
	}
	if a.SanctionsRefresh < 0 {
		return nil, verdictErr("sanctions", "refresh interval is negative")
	}
	return cd, nil
}

// resolveRPC expands the RPC URLs of the chains a feed or an oracle uses.
func (cd *chainData) resolveRPC(repl *caddy.Replacer) (map[int64]string, error) {
	used := map[int64]bool{}
	for _, f := range cd.feeds {
		used[f.ChainID] = true
	}
	for _, o := range cd.oracles {
		used[o.ChainID] = true
	}
	out := map[int64]string{}
	for id, ph := range cd.rpc {
		if !used[id] {
			continue
		}
		if out[id] = caddyconf.ResolveSecret(repl, ph); out[id] == "" {
			return nil, verdictErr("rpc", "the url of chain %d resolved to an empty value", id)
		}
	}
	return out, nil
}

// openChainData dials the RPCs and builds the engine's feeds and oracles into opts. The
// returned clients are the service's to close.
func openChainData(ctx context.Context, cd *chainData, urls map[int64]string, opts *engine.Options) ([]*ethclient.Client, error) {
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
			return fail(verdictErr("rpc", "chain %d: the url is not a usable JSON-RPC endpoint", id)) // never quote it
		}
		clients[id] = c
		all = append(all, c)
	}
	if len(cd.feeds) > 0 {
		callers := map[int64]ethereum.ContractCaller{}
		for id, c := range clients {
			callers[id] = c
		}
		feeds, err := prices.NewFeeds(prices.FeedOptions{Callers: callers}, cd.feeds...)
		if err != nil {
			return fail(&VerdictConfigError{Option: "price_feed", Err: err})
		}
		opts.PriceFeeds = feeds
	}
	for _, o := range cd.oracles {
		or, err := sanctions.NewOracle(sanctions.OracleOptions{ChainID: o.ChainID, Address: common.HexToAddress(o.Address), Caller: clients[o.ChainID]})
		if err != nil {
			return fail(&VerdictConfigError{Option: "sanctions_oracle", Err: err})
		}
		opts.SanctionsOracles = append(opts.SanctionsOracles, or)
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
		if !caddyconf.PlainWord(s) { // an rpc URL in the chain id's place: never echo it (docs/caddy.md#secrets)
			return 0, d.Errf("%s: the chain id comes first, as a positive integer", option)
		}
		return 0, d.Errf("%s: chain id %q is not a positive integer", option, s)
	}
	return id, nil
}

// parseVerdictRPC reads `rpc <chain id> <url placeholder>`.
func parseVerdictRPC(d *caddyfile.Dispenser) (VerdictRPCConfig, error) {
	args := d.RemainingArgs()
	if len(args) != 2 {
		// not ArgErr, which quotes the last word: that may be the URL with its key
		return VerdictRPCConfig{}, d.Errf("rpc wants <chain id> <url placeholder>: wrong argument count (%d)", len(args))
	}
	id, err := parseChainID(d, "rpc", args[0])
	if err != nil {
		return VerdictRPCConfig{}, err
	}
	return VerdictRPCConfig{ChainID: id, URL: args[1]}, nil
}

// parseVerdictPriceFeed reads `price_feed <chain id> <asset> <feed> [<max age>]`.
func parseVerdictPriceFeed(d *caddyfile.Dispenser) (VerdictPriceFeedConfig, error) {
	args := d.RemainingArgs()
	if len(args) < 3 || len(args) > 4 {
		return VerdictPriceFeedConfig{}, caddyconf.ArgErr(d, nil)
	}
	id, err := parseChainID(d, "price_feed", args[0])
	if err != nil {
		return VerdictPriceFeedConfig{}, err
	}
	f := VerdictPriceFeedConfig{ChainID: id, Asset: args[1], Feed: args[2]}
	if len(args) == 4 {
		age, err := caddy.ParseDuration(args[3])
		if err != nil || age <= 0 {
			return VerdictPriceFeedConfig{}, d.Errf("price_feed: max age %q is not a positive duration", args[3])
		}
		f.MaxAge = caddy.Duration(age)
	}
	return f, nil
}

// parseVerdictOracle reads `sanctions_oracle <chain id> <address>`.
func parseVerdictOracle(d *caddyfile.Dispenser) (VerdictOracleConfig, error) {
	args := d.RemainingArgs()
	if len(args) != 2 {
		return VerdictOracleConfig{}, caddyconf.ArgErr(d, nil)
	}
	id, err := parseChainID(d, "sanctions_oracle", args[0])
	if err != nil {
		return VerdictOracleConfig{}, err
	}
	return VerdictOracleConfig{ChainID: id, Address: args[1]}, nil
}

// parseVerdictSanctions reads `sanctions <file> [<ttl>] [refresh <interval>]` into a.
func parseVerdictSanctions(d *caddyfile.Dispenser, a *VerdictApp) error {
	args := d.RemainingArgs()
	if len(args) >= 2 && args[len(args)-2] == "refresh" {
		every, err := caddy.ParseDuration(args[len(args)-1])
		if err != nil || every < time.Second {
			return d.Errf("sanctions refresh %q is not a duration of at least 1s", args[len(args)-1])
		}
		a.SanctionsRefresh = caddy.Duration(every)
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
		a.SanctionsTTL = caddy.Duration(ttl)
	}
	return nil
}
