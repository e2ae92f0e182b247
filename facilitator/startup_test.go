package facilitator

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/x402gate/x402gate/x402"
)

// TestOpenContactsNoChainAndRefusesUntilReady: Open makes an engine whose network is not
// ready, without a request to its endpoint; a payment on it is refused with
// chain_unavailable and nothing is sent. Start brings it up in the background, and then the
// same payment verifies; Start's goroutines end with its context.
func TestOpenContactsNoChainAndRefusesUntilReady(t *testing.T) {
	env := newTestEnv(t)
	e, err := Open(env.config(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	caip2 := env.net.CAIP2
	if n := e.order[0].Requests(); n != 0 || e.Ready(caip2) || e.NetworkState(caip2) != NetworkStarting {
		t.Fatalf("after Open: %d requests, ready %v, state %q; want none, false, starting", n, e.Ready(caip2), e.NetworkState(caip2))
	}
	payer, payee := env.chain.Accounts[1], env.chain.Accounts[2]
	p, r := env.pay(t, x402.Version2, payer, payee.Address)
	got, err := e.Verify(context.Background(), x402.VerifyInput{Payment: p, Requirements: r})
	if err != nil || got.IsValid || got.InvalidReason != x402.ReasonChainUnavailable.For(x402.Version2) || !strings.Contains(got.InvalidMessage, "not ready (starting)") {
		t.Fatalf("verify before ready = %+v, %v; want chain_unavailable, not ready (starting)", got, err)
	}
	nonce := env.signerNonce(t, env.chain.FacilitatorAccount().Address)
	res, err := e.Settle(context.Background(), p, r)
	if err != nil || res.Success || res.Transaction != "" || env.signerNonce(t, env.chain.FacilitatorAccount().Address) != nonce {
		t.Fatalf("settle before ready = %+v, %v; want a refusal and nothing sent", res, err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	wait := e.Start(ctx, func(id string) { ready <- id })
	select {
	case id := <-ready:
		if id != caip2 || !e.Ready(caip2) {
			t.Fatalf("onReady(%q), Ready %v", id, e.Ready(caip2))
		}
	case <-time.After(time.Minute):
		t.Fatalf("the network is not ready: %q", e.NetworkState(caip2))
	}
	cancel()
	wait()
	if got, err := e.Verify(context.Background(), x402.VerifyInput{Payment: p, Requirements: r}); err != nil || !got.IsValid {
		t.Fatalf("verify once ready = %+v, %v", got, err)
	}
}

// TestStartKeepsAWrongChainUnavailable: an endpoint of another chain leaves the network
// wrong_chain_id; Start keeps trying until its context ends, and the wait returns then.
func TestStartKeepsAWrongChainUnavailable(t *testing.T) {
	env := newTestEnv(t)
	cfg := env.config(t)
	cfg.Networks[0].Name, cfg.Networks[0].ChainID = x402.Base.Name, 8453
	e, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	ctx, cancel := context.WithCancel(context.Background())
	wait := e.Start(ctx, func(string) { t.Error("a wrong chain became ready") })
	for deadline := time.Now().Add(time.Minute); e.NetworkState("eip155:8453") != NetworkWrongChain; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("state %q, want %q", e.NetworkState("eip155:8453"), NetworkWrongChain)
		}
	}
	if _, err := e.CheckChainIDs(context.Background()); err == nil || !strings.Contains(err.Error(), "eip155:8453") {
		t.Errorf("CheckChainIDs = %v, want an error naming eip155:8453", err)
	}
	cancel()
	wait()
	if e.Ready("eip155:8453") {
		t.Error("the wrong chain is ready")
	}
}
