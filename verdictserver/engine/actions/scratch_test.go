package actions

import (
	"bytes"
	"encoding/hex"
	"math/rand/v2"
	"testing"
)

// TestHexBytesDecodesAsHex: call data decoded into the scratch buffer is what
// hex.DecodeString gives, and a string it refuses is refused.
func TestHexBytesDecodesAsHex(t *testing.T) {
	rng := rand.New(rand.NewPCG(3009, 1))
	digits := "0123456789abcdefABCDEFgx:/@G`"
	s := new(Scratch)
	for range 20000 {
		b := make([]byte, 2*rng.IntN(40))
		for i := range b {
			if rng.IntN(50) == 0 {
				b[i] = digits[rng.IntN(len(digits))]
			} else {
				b[i] = digits[rng.IntN(22)]
			}
		}
		want, wantErr := hex.DecodeString(string(b))
		got, err := HexBytes(string(b), s)
		if (err != nil) != (wantErr != nil) || err == nil && !bytes.Equal(got, want) {
			t.Fatalf("%q: got %x %v, want %x %v", b, got, err, want, wantErr)
		}
	}
}
