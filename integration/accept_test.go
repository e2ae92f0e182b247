package integration_test

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/x402gate/x402gate/internal/testenv"
)

// acceptCaddyfile is one route with two accept blocks, USDC on base-sepolia and on base,
// each a local anvil with its own chain id and token, served by one bundled facilitator.
const acceptCaddyfile = `{
	admin {$CADDY_ADMIN}
	auto_https off
	x402 {
		facilitator {
			network base-sepolia {
				rpc {env.RPC_A}
				asset {$TOKEN_A}
				asset_name USDC
				asset_version 2
			}
			network base {
				rpc {env.RPC_B}
				asset {$TOKEN_B}
				asset_name USDC
				asset_version 2
			}
			signer_key {file.{$X402_FACILITATOR_KEY_FILE}}
		}
	}
}

http://:{$PORT} {
	bind 127.0.0.1
	x402 {
		pay_to {$X402_PAY_TO}
		description "two ways to pay"
		mime_type application/json
		accept {
			network base-sepolia
			price 0.01 USDC
		}
		accept {
			network base
			price 0.01 USDC
		}
	}
	respond "{\"ok\":true}"
}
`

// TestCaddyAcceptsTwoNetworks: the built caddy binary lists both ways to pay in the v1 body
// and the v2 header; x402-fetch (v1, a base-sepolia wallet) pays on the first anvil and
// @x402/fetch (v2, registered for eip155:8453) on the second, and each transfer lands on
// its own chain only.
func TestCaddyAcceptsTwoNetworks(t *testing.T) {
	chainA, tokA := testenv.StartChainWithToken(t)
	chainB, tokB := testenv.StartChainWithToken(t, testenv.WithChainID(8453))
	payTo := testenv.NewAccount(t).Address
	port := testenv.FreePort(t)
	testenv.StartCaddy(t, acceptCaddyfile, testenv.CaddyOptions{
		Env: []string{
			"RPC_A=" + chainA.RPCURL, "RPC_B=" + chainB.RPCURL,
			"TOKEN_A=" + tokA.Address.Hex(), "TOKEN_B=" + tokB.Address.Hex(),
			"X402_PAY_TO=" + payTo.Hex(),
			"X402_FACILITATOR_KEY_FILE=" + writeKeyFile(t, chainA.FacilitatorAccount()),
			"PORT=" + strconv.Itoa(port),
		},
		WaitPorts: []int{port},
	})
	url := "http://127.0.0.1:" + strconv.Itoa(port) + "/weather"

	r := mustDo(t, http.MethodGet, url, nil)
	if r.Status != http.StatusPaymentRequired {
		t.Fatalf("unpaid: status %d, want 402", r.Status)
	}
	var v1 struct {
		Accepts []struct{ Network, Asset string } `json:"accepts"`
	}
	if err := json.Unmarshal(r.Body, &v1); err != nil || len(v1.Accepts) != 2 || v1.Accepts[0].Network != "base-sepolia" || v1.Accepts[1].Network != "base" {
		t.Fatalf("v1 accepts %+v (%v), want base-sepolia then base", v1.Accepts, err)
	}
	raw, err := base64.StdEncoding.DecodeString(r.Header.Get("PAYMENT-REQUIRED"))
	if err != nil {
		t.Fatal(err)
	}
	var v2 struct {
		Accepts []struct{ Network, Asset string } `json:"accepts"`
	}
	if err := json.Unmarshal(raw, &v2); err != nil || len(v2.Accepts) != 2 || v2.Accepts[0].Network != "eip155:84532" || v2.Accepts[1].Network != "eip155:8453" ||
		!strings.EqualFold(v2.Accepts[1].Asset, tokB.Address.Hex()) {
		t.Fatalf("v2 accepts %+v (%v), want eip155:84532 then eip155:8453 with the second token", v2.Accepts, err)
	}

	payerV1, payerV2 := chainA.Accounts[1], chainB.Accounts[2]
	balA := balances(t, tokA, payerV1.Address, payTo)
	balB := balances(t, tokB, payerV2.Address, payTo)
	balAofV2, balBofV1 := tokA.BalanceOf(t, payerV2.Address), tokB.BalanceOf(t, payerV1.Address)

	out := payWith(t, payV1Script, payerV1, url)
	if out.Status != http.StatusOK || out.PaymentResponseHeader == nil {
		t.Fatalf("x402-fetch: status %d %s", out.Status, out.Body)
	}
	sr := decodeSettleResponse(t, *out.PaymentResponseHeader)
	if sr.Network != "base-sepolia" {
		t.Errorf("v1 settled on %q, want base-sepolia", sr.Network)
	}
	checkOnChain(t, chainA, tokA, sr.Transaction, payerV1.Address, payTo)

	out = payWith(t, payV2Script, payerV2, url, "X402_NETWORK=eip155:8453", "X402_TOKEN="+tokB.Address.Hex())
	if out.Status != http.StatusOK || out.PaymentResponseHeader == nil {
		t.Fatalf("@x402/fetch: status %d %s", out.Status, out.Body)
	}
	sr = decodeSettleResponse(t, *out.PaymentResponseHeader)
	if sr.Network != "eip155:8453" {
		t.Errorf("v2 settled on %q, want eip155:8453", sr.Network)
	}
	checkOnChain(t, chainB, tokB, sr.Transaction, payerV2.Address, payTo)

	wantDelta(t, tokA, payerV1.Address, balA[0], -price)
	wantDelta(t, tokA, payTo, balA[1], price)
	wantDelta(t, tokB, payerV2.Address, balB[0], -price)
	wantDelta(t, tokB, payTo, balB[1], price)
	// Nothing crossed chains: each payer's balance on the other chain is unchanged.
	wantDelta(t, tokA, payerV2.Address, balAofV2, 0)
	wantDelta(t, tokB, payerV1.Address, balBofV1, 0)
}

