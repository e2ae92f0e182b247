package verdictserver

import (
	"bytes"
	"encoding/json"
	"errors"
	"math/big"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/x402gate/x402gate/docs"
	"github.com/x402gate/x402gate/facilitator"
	"github.com/x402gate/x402gate/verdict"
	"github.com/x402gate/x402gate/verdictserver/engine"
	"github.com/x402gate/x402gate/x402"
)

const testSignerKey = "0x8b3a350cf5c34c9194ca85829a2df0ec3153be0318b5e2d3348e872092edffba"

func testSigner(t *testing.T) common.Address {
	k, err := crypto.HexToECDSA(strings.TrimPrefix(testSignerKey, "0x"))
	if err != nil {
		t.Fatal(err)
	}
	return crypto.PubkeyToAddress(k.PublicKey)
}

// signingEnv is a verdict service that signs with testSignerKey, its clock fixed at now.
func signingEnv(t *testing.T, now time.Time, ttl time.Duration) *env {
	return newEnv(t, nil, func(c *Config, d *Deps) {
		c.SignerKey, c.SignatureTTL = testSignerKey, engine.Duration(ttl)
		d.Now = func() time.Time { return now }
	})
}

// TestTerminalVerdictsAreSigned: with a signer_key, an approved and a rejected verdict
// each carry a signature by the published address over the payment, its outcome and
// policy version, the record's requestHash as nonce, expiring the TTL after the verdict.
func TestTerminalVerdictsAreSigned(t *testing.T) {
	now := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	e := signingEnv(t, now, 2*time.Minute)
	ag := e.agent("signed", common.HexToAddress("0xA11CE00000000000000000000000000000000001"), allowPolicy)

	pub := call(t, http.MethodGet, e.api.URL+SignerPath, nil)
	if pub.status != http.StatusOK || pub.body["address"] != testSigner(t).Hex() || pub.body["ttlSeconds"] != float64(120) {
		t.Fatalf("signer route = %d %s", pub.status, pub.raw)
	}
	for _, c := range []struct {
		payTo   common.Address
		outcome uint8
	}{{allowedPay, verdict.SignedApproved}, {strangerPay, verdict.SignedRejected}} {
		a := e.submit(ag.Key, submitBody(ag.Wallet, c.payTo, ""))
		hash, _ := a.body["requestHash"].(string)
		v := e.await(ag.Key, hash)
		s := v.Signature
		if s == nil {
			t.Fatalf("%s verdict is not signed", v.Outcome)
		}
		want := verdict.PaymentBinding(ag.Wallet, testChain, c.payTo, testAsset, big.NewInt(10000))
		if err := verdict.CheckSignature(v, testSigner(t), want, now); err != nil {
			t.Fatalf("%s verdict: CheckSignature = %v", v.Outcome, err)
		}
		if s.Message.Outcome != c.outcome || s.Message.Nonce != common.HexToHash(hash) ||
			s.Message.Expiry != now.Add(2*time.Minute).Unix() || s.Message.PolicyVersion != *v.PolicyVersion {
			t.Fatalf("%s verdict signs %+v", v.Outcome, s.Message)
		}
	}
}

// TestUnsignedServicePublishesNoSigner: without a signer_key verdicts carry no signature
// member and the signer route is a 404.
func TestUnsignedServicePublishesNoSigner(t *testing.T) {
	e := newEnv(t, nil, nil)
	wantError(t, call(t, http.MethodGet, e.api.URL+SignerPath, nil), http.StatusNotFound, codeNotFound)
	ag := e.agent("unsigned", common.HexToAddress("0xA11CE00000000000000000000000000000000001"), allowPolicy)
	a := e.submit(ag.Key, submitBody(ag.Wallet, allowedPay, ""))
	hash, _ := a.body["requestHash"].(string)
	e.await(ag.Key, hash)
	raw := e.status(ag.Key, hash).raw
	if strings.Contains(string(raw), `"signature"`) {
		t.Fatalf("an unsigned service's verdict has a signature member: %s", raw)
	}
}

