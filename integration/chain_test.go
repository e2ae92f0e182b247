package integration_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/big"
	"strings"
	"testing"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/crypto"

	"github.com/x402gate/x402gate/internal/contracts"
	"github.com/x402gate/x402gate/internal/testenv"
)

// signScript is the Node script that makes X-PAYMENT headers with the real x402-fetch 1.2.0.
const signScript = "scripts/sign-x402-fetch.mjs"

// requirementsV1 is a v1 PaymentRequirements for our token on the local chain, which poses as
// base-sepolia (chain id 84532), so x402 1.2.0 signs for it as it would for Base Sepolia USDC.
func requirementsV1(tok *testenv.Token, payTo common.Address, amount string) map[string]any {
	return map[string]any{
		"scheme":            "exact",
		"network":           "base-sepolia",
		"maxAmountRequired": amount,
		"resource":          "http://127.0.0.1:8080/premium",
		"description":       "premium data",
		"mimeType":          "application/json",
		"payTo":             payTo.Hex(),
		"maxTimeoutSeconds": 60,
		"asset":             tok.Address.Hex(),
		"extra":             map[string]any{"name": tok.Name, "version": tok.Version},
	}
}

// xPayment is the decoded X-PAYMENT header (v1 PaymentPayload, exact EVM scheme). It is decoded
// here with encoding/json on purpose: this test checks the chain harness against the real
// client, independently of our own x402 codec.
type xPayment struct {
	X402Version int    `json:"x402Version"`
	Scheme      string `json:"scheme"`
	Network     string `json:"network"`
	Payload     struct {
		Signature     string `json:"signature"`
		Authorization struct {
			From        string `json:"from"`
			To          string `json:"to"`
			Value       string `json:"value"`
			ValidAfter  string `json:"validAfter"`
			ValidBefore string `json:"validBefore"`
			Nonce       string `json:"nonce"`
		} `json:"authorization"`
	} `json:"payload"`
}

// signWithX402Fetch runs the real x402-fetch client for payer over stdin (requirements or a 402
// body, marshalled unless it is []byte) and returns the raw header value; the key travels in
// the environment only.
func signWithX402Fetch(ctx context.Context, payer testenv.Account, stdin any, env ...string) (string, error) {
	in, ok := stdin.([]byte)
	if !ok {
		var err error
		if in, err = json.Marshal(stdin); err != nil {
			return "", err
		}
	}
	env = append(env, "X402_PAYER_KEY="+hexutil.Encode(crypto.FromECDSA(payer.Key)))
	out, err := testenv.RunNodeContext(ctx, signScript, env, in)
	return strings.TrimSpace(string(out)), err
}

// decodeXPayment decodes a header value into the payload and the authorization it carries.
func decodeXPayment(t *testing.T, header string) (xPayment, testenv.Authorization, []byte) {
	t.Helper()
	raw, err := base64.StdEncoding.DecodeString(header)
	if err != nil {
		t.Fatalf("X-PAYMENT is not standard base64: %v", err)
	}
	var p xPayment
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		t.Fatalf("X-PAYMENT JSON: %v", err)
	}
	a := p.Payload.Authorization
	auth := testenv.Authorization{
		From:        common.HexToAddress(a.From),
		To:          common.HexToAddress(a.To),
		Value:       mustBig(t, a.Value),
		ValidAfter:  mustBig(t, a.ValidAfter),
		ValidBefore: mustBig(t, a.ValidBefore),
	}
	nonce, err := hexutil.Decode(a.Nonce)
	if err != nil || len(nonce) != 32 {
		t.Fatalf("nonce %q is not 32 bytes of hex", a.Nonce)
	}
	copy(auth.Nonce[:], nonce)
	sig, err := hexutil.Decode(p.Payload.Signature)
	if err != nil {
		t.Fatalf("signature %q is not hex: %v", p.Payload.Signature, err)
	}
	return p, auth, sig
}

func mustBig(t *testing.T, s string) *big.Int {
	t.Helper()
	n, ok := new(big.Int).SetString(s, 10)
	if !ok {
		t.Fatalf("%q is not a decimal integer", s)
	}
	return n
}

