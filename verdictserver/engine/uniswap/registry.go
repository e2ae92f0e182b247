package uniswap

import (
	"fmt"
	"strings"

	"github.com/ethereum/go-ethereum/common"

	"github.com/x402gate/x402gate/verdictserver/engine/actions"
	"github.com/x402gate/x402gate/verdictserver/engine/internal/intern"
)

// The registry of known contracts (docs/policy.md#known-contracts): a protocol decoder reads
// calls only to the contracts it knows on the call's chain, the canonical deployments built in,
// the ones Options.Contracts adds, and those the agent's policy adds (knownContracts). A router's selector at any other address is a decode
// failure: the engine cannot know what that contract does with it. Token interfaces (ERC-20,
// EIP-2612, EIP-3009) are read on any token contract, since the asset check judges the token.

// ContractKind is what a known contract is, and so how calls to it are read.
type ContractKind string

// The kinds of known contracts.
const (
	// ContractV2Router is Uniswap's V2 Router02.
	ContractV2Router ContractKind = "uniswap.v2Router02"
	// ContractSwapRouter is Uniswap's V3 SwapRouter.
	ContractSwapRouter ContractKind = "uniswap.swapRouter"
	// ContractSwapRouter02 is Uniswap's SwapRouter02 (V2 and V3 swaps, multicall).
	ContractSwapRouter02 ContractKind = "uniswap.swapRouter02"
	// ContractUniversalRouter is Uniswap's Universal Router; KnownContract.Version picks its
	// command table.
	ContractUniversalRouter ContractKind = "uniswap.universalRouter"
	// ContractPermit2 is Uniswap's Permit2 (allowances and transfers of ERC-20 tokens).
	ContractPermit2 ContractKind = "uniswap.permit2"
)

// KnownContract is a contract a protocol decoder reads calls to.
type KnownContract struct {
	// ChainID is the chain it is deployed on, > 0.
	ChainID int64
	// Address is where.
	Address common.Address
	// Kind is what it is.
	Kind ContractKind
	// Version is a Universal Router's version, "1.2", "2.0" or "2.1.1"; empty for the
	// other kinds.
	Version string
}

// known is a registry entry: the kind, and a Universal Router's command table.
type known struct {
	kind ContractKind
	ur   *urVersion
}

// registry maps a chain and an address to the contract known there.
type registry map[int64]map[common.Address]known

// Permit2 is Permit2's address: the same on every chain (a CREATE2 deployment).
var Permit2 = common.HexToAddress("0x000000000022D473030F116dDEE9F6B43aC78BA3")

// canonicalContracts are the built-in deployments (Uniswap's deploy-addresses for chains 1,
// 8453, 84532 and 11155111).
var canonicalContracts = func() []KnownContract {
	ur := func(chain int64, version, addr string) KnownContract {
		return KnownContract{chain, common.HexToAddress(addr), ContractUniversalRouter, version}
	}
	c := func(chain int64, kind ContractKind, addr string) KnownContract {
		return KnownContract{chain, common.HexToAddress(addr), kind, ""}
	}
	out := []KnownContract{
		ur(1, "1.2", "0x3fC91A3afd70395Cd496C647d5a6CC9D4B2b7FAD"), ur(1, "2.0", "0x66a9893cc07d91d95644aedd05d03f95e1dba8af"), ur(1, "2.1.1", "0x4C82D1fBFe28C977cBB58D8C7FF8FCF9F70a2cCA"),
		ur(8453, "1.2", "0x3fC91A3afd70395Cd496C647d5a6CC9D4B2b7FAD"), ur(8453, "1.2", "0xeC8B0F7Ffe3ae75d7FfAb09429e3675bb63503e4"),
		ur(8453, "2.0", "0x6ff5693b99212da76ad316178a184ab56d299b43"), ur(8453, "2.1.1", "0xFdf682F51FE81Aa4898F0AE2163d8A55c127fbC7"),
		ur(84532, "2.0", "0x95273d871c8156636e114b63797d78D7E1720d81"), ur(84532, "2.1.1", "0x8B844f885672f333Bc0042cB669255f93a4C1E6b"),
		ur(11155111, "1.2", "0x3fC91A3afd70395Cd496C647d5a6CC9D4B2b7FAD"), ur(11155111, "2.0", "0x3a9d48ab9751398bbfa63ad67599bb04e4bdf98b"), ur(11155111, "2.1.1", "0x7DfD4F31be6814D2906BDE155c3e1B146EAc1468"),
		c(1, ContractV2Router, "0x7a250d5630B4cF539739dF2C5dAcb4c659F2488D"), c(1, ContractSwapRouter, "0xE592427A0AEce92De3Edee1F18E0157C05861564"),
		c(1, ContractSwapRouter02, "0x68b3465833fb72A70ecDF485E0e4C7bD8665Fc45"),
		c(8453, ContractV2Router, "0x4752ba5dbc23f44d87826276bf6fd6b1c372ad24"), c(8453, ContractSwapRouter02, "0x2626664c2603336E57B271c5C0b26F421741e481"),
	}
	for _, chain := range []int64{1, 8453, 84532, 11155111} {
		out = append(out, KnownContract{chain, Permit2, ContractPermit2, ""})
	}
	return out
}()