// TestBindingOf: each kind of action is bound as docs/verdict-signing.md#binding says.
func TestBindingOf(t *testing.T) {
	wallet := common.HexToAddress("0xA11CE00000000000000000000000000000000001")
	router := common.HexToAddress("0x2626664c2603336E57B271c5C0b26F421741e481")
	tree := func(s string) map[string]any {
		m, err := object(json.RawMessage(s))
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	hl := `{"protocol":"hyperliquid","chainId":1337,"action":{"type":"cancel","cancels":[{"a":0,"o":7}]},"nonce":1763640000000}`
	for name, c := range map[string]struct {
		tx   string
		want verdict.Binding
	}{
		"an x402 payment, as the ERC-20 transfer it makes": {
			`{"protocol":"payment","rail":"x402","chainId":84532,"payTo":"` + allowedPay.Hex() + `","asset":"` + testAsset.Hex() + `","amount":"10000"}`,
			verdict.PaymentBinding(wallet, 84532, allowedPay, testAsset, big.NewInt(10000))},
		"an EVM call, as itself": {
			`{"protocol":"uniswap","chainId":8453,"to":"` + router.Hex() + `","data":"0xdeadbeef","value":"7"}`,
			verdict.CallBinding(wallet, 8453, router, []byte{0xde, 0xad, 0xbe, 0xef}, big.NewInt(7))},
		"a Hyperliquid action, as its canonical JSON": {hl,
			verdict.Binding{Wallet: wallet, ChainID: 1337, DataHash: crypto.Keccak256Hash([]byte(
				`{"action":{"cancels":[{"a":0,"o":7}],"type":"cancel"},"chainId":1337,"nonce":1763640000000,"protocol":"hyperliquid"}`)), Value: new(big.Int)}},
	} {
		t.Run(name, func(t *testing.T) {
			got := bindingOf(tree(c.tx), wallet)
			if got.Wallet != c.want.Wallet || got.ChainID != c.want.ChainID || got.To != c.want.To ||
				got.DataHash != c.want.DataHash || got.Value.Cmp(c.want.Value) != 0 {
				t.Fatalf("bindingOf = %+v, want %+v", got, c.want)
			}
		})
	}
}

// TestSignerConfig: the TTL is at most 5 minutes and needs a key; a key that is not one
// fails New without quoting it.
func TestSignerConfig(t *testing.T) {
	for name, c := range map[string]SigningConfig{
		"a TTL over 5 minutes": {SignerKey: "{env.K}", SignatureTTL: engine.Duration(6 * time.Minute)},
		"a TTL without a key":  {SignatureTTL: engine.Duration(time.Minute)},
	} {
		cfg := Config{SigningConfig: c}
		var ce *ConfigError
		if err := cfg.Validate(); !errors.As(err, &ce) || ce.Option != "signature_ttl" {
			t.Errorf("%s: Validate = %v, want a signature_ttl error", name, err)
		}
	}
	const notAKey = "not-a-key-but-a-secret-all-the-same-0123456789"
	eng, err := engine.New(engine.Config{}, engine.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = New(Config{SigningConfig: SigningConfig{SignerKey: notAKey}}, Deps{Store: sqliteStore(t), Engine: eng})
	var ce *ConfigError
	if !errors.As(err, &ce) || ce.Option != "signer_key" || strings.Contains(err.Error(), notAKey) {
		t.Fatalf("New = %v, want a signer_key error that does not quote the key", err)
	}
}

// TestFacilitatorChecksTheVerdictSigner: the facilitator's verdict client with a
// verdict_signer, against a real verdict service, takes an approval signed by that
// address, and fails closed ("error", never approved) when the service signs with another
// key or does not sign at all: an impersonated verdict service approves nothing
// (docs/verdict-signing.md#checking-at-the-gate).
func TestFacilitatorChecksTheVerdictSigner(t *testing.T) {
	wallet := common.HexToAddress("0xA11CE00000000000000000000000000000000001")
	const otherKey = "0x92db14e403b83dfe3df233f83dfa3a0d7096f21ca9b0d6d6b8d88b2b4ec1564e"
	for _, c := range []struct {
		name, key string
		want      verdict.GuardianStatus
	}{
		{"signed by the configured signer", testSignerKey, verdict.GuardianApproved},
		{"signed by another key", otherKey, verdict.GuardianError},
		{"not signed", "", verdict.GuardianError},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, nil, func(cfg *Config, _ *Deps) { cfg.SignerKey = c.key })
			ag := e.agent("payer", wallet, allowPolicy)
			vc, err := facilitator.NewVerdictClient(facilitator.VerdictClientConfig{
				BaseURL: e.api.URL, APIKey: ag.Key, Signer: testSigner(t), Poll: fastPoll})
			if err != nil {
				t.Fatal(err)
			}
			p := &x402.Payment{Version: 2, Scheme: "exact", Network: "eip155:84532",
				Authorization: x402.Authorization{From: wallet, To: allowedPay, Value: big.NewInt(10_000)}}
			res, err := vc.VerifyPayment(t.Context(), p, merchant(10_000, allowedPay, "eip155:84532"))
			if err != nil {
				t.Fatal(err)
			}
			if res.Status != c.want || res.Approved != (c.want == verdict.GuardianApproved) {
				t.Fatalf("result = %s (approved %v): %s; want %s", res.Status, res.Approved, res.Reason, c.want)
			}
			if c.want == verdict.GuardianError && !strings.Contains(res.Reason, "verdict signature") {
				t.Fatalf("reason %q does not say the signature failed", res.Reason)
			}
		})
	}
}

