package verdictserver

import (
	"crypto/ecdsa"
	"encoding/hex"
	"net/http"
	"strings"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"

	"github.com/x402gate/x402gate/verdict"
	"github.com/x402gate/x402gate/verdictserver/engine"
	"github.com/x402gate/x402gate/verdictserver/engine/actions"
	"github.com/x402gate/x402gate/verdictserver/engine/evmcall"
)

// SignerPath is the public route that publishes the verdict signer's address and the
// EIP-712 domain and types of its signatures (docs/verdict-signing.md#the-signer-route).
const SignerPath = "/.well-known/x402gate-verdict-signer"

// SigningConfig configures signed verdicts (docs/verdict-signing.md). The Config embeds it.
type SigningConfig struct {
	// SignerKey is the secp256k1 private key that signs every terminal verdict, 64 hex
	// digits with or without 0x, given as a placeholder ({env.*} or {file.*}) that the
	// caller expands. Default: none, verdicts are not signed.
	SignerKey string `json:"signer_key,omitempty"`
	// SignatureTTL is how long a verdict's signature stays valid after the verdict is
	// made: more than 0 and at most 5m (verdict.MaxSignatureTTL). Default: 5m.
	SignatureTTL engine.Duration `json:"signature_ttl,omitempty"`
}

// Validate checks the signature TTL; the key is checked once expanded (New).
func (c *SigningConfig) Validate() error {
	if ttl := time.Duration(c.SignatureTTL); ttl < 0 || ttl > verdict.MaxSignatureTTL {
		return ConfigErr("signature_ttl", "must be more than 0 and at most %s", verdict.MaxSignatureTTL)
	}
	if c.SignatureTTL != 0 && c.SignerKey == "" {
		return ConfigErr("signature_ttl", "needs a signer_key")
	}
	return nil
}

// signer signs terminal verdicts with the service's key.
type signer struct {
	key  *ecdsa.PrivateKey
	addr common.Address
	ttl  time.Duration
}

// newSigner parses the expanded key; nil without one. The error never quotes the key.
func (c *SigningConfig) newSigner() (*signer, error) {
	if c.SignerKey == "" {
		return nil, nil
	}
	raw, err := hex.DecodeString(strings.TrimPrefix(strings.TrimSpace(c.SignerKey), "0x"))
	if err != nil || len(raw) != 32 {
		return nil, ConfigErr("signer_key", "resolved to something other than 64 hex digits")
	}
	key, err := crypto.ToECDSA(raw)
	if err != nil {
		return nil, ConfigErr("signer_key", "is not a valid secp256k1 private key")
	}
	ttl := time.Duration(c.SignatureTTL)
	if ttl == 0 {
		ttl = verdict.MaxSignatureTTL
	}
	return &signer{key: key, addr: crypto.PubkeyToAddress(key.PublicKey), ttl: ttl}, nil
}

// sign signs v, the terminal verdict of the record hash about in, valid for the signer's
// TTL from now (docs/verdict-signing.md). The record's requestHash is the nonce: one
// record, one signature that a guarded account accepts once.
func (g *signer) sign(v *verdict.Verdict, in engine.Input, hash string, now time.Time) (*verdict.Signature, error) {
	sig := new(verdict.Signature)
	if err := g.signInto(sig, v, in, hash, now); err != nil {
		return nil, err
	}
	return sig, nil
}

// signInto is sign into sig.
func (g *signer) signInto(sig *verdict.Signature, v *verdict.Verdict, in engine.Input, hash string, now time.Time) error {
	m := verdict.SignedVerdict{
		Binding: bindingOf(in.ProposedTx, in.Escrow),
		Outcome: verdict.SignedRejected,
		Nonce:   common.HexToHash(hash),
		Expiry:  now.Add(g.ttl).Unix(),
	}
	if v.Approved() {
		m.Outcome = verdict.SignedApproved
	}
	if v.PolicyVersion != nil {
		m.PolicyVersion = *v.PolicyVersion
	}
	return verdict.SignVerdictInto(sig, g.key, m)
}

// bindingOf is the action a verdict about tx signs (docs/verdict-signing.md#binding): an
// x402 payment as the ERC-20 transfer it makes, an EVM call as itself, and any other
// action (Hyperliquid's) as keccak256 of its canonical JSON, to the zero address.
func bindingOf(tx map[string]any, wallet common.Address) verdict.Binding {
	chainID, _ := actions.ChainID(tx["chainId"])
	if p, _ := tx["protocol"].(string); p == verdict.ProtocolPayment {
		if b, ok := paymentBinding(tx, wallet, chainID); ok {
			return b
		}
	} else if c, de := evmcall.ReadCall(tx, nil); de == nil {
		return verdict.CallBinding(wallet, c.ChainID, c.To, c.Data, c.Value)
	}
	canonical, _ := canonicalJSON(tx) // a stored proposedTx is decoded JSON: it always encodes
	return verdict.CallBinding(wallet, chainID, common.Address{}, canonical, nil)
}

// paymentBinding reads a payment's payTo, asset and amount; ok is false when one is not
// well formed (the verdict is then a decode failure, bound to the canonical JSON).
func paymentBinding(tx map[string]any, wallet common.Address, chainID int64) (verdict.Binding, bool) {
	payTo, de1 := actions.AddressMember(tx, "payTo")
	asset, de2 := actions.AddressMember(tx, "asset")
	s, _ := tx["amount"].(string)
	amount, ok := actions.BaseUnits(s)
	if de1 != nil || de2 != nil || !ok {
		return verdict.Binding{}, false
	}
	return verdict.PaymentBinding(wallet, chainID, payTo, asset, amount), true
}

// signerInfo is the body of GET /.well-known/x402gate-verdict-signer.
type signerInfo struct {
	Address     string         `json:"address"`
	Domain      map[string]any `json:"domain"`
	PrimaryType string         `json:"primaryType"`
	Types       any            `json:"types"`
	TTLSeconds  int64          `json:"ttlSeconds"`
	Outcomes    map[string]int `json:"outcomes"`
}

// serveSigner answers GET /.well-known/x402gate-verdict-signer
// (docs/verdict-signing.md#the-signer-route): the signer's address, the EIP-712 domain and
// types, the signatures' TTL; 404 when this service does not sign its verdicts.
func (s *Server) serveSigner(w http.ResponseWriter, _ *http.Request, _ *principal) {
	if s.signer == nil {
		writeCode(w, codeNotFound, "this verdict service does not sign its verdicts")
		return
	}
	w.Header().Set("Cache-Control", "public, max-age=300")
	domain := verdict.SignatureDomain()
	writeJSON(w, http.StatusOK, signerInfo{
		Address:     s.signer.addr.Hex(),
		Domain:      domain.Map(),
		PrimaryType: verdict.SignaturePrimaryType,
		Types:       verdict.SignatureTypes(),
		TTLSeconds:  int64(s.signer.ttl / time.Second),
		Outcomes:    map[string]int{"approved": int(verdict.SignedApproved), "rejected": int(verdict.SignedRejected)},
	})
}

// encodeVerdict encodes v, signed when the service signs, without touching v (whose memory
// the engine may reuse). A verdict under spend windows is signed and encoded once they have
// decided (withWindowCheck).
func (s *Server) encodeVerdict(v *verdict.Verdict, in engine.Input, hash string) ([]byte, error) {
	if s.signer == nil {
		return encodeInto(nil, v)
	}
	sig, err := s.signer.sign(v, in, hash, s.now())
	if err != nil {
		return nil, err
	}
	signed := *v
	signed.Signature = sig
	return encodeInto(nil, &signed)
}