// builtinRegistry is the registry of canonicalContracts alone.
var builtinRegistry = mustRegistry(nil)

func mustRegistry(extra []KnownContract) registry {
	r, err := newRegistry(extra)
	if err != nil {
		panic("engine: " + err.Error())
	}
	return r
}

// urVersions are the Universal Router versions by name.
var urVersions = map[string]*urVersion{urV1_2.name: urV1_2, urV2_0.name: urV2_0, urV2_1.name: urV2_1}

// newRegistry is canonicalContracts and extra; an entry of extra replaces a built-in one at
// the same chain and address.
func newRegistry(extra []KnownContract) (registry, error) {
	r := registry{}
	for i, k := range append(append([]KnownContract{}, canonicalContracts...), extra...) {
		e, err := entryOf(k.Kind, k.Version)
		if err != nil {
			return nil, fmt.Errorf("contract %d (%s on %d): %w", i, k.Address.Hex(), k.ChainID, err)
		}
		if k.ChainID <= 0 || k.Address == (common.Address{}) {
			return nil, fmt.Errorf("contract %d: needs a chain id > 0 and an address", i)
		}
		if r[k.ChainID] == nil {
			r[k.ChainID] = map[common.Address]known{}
		}
		r[k.ChainID][k.Address] = e
	}
	return r, nil
}

// entryOf is the registry entry of a contract of kind; version is a Universal Router's.
func entryOf(kind ContractKind, version string) (known, error) {
	e := known{kind: kind}
	switch kind {
	case ContractUniversalRouter:
		if e.ur = urVersions[version]; e.ur == nil {
			return e, fmt.Errorf("Universal Router version %q is not 1.2, 2.0 or 2.1.1", version)
		}
	case ContractV2Router, ContractSwapRouter, ContractSwapRouter02, ContractPermit2:
		if version != "" {
			return e, fmt.Errorf("only a Universal Router has a version")
		}
	default:
		return e, fmt.Errorf("kind %q is not a known contract kind", kind)
	}
	return e, nil
}

// policyContract is the contract a policy's knownContracts names at addr on chainID: its kind
// written "kind" or "kind@version" (docs/policy.md#known-contracts).
func policyContract(added map[string]map[string]string, chainID int64, addr common.Address) (known, bool) {
	for written, kind := range added[intern.ChainKey(chainID)] {
		if a, ok := intern.StrictAddress(written); ok && a == addr {
			k, v, _ := strings.Cut(kind, "@")
			e, err := entryOf(ContractKind(k), v)
			return e, err == nil
		}
	}
	return known{}, false
}

// lookup is the contract known at addr on chainID.
func (r registry) lookup(chainID int64, addr common.Address) (known, bool) {
	if r == nil {
		r = builtinRegistry
	}
	k, ok := r[chainID][addr]
	return k, ok
}

// knownAt is the contract the registry r or, beside it, the policy of s's evaluation knows at
// addr on chainID (docs/policy.md#known-contracts): a built-in or configured contract is never
// redefined by a policy.
func (r registry) knownAt(s *actions.Scratch, chainID int64, addr common.Address) (known, bool) {
	if k, ok := r.lookup(chainID, addr); ok {
		return k, true
	}
	if s == nil || s.Added == nil {
		return known{}, false
	}
	return policyContract(s.Added, chainID, addr)
}

// NewDecoder is a Decoder that reads calls to the canonical contracts and to contracts; one at
// the address of a built-in one replaces it (docs/policy.md#known-contracts).
func NewDecoder(contracts []KnownContract) (Decoder, error) {
	reg, err := newRegistry(contracts)
	if err != nil {
		return Decoder{}, err
	}
	return Decoder{reg: reg}, nil
}
