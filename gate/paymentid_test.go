package gate

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/x402gate/x402gate/gate/payledger"
	"github.com/x402gate/x402gate/gate/redisretry"
	"github.com/x402gate/x402gate/internal/testenv"
	"github.com/x402gate/x402gate/x402"
)

// withID is the extensions of a payment that carries id, as @x402/extensions'
// appendPaymentIdentifierToExtensions writes it into the echoed declaration.
func withID(c challengeOf, id string) map[string]any {
	decl := c.v2.Extensions[PaymentIdentifierExtension].(map[string]any)
	info := map[string]any{}
	for k, v := range decl["info"].(map[string]any) {
		info[k] = v
	}
	info["id"] = id
	return map[string]any{PaymentIdentifierExtension: map[string]any{"info": info, "schema": decl["schema"]}}
}

func TestPaymentIdentifier(t *testing.T) {
	v := newTestEnv(t)
	cfg := v.config()
	cfg.PaymentID = PaymentIDRequired
	up := &upstream{script: []int{http.StatusServiceUnavailable}} // the first upstream call fails
	srv := serve(t, v.gate(t, cfg, Options{}), up)
	url := srv.URL + "/data"
	c := fetchChallenge(t, url)
	decl, ok := c.v2.Extensions[PaymentIdentifierExtension].(map[string]any)
	if !ok || decl["info"].(map[string]any)["required"] != true {
		t.Fatalf("the 402 declares %v, want payment-identifier required", c.v2.Extensions)
	}
	payer := v.chain.Accounts[4]

	status := func(name, value string) (int, string) {
		res := get(t, url, name, value)
		body := readBody(t, res)
		if res.StatusCode == http.StatusOK {
			return res.StatusCode, ""
		}
		return res.StatusCode, errorOf(t, body)
	}

	t.Run("a v2 payment without an id is refused 400 on a route that requires one", func(t *testing.T) {
		l := v.ledger(t, payer.Address)
		name, value := signOffer(t, v.token, x402.Version2, payer, c, 0, nil)
		if s, reason := status(name, value); s != http.StatusBadRequest || reason != string(ReasonPaymentIDRequired) {
			t.Errorf("got %d %s, want 400 %s", s, reason, ReasonPaymentIDRequired)
		}
		name, value = signOffer(t, v.token, x402.Version1, payer, c, 0, nil)
		if s, reason := status(name, value); s != http.StatusBadRequest || reason != string(ReasonPaymentIDRequired) {
			t.Errorf("v1 (no extensions): got %d %s, want 400 %s", s, reason, ReasonPaymentIDRequired)
		}
		v.expectMoved(t, payer.Address, l, 0)
	})
	t.Run("an id that is too short or has other characters is refused 400", func(t *testing.T) {
		for _, id := range []string{"short", "pay_" + "ab!cdefghijklmnopq", string(make([]byte, 129))} {
			name, value := signOffer(t, v.token, x402.Version2, payer, c, 0, withID(c, id))
			if s, reason := status(name, value); s != http.StatusBadRequest || reason != "invalid_payload" {
				t.Errorf("id %q: got %d %s, want 400 invalid_payload", id, s, reason)
			}
		}
	})
	t.Run("the same id and payload: served again without a charge until one good answer, then 409", func(t *testing.T) {
		l := v.ledger(t, payer.Address)
		name, value := signOffer(t, v.token, x402.Version2, payer, c, 0, withID(c, "pay_same_payload_0001"))
		if s, _ := status(name, value); s != http.StatusServiceUnavailable {
			t.Fatalf("first attempt: status %d, want the upstream's 503", s)
		}
		if s, reason := status(name, value); s != http.StatusOK {
			t.Fatalf("repeat after the failed upstream: %d %s, want 200", s, reason)
		}
		if s, reason := status(name, value); s != http.StatusConflict || reason != string(ReasonPaymentIDUsed) {
			t.Errorf("repeat after the good answer: %d %s, want 409 %s", s, reason, ReasonPaymentIDUsed)
		}
		v.expectMoved(t, payer.Address, l, 1)
		if up.calls.Load() != 2 {
			t.Errorf("the upstream ran %d times, want 2", up.calls.Load())
		}
	})
	t.Run("the same id with another payload is a conflict, 409, and charges nothing", func(t *testing.T) {
		id := "pay_conflict_000000001"
		name, value := signOffer(t, v.token, x402.Version2, payer, c, 0, withID(c, id))
		if s, reason := status(name, value); s != http.StatusOK {
			t.Fatalf("first: %d %s", s, reason)
		}
		l := v.ledger(t, payer.Address)
		name, value = signOffer(t, v.token, x402.Version2, payer, c, 0, withID(c, id))
		if s, reason := status(name, value); s != http.StatusConflict || reason != string(ReasonPaymentIDConflict) {
			t.Errorf("another payload: %d %s, want 409 %s", s, reason, ReasonPaymentIDConflict)
		}
		v.expectMoved(t, payer.Address, l, 0)
	})
	t.Run("20 concurrent repeats of one id and payload: one charge, one good answer", func(t *testing.T) {
		l := v.ledger(t, payer.Address)
		calls := up.calls.Load()
		name, value := signOffer(t, v.token, x402.Version2, payer, c, 0, withID(c, "pay_concurrent_000001"))
		refused := errors.New("409")
		wins := testenv.Race(t, 20, refused, func(int) error {
			res := get(t, url, name, value)
			body := readBody(t, res)
			switch res.StatusCode {
			case http.StatusOK:
				return nil
			case http.StatusConflict:
				return refused
			}
			return fmt.Errorf("status %d %s", res.StatusCode, body)
		})
		if wins != 1 {
			t.Errorf("%d good answers, want 1", wins)
		}
		v.expectMoved(t, payer.Address, l, 1)
		if got := up.calls.Load() - calls; got != 1 {
			t.Errorf("the upstream ran %d times, want 1", got)
		}
	})
}

