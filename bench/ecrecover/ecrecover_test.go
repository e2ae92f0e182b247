// Package ecrecover holds the bound of the verify CPU comparison in bench/run: the bare
// secp256k1 public-key recovery of go-ethereum, with nothing around it.
package ecrecover

import (
	"testing"

	"github.com/ethereum/go-ethereum/crypto"
)

// BenchmarkEcrecover is one crypto.Ecrecover of a 65-byte signature over a 32-byte digest.
func BenchmarkEcrecover(b *testing.B) {
	key, err := crypto.GenerateKey()
	if err != nil {
		b.Fatal(err)
	}
	digest := crypto.Keccak256([]byte("x402gate bench: the recovery bound"))
	sig, err := crypto.Sign(digest, key)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := crypto.Ecrecover(digest, sig); err != nil {
			b.Fatal(err)
		}
	}
}
