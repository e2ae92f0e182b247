package facilitator

import (
	"context"
	"crypto/ecdsa"
	"encoding/json"
	"math/big"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"
	"go.uber.org/zap"

	"github.com/x402gate/x402gate/facilitator/approval"
	"github.com/x402gate/x402gate/facilitator/journal"
	"github.com/x402gate/x402gate/internal/testenv"
	"github.com/x402gate/x402gate/verdict"
	"github.com/x402gate/x402gate/x402"
)

// testEnv is one anvil chain with our token, and what the engine tests build on it.
type testEnv struct {
	chain *testenv.Chain
	token *testenv.Token
	net   x402.Network
	now   time.Time // the engines' fixed clock: the chain's clock when the env started
}

// testAmount is the price of the test payments: 0.01 USDC.
var testAmount = big.NewInt(10_000)

func newTestEnv(t testing.TB, opts ...testenv.AnvilOption) *testEnv {
	t.Helper()
	chain, token := testenv.StartChainWithToken(t, opts...)
	return &testEnv{
		chain: chain,
		token: token,
		net: x402.Network{
			Name: x402.BaseSepolia.Name, CAIP2: x402.BaseSepolia.CAIP2, ChainID: new(big.Int).Set(chain.ChainID),
			USDC: x402.Asset{Address: token.Address, Name: token.Name, Version: token.Version, Decimals: 6, Symbol: "USDC"},
		},
		now: time.Unix(int64(chain.Now(t)), 0),
	}
}

// config is a Config on the env's chain with account 0 as signer, a MemoryStore and an
// SQLite journal in t's temporary directory.
func (v *testEnv) config(t testing.TB) Config {
	t.Helper()
	j, err := journal.OpenSQLite(context.Background(), filepath.Join(t.TempDir(), "journal.db"))
	if err != nil {
		t.Fatalf("open journal: %v", err)
	}
	t.Cleanup(func() { _ = j.Close() })
	store := approval.NewMemoryStore(0)
	t.Cleanup(func() { _ = store.Close() })
	return Config{
		Networks: []NetworkConfig{NetworkOf(v.net, v.chain.RPCURL)},
		Signer:   v.chain.FacilitatorAccount().Key,
		Store:    store,
		Journal:  j,
		Logger:   zap.NewNop(),
		Now:      func() time.Time { return v.now },
		// The pricing service quotes 1000 base units to account 7 for every payment.
		Pricing: func(context.Context, *x402.Requirements) (*x402.Requirements, error) {
			return v.requirements(v.chain.Accounts[7].Address, big.NewInt(1_000)), nil
		},
	}
}

// engine starts a Service on cfg and closes it when t ends.
func (v *testEnv) engine(t testing.TB, cfg Config) *Service {
	t.Helper()
	e, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(e.Close)
	return e
}

// requirements is what a resource asks: testAmount of the token paid to payTo.
func (v *testEnv) requirements(payTo common.Address, amount *big.Int) *x402.Requirements {
	return &x402.Requirements{
		Scheme:            x402.SchemeExact,
		Network:           v.net.CAIP2,
		Amount:            new(big.Int).Set(amount),
		Asset:             v.token.Address,
		PayTo:             payTo,
		MaxTimeoutSeconds: 600,
		Extra:             map[string]any{"name": v.token.Name, "version": v.token.Version},
	}
}

// authorization is an authorization of value from from to to, valid from ten minutes
// before the engines' clock to ten minutes after it, with a fresh nonce.
func (v *testEnv) authorization(t testing.TB, from, to common.Address, value *big.Int) x402.Authorization {
	return x402.Authorization{
		From:        from,
		To:          to,
		Value:       new(big.Int).Set(value),
		ValidAfter:  big.NewInt(v.now.Unix() - 600),
		ValidBefore: big.NewInt(v.now.Unix() + 600),
		Nonce:       testenv.RandomNonce(t),
	}
}

