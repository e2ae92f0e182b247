package facilitator

import (
	"context"
	"math/big"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"

	"github.com/x402gate/x402gate/facilitator/journal"
	"github.com/x402gate/x402gate/internal/testenv"
	"github.com/x402gate/x402gate/x402"
)

// pendingSettle settles a payment on a chain that does not mine on its own: the settle
// answers settlement_pending with the transaction hash. Automine stays off until t ends.
func pendingSettle(t *testing.T, env *testEnv, e *Service) (*x402.Payment, *x402.Requirements, string) {
	t.Helper()
	p, r := env.pay(t, x402.Version2, env.chain.Accounts[1], env.chain.Accounts[2].Address)
	env.chain.SetAutomine(t, false)
	t.Cleanup(func() { env.chain.SetAutomine(t, true) })
	res, err := e.Settle(context.Background(), p, r)
	if err != nil || res.Success || res.ErrorReason != x402.ReasonSettlementPending.V2() || res.Transaction == "" {
		t.Fatalf("settle = %+v, %v; want settlement_pending with a transaction", res, err)
	}
	return p, r, res.Transaction
}

func status(t *testing.T, e *Service, p *x402.Payment, r *x402.Requirements) x402.SettleResponse {
	t.Helper()
	res, err := e.SettlementStatus(context.Background(), p, r)
	if err != nil {
		t.Fatalf("SettlementStatus: %v", err)
	}
	return res
}

// TestSettlementStatusPendingThenConfirmed: a pending settlement is reported pending with
// its transaction until the transaction is mined, then success with that transaction; the
// journal row is closed as confirmed and stays so.
func TestSettlementStatusPendingThenConfirmed(t *testing.T) {
	env := newTestEnv(t)
	cfg := env.config(t)
	cfg.ReceiptTimeout = Duration(300 * time.Millisecond)
	e := env.engine(t, cfg)
	p, r, tx := pendingSettle(t, env, e)

	if res := status(t, e, p, r); res.Success || res.ErrorReason != x402.ReasonSettlementPending.V2() || res.Transaction != tx {
		t.Fatalf("status before mining = %+v; want settlement_pending with %s", res, tx)
	}
	env.chain.Mine(t)
	res := status(t, e, p, r)
	if !res.Success || res.Transaction != tx || res.Payer != p.Authorization.From.Hex() {
		t.Fatalf("status after mining = %+v; want success with %s", res, tx)
	}
	row, err := cfg.Journal.Get(context.Background(), x402.KeyOf(p, r).AuthorizationKey())
	if err != nil || row.State != journal.StateConfirmed {
		t.Fatalf("journal row = %+v, %v; want confirmed", row, err)
	}
	if res := status(t, e, p, r); !res.Success || res.Transaction != tx {
		t.Fatalf("status of the confirmed row = %+v; want success with %s", res, tx)
	}
	// Another payment with the same authorization nonce (another payee) is not this one.
	other := *r
	other.PayTo = env.chain.Accounts[3].Address
	q := *p
	q.Authorization.To = other.PayTo
	if res := status(t, e, &q, &other); res.Success || res.ErrorReason != string(ReasonNoSettlement) {
		t.Fatalf("status of another payment on the same authorization = %+v; want no_settlement", res)
	}
}

// TestSettlementStatusUnknown: a payment never settled has no settlement.
func TestSettlementStatusUnknown(t *testing.T) {
	env := newTestEnv(t)
	e := env.engine(t, env.config(t))
	p, r := env.pay(t, x402.Version1, env.chain.Accounts[1], env.chain.Accounts[2].Address)
	res := status(t, e, p, r)
	if res.Success || res.ErrorReason != string(ReasonNoSettlement) || res.Transaction != "" {
		t.Fatalf("status = %+v; want no_settlement", res)
	}
}

// TestSettlementStatusCancelled: the settlement transaction is dropped from the pool and
// the payer cancels the authorization on chain: the settlement failed, the payee was not
// paid, and the status says so without sending the transaction again.
func TestSettlementStatusCancelled(t *testing.T) {
	env := newTestEnv(t)
	cfg := env.config(t)
	cfg.ReceiptTimeout = Duration(300 * time.Millisecond)
	e := env.engine(t, cfg)
	payee := env.chain.Accounts[2].Address
	before := env.token.BalanceOf(t, payee)
	p, r, tx := pendingSettle(t, env, e)
	cancelAuthorization(t, env, p)

	res := status(t, e, p, r)
	if res.Success || res.ErrorReason != x402.ReasonTransactionFailed.V2() {
		t.Fatalf("status = %+v; want a failure", res)
	}
	row, err := cfg.Journal.Get(context.Background(), x402.KeyOf(p, r).AuthorizationKey())
	if err != nil || row.State != journal.StateFailed || row.Reason != ReconcileSettledElsewhere {
		t.Fatalf("journal row = %+v, %v; want failed %s", row, err, ReconcileSettledElsewhere)
	}
	env.chain.Mine(t)
	if d := new(big.Int).Sub(env.token.BalanceOf(t, payee), before); d.Sign() != 0 {
		t.Errorf("payee received %s, want nothing", d)
	}
	if _, err := env.chain.Client.TransactionReceipt(context.Background(), common.HexToHash(tx)); err == nil {
		t.Errorf("the dropped settlement %s was mined", tx)
	}
}

// cancelAuthorization drops every pending settlement transaction from the node's pool,
// then the payer cancels p's authorization and the block is mined.
func cancelAuthorization(t *testing.T, env *testEnv, p *x402.Payment) {
	t.Helper()
	env.chain.RPC(t, nil, "anvil_dropAllTransactions")
	payer := env.chain.Accounts[1]
	sig := env.token.SignCancelAuthorization(t, payer.Key, payer.Address, p.Authorization.Nonce)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tx, err := env.chain.Send(ctx, payer, &env.token.Address, testenv.CancelAuthorizationVRS(t, payer.Address, p.Authorization.Nonce, sig), 0)
	if err != nil {
		t.Fatalf("send cancelAuthorization: %v", err)
	}
	env.chain.Mine(t)
	rcpt, err := env.chain.WaitReceipt(ctx, tx.Hash())
	if err != nil || rcpt.Status != 1 {
		t.Fatalf("cancelAuthorization receipt = %+v, %v", rcpt, err)
	}
}
