package gate

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/x402gate/x402gate/facilitator"
	"github.com/x402gate/x402gate/facilitator/httpapi"
	"github.com/x402gate/x402gate/internal/testenv"
	"github.com/x402gate/x402gate/x402"
)

// pendingAnswer presents a fresh payment header while the chain does not mine: the
// answer must be 502 settlement_pending with the transaction and a retry token. Automine
// stays off until the caller turns it on (or t ends).
func pendingAnswer(t *testing.T, env *testEnv, url string, version int) (name, value string, p *x402.Payment, first paidAnswer) {
	t.Helper()
	name, value = env.sign(t, version, env.payer, fetchChallenge(t, url), tamper{})
	p, err := x402.DecodePaymentHeader(name, value, env.reg)
	if err != nil {
		t.Fatal(err)
	}
	env.chain.SetAutomine(t, false)
	t.Cleanup(func() { env.chain.SetAutomine(t, true) })
	first = present(t, url, name, value)
	if first.status != http.StatusBadGateway || !isTxHash(first.tx) || !isRetryToken(first.token) {
		t.Fatalf("first: %+v, want 502 with a transaction and a retry token", first)
	}
	return name, value, p, first
}

// cancelOnChain drops the pending settlement from the node's pool and has the payer
// cancel the authorization (cancelAuthorization), mined: the nonce is used, nothing moved.
func cancelOnChain(t *testing.T, env *testEnv, p *x402.Payment) {
	t.Helper()
	env.chain.RPC(t, nil, "anvil_dropAllTransactions")
	sig := env.token.SignCancelAuthorization(t, env.payer.Key, env.payer.Address, p.Authorization.Nonce)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tx, err := env.chain.Send(ctx, env.payer, &env.token.Address, testenv.CancelAuthorizationVRS(t, env.payer.Address, p.Authorization.Nonce, sig), 0)
	if err != nil {
		t.Fatalf("send cancelAuthorization: %v", err)
	}
	env.chain.SetAutomine(t, true)
	env.chain.Mine(t)
	if rc, err := env.chain.WaitReceipt(ctx, tx.Hash()); err != nil || rc.Status != 1 {
		t.Fatalf("cancelAuthorization receipt %+v, %v", rc, err)
	}
}

// TestSettlementPendingCancelledGetsNothing: the settlement is pending, then never lands
// (dropped) and the payer cancels the authorization on chain. The retry with the token is
// refused with 402 and the failure, the upstream never runs, nothing moved, and the credit
// is gone.
func TestSettlementPendingCancelledGetsNothing(t *testing.T) {
	env := newTestEnvWith(t, func(c *facilitator.Config) { c.ReceiptTimeout = facilitator.Duration(time.Second) })
	up := &upstream{}
	srv := serve(t, env.gate(t, env.config(), Options{}), up)
	url := srv.URL + "/r"
	before := env.ledger(t, env.payer.Address)
	name, value, p, first := pendingAnswer(t, env, url, x402.Version2)
	cancelOnChain(t, env, p)

	want := x402.ReasonTransactionFailed.V2()
	if a := presentToken(t, url, name, value, first.token); a.status != http.StatusPaymentRequired || a.err != want {
		t.Errorf("retry after the cancel: %+v, want 402 %s", a, want)
	}
	if a := presentToken(t, url, name, value, first.token); a.status != http.StatusPaymentRequired || a.err != nonceUsed {
		t.Errorf("retry after the refusal: %+v, want 402 %s", a, nonceUsed)
	}
	if n := up.calls.Load(); n != 0 {
		t.Errorf("upstream ran %d times for a cancelled payment", n)
	}
	after := env.ledger(t, env.payer.Address)
	if after.payer.Cmp(before.payer) != 0 || after.payTo.Cmp(before.payTo) != 0 {
		t.Errorf("balances moved: payer %s -> %s, payee %s -> %s", before.payer, after.payer, before.payTo, after.payTo)
	}
}

// TestSettlementPendingThenUpstreamFails: a pending settlement confirmed on the retry is
// the payment's first run: when the upstream then fails, the answer carries a new retry
// token, and the header with it reaches the upstream again, without a second transfer.
func TestSettlementPendingThenUpstreamFails(t *testing.T) {
	env := newTestEnvWith(t, func(c *facilitator.Config) { c.ReceiptTimeout = facilitator.Duration(time.Second) })
	up := &upstream{script: []int{http.StatusServiceUnavailable, http.StatusOK}}
	srv := serve(t, env.gate(t, env.config(), Options{}), up)
	url := srv.URL + "/r"
	before := env.ledger(t, env.payer.Address)
	name, value, _, first := pendingAnswer(t, env, url, x402.Version1)
	env.chain.SetAutomine(t, true)
	env.chain.Mine(t)

	failed := presentToken(t, url, name, value, first.token)
	if failed.status != http.StatusServiceUnavailable || failed.tx != first.tx || !isRetryToken(failed.token) || failed.token == first.token {
		t.Fatalf("resumed run: %+v, want the upstream's 503 with %s and a new token", failed, first.tx)
	}
	if a := presentToken(t, url, name, value, first.token); a.status != http.StatusPaymentRequired {
		t.Errorf("the pending token again: %+v, want 402", a)
	}
	if a := presentToken(t, url, name, value, failed.token); a.status != http.StatusOK || a.tx != first.tx {
		t.Errorf("retry with the new token: %+v, want 200 with %s", a, first.tx)
	}
	if n := up.calls.Load(); n != 2 {
		t.Errorf("upstream ran %d times, want 2", n)
	}
	env.expectMoved(t, env.payer.Address, before, 1)
}

// TestSettlementPendingRemoteFacilitator: a facilitator that cannot report a
// settlement's status (the remote client: the facilitator API has no status route) earns
// no retry token: the 502 stands as before.
func TestSettlementPendingRemoteFacilitator(t *testing.T) {
	env := newTestEnvWith(t, func(c *facilitator.Config) { c.ReceiptTimeout = facilitator.Duration(time.Second) })
	api := httptest.NewServer(httpapi.NewHandler(env.engine, httpapi.HandlerOptions{Registry: env.reg}))
	defer api.Close()
	up := &upstream{}
	srv := serve(t, env.gate(t, env.config(), Options{Facilitator: remote(t, api.URL, "", env.reg)}), up)
	url := srv.URL + "/r"
	name, value := env.sign(t, x402.Version2, env.payer, fetchChallenge(t, url), tamper{})
	env.chain.SetAutomine(t, false)
	t.Cleanup(func() { env.chain.SetAutomine(t, true) })
	a := present(t, url, name, value)
	if a.status != http.StatusBadGateway || a.err != "settlement_pending" || a.token != "" {
		t.Fatalf("answer %+v, want 502 settlement_pending without a retry token", a)
	}
	if up.calls.Load() != 0 {
		t.Error("the upstream ran")
	}
}
