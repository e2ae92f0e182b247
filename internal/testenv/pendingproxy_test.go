package testenv

import (
	"context"
	"math/big"
	"strings"
	"testing"

	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/ethclient"
)

// TestPendingProxyRefusesTheSeventeenth: with mining off, one sender's first 16
// transactions are admitted and the 17th is refused with geth's error text; another sender
// still has its own 16 slots, a replacement of a pending nonce takes no new slot, and once
// the pool is mined the sender has its slots back.
func TestPendingProxyRefusesTheSeventeenth(t *testing.T) {
	c := StartAnvil(t)
	p := StartPendingProxy(t, c, GethAccountSlots)
	cl, err := ethclient.Dial(p.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	c.SetAutomine(t, false)
	ctx := context.Background()
	send := func(a Account, nonce uint64, fees int64) error {
		to := a.Address
		tx := types.MustSignNewTx(a.Key, types.LatestSignerForChainID(c.ChainID), &types.DynamicFeeTx{
			ChainID: c.ChainID, Nonce: nonce, GasTipCap: big.NewInt(1e9 * fees), GasFeeCap: big.NewInt(1e11 * fees), Gas: 21000, To: &to,
		})
		return cl.SendTransaction(ctx, tx)
	}
	a, b := c.Accounts[1], c.Accounts[2]
	for n := range uint64(GethAccountSlots) {
		if err := send(a, n, 1); err != nil {
			t.Fatalf("transaction %d of 16 refused: %v", n+1, err)
		}
	}
	if err := send(a, GethAccountSlots, 1); err == nil || !strings.Contains(err.Error(), "account limit exceeded") {
		t.Fatalf("17th transaction: %v, want geth's account limit exceeded", err)
	}
	if err := send(a, 3, 2); err != nil {
		t.Fatalf("a replacement of a pending nonce: %v", err)
	}
	if err := send(b, 0, 1); err != nil {
		t.Fatalf("another sender's first transaction: %v", err)
	}
	if p.Refused() != 1 {
		t.Fatalf("refused %d, want 1", p.Refused())
	}
	c.Mine(t)
	if err := send(a, GethAccountSlots, 1); err != nil {
		t.Fatalf("after the pool was mined: %v", err)
	}
}