// TestX402FetchAuthorizationSettlesOnAnvilOnce is the harness's end-to-end check: an
// authorization signed by the real x402-fetch client settles on our token exactly once.
func TestX402FetchAuthorizationSettlesOnAnvilOnce(t *testing.T) {
	t.Parallel()
	c, tok := testenv.StartChainWithToken(t)
	ctx := context.Background()
	facilitator, payer, payTo := c.FacilitatorAccount(), c.Accounts[1], c.Accounts[2]
	value := big.NewInt(10_000) // 0.01 USDC

	header, err := signWithX402Fetch(ctx, payer, requirementsV1(tok, payTo.Address, value.String()))
	if err != nil {
		t.Fatal(err)
	}
	p, auth, sig := decodeXPayment(t, header)

	t.Run("the header is a v1 exact payment for the requirements", func(t *testing.T) {
		if p.X402Version != 1 || p.Scheme != "exact" || p.Network != "base-sepolia" {
			t.Errorf("header = {x402Version %d, scheme %q, network %q}, want {1, exact, base-sepolia}", p.X402Version, p.Scheme, p.Network)
		}
		if auth.From != payer.Address || auth.To != payTo.Address || auth.Value.Cmp(value) != 0 {
			t.Errorf("authorization = %s -> %s value %s, want %s -> %s value %s",
				auth.From, auth.To, auth.Value, payer.Address, payTo.Address, value)
		}
		if len(sig) != 65 {
			t.Errorf("signature is %d bytes, want 65", len(sig))
		}
	})

	t.Run("the client signs the EIP-712 digest the harness computes", func(t *testing.T) {
		digest := tok.Digest(t, testenv.PrimaryTransfer, auth)
		rsv := append([]byte(nil), sig...)
		rsv[64] -= 27
		pub, err := crypto.SigToPub(digest[:], rsv)
		if err != nil {
			t.Fatal(err)
		}
		if got := crypto.PubkeyToAddress(*pub); got != payer.Address {
			t.Errorf("signature recovers to %s, want the payer %s", got, payer.Address)
		}
	})

	payerBefore, payToBefore := tok.BalanceOf(t, payer.Address), tok.BalanceOf(t, payTo.Address)
	settle := testenv.TransferWithAuthorizationVRS(t, auth, sig)

	t.Run("transferWithAuthorization(v,r,s) from the facilitator account settles it", func(t *testing.T) {
		if tok.AuthorizationState(t, auth.From, auth.Nonce) {
			t.Fatal("nonce is used before settlement")
		}
		r, err := c.SendAndWait(ctx, facilitator, &tok.Address, settle, 0)
		if err != nil {
			t.Fatal(err)
		}
		if r.Status != 1 {
			t.Fatalf("receipt status %d", r.Status)
		}
		if got := new(big.Int).Sub(payerBefore, tok.BalanceOf(t, payer.Address)); got.Cmp(value) != 0 {
			t.Errorf("payer paid %s, want exactly %s", got, value)
		}
		if got := new(big.Int).Sub(tok.BalanceOf(t, payTo.Address), payToBefore); got.Cmp(value) != 0 {
			t.Errorf("payTo received %s, want exactly %s", got, value)
		}
		if !tok.AuthorizationState(t, auth.From, auth.Nonce) {
			t.Error("authorizationState is false after settlement")
		}
	})

	for _, tc := range []struct {
		name string
		gas  uint64
	}{
		{"the same authorization again fails gas estimation", 0},
		{"the same authorization again reverts on chain", 200_000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := c.SendAndWait(ctx, facilitator, &tok.Address, settle, tc.gas)
			if reason, _ := testenv.RevertReason(err); reason != contracts.RevertAuthorizationUsed {
				t.Fatalf("revert reason = %q (err %v), want %q", reason, err, contracts.RevertAuthorizationUsed)
			}
			if tc.gas != 0 && (r == nil || r.Status != 0) {
				t.Errorf("want a mined receipt with status 0, got %v", r)
			}
			if got := new(big.Int).Sub(payerBefore, tok.BalanceOf(t, payer.Address)); got.Cmp(value) != 0 {
				t.Errorf("payer has paid %s in total, want %s (once)", got, value)
			}
		})
	}
}

