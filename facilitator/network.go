package facilitator

import (
	"math/big"

	"github.com/ethereum/go-ethereum/common"
	"strconv"
	"strings"

	"github.com/x402gate/x402gate/x402"
)

// NetworkConfig is one chain a facilitator verifies and settles on, as an operator writes
// it (docs/facilitator.md#networks): a built-in network by name, or any chain with its
// chain id and asset, and its RPC endpoint.
type NetworkConfig struct {
	// Name is a built-in network (base, base-sepolia), a CAIP-2 id or a chain id, or any
	// name together with ChainID. Required.
	Name string `json:"name"`
	// ChainID is required for a network that is not built in.
	ChainID uint64 `json:"chain_id,omitempty"`
	// RPC is the chain's JSON-RPC endpoint, http or https. It may carry an API key, so it
	// never appears in a response, an error or a log. Required.
	RPC string `json:"rpc,omitempty"`
	// Asset is the EIP-3009 token, the one asset accepted on the chain. Default: the
	// network's USDC (required for a network that is not built in).
	Asset string `json:"asset,omitempty"`
	// AssetName is the token's EIP-712 domain name. Required with a non-default asset.
	AssetName string `json:"asset_name,omitempty"`
	// AssetVersion is the token's EIP-712 domain version. Default: the network USDC's
	// version, or x402.DefaultAssetVersion ("2", FiatToken) for a network that is not
	// built in.
	AssetVersion string `json:"asset_version,omitempty"`
	// Decimals of the asset. Default: the network USDC's, or x402.DefaultAssetDecimals (6).
	Decimals int `json:"decimals,omitempty"`
	// Symbol of the asset. Default: the network USDC's, or x402.DefaultAssetSymbol (USDC).
	Symbol string `json:"symbol,omitempty"`
	// MinAmount is the smallest requirement amount accepted, in the asset's base units.
	// Default: no minimum.
	MinAmount string `json:"min_amount,omitempty"`
	// Permit2Tokens are ERC-20 tokens (0x-hex addresses) settled on this chain through
	// Permit2 only: `exact` with extra.assetTransferMethod "permit2", and `upto`
	// (docs/payments.md#permit2). The asset is settled through Permit2 too, without being
	// listed. Default: none.
	Permit2Tokens []string `json:"permit2_tokens,omitempty"`
}

// NetworkOf is the NetworkConfig of net, served through the endpoint rpc: every asset
// field written out, so that it resolves to net again.
func NetworkOf(net x402.Network, rpc string) NetworkConfig {
	nc := NetworkConfig{
		Name: net.Name, RPC: rpc, Asset: net.USDC.Address.Hex(), AssetName: net.USDC.Name,
		AssetVersion: net.USDC.Version, Decimals: net.USDC.Decimals, Symbol: net.USDC.Symbol,
	}
	if net.ChainID != nil {
		nc.ChainID = net.ChainID.Uint64()
	}
	return nc
}

// builtin resolves the networks every configuration knows.
var builtin = x402.NewRegistry()

// validate checks n without I/O. Its errors are *ConfigError.
func (n NetworkConfig) validate() error {
	if n.Name == "" {
		return configErr("", "network", "a name is required")
	}
	if n.RPC == "" {
		return configErr(n.Name, "rpc", "is required")
	}
	if _, err := n.minAmount(); err != nil {
		return err
	}
	if _, err := n.permit2Tokens(); err != nil {
		return err
	}
	_, err := n.Network()
	return err
}

// permit2Tokens is Permit2Tokens as a set of addresses.
func (n NetworkConfig) permit2Tokens() (map[common.Address]bool, error) {
	m := make(map[common.Address]bool, len(n.Permit2Tokens))
	for _, s := range n.Permit2Tokens {
		a, err := x402.ParseAddress(s)
		if err != nil {
			return nil, &ConfigError{Network: n.Name, Option: "permit2_tokens", Err: err}
		}
		m[a] = true
	}
	return m, nil
}

// Network builds the x402.Network of n: a built-in network with the asset options
// applied, or a network that is not built in from ChainID and the asset options.
func (n NetworkConfig) Network() (x402.Network, error) {
	net, ok := builtin.Lookup(n.Name)
	if !ok {
		id := n.ChainID
		if s, isCAIP2 := strings.CutPrefix(n.Name, "eip155:"); isCAIP2 {
			id, _ = strconv.ParseUint(s, 10, 64)
		} else if v, err := strconv.ParseUint(n.Name, 10, 64); err == nil {
			id = v
		}
		if id == 0 {
			return x402.Network{}, configErr(n.Name, "chain_id", "is required for a network that is not one of %s", strings.Join(builtin.Names(), ", "))
		}
		net = x402.Network{Name: n.Name, ChainID: new(big.Int).SetUint64(id), CAIP2: "eip155:" + strconv.FormatUint(id, 10)}
		if strings.HasPrefix(n.Name, "eip155:") {
			net.Name = strconv.FormatUint(id, 10)
		}
	} else if n.ChainID != 0 && new(big.Int).SetUint64(n.ChainID).Cmp(net.ChainID) != 0 {
		return x402.Network{}, configErr(n.Name, "chain_id", "%d is not the built-in network's %s", n.ChainID, net.ChainID)
	}
	if n.Decimals < 0 || n.Decimals > x402.MaxDecimals {
		return x402.Network{}, configErr(n.Name, "decimals", "%d is not in 0..%d", n.Decimals, x402.MaxDecimals)
	}
	if n.Asset != "" {
		a, err := x402.ParseAddress(n.Asset)
		if err != nil {
			return x402.Network{}, &ConfigError{Network: n.Name, Option: "asset", Err: err}
		}
		if a != net.USDC.Address {
			if n.AssetName == "" {
				return x402.Network{}, configErr(n.Name, "asset_name", "the token's EIP-712 name is required with a non-default asset")
			}
			version := net.USDC.Version
			if version == "" {
				version = x402.DefaultAssetVersion
			}
			net.USDC = x402.Asset{Address: a, Name: n.AssetName, Version: version, Decimals: x402.DefaultAssetDecimals, Symbol: x402.DefaultAssetSymbol}
		}
	} else if !ok {
		return x402.Network{}, configErr(n.Name, "asset", "is required for a network that is not built in")
	}
	if n.AssetName != "" {
		net.USDC.Name = n.AssetName
	}
	if n.AssetVersion != "" {
		net.USDC.Version = n.AssetVersion
	}
	if n.Decimals != 0 {
		net.USDC.Decimals = n.Decimals
	}
	if n.Symbol != "" {
		net.USDC.Symbol = n.Symbol
	}
	return net, nil
}

// minAmount is MinAmount as a number; nil when there is none.
func (n NetworkConfig) minAmount() (*big.Int, error) {
	if n.MinAmount == "" {
		return nil, nil
	}
	m, ok := new(big.Int).SetString(n.MinAmount, 10)
	if !ok || m.Sign() < 0 {
		return nil, configErr(n.Name, "min_amount", "%q is not a non-negative integer of base units", n.MinAmount)
	}
	return m, nil
}

// Registry is the networks of c and nothing else, as the gates that use the facilitator
// resolve them: a gate naming a network it does not serve is refused when it is
// configured.
func (c *Config) Registry() (*x402.Registry, error) {
	reg := new(x402.Registry)
	for _, n := range c.Networks {
		net, err := n.Network()
		if err != nil {
			return nil, err
		}
		if err := reg.Add(net); err != nil {
			return nil, err
		}
	}
	return reg, nil
}
