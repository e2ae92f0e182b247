package sanctions_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/ethclient"

	"github.com/x402gate/x402gate/internal/testenv"
	"github.com/x402gate/x402gate/verdictserver/engine/sanctions"
)

var (
	bad   = common.HexToAddress("0xbad0000000000000000000000000000000000001")
	bad2  = common.HexToAddress("0xbad0000000000000000000000000000000000002")
	clean = common.HexToAddress("0xc1ea000000000000000000000000000000000001")
)

// TestOracleScreens asks our isSanctioned oracle on anvil: listed addresses are found, the
// answers are cached for the TTL (a removal on chain is seen after it), and every failure,
// a node that went away or an address without the oracle's code, fails closed.
func TestOracleScreens(t *testing.T) {
	chain := testenv.StartAnvil(t)
	or := chain.DeploySanctionsOracle(t)
	or.Add(t, bad, bad2)
	if !or.IsSanctioned(t, bad) || or.IsSanctioned(t, clean) {
		t.Fatal("the test oracle does not answer as set")
	}
	clk := testenv.NewClock(time.Date(2026, 11, 20, 12, 0, 0, 0, time.UTC))
	cc := &testenv.CountingCaller{Caller: chain.Client}
	o, err := sanctions.NewOracle(sanctions.OracleOptions{ChainID: chain.ChainID.Int64(), Address: or.Address, Caller: cc, TTL: time.Minute, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	if o.Name() != "sanctions-oracle:84532:"+or.Address.Hex() {
		t.Errorf("name %q", o.Name())
	}

	listed, asOf, err := o.Screen(context.Background(), []common.Address{clean, bad, bad2})
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(listed, func(a, b common.Address) int { return strings.Compare(a.Hex(), b.Hex()) })
	if !slices.Equal(listed, []common.Address{bad, bad2}) || !asOf.Equal(clk.Now()) {
		t.Errorf("listed %v as of %s, want both bad addresses now", listed, asOf)
	}
	if cc.Calls() != 3 {
		t.Errorf("%d eth_calls, want 3", cc.Calls())
	}

	or.Remove(t, bad)
	clk.Add(30 * time.Second)
	listed, asOf, err = o.Screen(context.Background(), []common.Address{bad})
	if err != nil || !slices.Equal(listed, []common.Address{bad}) || !asOf.Equal(clk.Now().Add(-30*time.Second)) {
		t.Errorf("within the TTL: %v %s %v, want the cached answer", listed, asOf, err)
	}
	if cc.Calls() != 3 {
		t.Errorf("within the TTL the oracle was asked again")
	}
	clk.Add(31 * time.Second)
	if listed, _, err = o.Screen(context.Background(), []common.Address{bad}); err != nil || len(listed) != 0 {
		t.Errorf("past the TTL: %v %v, want the removal seen", listed, err)
	}

	chain.Stop()
	clk.Add(2 * time.Minute)
	if _, _, err = o.Screen(context.Background(), []common.Address{clean}); !errors.Is(err, sanctions.ErrOracleUnavailable) {
		t.Errorf("node gone: %v, want ErrOracleUnavailable", err)
	}
}

func TestOracleFailsClosed(t *testing.T) {
	chain := testenv.StartAnvil(t)
	hung, err := ethclient.Dial(testenv.HungRPC(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(hung.Close)
	token := chain.DeployToken(t, "T", "1") // code, but no isSanctioned
	for _, tc := range []struct {
		name   string
		addr   common.Address
		caller ethereum.ContractCaller
		want   string
	}{
		{"an address without code", common.HexToAddress("0x000000000000000000000000000000000000c0de"), chain.Client, "no answer"},
		{"a contract without isSanctioned", token.Address, chain.Client, "reverted"},
		{"a node that never answers", common.HexToAddress("0x000000000000000000000000000000000000c0de"), hung, "timed out"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// the hung node has to outlast the deadline; anvil must answer within it, even on
			// a loaded machine (a 100 ms deadline timed out on anvil at load 12)
			deadline := 30 * time.Second
			if tc.caller == hung {
				deadline = 100 * time.Millisecond
			}
			o, err := sanctions.NewOracle(sanctions.OracleOptions{ChainID: 84532, Address: tc.addr, Caller: tc.caller, Deadline: deadline})
			if err != nil {
				t.Fatal(err)
			}
			listed, _, err := o.Screen(context.Background(), []common.Address{clean, bad})
			if !errors.Is(err, sanctions.ErrOracleUnavailable) || !strings.Contains(err.Error(), tc.want) || listed != nil {
				t.Fatalf("listed %v, err %v; want ErrOracleUnavailable saying %q", listed, err, tc.want)
			}
		})
	}
}

func TestNewOracleRefusesBadOptions(t *testing.T) {
	c := &testenv.CountingCaller{}
	for _, tc := range []struct {
		name string
		o    sanctions.OracleOptions
		want string
	}{
		{"no chain", sanctions.OracleOptions{Address: bad, Caller: c}, "chain id must be positive"},
		{"zero address", sanctions.OracleOptions{ChainID: 1, Caller: c}, "zero address"},
		{"no rpc", sanctions.OracleOptions{ChainID: 1, Address: bad}, "no rpc for chain 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := sanctions.NewOracle(tc.o); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want %q", err, tc.want)
			}
		})
	}
}
