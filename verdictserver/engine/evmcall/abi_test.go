package evmcall_test

import (
	"bytes"
	"encoding/hex"
	"testing"

	"github.com/ethereum/go-ethereum/crypto"

	"github.com/x402gate/x402gate/verdictserver/engine/erc20"
	"github.com/x402gate/x402gate/verdictserver/engine/evmcall"
	"github.com/x402gate/x402gate/verdictserver/engine/uniswap"
)

func TestSelectors(t *testing.T) {
	// The selectors of the deployed contracts, pinned: keccak-256 of each signature, and
	// the decoders' ABIs give the same.
	for sig, want := range map[string]string{
		"transfer(address,uint256)": "a9059cbb", "approve(address,uint256)": "095ea7b3", "transferFrom(address,address,uint256)": "23b872dd",
		"transferWithAuthorization(address,address,uint256,uint256,uint256,bytes32,uint8,bytes32,bytes32)": "e3ee160e",
		"transferWithAuthorization(address,address,uint256,uint256,uint256,bytes32,bytes)":                 "cf092995",
		"receiveWithAuthorization(address,address,uint256,uint256,uint256,bytes32,uint8,bytes32,bytes32)":  "ef55bec6",
		"increaseAllowance(address,uint256)": "39509351", "deposit()": "d0e30db0", "withdraw(uint256)": "2e1a7d4d",
		"permit(address,address,uint256,uint256,uint8,bytes32,bytes32)":                                    "d505accf",
		"swapExactTokensForTokens(uint256,uint256,address[],address,uint256)":                              "38ed1739",
		"swapTokensForExactTokens(uint256,uint256,address[],address,uint256)":                              "8803dbee",
		"swapExactETHForTokens(uint256,address[],address,uint256)":                                         "7ff36ab5",
		"swapETHForExactTokens(uint256,address[],address,uint256)":                                         "fb3bdb41",
		"swapExactTokensForETH(uint256,uint256,address[],address,uint256)":                                 "18cbafe5",
		"swapTokensForExactETH(uint256,uint256,address[],address,uint256)":                                 "4a25d94a",
		"swapExactTokensForTokensSupportingFeeOnTransferTokens(uint256,uint256,address[],address,uint256)": "5c11d795",
		"swapExactETHForTokensSupportingFeeOnTransferTokens(uint256,address[],address,uint256)":            "b6f9de95",
		"swapExactTokensForETHSupportingFeeOnTransferTokens(uint256,uint256,address[],address,uint256)":    "791ac947",
		"exactInputSingle((address,address,uint24,address,uint256,uint256,uint256,uint160))":               "414bf389",
		"exactInput((bytes,address,uint256,uint256,uint256))":                                              "c04b8d59",
		"exactOutputSingle((address,address,uint24,address,uint256,uint256,uint256,uint160))":              "db3e2198",
		"exactOutput((bytes,address,uint256,uint256,uint256))":                                             "f28c0498",
		"exactInputSingle((address,address,uint24,address,uint256,uint256,uint160))":                       "04e45aaf",
		"exactInput((bytes,address,uint256,uint256))":                                                      "b858183f",
		"exactOutputSingle((address,address,uint24,address,uint256,uint256,uint160))":                      "5023b4df",
		"exactOutput((bytes,address,uint256,uint256))":                                                     "09b81346",
		"multicall(bytes[])": "ac9650d8", "multicall(uint256,bytes[])": "5ae401dc", "multicall(bytes32,bytes[])": "1f0464d1",
		"execute(bytes,bytes[],uint256)": "3593564c", "execute(bytes,bytes[])": "24856bc3",
	} {
		if got := hex.EncodeToString(crypto.Keccak256([]byte(sig))[:4]); got != want {
			t.Errorf("keccak(%s) = %s, want %s", sig, got, want)
		}
		found := false
		for _, a := range []*evmcall.ABI{erc20.ABI, uniswap.RouterABI} {
			for _, m := range a.Methods {
				if m.Sig == sig {
					found = true
					if hex.EncodeToString(m.ID) != want {
						t.Errorf("%s: abi id %x, want %s", sig, m.ID, want)
					}
				}
			}
		}
		if !found {
			t.Errorf("%s is not in the decoders' ABIs", sig)
		}
	}
}

// TestMethodByIDIsMethodById: the selector index finds, for every selector, the method
// go-ethereum's ABI.MethodById finds, and nothing where it finds nothing.
func TestMethodByIDIsMethodById(t *testing.T) {
	for _, a := range []*evmcall.ABI{erc20.ABI, uniswap.RouterABI} {
		for _, m := range a.Methods {
			got := a.MethodByID(m.ID)
			want, err := a.MethodById(m.ID)
			if err != nil || got == nil || got.Sig != want.Sig || !bytes.Equal(got.ID, want.ID) {
				t.Errorf("%s: methodByID %v, MethodById %v %v", m.Sig, got, want, err)
			}
		}
		if m := a.MethodByID([]byte{0xde, 0xad, 0xbe, 0xef}); m != nil {
			t.Errorf("an unknown selector found %s", m.Sig)
		}
	}
}