// paymentIDCaddyfile is one route that requires the payment-identifier extension.
const paymentIDCaddyfile = `{
	admin {$CADDY_ADMIN}
	auto_https off
	x402 {
		facilitator {
			network base-sepolia {
				rpc {env.RPC_A}
				asset {$TOKEN_A}
				asset_name USDC
				asset_version 2
			}
			signer_key {file.{$X402_FACILITATOR_KEY_FILE}}
		}
	}
}

http://:{$PORT} {
	bind 127.0.0.1
	x402 {
		pay_to {$X402_PAY_TO}
		network base-sepolia
		price 0.01 USDC
		payment_id required
	}
	respond "{\"ok\":true}"
}
`

// TestCaddyPaymentIdentifier: @x402/fetch with @x402/extensions' appendPaymentIdentifierToExtensions
// against the built caddy binary: without an id the route answers 400; the client's header
// with an id pays once; the same header again is not charged (409 used, one good answer);
// another payment under the same id is a 409 conflict.
func TestCaddyPaymentIdentifier(t *testing.T) {
	chain, tok := testenv.StartChainWithToken(t)
	payTo := testenv.NewAccount(t).Address
	port := testenv.FreePort(t)
	testenv.StartCaddy(t, paymentIDCaddyfile, testenv.CaddyOptions{
		Env: []string{
			"RPC_A=" + chain.RPCURL, "TOKEN_A=" + tok.Address.Hex(), "X402_PAY_TO=" + payTo.Hex(),
			"X402_FACILITATOR_KEY_FILE=" + writeKeyFile(t, chain.FacilitatorAccount()),
			"PORT=" + strconv.Itoa(port),
		},
		WaitPorts: []int{port},
	})
	url := "http://127.0.0.1:" + strconv.Itoa(port) + "/data"
	payer := chain.Accounts[1]
	bal := balances(t, tok, payer.Address, payTo)
	token := "X402_TOKEN=" + tok.Address.Hex()

	out := payWith(t, payV2Script, payer, url, token)
	if out.Status != http.StatusBadRequest || !strings.Contains(out.Body, "payment_identifier_required") {
		t.Errorf("without an id: status %d %s, want 400 payment_identifier_required", out.Status, out.Body)
	}

	const id = "pay_integration_0000000001"
	header := signOnly(t, payV2Script, payer, url, token, "X402_PAYMENT_ID="+id)
	if p := decodePaymentJSON(t, header); !strings.Contains(func() string { b, _ := json.Marshal(p["extensions"]); return string(b) }(), id) {
		t.Fatalf("the client's payment carries no id: %v", p["extensions"])
	}
	for i, want := range []int{http.StatusOK, http.StatusConflict} {
		r := mustDo(t, http.MethodGet, url, map[string]string{"PAYMENT-SIGNATURE": header})
		if r.Status != want {
			t.Fatalf("send %d of the same header: status %d %s, want %d", i+1, r.Status, r.Body, want)
		}
		if i == 1 && !strings.Contains(string(r.Body), "payment_identifier_used") {
			t.Errorf("the repeat after the good answer: %s, want payment_identifier_used", r.Body)
		}
	}
	other := signOnly(t, payV2Script, payer, url, token, "X402_PAYMENT_ID="+id)
	r := mustDo(t, http.MethodGet, url, map[string]string{"PAYMENT-SIGNATURE": other})
	if r.Status != http.StatusConflict || !strings.Contains(string(r.Body), "payment_identifier_conflict") {
		t.Errorf("another payment under the id: status %d %s, want 409 payment_identifier_conflict", r.Status, r.Body)
	}
	wantDelta(t, tok, payer.Address, bal[0], -price)
	wantDelta(t, tok, payTo, bal[1], price)
}
