package payledger

import (
	"bytes"
	"testing"
)

// settlement is a settlement as the gate encodes it (gate.Settlement).
const settlement = `{"success":true,"payer":"0xA11CE00000000000000000000000000000000001","transaction":"0x000000000000000000000000000000000000000000000000000000000000feed","amount":"10000","network":"eip155:84532","networkName":"base-sepolia","asset":"0x036CbD53842c5426634e7929541eC2318f3dCF7e","payTo":"0x209693Bc6afc0C5328bA36FaF03C514EF312287C","x402Version":2}`

// another is the settlement of another payer on the same route.
const another = `{"success":true,"payer":"0x7b3A9f00000dE5550000000000000000000aB002","transaction":"0x3f9a8b7c6d5e4f30211a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f70","amount":"10000","network":"eip155:84532","networkName":"base-sepolia","asset":"0x036CbD53842c5426634e7929541eC2318f3dCF7e","payTo":"0x209693Bc6afc0C5328bA36FaF03C514EF312287C","x402Version":2}`

func roundTrip(t *testing.T, c *codec, data []byte) string {
	t.Helper()
	enc := c.encode(data)
	got, err := c.decode(enc)
	if err != nil || !bytes.Equal(got, data) || (got == nil) != (data == nil) {
		t.Fatalf("decode(encode(%q)) = %q, %v", data, got, err)
	}
	return enc
}

// TestCodecSettlement: a settlement of the dictionary's route is kept in under 100 bytes,
// and comes back byte for byte, as do nil, empty and unlike data.
func TestCodecSettlement(t *testing.T) {
	var c codec
	roundTrip(t, &c, []byte(settlement))
	if enc := roundTrip(t, &c, []byte(another)); len(enc) > 100 {
		t.Errorf("another settlement kept in %d bytes, want <= 100 (of %d)", len(enc), len(another))
	}
	for _, d := range [][]byte{nil, {}, []byte("x"), []byte("0123456789abcdefABCDEF0123456789aBcDeF"), []byte(settlement[:200] + "zz")} {
		roundTrip(t, &c, d)
	}
}

// TestCodecCorrupt: a damaged encoding is an error wrapping ErrUnavailable, never a panic.
func TestCodecCorrupt(t *testing.T) {
	var c codec
	roundTrip(t, &c, []byte(settlement))
	enc := roundTrip(t, &c, []byte(another))
	for _, bad := range []string{"o\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff", "o\x05", "o\x09\xff\x7f", "o\x0a", enc[:len(enc)-3]} {
		if _, err := c.decode(bad); err == nil {
			t.Errorf("decode(%q): no error", bad)
		}
	}
}

func FuzzCodec(f *testing.F) {
	f.Add([]byte(settlement), []byte(another))
	f.Add([]byte("abc"), []byte("0xDEADbeef00112233"))
	f.Fuzz(func(t *testing.T, dict, data []byte) {
		var c codec
		roundTrip(t, &c, dict)
		roundTrip(t, &c, data)
		_, _ = c.decode("o" + string(data)) // never panics
	})
}
