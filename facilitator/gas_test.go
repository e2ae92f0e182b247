package facilitator

import (
	"context"
	"math/big"
	"testing"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"

	"github.com/x402gate/x402gate/facilitator/txsender"
	"github.com/x402gate/x402gate/internal/testenv"
	"github.com/x402gate/x402gate/x402"
)

// freshAccount is a new key that has never held anything on the chain.
func freshAccount(t *testing.T) testenv.Account {
	t.Helper()
	key, err := crypto.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	return testenv.Account{Key: key, Address: crypto.PubkeyToAddress(key.PublicKey)}
}

// keptLimit is the gas limit the sender keeps for the token's transferWithAuthorization
// (v,r,s), and whether it keeps one.
func keptLimit(e *Service) (uint64, bool) {
	c := e.order[0]
	return c.sender.(*txsender.Sender).GasLimit(c.net.USDC.Address, [4]byte(c.abi.transferVRS.ID))
}

// settleOK settles p and fails t unless it settled; it returns the transaction's gas limit
// and the gas its receipt used.
func settleOK(t *testing.T, env *testEnv, e *Service, p *x402.Payment, r *x402.Requirements) (limit, used uint64) {
	t.Helper()
	res, err := e.Settle(context.Background(), p, r)
	if err != nil || !res.Success {
		t.Fatalf("settle = %+v, %v", res, err)
	}
	h := common.HexToHash(res.Transaction)
	tx, _, err := env.chain.Client.TransactionByHash(context.Background(), h)
	if err != nil {
		t.Fatalf("transaction %s: %v", h.Hex(), err)
	}
	rcpt, err := env.chain.Client.TransactionReceipt(context.Background(), h)
	if err != nil {
		t.Fatalf("receipt %s: %v", h.Hex(), err)
	}
	return tx.Gas(), rcpt.GasUsed
}

// The first settle estimates the transfer and keeps twice the estimate; the following ones
// are simulated once with that limit and sent with it. The limit kept from the cheapest
// transfer (the payee holds a balance already, the payer keeps one) must carry the costly
// ones on chain: a payee that never held the token (a zero balance slot written), and a
// payer whose balance goes to zero (docs/facilitator.md#gas-limit).
func TestSettleGasLimitKeptFromACheapTransferCarriesTheCostlyOnes(t *testing.T) {
	env := newTestEnv(t)
	e := env.engine(t, env.config(t))
	payer, payee := env.chain.Accounts[1], env.chain.Accounts[2]
	env.token.Mint(t, payee.Address, big.NewInt(1)) // the payee's balance slot is not zero

	if _, ok := keptLimit(e); ok {
		t.Fatal("a limit is kept before any settle")
	}
	p, r := env.pay(t, x402.Version2, payer, payee.Address)
	limit, used := settleOK(t, env, e, p, r)
	kept, ok := keptLimit(e)
	if !ok || kept != limit {
		t.Fatalf("kept limit %d (%v), want the first settlement's limit %d", kept, ok, limit)
	}
	if used > limit/txsender.SimulateHeadroom*12/10 {
		t.Errorf("the first settlement used %d gas of a limit of %d: the estimate it was kept from is off", used, limit)
	}

	emptyPayer := freshAccount(t)
	env.token.Mint(t, emptyPayer.Address, testAmount) // pays its whole balance
	for _, tc := range []struct {
		name         string
		payer, payee testenv.Account
	}{
		{"fresh payee", payer, freshAccount(t)},
		{"payer to zero", emptyPayer, payee},
		{"fresh payee again", payer, freshAccount(t)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, r := env.pay(t, x402.Version2, tc.payer, tc.payee.Address)
			before := env.token.BalanceOf(t, tc.payee.Address)
			limit, used := settleOK(t, env, e, p, r)
			if limit != kept {
				t.Errorf("sent with gas %d, want the kept limit %d", limit, kept)
			}
			if used >= limit {
				t.Errorf("used %d of %d gas", used, limit)
			}
			if d := new(big.Int).Sub(env.token.BalanceOf(t, tc.payee.Address), before); d.Cmp(testAmount) != 0 {
				t.Errorf("payee received %s, want %s", d, testAmount)
			}
		})
	}
}

// A kept limit changes nothing about what the simulation refuses: a transfer the token
// reverts is refused with the token's reason, and nothing is kept from it.
func TestSimulateWithAKeptLimitRefusesWhatTheTokenReverts(t *testing.T) {
	env := newTestEnv(t)
	e := env.engine(t, env.config(t))
	ctx := context.Background()
	payer, payee := env.chain.Accounts[1], env.chain.Accounts[2]
	p, r := env.pay(t, x402.Version2, payer, payee.Address)
	settleOK(t, env, e, p, r)
	kept, ok := keptLimit(e)
	if !ok {
		t.Fatal("no limit kept after a settle")
	}

	// The settled authorization again: its nonce is used on chain.
	c, f := e.checkSigned(ctx, p, r, nil)
	if f != nil {
		t.Fatalf("checkSigned: %+v", f)
	}
	if _, f := e.simulate(ctx, c); f == nil || f.reason != x402.ReasonNonceUsed {
		t.Errorf("simulate of a used authorization = %+v, want %s", f, x402.ReasonNonceUsed)
	}
	// A payer without funds.
	p, r = env.pay(t, x402.Version2, freshAccount(t), payee.Address)
	if c, f = e.checkSigned(ctx, p, r, nil); f != nil {
		t.Fatalf("checkSigned: %+v", f)
	}
	if _, f := e.simulate(ctx, c); f == nil || f.reason != x402.ReasonInsufficientFunds {
		t.Errorf("simulate of an unfunded payer = %+v, want %s", f, x402.ReasonInsufficientFunds)
	}
	if g, _ := keptLimit(e); g != kept {
		t.Errorf("kept limit %d after refusals, want %d unchanged", g, kept)
	}
}

// A kept limit that no longer suffices (the token's code or state changed since) fails the
// one-run simulation; the transfer is then estimated again and settles with the new limit.
func TestSimulateEstimatesAgainWhenTheKeptLimitRunsOut(t *testing.T) {
	env := newTestEnv(t)
	e := env.engine(t, env.config(t))
	payer, payee := env.chain.Accounts[1], env.chain.Accounts[2]
	p, r := env.pay(t, x402.Version2, payer, payee.Address)
	settleOK(t, env, e, p, r)
	kept, _ := keptLimit(e)

	// Stand in for a token upgrade that made the transfer costlier: the kept limit is now
	// too small to run it (a transaction needs 21,000 before any code runs).
	c := e.order[0]
	c.sender.(*txsender.Sender).KeepGasLimit(c.net.USDC.Address, [4]byte(c.abi.transferVRS.ID), 30_000)

	p, r = env.pay(t, x402.Version2, payer, freshAccount(t).Address)
	limit, used := settleOK(t, env, e, p, r)
	if limit <= 30_000 || used >= limit {
		t.Errorf("settled with gas %d (used %d), want a new estimate's limit", limit, used)
	}
	if g, _ := keptLimit(e); g != limit {
		t.Errorf("kept limit %d, want the new estimate's %d (was %d)", g, limit, kept)
	}
}
