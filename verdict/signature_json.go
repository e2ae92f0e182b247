package verdict

import (
	"encoding/hex"
	"strconv"

	"github.com/ethereum/go-ethereum/common"
)

// MarshalJSON encodes s as the verdict's "signature" member
// (docs/verdict-signing.md#the-signature-member): AppendJSON into bytes of its own.
func (s *Signature) MarshalJSON() ([]byte, error) {
	return s.AppendJSON(make([]byte, 0, 640)), nil // 560 or so: grows only for a value of some 40 digits
}

// AppendJSON appends s as the verdict's "signature" member
// (docs/verdict-signing.md#the-signature-member): {"signer", "message": {"wallet", "chainId",
// "to", "dataHash", "value", "policyVersion", "outcome", "nonce", "expiry"}, "signature"},
// the typed-data message as a wallet shows it: addresses EIP-55 checksummed, hashes and the
// signature 0x and lower-case hex, the uint256 value a decimal string, the other integers
// numbers. Every member is hex or a number, so it is written as it is, with nothing to
// escape (TestSignatureJSON holds it to encoding/json's encoding of the same members).
func (s *Signature) AppendJSON(b []byte) []byte {
	m := &s.Message
	b = append(b, `{"signer":"`...)
	b = appendAddress(b, s.Signer)
	b = append(b, `","message":{"wallet":"`...)
	b = appendAddress(b, m.Wallet)
	b = append(b, `","chainId":`...)
	b = strconv.AppendInt(b, m.ChainID, 10)
	b = append(b, `,"to":"`...)
	b = appendAddress(b, m.To)
	b = appendHex(append(b, `","dataHash":"`...), m.DataHash[:])
	b = orZero(m.Value).Append(append(b, `","value":"`...), 10)
	b = strconv.AppendInt(append(b, `","policyVersion":`...), m.PolicyVersion, 10)
	b = strconv.AppendUint(append(b, `,"outcome":`...), uint64(m.Outcome), 10)
	b = appendHex(append(b, `,"nonce":"`...), m.Nonce[:])
	b = strconv.AppendInt(append(b, `","expiry":`...), m.Expiry, 10)
	b = appendHex(append(b, `},"signature":"`...), s.Sig)
	return append(b, `"}`...)
}

// appendAddress appends a's EIP-55 checksummed hex, as common.Address.Hex writes it, with a
// recycled hash state (digests) instead of Hex's own state and strings.
func appendAddress(b []byte, a common.Address) []byte {
	d := digests.Get().(*digestState)
	defer digests.Put(d)
	lower := d.prefix[:hex.Encode(d.prefix[:40], a[:])] // prefix is scratch here
	d.h.Reset()
	_, _ = d.h.Write(lower)
	_, _ = d.h.Read(d.out[:])
	b = append(b, "0x"...)
	for i, c := range lower {
		nibble := d.out[i/2] >> 4
		if i%2 == 1 {
			nibble = d.out[i/2] & 0xf
		}
		if c > '9' && nibble > 7 {
			c -= 'a' - 'A'
		}
		b = append(b, c)
	}
	return b
}

// appendHex appends 0x and the lower-case hex of p.
func appendHex(b, p []byte) []byte {
	return hex.AppendEncode(append(b, "0x"...), p)
}
