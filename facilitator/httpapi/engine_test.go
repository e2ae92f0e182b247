package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"

	"github.com/x402gate/x402gate/facilitator"
	"github.com/x402gate/x402gate/facilitator/facilitatortest"
	"github.com/x402gate/x402gate/internal/testenv"
	"github.com/x402gate/x402gate/verdict"
	"github.com/x402gate/x402gate/x402"
)

// testAmount is the price of the test payments: 0.01 USDC.
var testAmount = big.NewInt(10_000)

// testEnv is one anvil chain with our token, and a registry that knows it as
// base-sepolia: the real parts that the API's end-to-end tests serve an engine on.
type testEnv struct {
	*facilitatortest.Env
	chain *testenv.Chain
	token *testenv.Token
	net   x402.Network
	reg   *x402.Registry
}

func newTestEnv(t *testing.T) *testEnv {
	t.Helper()
	c := facilitatortest.StartChain(t)
	return &testEnv{Env: c, chain: c.Chain, token: c.Token, net: c.Network, reg: c.Registry}
}

// engine starts a facilitator.Service on the env's chain (facilitatortest.Env.Service).
func (v *testEnv) engine(t *testing.T, mutate func(*facilitator.Config)) *facilitator.Service {
	t.Helper()
	return v.Service(t, mutate)
}

// requirements asks amount of the token paid to payTo, with the resource a v1
// requirement needs on the wire.
func (v *testEnv) requirements(payTo common.Address, amount *big.Int) *x402.Requirements {
	return &x402.Requirements{
		Scheme:            x402.SchemeExact,
		Network:           v.net.CAIP2,
		Amount:            new(big.Int).Set(amount),
		Asset:             v.token.Address,
		PayTo:             payTo,
		MaxTimeoutSeconds: 600,
		Resource:          x402.ResourceInfo{URL: "https://api.example.com/premium", Description: "premium", MimeType: "application/json"},
		Extra:             map[string]any{"name": v.token.Name, "version": v.token.Version},
	}
}

// payment is payer's signed authorization of r, in the given x402 version.
func (v *testEnv) payment(t *testing.T, version int, payer testenv.Account, r *x402.Requirements) *x402.Payment {
	t.Helper()
	a := v.token.NewAuthorization(t, payer.Address, r.PayTo, r.Amount)
	p := &x402.Payment{
		Version:       version,
		Scheme:        x402.SchemeExact,
		Network:       r.Network,
		Signature:     v.token.SignAuthorization(t, payer.Key, a),
		Authorization: x402.Authorization(a),
	}
	if version == x402.Version2 {
		acc := *r
		acc.Amount = new(big.Int).Set(r.Amount)
		p.Accepted = &acc
	}
	return p
}

// pay is a valid payment of testAmount from payer to payTo, and its requirements.
func (v *testEnv) pay(t *testing.T, version int, payer testenv.Account, payTo common.Address) (*x402.Payment, *x402.Requirements) {
	t.Helper()
	r := v.requirements(payTo, testAmount)
	return v.payment(t, version, payer, r), r
}

// balances are the token balances of addrs, in order.
func (v *testEnv) balances(t *testing.T, addrs ...common.Address) []*big.Int {
	t.Helper()
	out := make([]*big.Int, len(addrs))
	for i, a := range addrs {
		out[i] = v.token.BalanceOf(t, a)
	}
	return out
}

// approvingVerdicts is a verdict service that approves every payment: the fee path needs
// a terminal verdict, and the verdict service is not what these tests are about.
type approvingVerdicts struct{}

func (approvingVerdicts) VerifyPayment(context.Context, *x402.Payment, *x402.Requirements) (verdict.GuardianResult, error) {
	return verdict.GuardianResult{Approved: true, Status: verdict.GuardianApproved, Reason: "allowed", RequestHash: "0xreq"}, nil
}

