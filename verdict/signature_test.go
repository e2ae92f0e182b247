package verdict_test

import (
	crand "crypto/rand"
	"encoding/json"
	"errors"
	"math"
	"math/big"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/ethereum/go-ethereum/signer/core/apitypes"

	"github.com/x402gate/x402gate/internal/testenv"
	"github.com/x402gate/x402gate/verdict"
)

var (
	sigPayer = common.HexToAddress("0x1111111111111111111111111111111111111111")
	sigPayTo = common.HexToAddress("0x209693Bc6afc0C5328bA36FaF03C514EF312287C")
	sigAsset = common.HexToAddress("0x036CbD53842c5426634e7929541eC2318f3dCF7e")
	sigNow   = time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
)

func sigBinding() verdict.Binding {
	return verdict.PaymentBinding(sigPayer, 84532, sigPayTo, sigAsset, big.NewInt(10000))
}

// signedTree is testenv's approved verdict (policyVersion 3) carrying a signature of m by key.
func signedTree(t *testing.T, key string, m verdict.SignedVerdict) map[string]any {
	t.Helper()
	k, err := crypto.HexToECDSA(key)
	if err != nil {
		t.Fatal(err)
	}
	sig, err := verdict.SignVerdict(k, m)
	if err != nil {
		t.Fatal(err)
	}
	tree := testenv.ApprovedVerdict()
	var sm map[string]any
	if err := json.Unmarshal([]byte(testenv.VerdictJSON(sig)), &sm); err != nil {
		t.Fatal(err)
	}
	tree["signature"] = sm
	return tree
}

func approvedMessage() verdict.SignedVerdict {
	return verdict.SignedVerdict{
		Binding: sigBinding(), PolicyVersion: 3, Outcome: verdict.SignedApproved,
		Nonce: common.HexToHash("0x" + strings.Repeat("ab", 32)), Expiry: sigNow.Add(time.Minute).Unix(),
	}
}

const (
	serviceKey = "8b3a350cf5c34c9194ca85829a2df0ec3153be0318b5e2d3348e872092edffba"
	otherKey   = "92db14e403b83dfe3df233f83dfa3a0d7096f21ca9b0d6d6b8d88b2b4ec1564e"
)

func serviceAddr(t *testing.T) common.Address {
	k, err := crypto.HexToECDSA(serviceKey)
	if err != nil {
		t.Fatal(err)
	}
	return crypto.PubkeyToAddress(k.PublicKey)
}

func parse(t *testing.T, tree map[string]any) (*verdict.Verdict, error) {
	t.Helper()
	return verdict.ParseVerdict([]byte(testenv.VerdictJSON(tree)), "0xab")
}

// TestSignedVerdictRoundTrip: a verdict signed by the service's key parses, keeps its
// signature through JSON, and passes the gate's check for its own payment.
func TestSignedVerdictRoundTrip(t *testing.T) {
	v, err := parse(t, signedTree(t, serviceKey, approvedMessage()))
	if err != nil {
		t.Fatal(err)
	}
	if v.Signature == nil {
		t.Fatal("the parsed verdict lost its signature")
	}
	if err := verdict.CheckSignature(v, serviceAddr(t), sigBinding(), sigNow); err != nil {
		t.Fatalf("CheckSignature = %v", err)
	}
	again, err := verdict.ParseVerdict([]byte(testenv.VerdictJSON(v)), "0xab")
	if err != nil {
		t.Fatal(err)
	}
	if err := verdict.CheckSignature(again, serviceAddr(t), sigBinding(), sigNow); err != nil {
		t.Fatalf("after a second encoding: CheckSignature = %v", err)
	}
}

