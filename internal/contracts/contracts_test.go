package contracts_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/accounts/abi"

	"github.com/x402gate/x402gate/internal/contracts"
)

// TestCommittedArtifactsAreUpToDate recompiles the Solidity sources with the pinned npm solc and
// requires the committed artifacts to match, so nobody edits a .sol file and forgets the JSON.
func TestCommittedArtifactsAreUpToDate(t *testing.T) {
	integrationDir, err := filepath.Abs(filepath.Join("..", "..", "integration"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(integrationDir, "node_modules", "solc")); err != nil {
		t.Fatalf("npm solc is not installed (%v); run: cd integration && npm ci", err)
	}
	out := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", "scripts/compile.mjs", "--out", out)
	cmd.Dir = integrationDir
	if combined, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("node scripts/compile.mjs: %v\n%s", err, combined)
	}

	for _, tc := range []struct {
		file      string
		committed contracts.Artifact
	}{
		{"X402Token.json", contracts.Token},
		{"TestWallet1271.json", contracts.Wallet},
		{"TestPriceFeed.json", contracts.PriceFeed},
		{"TestSanctionsOracle.json", contracts.SanctionsOracle},
		{"GuardedAccount.json", contracts.GuardedAccount},
		{"PlainToken.json", contracts.PlainToken},
		{"Permit2.json", contracts.Permit2},
		{"X402ExactPermit2Proxy.json", contracts.ExactPermit2Proxy},
		{"X402UptoPermit2Proxy.json", contracts.UptoPermit2Proxy},
	} {
		t.Run(tc.file, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join(out, tc.file))
			if err != nil {
				t.Fatal(err)
			}
			var fresh contracts.Artifact
			if err := json.Unmarshal(data, &fresh); err != nil {
				t.Fatal(err)
			}
			const hint = "; regenerate with: cd integration && node scripts/compile.mjs"
			if !bytes.Equal(fresh.Bytecode, tc.committed.Bytecode) {
				t.Errorf("committed bytecode of %s is stale%s", tc.file, hint)
			}
			if !bytes.Equal(fresh.DeployedBytecode, tc.committed.DeployedBytecode) {
				t.Errorf("committed deployedBytecode of %s is stale%s", tc.file, hint)
			}
			if !jsonEqual(t, fresh.ABI, tc.committed.ABI) {
				t.Errorf("committed abi of %s is stale%s", tc.file, hint)
			}
		})
	}
}

func jsonEqual(t *testing.T, a, b json.RawMessage) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatal(err)
	}
	xs, _ := json.Marshal(x)
	ys, _ := json.Marshal(y)
	return bytes.Equal(xs, ys)
}

// TestTokenMethodsHaveTheUSDCSelectors pins the selectors facilitators call on USDC: if these
// differ, a facilitator tested against X402Token would not work against FiatToken.
func TestTokenMethodsHaveTheUSDCSelectors(t *testing.T) {
	checkSelectors(t, contracts.TokenABI, []selectorCase{
		{"transferWithAuthorization with v,r,s", contracts.TransferWithAuthorizationVRS, "e3ee160e"},
		{"transferWithAuthorization with bytes signature", contracts.TransferWithAuthorizationBytes, "cf092995"},
		{"receiveWithAuthorization with v,r,s", contracts.ReceiveWithAuthorizationVRS, "ef55bec6"},
		{"receiveWithAuthorization with bytes signature", contracts.ReceiveWithAuthorizationBytes, "88b7ab63"},
		{"cancelAuthorization with v,r,s", contracts.CancelAuthorizationVRS, "5a049a70"},
		{"cancelAuthorization with bytes signature", contracts.CancelAuthorizationBytes, "b7b72899"},
		{"authorizationState", "authorizationState", "e94a0102"},
		{"balanceOf", "balanceOf", "70a08231"},
		{"transfer", "transfer", "a9059cbb"},
		{"DOMAIN_SEPARATOR", "DOMAIN_SEPARATOR", "3644e515"},
	})
}

// selectorCase is a method of an ABI and the selector it must have.
type selectorCase struct{ name, method, selector string }

// checkSelectors checks that each method of cases is in parsed with its selector.
func checkSelectors(t *testing.T, parsed abi.ABI, cases []selectorCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m, ok := parsed.Methods[tc.method]
			if !ok {
				t.Fatalf("no method %q", tc.method)
			}
			if got := hex.EncodeToString(m.ID); got != tc.selector {
				t.Errorf("selector of %s = %s, want %s", m.Sig, got, tc.selector)
			}
		})
	}
}

// TestTokenEventsHaveTheStandardTopics pins the event topics that receipts are parsed by.
func TestTokenEventsHaveTheStandardTopics(t *testing.T) {
	for _, tc := range []struct {
		event string
		topic string
	}{
		{"Transfer", "ddf252ad1be2c89b69c2b068fc378daa952ba7f163c4a11628f55a4df523b3ef"},
		{"Approval", "8c5be1e5ebec7d5bd14f71427d1e84f3dd0314c0f7b2291e5b200ac8c7c3b925"},
		{"AuthorizationUsed", "98de503528ee59b575ef0c0a2576a82497bfc029a5685b209e9ec333479b10a5"},
		{"AuthorizationCanceled", "1cdd46ff242716cdaa72d159d339a485b3438398348d68f09d7c8c0a59353d81"},
	} {
		t.Run(tc.event, func(t *testing.T) {
			e, ok := contracts.TokenABI.Events[tc.event]
			if !ok {
				t.Fatalf("TokenABI has no event %q", tc.event)
			}
			if got := hex.EncodeToString(e.ID[:]); got != tc.topic {
				t.Errorf("topic of %s = %s, want %s", e.Sig, got, tc.topic)
			}
		})
	}
}

