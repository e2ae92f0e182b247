package pass

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/ethereum/go-ethereum/accounts"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"
)

// Sign-in-with-x (docs/gate.md#sign-in-with-x) lets a wallet that bought a pass in again
// without the pass itself: the 402 carries the x402 v2 "sign-in-with-x" extension (a
// challenge bound to the origin), the client signs the EIP-4361 message it describes with
// its wallet (EIP-191) and sends it back in the SIGN-IN-WITH-X header. This file reads and
// checks the proof; the gate looks its signer up in the pass book.

// HeaderSignInWithX carries a sign-in-with-x proof: base64 of its JSON payload.
const HeaderSignInWithX = "SIGN-IN-WITH-X"

// SignInWithX is the extension's key in PAYMENT-REQUIRED extensions.
const SignInWithX = "sign-in-with-x"

// siwxMaxAge bounds the age of a proof's issuedAt, as the reference server does.
const siwxMaxAge = 5 * time.Minute

// siwxSkew is how far in the future an issuedAt may lie: the clocks of a fleet.
const siwxSkew = 5 * time.Second

// maxSIWXBytes bounds the SIGN-IN-WITH-X header.
const maxSIWXBytes = 8 << 10

// Sign-in-with-x refusals (HeaderPassRefused), the reference's codes where it has one.
const (
	SIWXMalformed      Refusal = "invalid_siwx_payload"
	SIWXDomainMismatch Refusal = "invalid_siwx_domain_mismatch"
	SIWXURIMismatch    Refusal = "invalid_siwx_uri_mismatch"
	SIWXIssuedAt       Refusal = "invalid_siwx_issued_at"
	SIWXTooOld         Refusal = "invalid_siwx_issued_at_too_old"
	SIWXInFuture       Refusal = "invalid_siwx_issued_at_in_future"
	SIWXExpired        Refusal = "invalid_siwx_expired"
	SIWXNotYetValid    Refusal = "invalid_siwx_not_yet_valid"
	SIWXNonce          Refusal = "invalid_siwx_nonce"
	SIWXChainID        Refusal = "invalid_siwx_chain_id"
	SIWXSignature      Refusal = "invalid_siwx_signature"
	// SIWXNoPass: the proof is good, but the signer holds no live pass for this scope.
	SIWXNoPass Refusal = "siwx_no_pass"
)

// ChainSpec is one supportedChains entry of the challenge.
type ChainSpec struct {
	ChainID string `json:"chainId"`
	Type    string `json:"type"`
}

// Info is the challenge's info, as @x402/extensions declares it.
type Info struct {
	Domain         string   `json:"domain"`
	URI            string   `json:"uri"`
	Statement      string   `json:"statement,omitempty"`
	Version        string   `json:"version"`
	Nonce          string   `json:"nonce"`
	IssuedAt       string   `json:"issuedAt"`
	ExpirationTime string   `json:"expirationTime,omitempty"`
	Resources      []string `json:"resources,omitempty"`
}

// siwxTime is JavaScript's Date.toISOString form, which the clients echo.
const siwxTime = "2006-01-02T15:04:05.000Z07:00"

// siwxSchema is the JSON schema of the proof, as the extension publishes it.
var siwxSchema = map[string]any{
	"$schema": "https://json-schema.org/draft/2020-12/schema",
	"type":    "object",
	"properties": map[string]any{
		"domain": map[string]string{"type": "string"}, "address": map[string]string{"type": "string"},
		"statement": map[string]string{"type": "string"}, "uri": map[string]string{"type": "string", "format": "uri"},
		"version": map[string]string{"type": "string"}, "chainId": map[string]string{"type": "string"},
		"type": map[string]string{"type": "string"}, "nonce": map[string]string{"type": "string"},
		"issuedAt":       map[string]string{"type": "string", "format": "date-time"},
		"expirationTime": map[string]string{"type": "string", "format": "date-time"},
		"notBefore":      map[string]string{"type": "string", "format": "date-time"},
		"requestId":      map[string]string{"type": "string"},
		"resources":      map[string]any{"type": "array", "items": map[string]string{"type": "string", "format": "uri"}},
		"signature":      map[string]string{"type": "string"},
	},
	"required": []string{"domain", "address", "uri", "version", "chainId", "type", "nonce", "issuedAt", "signature"},
}