// TestX402FetchHeadersSettleThroughEveryOverload settles fresh x402-fetch authorizations through
// the bytes-signature overload too, which facilitators use for contract wallets.
func TestX402FetchHeadersSettleThroughEveryOverload(t *testing.T) {
	t.Parallel()
	c, tok := testenv.StartChainWithToken(t)
	ctx := context.Background()
	facilitator, payer, payTo := c.FacilitatorAccount(), c.Accounts[3], c.Accounts[4]

	for _, tc := range []struct {
		name string
		pack func(testing.TB, testenv.Authorization, []byte) []byte
	}{
		{"transferWithAuthorization(v,r,s)", testenv.TransferWithAuthorizationVRS},
		{"transferWithAuthorization(bytes)", testenv.TransferWithAuthorizationBytes},
	} {
		t.Run(tc.name, func(t *testing.T) {
			header, err := signWithX402Fetch(ctx, payer, requirementsV1(tok, payTo.Address, "2500"))
			if err != nil {
				t.Fatal(err)
			}
			_, auth, sig := decodeXPayment(t, header)
			before := tok.BalanceOf(t, payTo.Address)
			if _, err := c.SendAndWait(ctx, facilitator, &tok.Address, tc.pack(t, auth, sig), 0); err != nil {
				t.Fatal(err)
			}
			if got := new(big.Int).Sub(tok.BalanceOf(t, payTo.Address), before); got.Cmp(auth.Value) != 0 {
				t.Errorf("payTo received %s, want %s", got, auth.Value)
			}
		})
	}
}

// TestSignScriptBehavesLikeX402Fetch pins what the script passes through from x402-fetch:
// its spending cap, its selection among several accepts, and its refusal of bad input.
func TestSignScriptBehavesLikeX402Fetch(t *testing.T) {
	t.Parallel()
	c, tok := testenv.StartChainWithToken(t)
	ctx := context.Background()
	payer, payTo := c.Accounts[5], c.Accounts[6]
	otherNetwork := requirementsV1(tok, payTo.Address, "1000")
	otherNetwork["network"] = "base"

	for _, tc := range []struct {
		name      string
		stdin     any
		env       []string
		wantErr   string // substring of the script's failure; "" means it signs
		wantValue string
	}{
		{"a price within 0.1 USDC is paid", requirementsV1(tok, payTo.Address, "100000"), nil, "", "100000"},
		{"a price above 0.1 USDC is refused by default", requirementsV1(tok, payTo.Address, "100001"), nil, "exceeds maximum", ""},
		{"X402_MAX_VALUE raises the cap", requirementsV1(tok, payTo.Address, "5000000"), []string{"X402_MAX_VALUE=5000000"}, "", "5000000"},
		{
			"a 402 body is answered with the requirement for the signer's network",
			map[string]any{"x402Version": 1, "error": "X-PAYMENT header is required", "accepts": []any{otherNetwork, requirementsV1(tok, payTo.Address, "777")}},
			nil, "", "777",
		},
		{"stdin that is not JSON is refused", []byte("{"), nil, "stdin is not JSON", ""},
		{"requirements that fail x402-fetch's schema are refused", []byte(`{"scheme":"exact"}`), nil, "sign-x402-fetch:", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // signing is offline; only node's start-up takes time
			header, err := signWithX402Fetch(ctx, payer, tc.stdin, tc.env...)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
				}
				if strings.Contains(err.Error(), fmt.Sprintf("%x", crypto.FromECDSA(payer.Key))) {
					t.Fatal("the script's error output contains the private key")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			_, auth, _ := decodeXPayment(t, header)
			if auth.Value.String() != tc.wantValue || auth.To != payTo.Address {
				t.Errorf("signed %s to %s, want %s to %s", auth.Value, auth.To, tc.wantValue, payTo.Address)
			}
		})
	}
}