// TestPaymentIdentifierAcrossInstances: two gates on one Redis (gate/redisretry) are two
// instances of a fleet. Twenty concurrent repeats of one id and payload, sent to either,
// make one charge and one good answer; then the id is spent on both, and another payload
// under it is a conflict on both.
func TestPaymentIdentifierAcrossInstances(t *testing.T) {
	v := newTestEnv(t)
	rs, err := redisretry.Open(context.Background(), testenv.StartRedis(t), "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rs.Close() })
	cfg := v.config()
	cfg.PaymentID = PaymentIDOptional
	up := &upstream{}
	var urls []string
	// Behind one load balancer both instances see the same public URL.
	public := MiddlewareOptions{Resource: func(*http.Request) string { return "https://api.example/data" }}
	for range 2 {
		g := v.gate(t, cfg, Options{Ledger: rs})
		srv := httptest.NewServer(g.Middleware(public)(up))
		t.Cleanup(srv.Close)
		urls = append(urls, srv.URL+"/data")
	}
	c := fetchChallenge(t, urls[0])
	payer := v.chain.Accounts[5]
	l := v.ledger(t, payer.Address)
	name, value := signOffer(t, v.token, x402.Version2, payer, c, 0, withID(c, "pay_fleet_00000000001"))
	refused := errors.New("409")
	wins := testenv.Race(t, 20, refused, func(i int) error {
		res := get(t, urls[i%2], name, value)
		body := readBody(t, res)
		switch res.StatusCode {
		case http.StatusOK:
			return nil
		case http.StatusConflict:
			return refused
		}
		return fmt.Errorf("status %d %s", res.StatusCode, body)
	})
	if wins != 1 {
		t.Errorf("%d good answers across the two instances, want 1", wins)
	}
	v.expectMoved(t, payer.Address, l, 1)
	for i, u := range urls {
		res := get(t, u, name, value)
		if body := readBody(t, res); res.StatusCode != http.StatusConflict || errorOf(t, body) != string(ReasonPaymentIDUsed) {
			t.Errorf("instance %d after the good answer: %d %s, want 409 %s", i, res.StatusCode, body, ReasonPaymentIDUsed)
		}
	}
	name, value = signOffer(t, v.token, x402.Version2, payer, c, 0, withID(c, "pay_fleet_00000000001"))
	for i, u := range urls {
		res := get(t, u, name, value)
		if body := readBody(t, res); res.StatusCode != http.StatusConflict || errorOf(t, body) != string(ReasonPaymentIDConflict) {
			t.Errorf("instance %d, another payload: %d %s, want 409 %s", i, res.StatusCode, body, ReasonPaymentIDConflict)
		}
	}
	v.expectMoved(t, payer.Address, l, 1)
	if up.calls.Load() != 1 {
		t.Errorf("the upstream ran %d times, want 1", up.calls.Load())
	}
}

// crashedLedger is the ledger of an instance that dies between a settle and its answer:
// Begin goes through (with a lease that has run out by the next request, as the dead
// holder's lease does in time), and nothing after it reaches the ledger.
type crashedLedger struct{ Ledger }

func (c crashedLedger) Begin(ctx context.Context, cl payledger.Claim) (payledger.Entry, error) {
	cl.Lease = time.Millisecond
	return c.Ledger.Begin(ctx, cl)
}
func (crashedLedger) Renew(context.Context, string, string, time.Duration) (bool, error) {
	return true, nil
}
func (crashedLedger) Settle(context.Context, string, string, []byte) (bool, error) { return true, nil }
func (crashedLedger) End(context.Context, string, string, int, []byte, int, time.Duration) (bool, error) {
	return false, nil
}

// TestPaymentIdentifierRedeemsAnAnswerLostInACrash: instance A settles a payment carrying
// an id and dies before its answer (nothing after Begin reaches the shared Redis). The same
// payment and id sent to instance B is refused by the facilitator as already settled; B
// finds the id begun without a settlement, the journal confirms this payment's settlement,
// and B serves the answer that was lost, once: the repeat after it is 409 used. A fresh id
// on the same settled payment is refused (402): only the id the payment was first sent
// under can redeem it (docs/gate.md#payment-identifier).
func TestPaymentIdentifierRedeemsAnAnswerLostInACrash(t *testing.T) {
	v := newTestEnv(t)
	rs, err := redisretry.Open(context.Background(), testenv.StartRedis(t), "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rs.Close() })
	cfg := v.config()
	cfg.PaymentID = PaymentIDOptional
	up := &upstream{}
	public := MiddlewareOptions{Resource: func(*http.Request) string { return "https://api.example/data" }}
	var urls []string
	for _, l := range []Ledger{crashedLedger{rs}, rs} {
		g := v.gate(t, cfg, Options{Ledger: l})
		srv := httptest.NewServer(g.Middleware(public)(up))
		t.Cleanup(srv.Close)
		urls = append(urls, srv.URL+"/data")
	}
	c := fetchChallenge(t, urls[0])
	payer := v.chain.Accounts[6]
	l := v.ledger(t, payer.Address)
	name, value := signOffer(t, v.token, x402.Version2, payer, c, 0, withID(c, "pay_lost_answer_000001"))
	if res := get(t, urls[0], name, value); res.StatusCode != http.StatusOK {
		t.Fatalf("instance A: %d %s", res.StatusCode, readBody(t, res))
	}
	// A's answer is lost with A. The payer sends the same payment and id to B.
	time.Sleep(50 * time.Millisecond) // past the 1 ms lease the dead A held
	res := get(t, urls[1], name, value)
	if body := readBody(t, res); res.StatusCode != http.StatusOK {
		t.Fatalf("instance B, the same payment and id after A died: %d %s, want 200", res.StatusCode, body)
	}
	if res.Header.Get("PAYMENT-RESPONSE") == "" {
		t.Error("B's answer carries no PAYMENT-RESPONSE")
	}
	res = get(t, urls[1], name, value)
	if body := readBody(t, res); res.StatusCode != http.StatusConflict || errorOf(t, body) != string(ReasonPaymentIDUsed) {
		t.Errorf("the repeat after B's answer: %d %s, want 409 %s", res.StatusCode, body, ReasonPaymentIDUsed)
	}
	// The same signed payment under a fresh id: never begun before, so not redeemable.
	raw, err := base64.StdEncoding.DecodeString(value)
	if err != nil {
		t.Fatal(err)
	}
	fresh := base64.StdEncoding.EncodeToString(bytes.Replace(raw, []byte("pay_lost_answer_000001"), []byte("pay_lost_answer_000002"), 1))
	res = get(t, urls[1], name, fresh)
	if body := readBody(t, res); res.StatusCode != http.StatusPaymentRequired {
		t.Errorf("the settled payment under a fresh id: %d %s, want 402", res.StatusCode, body)
	}
	v.expectMoved(t, payer.Address, l, 1)
	if up.calls.Load() != 2 {
		t.Errorf("the upstream ran %d times, want 2 (A's lost answer and B's)", up.calls.Load())
	}
}