// BenchmarkEncodeSignedVerdict: what signing adds to storing a verdict: the payment's
// binding, the EIP-712 digest (apitypes), the ECDSA signature and the JSON encoding, beside
// BenchmarkEncodeUnsignedVerdict.
func BenchmarkEncodeSignedVerdict(b *testing.B) { benchEncode(b, testSignerKey) }

// BenchmarkEncodeUnsignedVerdict is the JSON encoding of the same verdict without a signer.
func BenchmarkEncodeUnsignedVerdict(b *testing.B) { benchEncode(b, "") }

func benchEncode(b *testing.B, key string) {
	eng, err := engine.New(engine.Config{}, engine.Deps{})
	if err != nil {
		b.Fatal(err)
	}
	sg, err := (&SigningConfig{SignerKey: key}).newSigner()
	if err != nil {
		b.Fatal(err)
	}
	s := &Server{signer: sg, now: time.Now}
	in := engine.Input{ProposedTx: payment(allowedPay), Escrow: common.HexToAddress("0xA11CE00000000000000000000000000000000001")}
	v := eng.Evaluate(b.Context(), in)
	hash := "0x" + strings.Repeat("ab", 32)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.encodeVerdict(v, in, hash); err != nil {
			b.Fatal(err)
		}
	}
}

// TestSignedVerdictKeepsTheSpecSchema: the signature member is an extension of
// schemaVersion 1 (docs/verdict-signing.md#the-signature-member): a signed verdict is valid
// under the Verdict schema of docs/openapi.json with our signature property taken out,
// that is, the spec's members alone.
func TestSignedVerdictKeepsTheSpecSchema(t *testing.T) {
	var doc map[string]any
	if err := json.Unmarshal(docs.OpenAPI, &doc); err != nil {
		t.Fatal(err)
	}
	schemas := doc["components"].(map[string]any)["schemas"].(map[string]any)
	props := schemas["Verdict"].(map[string]any)["properties"].(map[string]any)
	if _, ok := props["signature"]; !ok {
		t.Fatal("docs/openapi.json's Verdict has no signature property: the page changed")
	}
	delete(props, "signature")
	delete(schemas, "VerdictSignature")
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	if err := c.AddResource("spec.json", doc); err != nil {
		t.Fatal(err)
	}
	schema, err := c.Compile("spec.json#/components/schemas/Verdict")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	e := signingEnv(t, now, time.Minute)
	ag := e.agent("spec", common.HexToAddress("0xA11CE00000000000000000000000000000000001"), allowPolicy)
	hash, _ := e.submit(ag.Key, submitBody(ag.Wallet, allowedPay, "")).body["requestHash"].(string)
	e.await(ag.Key, hash)
	env, err := jsonschema.UnmarshalJSON(bytes.NewReader(e.status(ag.Key, hash).raw))
	if err != nil {
		t.Fatal(err)
	}
	v := env.(map[string]any)["verdict"]
	if _, signed := v.(map[string]any)["signature"]; !signed {
		t.Fatal("the verdict is not signed")
	}
	if err := schema.Validate(v); err != nil {
		t.Fatalf("a signed verdict fails the spec's Verdict schema: %v", err)
	}
}