// TestVerificationFeeTravelsOverHTTP is the fee path with real parts end to end: Client ->
// NewHandler -> Engine (GUARDIAN_MODE optional) -> anvil. The fee authorization travels as
// verificationPayment beside verificationRequirements in the /verify body; the answer
// carries feeTxHash; the merchant payment moves only at /settle.
func TestVerificationFeeTravelsOverHTTP(t *testing.T) {
	for _, version := range []int{x402.Version1, x402.Version2} {
		t.Run("v"+big.NewInt(int64(version)).String(), func(t *testing.T) {
			env := newTestEnv(t)
			e := env.engine(t, func(c *facilitator.Config) {
				c.VerdictMode, c.Verdicts = facilitator.VerdictOptional, approvingVerdicts{}
				// The pricing service quotes 0.001 USDC to account 7 for every payment.
				c.Pricing = func(context.Context, *x402.Requirements) (*x402.Requirements, error) {
					return env.requirements(env.chain.Accounts[7].Address, big.NewInt(1_000)), nil
				}
			})
			srv := httptest.NewServer(NewHandler(e, HandlerOptions{APIKey: apiTestKey, Registry: env.reg}))
			t.Cleanup(srv.Close)
			cl := newTestClient(t, ClientConfig{URL: srv.URL, APIKey: apiTestKey, Registry: env.reg})
			payer, payee, feePayee := env.chain.Accounts[1], env.chain.Accounts[2], env.chain.Accounts[7]
			// The verification fee: 0.001 USDC paid to account 7.
			fee := env.requirements(feePayee.Address, big.NewInt(1_000))
			p, r := env.pay(t, version, payer, payee.Address)
			before := env.balances(t, payee.Address, feePayee.Address)

			ver, err := cl.Verify(context.Background(), x402.VerifyInput{Payment: p, Requirements: r,
				VerificationRequirements: fee, VerificationPayment: env.payment(t, x402.Version2, payer, fee)})
			if err != nil || !ver.IsValid || ver.GuardianStatus != string(verdict.GuardianApproved) || ver.FeeTxHash == "" || ver.FeeError != "" {
				t.Fatalf("verify = %+v, %v; want valid, approved, with feeTxHash", ver, err)
			}
			mid := env.balances(t, payee.Address, feePayee.Address)
			if mid[0].Cmp(before[0]) != 0 || new(big.Int).Sub(mid[1], before[1]).Int64() != 1_000 {
				t.Fatalf("after verify: payee %s -> %s, fee payee %s -> %s; want only the fee moved", before[0], mid[0], before[1], mid[1])
			}
			res, err := cl.Settle(context.Background(), p, r)
			if err != nil || !res.Success {
				t.Fatalf("settle = %+v, %v", res, err)
			}
			if d := new(big.Int).Sub(env.token.BalanceOf(t, payee.Address), mid[0]); d.Cmp(testAmount) != 0 {
				t.Errorf("payee received %s at settle, want %s", d, testAmount)
			}

			// Without the fee payment, feeError says so over the wire too. The fee
			// requirement then travels in the merchant payment's version.
			p2, r2 := env.pay(t, version, payer, payee.Address)
			fee.Resource = x402.ResourceInfo{URL: "https://verdict.example/fee", Description: "verification fee", MimeType: "application/json"}
			ver, err = cl.Verify(context.Background(), x402.VerifyInput{Payment: p2, Requirements: r2, VerificationRequirements: fee})
			if err != nil || ver.IsValid || ver.FeeError != facilitator.FeePaymentMissing || ver.InvalidReason != x402.ReasonInvalidPayload.For(version) {
				t.Errorf("verify without fee payment = %+v, %v; want feeError %s", ver, err, facilitator.FeePaymentMissing)
			}
		})
	}
}

