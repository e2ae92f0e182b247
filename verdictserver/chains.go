package verdictserver

import (
	"strconv"
	"time"

	"github.com/ethereum/go-ethereum/common"

	"github.com/x402gate/x402gate/verdictserver/engine"
	"github.com/x402gate/x402gate/verdictserver/engine/prices"
)

// RPCConfig is the JSON-RPC endpoint of one chain, which the price feeds and sanctions
// oracle on that chain are read through.
type RPCConfig struct {
	// ChainID is the chain. Required.
	ChainID int64 `json:"chain_id"`
	// URL is the endpoint (an RPC URL often carries an API key). Required.
	URL string `json:"url"`
}

// PriceFeedConfig is a Chainlink-style price feed that prices one asset
// (docs/policy.md#price-feeds).
type PriceFeedConfig struct {
	// ChainID is the chain of the asset and the feed; it needs an rpc. Required.
	ChainID int64 `json:"chain_id"`
	// Asset is the token the feed prices. Required.
	Asset string `json:"asset"`
	// Feed is the aggregator contract. Required.
	Feed string `json:"feed"`
	// MaxAge is how old the feed's latest round may be. Default: 1h.
	MaxAge engine.Duration `json:"max_age,omitempty"`
}

// OracleConfig is a Chainalysis-style sanctions oracle on one chain
// (docs/policy.md#sanctions-oracle).
type OracleConfig struct {
	// ChainID is the chain whose actions the oracle screens; it needs an rpc. Required.
	ChainID int64 `json:"chain_id"`
	// Address is the oracle contract. Required.
	Address string `json:"address"`
}

// ChainData is what the rpc, price_feed and sanctions_oracle options configure, checked.
type ChainData struct {
	// RPC are the endpoints by chain id, as the config gives them (unexpanded).
	RPC map[int64]string
	// Feeds are the price feeds.
	Feeds []prices.Feed
	// Oracles are the sanctions oracles, one per chain.
	Oracles []OracleConfig
}

// UsedRPC are the endpoints of the chains a feed or an oracle reads.
func (cd *ChainData) UsedRPC() map[int64]string {
	used := map[int64]string{}
	for _, f := range cd.Feeds {
		used[f.ChainID] = cd.RPC[f.ChainID]
	}
	for _, o := range cd.Oracles {
		used[o.ChainID] = cd.RPC[o.ChainID]
	}
	return used
}

// ChainData checks the rpc, price_feed and sanctions_oracle options.
func (c *Config) ChainData() (*ChainData, error) {
	cd := &ChainData{RPC: map[int64]string{}}
	for i, r := range c.RPC {
		switch {
		case r.ChainID <= 0:
			return nil, configErrAt("rpc", i+1, "chain id %d is not positive", r.ChainID)
		case r.URL == "":
			return nil, configErrAt("rpc", i+1, "needs a url placeholder")
		}
		if _, dup := cd.RPC[r.ChainID]; dup {
			return nil, configErrAt("rpc", i+1, "a second rpc for chain %d", r.ChainID)
		}
		cd.RPC[r.ChainID] = r.URL
	}
	if err := c.feeds(cd); err != nil {
		return nil, err
	}
	oracleChains := map[int64]bool{}
	for i, o := range c.SanctionsOracles {
		switch {
		case o.ChainID <= 0:
			return nil, configErrAt("sanctions_oracle", i+1, "chain id %d is not positive", o.ChainID)
		case !nonZeroAddress(o.Address):
			return nil, configErrAt("sanctions_oracle", i+1, "%q is not an address", o.Address)
		case cd.RPC[o.ChainID] == "":
			return nil, configErrAt("sanctions_oracle", i+1, "chain %d has no rpc: add `rpc %d {env.…}`", o.ChainID, o.ChainID)
		case oracleChains[o.ChainID]:
			return nil, configErrAt("sanctions_oracle", i+1, "a second oracle for chain %d", o.ChainID)
		}
		oracleChains[o.ChainID] = true
		cd.Oracles = append(cd.Oracles, o)
	}
	if c.SanctionsRefresh < 0 {
		return nil, ConfigErr("sanctions", "refresh interval is negative")
	}
	return cd, nil
}

// feeds checks the price_feed options into cd.
func (c *Config) feeds(cd *ChainData) error {
	seen := map[[2]string]bool{}
	for i, f := range c.PriceFeeds {
		switch {
		case f.ChainID <= 0:
			return configErrAt("price_feed", i+1, "chain id %d is not positive", f.ChainID)
		case !common.IsHexAddress(f.Asset):
			return configErrAt("price_feed", i+1, "asset %q is not an address", f.Asset)
		case !common.IsHexAddress(f.Feed):
			return configErrAt("price_feed", i+1, "feed %q is not an address", f.Feed)
		case f.MaxAge < 0:
			return configErrAt("price_feed", i+1, "max age is negative")
		case cd.RPC[f.ChainID] == "":
			return configErrAt("price_feed", i+1, "chain %d has no rpc: add `rpc %d {env.…}`", f.ChainID, f.ChainID)
		}
		asset := common.HexToAddress(f.Asset)
		k := [2]string{strconv.FormatInt(f.ChainID, 10), asset.Hex()}
		if seen[k] {
			return configErrAt("price_feed", i+1, "a second feed for %s on chain %d", asset.Hex(), f.ChainID)
		}
		seen[k] = true
		cd.Feeds = append(cd.Feeds, prices.Feed{ChainID: f.ChainID, Asset: asset, Address: common.HexToAddress(f.Feed), MaxAge: time.Duration(f.MaxAge)})
	}
	return nil
}
