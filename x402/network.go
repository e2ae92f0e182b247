package x402

import (
	"errors"
	"fmt"
	"math/big"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/ethereum/go-ethereum/common"
)

// Asset is an EIP-3009 token on one network and the EIP-712 domain it signs under.
type Asset struct {
	Address  common.Address
	Name     string // EIP-712 domain name, e.g. "USD Coin" on Base, "USDC" on Base Sepolia
	Version  string // EIP-712 domain version
	Decimals int
	Symbol   string
}

// Network is one EVM chain: its v1 name, its CAIP-2 id and its default asset.
type Network struct {
	Name    string // v1 name, e.g. "base-sepolia"
	CAIP2   string // v2 id, e.g. "eip155:84532"
	ChainID *big.Int
	USDC    Asset
}

// Networks known without configuration. The addresses and domains are Circle's USDC
// deployments (docs/protocol.md#networks-and-assets).
var (
	Base = Network{
		Name: "base", CAIP2: "eip155:8453", ChainID: big.NewInt(8453),
		USDC: Asset{Address: common.HexToAddress("0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913"), Name: "USD Coin", Version: "2", Decimals: 6, Symbol: "USDC"},
	}
	BaseSepolia = Network{
		Name: "base-sepolia", CAIP2: "eip155:84532", ChainID: big.NewInt(84532),
		USDC: Asset{Address: common.HexToAddress("0x036CbD53842c5426634e7929541eC2318f3dCF7e"), Name: "USDC", Version: "2", Decimals: 6, Symbol: "USDC"},
	}
)

// Defaults of a token configured by its address alone: Circle's FiatToken, whose
// EIP-712 domain version is "2" on every chain (docs/facilitator.md#networks).
const (
	DefaultAssetVersion  = "2"
	DefaultAssetDecimals = 6
	DefaultAssetSymbol   = "USDC"
)

// Registry resolves networks by v1 name, CAIP-2 id or chain id. The zero value is empty;
// NewRegistry returns one holding Base and Base Sepolia. It is safe for concurrent use.
type Registry struct {
	mu      sync.RWMutex
	byName  map[string]Network
	byCAIP2 map[string]Network
}

// NewRegistry returns a registry with the built-in networks.
func NewRegistry() *Registry {
	r := &Registry{}
	for _, n := range []Network{Base, BaseSepolia} {
		if err := r.Add(n); err != nil {
			panic(err) // built-in table is constant; unreachable
		}
	}
	return r
}

// Add registers a network, replacing one with the same name or CAIP-2 id (so a local
// chain configured as "base-sepolia" with its own token overrides the default asset).
func (r *Registry) Add(n Network) error {
	if n.ChainID == nil || n.ChainID.Sign() <= 0 {
		return fmt.Errorf("network %q: chain id must be positive", n.Name)
	}
	if n.Name == "" {
		return fmt.Errorf("network with chain id %s: name is empty", n.ChainID)
	}
	want := "eip155:" + n.ChainID.String()
	if n.CAIP2 == "" {
		n.CAIP2 = want
	}
	if n.CAIP2 != want {
		return fmt.Errorf("network %q: CAIP-2 id %q does not match chain id %s", n.Name, n.CAIP2, n.ChainID)
	}
	if n.USDC.Address == (common.Address{}) {
		return fmt.Errorf("network %q: asset address is empty", n.Name)
	}
	if n.USDC.Name == "" || n.USDC.Version == "" {
		return fmt.Errorf("network %q: asset EIP-712 name and version are required", n.Name)
	}
	if n.USDC.Decimals < 0 || n.USDC.Decimals > 36 {
		return fmt.Errorf("network %q: asset decimals %d out of range", n.Name, n.USDC.Decimals)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.byName == nil {
		r.byName = map[string]Network{}
		r.byCAIP2 = map[string]Network{}
	}
	if old, ok := r.byCAIP2[n.CAIP2]; ok {
		delete(r.byName, old.Name)
	}
	if old, ok := r.byName[n.Name]; ok {
		delete(r.byCAIP2, old.CAIP2)
	}
	r.byName[n.Name] = n
	r.byCAIP2[n.CAIP2] = n
	return nil
}

// Lookup finds a network by v1 name ("base-sepolia"), CAIP-2 id ("eip155:84532") or
// decimal chain id ("84532").
func (r *Registry) Lookup(id string) (Network, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if n, ok := r.byName[id]; ok {
		return n, true
	}
	if n, ok := r.byCAIP2[id]; ok {
		return n, true
	}
	if _, err := strconv.ParseUint(id, 10, 64); err == nil && !strings.HasPrefix(id, "0") {
		n, ok := r.byCAIP2["eip155:"+id]
		return n, ok
	}
	return Network{}, false
}

// Names returns the v1 names of the registered networks, sorted.
func (r *Registry) Names() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]string, 0, len(r.byName))
	for name := range r.byName {
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}

// Networks returns every registered network.
func (r *Registry) Networks() []Network {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]Network, 0, len(r.byName))
	for _, n := range r.byName {
		out = append(out, n)
	}
	return out
}

// ParseAddress reads a configured 20-byte 0x-hex address (a payee, a token, a factory). A
// mixed-case address must carry a valid EIP-55 checksum, so a typo is caught at start,
// not after money moved; the zero address is refused (docs/gate.md#configuration).
func ParseAddress(s string) (common.Address, error) {
	if !common.IsHexAddress(s) || !strings.HasPrefix(s, "0x") {
		return common.Address{}, fmt.Errorf("%q is not a 0x-hex address", s)
	}
	a := common.HexToAddress(s)
	lower, upper := strings.ToLower(s[2:]), strings.ToUpper(s[2:])
	if s[2:] != lower && s[2:] != upper && a.Hex() != s {
		return common.Address{}, fmt.Errorf("%q fails its EIP-55 checksum (want %s)", s, a.Hex())
	}
	if a == (common.Address{}) {
		return common.Address{}, errors.New("the zero address cannot be used")
	}
	return a, nil
}