// sign signs a under the token's EIP-712 domain with key.
func (v *testEnv) sign(t testing.TB, key *ecdsa.PrivateKey, a x402.Authorization) []byte {
	t.Helper()
	return v.token.SignAuthorization(t, key, testenv.Authorization(a))
}

// payment is the normalised payment of a signed as sig, in the given x402 version,
// answering r.
func (v *testEnv) payment(version int, a x402.Authorization, sig []byte, r *x402.Requirements) *x402.Payment {
	p := &x402.Payment{
		Version:       version,
		Scheme:        x402.SchemeExact,
		Network:       r.Network,
		Signature:     sig,
		Authorization: a,
	}
	if version == x402.Version2 {
		acc := *r
		acc.Amount = new(big.Int).Set(r.Amount)
		p.Accepted = &acc
	}
	return p
}

// pay is a valid payment of testAmount from payer to payTo, and its requirements.
func (v *testEnv) pay(t testing.TB, version int, payer testenv.Account, payTo common.Address) (*x402.Payment, *x402.Requirements) {
	t.Helper()
	r := v.requirements(payTo, testAmount)
	a := v.authorization(t, payer.Address, payTo, testAmount)
	return v.payment(version, a, v.sign(t, payer.Key, a), r), r
}

// signerNonce is the mined nonce of addr: how many transactions it has had mined.
func (v *testEnv) signerNonce(t testing.TB, addr common.Address) uint64 {
	t.Helper()
	n, err := v.chain.Client.NonceAt(context.Background(), addr, nil)
	if err != nil {
		t.Fatalf("nonce of %s: %v", addr, err)
	}
	return n
}

// pendingNonce counts addr's transactions including those not mined yet.
func (v *testEnv) pendingNonce(t testing.TB, addr common.Address) uint64 {
	t.Helper()
	n, err := v.chain.Client.PendingNonceAt(context.Background(), addr)
	if err != nil {
		t.Fatalf("pending nonce of %s: %v", addr, err)
	}
	return n
}

// fakeVerdicts scripts verdicts: the fault injection the verdict service will not produce
// on demand. It counts calls.
type fakeVerdicts struct {
	res   verdict.GuardianResult
	err   error
	calls atomic.Int32
}

func (f *fakeVerdicts) VerifyPayment(ctx context.Context, p *x402.Payment, r *x402.Requirements) (verdict.GuardianResult, error) {
	f.calls.Add(1)
	return f.res, f.err
}

func approvedVerdict() *fakeVerdicts {
	return &fakeVerdicts{res: verdict.GuardianResult{Approved: true, Status: verdict.GuardianApproved, Reason: "allowed", RequestHash: "0xreq"}}
}

func TestNewRefusesIncompleteConfig(t *testing.T) {
	env := newTestEnv(t)
	wrongChain := env.net
	wrongChain.Name, wrongChain.ChainID, wrongChain.CAIP2 = x402.Base.Name, big.NewInt(8453), "eip155:8453"
	cases := []struct {
		name   string
		mutate func(*Config)
		want   string
	}{
		{"no networks", func(c *Config) { c.Networks = nil }, "network: at least one is required"},
		{"no signer key", func(c *Config) { c.Signer = nil }, "signer_key: is required"},
		{"a signer key that is not one", func(c *Config) { c.Signer, c.SignerKey = nil, "0xabc" }, "signer_key: is not a hex secp256k1 private key"},
		{"a pool key that is not one", func(c *Config) { c.SignerKeys = []string{"0xabc"} }, "signer_key: is not a hex secp256k1 private key"},
		{"a pool naming one key twice", func(c *Config) { c.Signers = []*ecdsa.PrivateKey{c.Signer} }, "signer_key: the pool names the signer"},
		{"a min_gas_balance that is not wei", func(c *Config) { c.MinGasBalance = "1e15" }, `min_gas_balance: "1e15" is not a non-negative integer of wei`},
		{"no approval store", func(c *Config) { c.Store = nil }, "approval store"},
		{"no journal", func(c *Config) { c.Journal = nil }, "journal"},
		{"unknown guardian mode", func(c *Config) { c.VerdictMode = "sometimes" }, "guardian_mode"},
		{"network without rpc url", func(c *Config) { c.Networks[0].RPC = "" }, "rpc: is required"},
		{"network without asset domain", func(c *Config) { c.Networks[0].AssetName = "" }, "EIP-712"},
		{"rpc endpoint serves another chain", func(c *Config) { c.Networks[0] = NetworkOf(wrongChain, env.chain.RPCURL) }, "serves chain id 84532"},
		{"rpc endpoint down, url not in the error", func(c *Config) { c.Networks[0].RPC = "http://127.0.0.1:1/key-abc123" }, "rpc unavailable"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := env.config(t)
			tc.mutate(&cfg)
			e, err := New(context.Background(), cfg)
			if err == nil {
				e.Close()
				t.Fatal("New accepted the config")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not mention %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "key-abc123") || strings.Contains(err.Error(), "127.0.0.1:1") {
				t.Errorf("error %q leaks the RPC URL", err)
			}
		})
	}
}

