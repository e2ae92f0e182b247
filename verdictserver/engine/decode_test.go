package engine

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/ethereum/go-ethereum/common"

	"github.com/x402gate/x402gate/verdict"
	"github.com/x402gate/x402gate/verdictserver/engine/actions"
	"github.com/x402gate/x402gate/verdictserver/engine/uniswap"
)

// transferDecoder reads {"protocol":"erc20","chainId":…,"to":token,"recipient":…}: the
// shape of a decoder the next protocols add through Deps.Decoders.
type transferDecoder struct{ incomplete bool }

func (transferDecoder) Protocol() string { return "erc20" }

func (d transferDecoder) Decode(tx map[string]any) (*Action, error) {
	if d.incomplete {
		return &Action{Protocol: "erc20"}, nil
	}
	c, ok := actions.ChainID(tx["chainId"])
	to, ok2 := tx["to"].(string)
	rc, ok3 := tx["recipient"].(string)
	if !ok || !ok2 || !ok3 {
		return nil, errors.New("bad transfer")
	}
	token := common.HexToAddress(to)
	return &Action{Protocol: "erc20", ChainID: c, Kind: "erc20.transfer", To: &token, Selector: "0xa9059cbb",
		Recipients: []common.Address{common.HexToAddress(rc)}, Assets: []common.Address{token}}, nil
}

func TestADecoderAddsAProtocolWithoutTouchingTheAPI(t *testing.T) {
	pol := mustPolicy(t, 2, `{"venues": {"allowed": ["erc20", "payment"]}, "chains": {"allowed": [84532]},
		"contracts": {"84532": {"0x036CbD53842c5426634e7929541eC2318f3dCF7e": ["0xa9059cbb"], "0x4200000000000000000000000000000000000006": ["0x095ea7b3"]}}}`)
	tx := func(token string) map[string]any {
		return map[string]any{"protocol": "erc20", "chainId": int64(84532), "to": token, "recipient": payee.Hex()}
	}
	e := newEngine(t, Config{}, Deps{Decoders: []Decoder{transferDecoder{}}})
	for _, tc := range []struct {
		name   string
		token  string
		reason verdict.ReasonCode
		status verdict.CheckStatus
	}{
		{"an allowed selector on an allowed contract", usdc.Hex(), verdict.ReasonAllowed, verdict.CheckPassed},
		{"a selector the contract's entry does not list", weth.Hex(), verdict.ReasonContractOrSelector, verdict.CheckFailed},
		{"a contract the chain's entry does not list", stranger.Hex(), verdict.ReasonContractOrSelector, verdict.CheckFailed},
	} {
		v := e.Evaluate(context.Background(), Input{Escrow: escrow, ProposedTx: tx(tc.token), Policy: pol})
		mustBeValid(t, v)
		if v.ReasonCode != tc.reason || checkOf(v, verdict.CheckContractSelector).Status != tc.status {
			t.Errorf("%s: %s, contract_selector %+v", tc.name, v.ReasonCode, checkOf(v, verdict.CheckContractSelector))
		}
	}
	// Payments still decode beside it; a decoder's plain error and an incomplete action are decode failures.
	if v := e.Evaluate(context.Background(), Input{Escrow: escrow, ProposedTx: payment(), Policy: pol}); v.ReasonCode != verdict.ReasonAllowed {
		t.Errorf("payment: %s", v.ReasonCode)
	}
	if v := e.Evaluate(context.Background(), Input{Escrow: escrow, ProposedTx: map[string]any{"protocol": "erc20"}, Policy: pol}); v.ReasonCode != verdict.ReasonDecodeFailure {
		t.Errorf("bad transfer: %s", v.ReasonCode)
	}
	bad := newEngine(t, Config{}, Deps{Decoders: []Decoder{transferDecoder{incomplete: true}}})
	v := bad.Evaluate(context.Background(), Input{Escrow: escrow, ProposedTx: tx(usdc.Hex()), Policy: pol})
	mustBeValid(t, v)
	if v.ReasonCode != verdict.ReasonDecodeFailure {
		t.Errorf("incomplete action: %s", v.ReasonCode)
	}
}

// TestDepsContractsRefused: a contract Deps adds must name a kind the decoders read,
// a Universal Router its version, a chain and an address (docs/policy.md#known-contracts).
func TestDepsContractsRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		c    KnownContract
		want string
	}{
		{"an unknown kind", KnownContract{ChainID: 84532, Address: urOther, Kind: "uniswap.router", Version: ""}, `kind "uniswap.router"`},
		{"a Universal Router without its version", KnownContract{ChainID: 84532, Address: urOther, Kind: uniswap.ContractUniversalRouter, Version: ""}, "version"},
		{"a Universal Router of an unknown version", KnownContract{ChainID: 84532, Address: urOther, Kind: uniswap.ContractUniversalRouter, Version: "3.0"}, `"3.0"`},
		{"a version on a SwapRouter02", KnownContract{ChainID: 84532, Address: urOther, Kind: uniswap.ContractSwapRouter02, Version: "2.0"}, "only a Universal Router"},
		{"chain 0", KnownContract{ChainID: 0, Address: urOther, Kind: uniswap.ContractSwapRouter02, Version: ""}, "chain id"},
		{"the zero address", KnownContract{ChainID: 84532, Address: common.Address{}, Kind: uniswap.ContractPermit2, Version: ""}, "address"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(Config{}, Deps{Contracts: []KnownContract{tc.c}})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one naming %s", err, tc.want)
			}
		})
	}
}
