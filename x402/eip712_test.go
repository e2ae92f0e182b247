package x402

import (
	"errors"
	"math/big"
	"testing"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/ethereum/go-ethereum/signer/core/apitypes"
)

func TestTypeHashesMatchResearchConstants(t *testing.T) {
	td := apitypes.TypedData{Types: transferWithAuthorizationTypes}
	for _, tc := range []struct {
		name, typ string
		want      common.Hash
	}{
		{"TransferWithAuthorization", "TransferWithAuthorization", TransferWithAuthorizationTypeHash},
		{"EIP712Domain", "EIP712Domain", EIP712DomainTypeHash},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := common.BytesToHash(td.TypeHash(tc.typ)); got != tc.want {
				t.Fatalf("type hash = %s, want %s", got, tc.want)
			}
		})
	}
	if got := crypto.Keccak256Hash([]byte("TransferWithAuthorization(address from,address to,uint256 value,uint256 validAfter,uint256 validBefore,bytes32 nonce)")); got.Hex() != "0x7c7c6cdb67a18743f49ec6fa9b35f50d52ed05cbed4cc592e13b44501c1a2267" {
		t.Fatalf("keccak of the type string = %s", got)
	}
}

// The digest must equal the EIP-712 definition assembled by hand from the type hashes,
// so a mistake in the apitypes types table cannot go unnoticed.
func TestTransferWithAuthorizationHashFollowsEIP712(t *testing.T) {
	a := testAuthorization()
	got, err := TransferWithAuthorizationHash(BaseSepolia.ChainID, BaseSepolia.USDC.Address, "USDC", "2", a)
	if err != nil {
		t.Fatal(err)
	}
	word := func(b []byte) []byte { return common.LeftPadBytes(b, 32) }
	domain := crypto.Keccak256(EIP712DomainTypeHash[:], crypto.Keccak256([]byte("USDC")), crypto.Keccak256([]byte("2")),
		word(BaseSepolia.ChainID.Bytes()), word(BaseSepolia.USDC.Address[:]))
	msg := crypto.Keccak256(TransferWithAuthorizationTypeHash[:], word(a.From[:]), word(a.To[:]), word(a.Value.Bytes()),
		word(a.ValidAfter.Bytes()), word(a.ValidBefore.Bytes()), a.Nonce[:])
	want := crypto.Keccak256Hash([]byte{0x19, 0x01}, domain, msg)
	if got != want {
		t.Fatalf("digest = %s, want %s", got, want)
	}
	other, _ := TransferWithAuthorizationHash(Base.ChainID, BaseSepolia.USDC.Address, "USDC", "2", a)
	if other == got {
		t.Fatal("chain id does not change the digest")
	}
}

func TestTransferWithAuthorizationHashRefusesIncompleteInput(t *testing.T) {
	a := testAuthorization()
	noValue := a
	noValue.Value = nil
	huge := a
	huge.ValidBefore = new(big.Int).Lsh(big.NewInt(1), 256)
	for _, tc := range []struct {
		name       string
		chainID    *big.Int
		domainName string
		a          Authorization
		reason     Reason
	}{
		{"missing EIP-712 name", BaseSepolia.ChainID, "", a, ReasonMissingEIP712Domain},
		{"no chain id", nil, "USDC", a, ReasonInvalidNetwork},
		{"value missing", BaseSepolia.ChainID, "USDC", noValue, ReasonInvalidPayload},
		{"validBefore beyond uint256", BaseSepolia.ChainID, "USDC", huge, ReasonInvalidPayload},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := TransferWithAuthorizationHash(tc.chainID, BaseSepolia.USDC.Address, tc.domainName, "2", tc.a)
			wantReason(t, err, tc.reason, "")
		})
	}
}

func TestRecoverSigner(t *testing.T) {
	a := testAuthorization()
	h, _ := TransferWithAuthorizationHash(BaseSepolia.ChainID, BaseSepolia.USDC.Address, "USDC", "2", a)
	sig := signTest(t, a) // v = 27/28
	low := append([]byte(nil), sig...)
	low[64] -= 27 // v = 0/1
	// The malleable twin (r, n-s, v^1) recovers the same key; it must be refused.
	high := append([]byte(nil), sig...)
	s := new(big.Int).SetBytes(sig[32:64])
	copy(high[32:64], common.LeftPadBytes(new(big.Int).Sub(crypto.S256().Params().N, s).Bytes(), 32))
	high[64] = 27 + (1 - (sig[64] - 27))
	badV := append([]byte(nil), sig...)
	badV[64] = 29
	zeroR := append([]byte(nil), sig...)
	copy(zeroR[:32], make([]byte, 32))
	for _, tc := range []struct {
		name  string
		sig   []byte
		cause error
	}{
		{"v as 27 or 28 recovers the payer", sig, nil},
		{"v as 0 or 1 recovers the payer", low, nil},
		{"high s is refused", high, ErrSignatureMalleable},
		{"v of 29 is refused", badV, ErrSignatureInvalid},
		{"zero r is refused", zeroR, ErrSignatureInvalid},
		{"64 bytes is not ECDSA", sig[:64], ErrSignatureLength},
		{"smart-wallet length is not ECDSA", make([]byte, 200), ErrSignatureLength},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := RecoverSigner(h, tc.sig)
			if tc.cause == nil {
				if err != nil || got != anvilAddr {
					t.Fatalf("recovered %s, %v; want %s", got.Hex(), err, anvilAddr.Hex())
				}
				return
			}
			if !errors.Is(err, tc.cause) {
				t.Fatalf("err = %v, want %v", err, tc.cause)
			}
			wantReason(t, err, ReasonInvalidSignature, "payload.signature")
		})
	}
	other := h
	other[0] ^= 1
	if got, err := RecoverSigner(other, sig); err == nil && got == anvilAddr {
		t.Fatal("a different digest recovered the payer")
	}
}

func TestSplitSignatureNormalisesV(t *testing.T) {
	sig := signTest(t, testAuthorization())
	for _, off := range []byte{0, 27} {
		s := append([]byte(nil), sig...)
		s[64] = s[64] - 27 + off
		v, r, ss, err := SplitSignature(s)
		if err != nil {
			t.Fatal(err)
		}
		if v != sig[64] || common.Hash(r) != common.BytesToHash(sig[:32]) || common.Hash(ss) != common.BytesToHash(sig[32:64]) {
			t.Fatalf("split v=%d", v)
		}
	}
}

func BenchmarkRecoverSigner(b *testing.B) {
	a := testAuthorization()
	sig := signTest(b, a)
	h, _ := TransferWithAuthorizationHash(BaseSepolia.ChainID, BaseSepolia.USDC.Address, "USDC", "2", a)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := RecoverSigner(h, sig); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkTransferWithAuthorizationHash(b *testing.B) {
	a := testAuthorization()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := TransferWithAuthorizationHash(BaseSepolia.ChainID, BaseSepolia.USDC.Address, "USDC", "2", a); err != nil {
			b.Fatal(err)
		}
	}
}