// Proof is the SIGN-IN-WITH-X proof. Optional strings are pointers: EIP-4361 tells an
// absent statement or request id from an empty one.
type Proof struct {
	Domain          string   `json:"domain"`
	Address         string   `json:"address"`
	Statement       *string  `json:"statement"`
	URI             string   `json:"uri"`
	Version         string   `json:"version"`
	ChainID         string   `json:"chainId"`
	Type            string   `json:"type"`
	Nonce           string   `json:"nonce"`
	IssuedAt        string   `json:"issuedAt"`
	ExpirationTime  *string  `json:"expirationTime"`
	NotBefore       *string  `json:"notBefore"`
	RequestID       *string  `json:"requestId"`
	Resources       []string `json:"resources"`
	SignatureScheme string   `json:"signatureScheme"`
	Signature       string   `json:"signature"`
}

// ParseProof decodes a SIGN-IN-WITH-X header value strictly.
func ParseProof(v string) (*Proof, bool) {
	if len(v) > maxSIWXBytes {
		return nil, false
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(v))
	if err != nil {
		return nil, false
	}
	var p Proof
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil || dec.More() {
		return nil, false
	}
	if p.Domain == "" || p.Address == "" || p.URI == "" || p.Version == "" || p.ChainID == "" ||
		p.Type == "" || p.Nonce == "" || p.IssuedAt == "" || p.Signature == "" {
		return nil, false
	}
	return &p, true
}

// Message is the EIP-4361 message the proof's signature covers, byte for byte as
// @x402/extensions (through @signinwithethereum/siwe) writes it, with the address written
// as given (checksummed, or as a browser wallet hands it out).
func (p *Proof) Message(addr string, chainID int64) string {
	var b strings.Builder
	b.WriteString(p.Domain + " wants you to sign in with your Ethereum account:\n" + addr + "\n")
	if p.Statement == nil {
		b.WriteString("\n\n")
	} else {
		b.WriteString("\n" + *p.Statement + "\n\n")
	}
	b.WriteString("URI: " + p.URI + "\nVersion: " + p.Version + "\nChain ID: " + strconv.FormatInt(chainID, 10) +
		"\nNonce: " + p.Nonce + "\nIssued At: " + p.IssuedAt)
	if p.ExpirationTime != nil && *p.ExpirationTime != "" {
		b.WriteString("\nExpiration Time: " + *p.ExpirationTime)
	}
	if p.NotBefore != nil && *p.NotBefore != "" {
		b.WriteString("\nNot Before: " + *p.NotBefore)
	}
	if p.RequestID != nil {
		b.WriteString("\nRequest ID: " + *p.RequestID)
	}
	if p.Resources != nil {
		b.WriteString("\nResources:")
		for _, r := range p.Resources {
			b.WriteString("\n- " + r)
		}
	}
	return b.String()
}

// proofAddress reads the proof's address: 0x-hex, and when mixed-case, correctly
// checksummed (EIP-55).
func proofAddress(s string) (common.Address, bool) {
	if !strings.HasPrefix(s, "0x") || !common.IsHexAddress(s) {
		return common.Address{}, false
	}
	a := common.HexToAddress(s)
	body := s[2:]
	if body != strings.ToLower(body) && body != strings.ToUpper(body) && a.Hex() != s {
		return common.Address{}, false
	}
	return a, true
}

// parseJSTime reads a timestamp as new Date() would for the ISO forms clients send.
func parseJSTime(s string) (time.Time, bool) {
	t, err := time.Parse(time.RFC3339Nano, s)
	return t, err == nil
}

