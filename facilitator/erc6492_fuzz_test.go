package facilitator

import (
	"bytes"
	"testing"

	"github.com/ethereum/go-ethereum/common"
)

// FuzzParseERC6492 unwraps any signature bytes as the verifier does (docs/facilitator.md):
// a signature without the ERC-6492 suffix is plain (ok false, no error); one with it either
// fails to decode (an error, so verify refuses it) or yields a factory, its calldata and an
// inner signature that, wrapped again, unwrap to the same three values.
func FuzzParseERC6492(f *testing.F) {
	t, err := loadTokenABI()
	if err != nil {
		f.Fatal(err)
	}
	wrap := func(factory common.Address, calldata, inner []byte) []byte {
		b, err := t.erc6492Args.Pack(factory, calldata, inner)
		if err != nil {
			f.Fatal(err)
		}
		return append(b, erc6492Suffix...)
	}
	f.Add(bytes.Repeat([]byte{0x11}, 65))
	f.Add(wrap(common.HexToAddress("0x3333333333333333333333333333333333333333"), []byte{0xde, 0xad, 0xbe, 0xef}, bytes.Repeat([]byte{0x22}, 65)))
	f.Add(wrap(common.Address{}, nil, nil))
	f.Add(append(bytes.Repeat([]byte{0xff}, 96), erc6492Suffix...))
	f.Add(erc6492Suffix)
	f.Fuzz(func(tt *testing.T, sig []byte) {
		w, ok, err := parseERC6492(t, sig)
		suffixed := bytes.HasSuffix(sig, erc6492Suffix)
		if ok != suffixed {
			tt.Fatalf("ok = %v for a signature that %s the suffix", ok, map[bool]string{true: "has", false: "lacks"}[suffixed])
		}
		if !ok {
			if err != nil {
				tt.Fatalf("a plain signature is an error: %v", err)
			}
			return
		}
		if err != nil {
			return
		}
		b, perr := t.erc6492Args.Pack(w.Factory, w.Calldata, w.Inner)
		if perr != nil {
			tt.Fatalf("a decoded wrapper does not pack: %v", perr)
		}
		again, ok2, err2 := parseERC6492(t, append(b, erc6492Suffix...))
		if !ok2 || err2 != nil || again.Factory != w.Factory || !bytes.Equal(again.Calldata, w.Calldata) || !bytes.Equal(again.Inner, w.Inner) {
			tt.Fatalf("re-wrapped %x does not unwrap to the same values: %v %v", sig, ok2, err2)
		}
	})
}