func TestWalletImplementsERC1271(t *testing.T) {
	m, ok := contracts.WalletABI.Methods["isValidSignature"]
	if !ok {
		t.Fatal("WalletABI has no isValidSignature")
	}
	if got := hex.EncodeToString(m.ID); got != hex.EncodeToString(contracts.ERC1271MagicValue[:]) {
		t.Errorf("isValidSignature selector = %s, want the ERC-1271 magic value %x", got, contracts.ERC1271MagicValue)
	}
}

// TestFeedAndOracleHaveTheChainlinkAndChainalysisSelectors pins the selectors the engine's
// readers call on real feeds and on the real oracle: a test against our contracts then holds
// for Chainlink's aggregators and Chainalysis's SanctionsList.
func TestFeedAndOracleHaveTheChainlinkAndChainalysisSelectors(t *testing.T) {
	for _, tc := range []struct {
		name     string
		abi      abi.ABI
		method   string
		selector string
	}{
		{"latestRoundData", contracts.PriceFeedABI, "latestRoundData", "feaf968c"},
		{"decimals", contracts.PriceFeedABI, "decimals", "313ce567"},
		{"description", contracts.PriceFeedABI, "description", "7284e416"},
		{"getRoundData", contracts.PriceFeedABI, "getRoundData", "9a6fc8f5"},
		{"isSanctioned", contracts.SanctionsOracleABI, "isSanctioned", "df592f7d"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, ok := tc.abi.Methods[tc.method]
			if !ok {
				t.Fatalf("no method %q", tc.method)
			}
			if got := hex.EncodeToString(m.ID); got != tc.selector {
				t.Errorf("selector of %s = %s, want %s", m.Sig, got, tc.selector)
			}
		})
	}
	for _, tc := range []struct{ event, topic string }{
		{"SanctionedAddressesAdded", "2596d7dd6966c5673f9c06ddb0564c4f0e6d8d206ea075b83ad9ddd71a4fb927"},
		{"SanctionedAddressesRemoved", "32aab684eee99db715515d1a9987a8fe33bb6341b0e35e60db7eab48a08f9a3a"},
	} {
		e, ok := contracts.SanctionsOracleABI.Events[tc.event]
		if !ok {
			t.Fatalf("no event %q", tc.event)
		}
		if got := hex.EncodeToString(e.ID[:]); got != tc.topic {
			t.Errorf("topic of %s = %s, want %s", e.Sig, got, tc.topic)
		}
	}
}

// TestPermit2ContractsHaveTheReferenceSelectors: our Permit2 and x402 proxies answer the
// calls the reference makes. The selectors were computed with viem's toFunctionSelector from
// @x402/evm 2.27's x402ExactPermit2ProxyABI and x402UptoPermit2ProxyABI, and from canonical
// Permit2's signatures.
func TestPermit2ContractsHaveTheReferenceSelectors(t *testing.T) {
	checkSelectors(t, contracts.Permit2ABI, []selectorCase{
		{"Permit2 permitWitnessTransferFrom", "permitWitnessTransferFrom", "137c29fe"},
		{"Permit2 nonceBitmap", "nonceBitmap", "4fe02b44"},
		{"Permit2 DOMAIN_SEPARATOR", "DOMAIN_SEPARATOR", "3644e515"},
	})
	checkSelectors(t, contracts.ExactPermit2ProxyABI, []selectorCase{
		{"exact proxy settle", "settle", "13cd3b53"},
		{"exact proxy settleWithPermit", "settleWithPermit", "fa340378"},
		{"exact proxy PERMIT2", "PERMIT2", "6afdd850"},
		{"exact proxy WITNESS_TYPE_STRING", "WITNESS_TYPE_STRING", "156e2152"},
	})
	checkSelectors(t, contracts.UptoPermit2ProxyABI, []selectorCase{
		{"upto proxy settle", "settle", "ff11e7b4"},
		{"upto proxy settleWithPermit", "settleWithPermit", "016c1748"},
		{"upto proxy WITNESS_TYPEHASH", "WITNESS_TYPEHASH", "2c03ae6a"},
	})
	for _, tc := range []struct {
		parsed   abi.ABI
		name     string
		selector string
	}{
		{contracts.UptoPermit2ProxyABI, "AmountExceedsPermitted", "fe64b4c7"},
		{contracts.UptoPermit2ProxyABI, "UnauthorizedFacilitator", "0f6fae87"},
		{contracts.ExactPermit2ProxyABI, "InvalidAmount", "2c5211c6"},
		{contracts.ExactPermit2ProxyABI, "PaymentTooEarly", "a65539fa"},
	} {
		if e, ok := tc.parsed.Errors[tc.name]; !ok || hex.EncodeToString(e.ID[:4]) != tc.selector {
			t.Errorf("error %s: %v", tc.name, ok)
		}
	}
}
