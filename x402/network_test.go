package x402

import (
	"math/big"
	"slices"
	"testing"

	"github.com/ethereum/go-ethereum/common"
)

func TestRegistryLookup(t *testing.T) {
	reg := NewRegistry()
	for _, tc := range []struct {
		id   string
		want string // v1 name, "" = unknown
	}{
		{"base", "base"},
		{"eip155:8453", "base"},
		{"8453", "base"},
		{"base-sepolia", "base-sepolia"},
		{"eip155:84532", "base-sepolia"},
		{"84532", "base-sepolia"},
		{"084532", ""},
		{"ethereum", ""},
		{"eip155:1", ""},
		{"", ""},
		{"BASE", ""},
	} {
		t.Run(tc.id, func(t *testing.T) {
			n, ok := reg.Lookup(tc.id)
			if ok != (tc.want != "") || n.Name != tc.want {
				t.Fatalf("Lookup(%q) = %q, %v", tc.id, n.Name, ok)
			}
		})
	}
}

func TestBuiltInNetworksCarryCirclesUSDCDomains(t *testing.T) {
	// docs/protocol.md#networks-and-assets: the mainnet/testnet EIP-712 name difference.
	for _, tc := range []struct {
		n             Network
		caip2, addr   string
		domain, chain string
	}{
		{Base, "eip155:8453", "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913", "USD Coin", "8453"},
		{BaseSepolia, "eip155:84532", "0x036CbD53842c5426634e7929541eC2318f3dCF7e", "USDC", "84532"},
	} {
		t.Run(tc.n.Name, func(t *testing.T) {
			if tc.n.CAIP2 != tc.caip2 || tc.n.USDC.Address.Hex() != tc.addr || tc.n.USDC.Name != tc.domain ||
				tc.n.USDC.Version != "2" || tc.n.USDC.Decimals != 6 || tc.n.ChainID.String() != tc.chain {
				t.Fatalf("network = %+v", tc.n)
			}
		})
	}
}

func TestRegistryAdd(t *testing.T) {
	token := Asset{Address: common.HexToAddress("0x5FbDB2315678afecb367f032d93F642f64180aa3"), Name: "X402 Test USD", Version: "2", Decimals: 6}
	for _, tc := range []struct {
		name string
		n    Network
		ok   bool
	}{
		{"local chain with its own token", Network{Name: "anvil", ChainID: big.NewInt(31337), USDC: token}, true},
		{"explicit matching CAIP-2", Network{Name: "anvil", CAIP2: "eip155:31337", ChainID: big.NewInt(31337), USDC: token}, true},
		{"CAIP-2 that does not match the chain id", Network{Name: "anvil", CAIP2: "eip155:1", ChainID: big.NewInt(31337), USDC: token}, false},
		{"no chain id", Network{Name: "anvil", USDC: token}, false},
		{"zero chain id", Network{Name: "anvil", ChainID: big.NewInt(0), USDC: token}, false},
		{"no name", Network{ChainID: big.NewInt(31337), USDC: token}, false},
		{"no asset", Network{Name: "anvil", ChainID: big.NewInt(31337)}, false},
		{"no EIP-712 domain", Network{Name: "anvil", ChainID: big.NewInt(31337), USDC: Asset{Address: token.Address, Decimals: 6}}, false},
		{"decimals out of range", Network{Name: "anvil", ChainID: big.NewInt(31337), USDC: Asset{Address: token.Address, Name: "T", Version: "1", Decimals: 99}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg := NewRegistry()
			err := reg.Add(tc.n)
			if (err == nil) != tc.ok {
				t.Fatalf("Add = %v", err)
			}
			_, found := reg.Lookup("eip155:31337")
			if found != tc.ok {
				t.Fatalf("found after Add = %v", found)
			}
		})
	}
}

func TestRegistryAddOverridesANetworkOfTheSameChain(t *testing.T) {
	reg := NewRegistry()
	local := Asset{Address: common.HexToAddress("0x5FbDB2315678afecb367f032d93F642f64180aa3"), Name: "X402 Test USD", Version: "2", Decimals: 6}
	if err := reg.Add(Network{Name: "base-sepolia", ChainID: big.NewInt(84532), USDC: local}); err != nil {
		t.Fatal(err)
	}
	n, ok := reg.Lookup("eip155:84532")
	if !ok || n.USDC.Address != local.Address {
		t.Fatalf("lookup = %+v", n)
	}
	names := []string{}
	for _, n := range reg.Networks() {
		names = append(names, n.Name)
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"base", "base-sepolia"}) {
		t.Fatalf("networks = %v", names)
	}
	// A custom network decodes in both versions under its own names.
	reg2 := NewRegistry()
	if err := reg2.Add(Network{Name: "anvil", ChainID: big.NewInt(31337), USDC: local}); err != nil {
		t.Fatal(err)
	}
	r, err := DecodeRequirementsJSON(mustJSON(t, with(reqV1Map(), "network", "anvil")), 1, reg2)
	if err != nil || r.Network != "eip155:31337" {
		t.Fatalf("decode = %+v, %v", r, err)
	}
	if v1, err := r.V1(reg2); err != nil || v1.Network != "anvil" {
		t.Fatalf("V1 = %+v, %v", v1, err)
	}
	if _, err := r.V1(nil); ReasonOf(err) != ReasonInvalidNetwork {
		t.Fatalf("V1 without the network = %v", err)
	}
}
