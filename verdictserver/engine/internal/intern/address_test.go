package intern

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/ethereum/go-ethereum/common"

	"github.com/x402gate/x402gate/verdictserver/policy"
)

// TestAddressParsersAgree: LooseAddress reads what common.IsHexAddress accepts as
// common.HexToAddress does, and StrictAddress accepts what policy.Address accepts, with the
// same address, on addresses in every case, checksummed or not, and corruptions of them.
func TestAddressParsersAgree(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 5))
	var inputs []string
	for i := 0; i < 3000; i++ {
		var a common.Address
		for j := range a {
			a[j] = byte(rng.Uint32())
		}
		s := a.Hex()
		switch rng.IntN(6) {
		case 0:
			s = strings.ToLower(s)
		case 1:
			s = "0x" + strings.ToUpper(s[2:])
		case 2: // a wrong checksum: one letter's case flipped
			b := []byte(s)
			for k := 2; k < len(b); k++ {
				if c := b[k]; c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' {
					b[k] ^= 0x20
					break
				}
			}
			s = string(b)
		case 3:
			s = s[2:]
		case 4:
			s = "0X" + s[2:]
		}
		if rng.IntN(8) == 0 { // a stray character, or one too few or many
			b := []byte(s)
			switch k := rng.IntN(len(b)); rng.IntN(3) {
			case 0:
				b[k] = "g 0xX\x00é"[rng.IntN(7)]
			case 1:
				b = b[:len(b)-1]
			default:
				b = append(b, '0')
			}
			s = string(b)
		}
		inputs = append(inputs, s)
	}
	inputs = append(inputs, "", "0x", "0x0", "0x0000000000000000000000000000000000000000", "0xEeeeeEeeeEeEeeEeEeEeeEEEeeeeEeeeeeeeEEeE")
	strictSeen, looseSeen := 0, 0
	for _, s := range inputs {
		got, ok := LooseAddress(s)
		if want := common.IsHexAddress(s); ok != want || ok && got != common.HexToAddress(s) {
			t.Fatalf("LooseAddress(%q) = %v %v, want %v %v", s, got, ok, common.HexToAddress(s), want)
		}
		want, wantOK := policy.Address(s)
		got, ok = StrictAddress(s)
		if ok != wantOK || ok && got != want {
			t.Fatalf("StrictAddress(%q) = %v %v, want %v %v", s, got, ok, want, wantOK)
		}
		if ok {
			strictSeen++
		}
		if common.IsHexAddress(s) {
			looseSeen++
		}
	}
	if strictSeen < 500 || looseSeen-strictSeen < 500 {
		t.Errorf("too few accepted inputs (strict %d, loose %d): the test does not test", strictSeen, looseSeen)
	}
}