func TestSupportedListsV1AndV2KindsAndSigner(t *testing.T) {
	env := newTestEnv(t)
	e := env.engine(t, env.config(t))
	got, err := e.Supported(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"1/exact/base-sepolia": true, "2/exact/eip155:84532": true, "2/upto/eip155:84532": true}
	if len(got.Kinds) != len(want) {
		t.Fatalf("kinds = %+v", got.Kinds)
	}
	for _, k := range got.Kinds {
		key := strings.Join([]string{big.NewInt(int64(k.X402Version)).String(), k.Scheme, k.Network}, "/")
		if !want[key] {
			t.Errorf("unexpected kind %s", key)
		}
	}
	signer := env.chain.FacilitatorAccount().Address.Hex()
	if s := got.Signers["eip155:*"]; len(s) != 1 || s[0] != signer {
		t.Errorf("signers = %v, want [%s]", got.Signers, signer)
	}
	for _, k := range got.Kinds {
		// An upto payer's witness names the facilitator /supported advertises (docs/payments.md#upto).
		if k.Scheme == x402.SchemeUpto && k.Extra[x402.ExtraFacilitatorAddress] != signer {
			t.Errorf("upto kind's extra = %v, want facilitatorAddress %s", k.Extra, signer)
		}
	}
	if got.Extensions == nil {
		t.Error("extensions is null; clients expect an array")
	}
}

func TestInfoShowsBalanceAndNoSecrets(t *testing.T) {
	env := newTestEnv(t)
	cfg := env.config(t)
	cfg.VerdictURL = "https://verdict.example"
	e := env.engine(t, cfg)
	env.token.Mint(t, env.chain.FacilitatorAccount().Address, big.NewInt(4_242))
	info := e.Info(context.Background())
	if info.Networks[0].AssetBalance != "4242" {
		t.Errorf("asset balance = %q, want the signer's 4242", info.Networks[0].AssetBalance)
	}
	if info.Address != env.chain.FacilitatorAccount().Address.Hex() || info.VerdictURL != cfg.VerdictURL {
		t.Errorf("info = %+v", info)
	}
	if len(info.Networks) != 1 || info.Networks[0].Balance == "" || info.Networks[0].Balance == "0" {
		t.Fatalf("networks = %+v, want the signer's balance", info.Networks)
	}
	b, _ := json.Marshal(info)
	if strings.Contains(string(b), env.chain.RPCURL) {
		t.Errorf("info %s carries the RPC URL", b)
	}
	key := common.Bytes2Hex(crypto.FromECDSA(cfg.Signer))
	if strings.Contains(string(b), key) {
		t.Error("info carries the signer key")
	}
	// The balance is cached: with the node gone, Info still answers with it.
	env.chain.Stop()
	if again := e.Info(context.Background()); again.Networks[0].Balance != info.Networks[0].Balance ||
		again.Networks[0].AssetBalance != info.Networks[0].AssetBalance {
		t.Errorf("cached balances %+v, want %+v", again.Networks[0], info.Networks[0])
	}
}