// Check validates p for a request on s at now and returns its signer: the domain and the
// URI's origin are this site's, the times hold, the chain is one chainOK takes, and the
// EIP-191 signature over the EIP-4361 message is the address's own. Smart-contract
// wallets (EIP-1271) are not verified.
func (p *Proof) Check(s Site, now time.Time, chainOK func(caip2 string) bool) (common.Address, Refusal) {
	if !strings.EqualFold(p.Domain, s.Host) {
		return common.Address{}, SIWXDomainMismatch
	}
	u, err := url.Parse(p.URI)
	if err != nil || !strings.EqualFold(u.Scheme+"://"+u.Host, s.Origin()) {
		return common.Address{}, SIWXURIMismatch
	}
	issued, ok := parseJSTime(p.IssuedAt)
	switch {
	case !ok:
		return common.Address{}, SIWXIssuedAt
	case now.Sub(issued) > siwxMaxAge:
		return common.Address{}, SIWXTooOld
	case issued.Sub(now) > siwxSkew:
		return common.Address{}, SIWXInFuture
	}
	if p.ExpirationTime != nil && *p.ExpirationTime != "" {
		if t, ok := parseJSTime(*p.ExpirationTime); !ok || !now.Before(t) {
			return common.Address{}, SIWXExpired
		}
	}
	if p.NotBefore != nil && *p.NotBefore != "" {
		if t, ok := parseJSTime(*p.NotBefore); !ok || now.Before(t) {
			return common.Address{}, SIWXNotYetValid
		}
	}
	if len(p.Nonce) < 8 || len(p.Nonce) > 128 {
		return common.Address{}, SIWXNonce
	}
	chain := strings.TrimPrefix(p.ChainID, "eip155:")
	id, err := strconv.ParseInt(chain, 10, 64)
	if p.Type != "eip191" || !chainOK(p.ChainID) || err != nil {
		return common.Address{}, SIWXChainID
	}
	addr, ok := proofAddress(p.Address)
	if !ok {
		return common.Address{}, SIWXMalformed
	}
	sig, err := hex.DecodeString(strings.TrimPrefix(p.Signature, "0x"))
	if err != nil || len(sig) != 65 {
		return common.Address{}, SIWXSignature
	}
	if sig[64] >= 27 {
		sig[64] -= 27
	}
	if signedBy(p.Message(addr.Hex(), id), sig, addr) {
		return addr, ""
	}
	// A browser wallet hands out its address in lowercase, and a page has no keccak to
	// checksum it with: the paywall signs the message with the address as the wallet gave it.
	if lower := strings.ToLower(p.Address); p.Address == lower {
		if signedBy(p.Message(lower, id), sig, addr) {
			return addr, ""
		}
	}
	return common.Address{}, SIWXSignature
}

// signedBy reports whether sig is addr's EIP-191 signature of msg.
func signedBy(msg string, sig []byte, addr common.Address) bool {
	pub, err := crypto.SigToPub(accounts.TextHash([]byte(msg)), sig)
	return err == nil && crypto.PubkeyToAddress(*pub) == addr
}

// NonceTTL is how long a used proof's nonce is remembered: longer than a proof lives.
const NonceTTL = siwxMaxAge + siwxSkew + time.Minute

// Challenge builds the extension for a 402 of resource on s at now: a fresh random nonce,
// issuedAt now, valid for siwxMaxAge, on chains, with statement.
func Challenge(s Site, resource, statement string, now time.Time, chains []ChainSpec) (map[string]any, error) {
	raw := make([]byte, 16)
	if _, err := rand.Read(raw); err != nil {
		return nil, fmt.Errorf("sign-in-with-x nonce: %w", err)
	}
	now = now.UTC()
	info := Info{
		Domain:         s.Host,
		URI:            resource,
		Statement:      statement,
		Version:        "1",
		Nonce:          hex.EncodeToString(raw),
		IssuedAt:       now.Format(siwxTime),
		ExpirationTime: now.Add(siwxMaxAge).Format(siwxTime),
		Resources:      []string{resource},
	}
	return map[string]any{"info": info, "supportedChains": chains, "schema": siwxSchema}, nil
}