// TestCheckSignatureRefuses: everything but a signature by the configured key over this
// payment, this outcome and this policy version, unexpired, is refused (fail closed).
func TestCheckSignatureRefuses(t *testing.T) {
	other := sigBinding()
	for name, c := range map[string]struct {
		tree  func() map[string]any
		want  verdict.Binding
		now   time.Time
		field string
	}{
		"an unsigned verdict":         {func() map[string]any { return testenv.ApprovedVerdict() }, sigBinding(), sigNow, "signature"},
		"a verdict signed by another": {func() map[string]any { return signedTree(t, otherKey, approvedMessage()) }, sigBinding(), sigNow, "signer"},
		"an expired signature":        {func() map[string]any { return signedTree(t, serviceKey, approvedMessage()) }, sigBinding(), sigNow.Add(61 * time.Second), "message.expiry"},
		"another payment's signature": {func() map[string]any { return signedTree(t, serviceKey, approvedMessage()) },
			verdict.PaymentBinding(sigPayer, 84532, sigPayTo, sigAsset, big.NewInt(10001)), sigNow, "message.dataHash"},
		"another payer's signature": {func() map[string]any { return signedTree(t, serviceKey, approvedMessage()) },
			verdict.PaymentBinding(sigPayTo, 84532, sigPayTo, sigAsset, big.NewInt(10000)), sigNow, "message.wallet"},
		"another chain's signature": {func() map[string]any { return signedTree(t, serviceKey, approvedMessage()) },
			verdict.PaymentBinding(sigPayer, 8453, sigPayTo, sigAsset, big.NewInt(10000)), sigNow, "message.chainId"},
		"another token's signature": {func() map[string]any { return signedTree(t, serviceKey, approvedMessage()) },
			verdict.PaymentBinding(sigPayer, 84532, sigPayTo, sigPayTo, big.NewInt(10000)), sigNow, "message.to"},
		"a signature with a value": {func() map[string]any { return signedTree(t, serviceKey, approvedMessage()) },
			verdict.Binding{Wallet: other.Wallet, ChainID: other.ChainID, To: other.To, DataHash: other.DataHash, Value: big.NewInt(1)}, sigNow, "message.value"},
	} {
		t.Run(name, func(t *testing.T) {
			v, err := parse(t, c.tree())
			if err != nil {
				t.Fatal(err)
			}
			err = verdict.CheckSignature(v, serviceAddr(t), c.want, c.now)
			var se *verdict.SignatureError
			if !errors.As(err, &se) || !errors.Is(err, verdict.ErrSignature) || se.Field != c.field {
				t.Fatalf("CheckSignature = %v, want a SignatureError of %s", err, c.field)
			}
		})
	}
}

// TestSignatureBindsEveryField: changing any member of a signed message (or the signature
// itself) leaves a verdict no check accepts: the parse refuses it, or the signature no
// longer recovers the service's address.
func TestSignatureBindsEveryField(t *testing.T) {
	changes := map[string]any{
		"wallet": "0x2222222222222222222222222222222222222222", "chainId": 8453,
		"to": "0x3333333333333333333333333333333333333333", "dataHash": "0x" + strings.Repeat("cd", 32),
		"value": "1", "policyVersion": 4, "outcome": 2, "nonce": "0x" + strings.Repeat("ef", 32),
		"expiry": sigNow.Add(2 * time.Minute).Unix(),
	}
	for member, changed := range changes {
		t.Run(member, func(t *testing.T) {
			tree := signedTree(t, serviceKey, approvedMessage())
			tree["signature"].(map[string]any)["message"].(map[string]any)[member] = changed
			v, err := parse(t, tree)
			if err != nil {
				return // refused at parse (outcome, policyVersion: they must be the verdict's own)
			}
			if err := verdict.CheckSignature(v, serviceAddr(t), v.Signature.Message.Binding, sigNow); !errors.Is(err, verdict.ErrSignature) {
				t.Fatalf("a changed %s passes CheckSignature: %v", member, err)
			}
		})
	}
	t.Run("a malleated signature (s in the upper half)", func(t *testing.T) {
		tree := signedTree(t, serviceKey, approvedMessage())
		v, err := parse(t, tree)
		if err != nil {
			t.Fatal(err)
		}
		sig := v.Signature.Sig
		n := crypto.S256().Params().N
		s := new(big.Int).Sub(n, new(big.Int).SetBytes(sig[32:64]))
		copy(sig[32:64], common.LeftPadBytes(s.Bytes(), 32))
		sig[64] = 55 - sig[64] // 27 <-> 28
		if err := verdict.CheckSignature(v, serviceAddr(t), sigBinding(), sigNow); !errors.Is(err, verdict.ErrSignature) {
			t.Fatalf("a malleated signature passes: %v", err)
		}
	})
}

// TestParseRefusesABadSignatureMember: the extension is held to its shape; a pending
// verdict, or one whose signature signs another outcome or policy version, is invalid.
func TestParseRefusesABadSignatureMember(t *testing.T) {
	rejected := approvedMessage()
	rejected.Outcome = verdict.SignedRejected
	for name, tree := range map[string]func() map[string]any{
		"a string": func() map[string]any { v := testenv.ApprovedVerdict(); v["signature"] = "0xab"; return v },
		"a short signature": func() map[string]any {
			v := signedTree(t, serviceKey, approvedMessage())
			v["signature"].(map[string]any)["signature"] = "0xab"
			return v
		},
		"no message": func() map[string]any {
			v := signedTree(t, serviceKey, approvedMessage())
			delete(v["signature"].(map[string]any), "message")
			return v
		},
		"a value with a sign": func() map[string]any {
			v := signedTree(t, serviceKey, approvedMessage())
			v["signature"].(map[string]any)["message"].(map[string]any)["value"] = "-1"
			return v
		},
		"another outcome signed": func() map[string]any { return signedTree(t, serviceKey, rejected) },
		"a pending verdict": func() map[string]any {
			v := signedTree(t, serviceKey, approvedMessage())
			v["outcome"], v["reasonCode"], v["policyVersion"] = "pending", "pending", nil
			return v
		},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := parse(t, tree()); !errors.Is(err, verdict.ErrInvalidResponse) {
				t.Fatalf("ParseVerdict = %v, want an invalid response", err)
			}
		})
	}
}

