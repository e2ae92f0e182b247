package facilitator

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/x402gate/x402gate/facilitator/journal"
	"github.com/x402gate/x402gate/internal/testenv"
	"github.com/x402gate/x402gate/x402"
)

// lyingNode forwards every JSON-RPC call to the real node at target, but answers
// eth_sendRawTransaction with an error reply after forwarding it: the node took the
// transaction, and the reply says otherwise. L2 nodes that forward to a sequencer answer
// this way when the forward times out. It is a fault the real node will not produce on
// demand.
func lyingNode(t *testing.T, target, message string) string {
	return sendErrorNode(t, target, message, true)
}

// refusingNode is lyingNode without the forward: the node never has the transaction, and
// the reply refuses it.
func refusingNode(t *testing.T, target, message string) string {
	return sendErrorNode(t, target, message, false)
}

// sendErrorNode forwards every JSON-RPC call to the node at target and answers
// eth_sendRawTransaction with an error reply carrying message, after forwarding it when
// forward is set.
func sendErrorNode(t *testing.T, target, message string, forward bool) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var call struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
		}
		send := json.Unmarshal(body, &call) == nil && call.Method == "eth_sendRawTransaction"
		var out []byte
		if forward || !send {
			res, err := http.Post(target, "application/json", bytes.NewReader(body))
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadGateway)
				return
			}
			out, _ = io.ReadAll(res.Body)
			_ = res.Body.Close()
		}
		if send {
			out, _ = json.Marshal(map[string]any{"jsonrpc": "2.0", "id": call.ID,
				"error": map[string]any{"code": -32000, "message": message}})
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(out)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestAmbiguousNodeRefusalStaysUncertain: a node's error reply that is not a definite
// refusal (the transaction may have propagated) never marks the journal row failed: the
// settle answers settlement_pending, and reconcile finds the transfer by its receipt and
// confirms the row, so the payer is never charged for a payment recorded as failed.
func TestAmbiguousNodeRefusalStaysUncertain(t *testing.T) {
	for _, message := range []string{
		"request timed out while forwarding to the sequencer",
		"backend error: upstream connect error or disconnect/reset before headers",
	} {
		t.Run(message, func(t *testing.T) {
			env, cfg, e, p, r, payee, before, res := settleThrough(t, func(env *testEnv) string { return lyingNode(t, env.chain.RPCURL, message) })
			if res.Success || x402.ReasonFromWire(res.ErrorReason) != x402.ReasonSettlementPending {
				t.Fatalf("settle = %+v, want settlement_pending: the outcome is unknown", res)
			}
			key := x402.KeyOf(p, r).AuthorizationKey()
			row, err := cfg.Journal.Get(context.Background(), key)
			if err != nil || row.State == journal.StateFailed {
				t.Fatalf("journal row = %+v, %v; want it left for reconcile, not failed", row, err)
			}
			// One reconcile may run before the transfer's receipt is visible (the row then stays
			// prepared, as CI saw once): reconcile again within a bound, as the periodic
			// reconcile does.
			for range 100 {
				if _, err := e.Reconcile(context.Background()); err != nil {
					t.Fatalf("Reconcile: %v", err)
				}
				if row, err = cfg.Journal.Get(context.Background(), key); err != nil || row.State == journal.StateConfirmed {
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
			if err != nil || row.State != journal.StateConfirmed {
				t.Errorf("journal row after reconcile = %+v, %v; want confirmed", row, err)
			}
			if d := new(big.Int).Sub(env.token.BalanceOf(t, payee.Address), before); d.Cmp(testAmount) != 0 {
				t.Errorf("payee received %s, want %s", d, testAmount)
			}
			if n := env.signerNonce(t, env.chain.FacilitatorAccount().Address); n != 1 {
				t.Errorf("signer sent %d transactions, want 1", n)
			}
		})
	}
}

// TestDefiniteNodeRefusalNamesNoTransaction: when the node refuses the settlement
// transaction for certain, nothing was broadcast and no money moved: the row is failed
// (not_broadcast) and the answer names no transaction, so that a gate answers a refusal
// (402) rather than an outcome to reconcile (502 with a retry credit).
func TestDefiniteNodeRefusalNamesNoTransaction(t *testing.T) {
	env, cfg, _, p, r, payee, before, res := settleThrough(t, func(env *testEnv) string {
		return refusingNode(t, env.chain.RPCURL, "insufficient funds for gas * price + value")
	})
	if res.Success || x402.ReasonFromWire(res.ErrorReason) != x402.ReasonUnexpectedSettle || res.Transaction != "" || res.TxHash != "" {
		t.Fatalf("settle = %+v, want unexpected_settle_error naming no transaction", res)
	}
	row, err := cfg.Journal.Get(context.Background(), x402.KeyOf(p, r).AuthorizationKey())
	if err != nil || row.State != journal.StateFailed {
		t.Fatalf("journal row = %+v, %v; want failed", row, err)
	}
	if got := env.token.BalanceOf(t, payee.Address); got.Cmp(before) != 0 {
		t.Errorf("payee balance %s, want %s unchanged", got, before)
	}
}

// settleThrough settles one payment from account 1 to account 2 through an engine whose RPC
// endpoint is rpc(env) (a proxy of the real node), and returns what the tests look at
// after it: the payee's balance before, and the settle's answer.
func settleThrough(t *testing.T, rpc func(*testEnv) string) (env *testEnv, cfg Config, e *Service, p *x402.Payment, r *x402.Requirements, payee testenv.Account, before *big.Int, res x402.SettleResponse) {
	t.Helper()
	env = newTestEnv(t)
	cfg = env.config(t)
	cfg.Networks[0].RPC = rpc(env)
	e = env.engine(t, cfg)
	payee = env.chain.Accounts[2]
	p, r = env.pay(t, x402.Version2, env.chain.Accounts[1], payee.Address)
	before = env.token.BalanceOf(t, payee.Address)
	res, err := e.Settle(context.Background(), p, r)
	if err != nil {
		t.Fatalf("Settle: %v", err)
	}
	return env, cfg, e, p, r, payee, before, res
}