// TestClientHandlerEngineOnAnvil is the whole remote path with real parts: Client ->
// httptest.Server(NewHandler(Engine)) -> Engine -> anvil with our EIP-3009 token. The
// balances on chain are the judge.
func TestClientHandlerEngineOnAnvil(t *testing.T) {
	env := newTestEnv(t)
	e := env.engine(t, nil)
	srv := httptest.NewServer(NewHandler(e, HandlerOptions{APIKey: apiTestKey, Registry: env.reg,
		HealthDetailed: true, HealthInfo: ServiceHealthInfo(e)}))
	t.Cleanup(srv.Close)
	cl := newTestClient(t, ClientConfig{URL: srv.URL, APIKey: apiTestKey, Registry: env.reg})
	ctx := context.Background()
	payTo := env.chain.Accounts[5].Address

	for _, tc := range []struct {
		name      string
		version   int
		payer     testenv.Account
		network   string
		badSigWhy string
	}{
		{"v1 payment verifies, settles once on chain and answers v1 names", x402.Version1, env.chain.Accounts[1], "base-sepolia", "invalid_exact_evm_payload_signature"},
		{"v2 payment verifies, settles once on chain and answers CAIP-2", x402.Version2, env.chain.Accounts[2], "eip155:84532", "invalid_exact_evm_signature"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, r := env.pay(t, tc.version, tc.payer, payTo)

			bad := *p
			bad.Signature = append([]byte(nil), p.Signature...)
			bad.Signature[10] ^= 0xff
			vr, err := cl.Verify(ctx, x402.VerifyInput{Payment: &bad, Requirements: r})
			if err != nil || vr.IsValid || vr.InvalidReason != tc.badSigWhy {
				t.Fatalf("tampered signature: %+v %v, want isValid false %q", vr, err, tc.badSigWhy)
			}

			vr, err = cl.Verify(ctx, x402.VerifyInput{Payment: p, Requirements: r})
			if err != nil || !vr.IsValid || !strings.EqualFold(vr.Payer, tc.payer.Address.Hex()) {
				t.Fatalf("verify: %+v %v", vr, err)
			}

			before := env.token.BalanceOf(t, payTo)
			sr, err := cl.Settle(ctx, p, r)
			if err != nil || !sr.Success {
				t.Fatalf("settle: %+v %v", sr, err)
			}
			if sr.Transaction == "" || sr.TxHash != sr.Transaction || sr.Network != tc.network {
				t.Fatalf("settle answer %+v, want transaction = txHash and network %q", sr, tc.network)
			}
			if got := new(big.Int).Sub(env.token.BalanceOf(t, payTo), before); got.Cmp(testAmount) != 0 {
				t.Fatalf("payee received %s, want %s", got, testAmount)
			}

			again, err := cl.Settle(ctx, p, r)
			var he *HTTPError
			if errors.As(err, &he) || again.Success {
				t.Fatalf("second settle of the same payment: %+v %v, want a logical failure", again, err)
			}
			if got := new(big.Int).Sub(env.token.BalanceOf(t, payTo), before); got.Cmp(testAmount) != 0 {
				t.Fatalf("after a replay the payee has received %s, want %s", got, testAmount)
			}
		})
	}

	t.Run("supported lists the engine's kinds and signer", func(t *testing.T) {
		s, err := cl.Supported(ctx)
		if err != nil || len(s.Kinds) != 3 || len(s.Signers["eip155:*"]) != 1 ||
			s.Signers["eip155:*"][0] != env.chain.FacilitatorAccount().Address.Hex() {
			t.Fatalf("%+v %v", s, err)
		}
	})
	t.Run("detailed health shows the signer's cached balance and no RPC URL", func(t *testing.T) {
		resp, err := http.Get(srv.URL + "/health")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var h struct {
			Status             string          `json:"status"`
			FacilitatorAddress string          `json:"facilitatorAddress"`
			Networks           []HealthNetwork `json:"networks"`
		}
		if err := json.Unmarshal(b, &h); err != nil || resp.StatusCode != 200 || h.Status != "ok" ||
			h.FacilitatorAddress != env.chain.FacilitatorAccount().Address.Hex() || len(h.Networks) != 1 ||
			h.Networks[0].ChainID != 84532 || h.Networks[0].Balances.Native == "" || h.Networks[0].Balances.Native == "0" ||
			h.Networks[0].Balances.Asset == "" {
			t.Fatalf("health %d %s", resp.StatusCode, b)
		}
		if strings.Contains(string(b), env.chain.RPCURL) {
			t.Fatal("health shows the RPC URL")
		}
	})
}

// TestRemoteSettleChecksEverything: a /settle over HTTP after a /verify of the same payment
// runs every check again, as the spec requires of a remote facilitator
// (docs/facilitator.md#settle-order): the token's state is read at /verify and again at
// /settle. Only an in-process Settle reuses what Verify proved.
func TestRemoteSettleChecksEverything(t *testing.T) {
	env := newTestEnv(t)
	node := testenv.CountCalls(t, env.chain.RPCURL, crypto.Keccak256([]byte("authorizationState(address,bytes32)"))[:4])
	e := env.engine(t, func(c *facilitator.Config) { c.Networks[0].RPC = node.URL })
	srv := httptest.NewServer(NewHandler(e, HandlerOptions{APIKey: apiTestKey, Registry: env.reg}))
	t.Cleanup(srv.Close)
	cl := newTestClient(t, ClientConfig{URL: srv.URL, APIKey: apiTestKey, Registry: env.reg})
	p, r := env.pay(t, x402.Version2, env.chain.Accounts[1], env.chain.Accounts[2].Address)
	before := node.Calls()
	if ver, err := cl.Verify(context.Background(), x402.VerifyInput{Payment: p, Requirements: r}); err != nil || !ver.IsValid {
		t.Fatalf("verify = %+v, %v", ver, err)
	}
	if res, err := cl.Settle(context.Background(), p, r); err != nil || !res.Success {
		t.Fatalf("settle = %+v, %v", res, err)
	}
	if got := node.Calls() - before; got != 2 {
		t.Errorf("%d token state reads for /verify and /settle, want 2: /settle checks everything", got)
	}
}