// BenchmarkCheckSignature: the gate's check of a signed verdict: the EIP-712 digest, the
// signer's recovery and the comparisons.
func BenchmarkCheckSignature(b *testing.B) {
	k, err := crypto.HexToECDSA(serviceKey)
	if err != nil {
		b.Fatal(err)
	}
	sig, err := verdict.SignVerdict(k, approvedMessage())
	if err != nil {
		b.Fatal(err)
	}
	pv := int64(3)
	v := &verdict.Verdict{Outcome: verdict.OutcomeApproved, PolicyVersion: &pv, Signature: sig}
	signer := crypto.PubkeyToAddress(k.PublicKey)
	b.ReportAllocs()
	for b.Loop() {
		if err := verdict.CheckSignature(v, signer, sigBinding(), sigNow); err != nil {
			b.Fatal(err)
		}
	}
}

// randomMessages are n messages drawn from r, edges included: negative, zero and extreme
// integers, values of every length, nil, negative and beyond 256 bits.
func randomMessages(r *rand.Rand, n int) []verdict.SignedVerdict {
	ints := []int64{0, 1, -1, 255, 1 << 32, math.MaxInt64, math.MinInt64}
	pick := func() int64 {
		if r.IntN(2) == 0 {
			return ints[r.IntN(len(ints))]
		}
		return r.Int64()
	}
	values := []*big.Int{nil, big.NewInt(0), big.NewInt(-1), new(big.Int).Lsh(big.NewInt(1), 256),
		new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 256), big.NewInt(1))}
	fill := func() []byte {
		var b [32]byte
		_, _ = crand.Read(b[:])
		return b[:]
	}
	out := make([]verdict.SignedVerdict, n)
	for i := range out {
		out[i] = verdict.SignedVerdict{
			Binding: verdict.Binding{Wallet: common.BytesToAddress(fill()), ChainID: pick(), To: common.BytesToAddress(fill()),
				DataHash: common.BytesToHash(fill()), Value: new(big.Int).SetBytes(fill()[:r.IntN(33)])},
			PolicyVersion: pick(), Outcome: uint8(r.IntN(256)), Nonce: common.BytesToHash(fill()), Expiry: pick(),
		}
		if r.IntN(4) == 0 {
			out[i].Value = values[r.IntN(len(values))]
		}
	}
	return out
}

// TestDigestIsGoEthereums: Digest, which lays the message's words out itself, is the digest
// go-ethereum's apitypes computes from TypedData (what a wallet or a verifier hashes) for any
// message, edges included, and refuses exactly the messages apitypes refuses.
func TestDigestIsGoEthereums(t *testing.T) {
	for i, m := range randomMessages(rand.New(rand.NewPCG(10, 24)), 3000) {
		got, err := m.Digest()
		want, _, werr := apitypes.TypedDataAndHash(m.TypedData())
		if (err != nil) != (werr != nil) || (err == nil && got != common.BytesToHash(want)) {
			t.Fatalf("#%d %+v: Digest %s, %v; apitypes %x, %v", i, m, got, err, want, werr)
		}
	}
}

// TestSignatureJSON: a signature member, which MarshalJSON writes itself, is byte for byte
// what encoding/json writes for the same members in the same order, for any message and
// signature.
func TestSignatureJSON(t *testing.T) {
	type message struct {
		Wallet        string      `json:"wallet"`
		ChainID       int64       `json:"chainId"`
		To            string      `json:"to"`
		DataHash      common.Hash `json:"dataHash"`
		Value         string      `json:"value"`
		PolicyVersion int64       `json:"policyVersion"`
		Outcome       uint8       `json:"outcome"`
		Nonce         common.Hash `json:"nonce"`
		Expiry        int64       `json:"expiry"`
	}
	type member struct {
		Signer    string        `json:"signer"`
		Message   message       `json:"message"`
		Signature hexutil.Bytes `json:"signature"`
	}
	r := rand.New(rand.NewPCG(10, 25))
	for i, m := range randomMessages(r, 1000) {
		s := &verdict.Signature{Signer: common.BytesToAddress(m.Nonce[:20]), Message: m, Sig: m.DataHash[:r.IntN(33)]}
		value := "0"
		if m.Value != nil {
			value = m.Value.String()
		}
		want, err := json.Marshal(member{Signer: s.Signer.Hex(), Signature: s.Sig, Message: message{
			Wallet: m.Wallet.Hex(), ChainID: m.ChainID, To: m.To.Hex(), DataHash: m.DataHash, Value: value,
			PolicyVersion: m.PolicyVersion, Outcome: m.Outcome, Nonce: m.Nonce, Expiry: m.Expiry,
		}})
		if err != nil {
			t.Fatal(err)
		}
		if got, err := json.Marshal(s); err != nil || string(got) != string(want) {
			t.Fatalf("#%d: MarshalJSON wrote %s (%v), encoding/json %s", i, got, err, want)
		}
	}
}
