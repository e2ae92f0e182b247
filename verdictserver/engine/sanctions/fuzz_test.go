package sanctions

import (
	"bytes"
	"context"
	"errors"
	"math/big"
	"os"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/common"
)

// FuzzParse: neither parser panics on any file, and what they accept is a dated list.
func FuzzParse(f *testing.F) {
	for _, p := range []string{"testdata/sdn_advanced.xml", "testdata/list.txt"} {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("<Sanctions><DateOfIssue><Year>2026</Year><Month>13</Month><Day>1</Day></DateOfIssue></Sanctions>"))
	f.Fuzz(func(t *testing.T, b []byte) {
		mt := time.Unix(1e9, 0)
		for _, parse := range []func() (*List, error){
			func() (*List, error) { return ParseText(bytes.NewReader(b), "t", mt) },
			func() (*List, error) { return ParseSDN(bytes.NewReader(b), "x", mt) },
		} {
			l, err := parse()
			if err == nil && (l == nil || l.AsOf().IsZero()) {
				t.Fatalf("accepted without a date: %v", l)
			}
		}
	})
}

// answering is an ethereum.ContractCaller that answers every eth_call with the same bytes: a node, or an
// oracle address, that returns anything (fault injection).
type answering []byte

func (a answering) CallContract(context.Context, ethereum.CallMsg, *big.Int) ([]byte, error) {
	return a, nil
}

// FuzzOracleAnswer: whatever an oracle returns, Screen never panics, and it lists an address
// only on the canonical ABI true (31 zero bytes, then 1) and passes it only on the canonical
// false; anything else is ErrOracleUnavailable.
func FuzzOracleAnswer(f *testing.F) {
	f.Add(append(make([]byte, 31), 1))
	f.Add(make([]byte, 32))
	f.Add(append(make([]byte, 31), 2))
	f.Add([]byte{})
	f.Add(append(make([]byte, 32), 1))
	f.Fuzz(func(t *testing.T, ret []byte) {
		o, err := NewOracle(OracleOptions{ChainID: 1, Address: common.HexToAddress("0x40C57923924B5c5c5455c48D93317139ADDaC8fb"), Caller: answering(ret)})
		if err != nil {
			t.Fatal(err)
		}
		a := common.HexToAddress("0xbad0000000000000000000000000000000000001")
		listed, _, err := o.Screen(context.Background(), []common.Address{a})
		canonical := len(ret) == 32 && bytes.Equal(ret[:31], make([]byte, 31)) && ret[31] <= 1
		switch {
		case !canonical && !errors.Is(err, ErrOracleUnavailable):
			t.Fatalf("answer %x: err %v, want unavailable", ret, err)
		case canonical && err != nil:
			t.Fatalf("answer %x: %v", ret, err)
		case canonical && (len(listed) == 1) != (ret[31] == 1):
			t.Fatalf("answer %x: listed %v", ret, listed)
		}
	})
}
