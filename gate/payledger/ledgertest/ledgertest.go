// Package ledgertest is the conformance test of gate/payledger's stores: the in-process
// one, Redis (gate/redisretry) and the journal's database (facilitator/journal) run the
// same transitions and must answer alike (docs/gate.md#payment-ledger).
package ledgertest

import (
	"context"
	"crypto/sha256"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/x402gate/x402gate/gate/payledger"
)

func sum(s string) []byte { h := sha256.Sum256([]byte(s)); return h[:] }

// claim is a claim on payment key by owner, with a lease of a minute.
func claim(key, owner string) payledger.Claim {
	return payledger.Claim{Key: key, Fingerprint: sum("fp " + key), Binding: sum("GET /r"), Owner: owner,
		Lease: time.Minute, TTL: time.Hour}
}

// short is the lease of a holder that dies: long enough for its own next step on any
// store, short for a test.
const short = 300 * time.Millisecond

// lapse waits until a short lease, taken before, has run out.
func lapse() { time.Sleep(short + 200*time.Millisecond) }

func begin(t *testing.T, l payledger.Ledger, c payledger.Claim, want payledger.Status) payledger.Entry {
	t.Helper()
	e, err := l.Begin(context.Background(), c)
	if err != nil || e.Status != want {
		t.Fatalf("Begin(%s by %s): status %d, %v; want %d", c.Key, c.Owner, e.Status, err, want)
	}
	return e
}

// ended returns a check that End, with no credits to grant, reached the ledger.
func ended(t *testing.T, what string) func(bool, error) {
	return func(_ bool, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
}

// must returns a check that a transition named what was done.
func must(t *testing.T, what string) func(bool, error) {
	return func(done bool, err error) {
		t.Helper()
		if !done || err != nil {
			t.Fatalf("%s: %v %v, want done", what, done, err)
		}
	}
}

// Conformance runs the ledger's transitions on a and b, two handles of one ledger (two
// instances), each in its own subtest; every store must pass it alike.
func Conformance(t *testing.T, a, b payledger.Ledger) {
	ctx := context.Background()
	token := sum("token")
	t.Run("a first run, a failure, retries against the credits, one good answer", func(t *testing.T) {
		begin(t, a, claim("k1", "o1"), payledger.New)
		begin(t, b, claim("k1", "o2"), payledger.Busy)
		must(t, "settle")(a.Settle(ctx, "k1", "o1", []byte("s")))
		granted, err := a.End(ctx, "k1", "o1", payledger.Fail, token, 2, time.Hour)
		must(t, "fail and grant")(granted, err)
		begin(t, b, claim("k1", "o3"), payledger.Refused) // no token, no id: a stranger
		c := claim("k1", "o3")
		c.Token = sum("wrong")
		begin(t, b, c, payledger.Refused)
		c.Token = token
		if e := begin(t, b, c, payledger.Retry); string(e.Data) != "s" {
			t.Errorf("retry data %q", e.Data)
		}
		c.Owner = "o4"
		begin(t, a, c, payledger.Busy)
		if granted, _ := b.End(ctx, "k1", "o3", payledger.Fail, sum("other"), 2, time.Hour); granted {
			t.Error("a failed retry was granted new credits")
		}
		begin(t, a, c, payledger.Retry)
		ended(t, "end the last retry")(a.End(ctx, "k1", "o4", payledger.Release, nil, 0, 0))
		c.Owner = "o5"
		begin(t, b, c, payledger.Spent) // the two credits are used up
	})
	t.Run("only the owner renews, settles, ends or forgets its lease", func(t *testing.T) {
		c := claim("k2", "late")
		c.Lease = short
		begin(t, a, c, payledger.New)
		lapse()
		begin(t, b, claim("k2", "next"), payledger.Resume)
		for what, f := range map[string]func() (bool, error){
			"renew":  func() (bool, error) { return a.Renew(ctx, "k2", "late", time.Minute) },
			"settle": func() (bool, error) { return a.Settle(ctx, "k2", "late", []byte("x")) },
			"end":    func() (bool, error) { return a.End(ctx, "k2", "late", payledger.Answer, nil, 0, 0) },
			"forget": func() (bool, error) { return a.Forget(ctx, "k2", "late") },
			"pend":   func() (bool, error) { return a.Pend(ctx, "k2", "late", token, []byte("x")) },
		} {
			if done, err := f(); done || err != nil {
				t.Errorf("%s by the lapsed owner: %v %v, want nothing", what, done, err)
			}
		}
		begin(t, a, claim("k2", "third"), payledger.Busy) // the next owner's lease stands
		must(t, "renew by its owner")(b.Renew(ctx, "k2", "next", time.Minute))
		must(t, "forget by its owner")(b.Forget(ctx, "k2", "next"))
		begin(t, a, claim("k2", "fourth"), payledger.New)
	})
	t.Run("a settled payment whose run was lost is served once, to any presenter", func(t *testing.T) {
		c := claim("k3", "dead")
		c.Lease = short
		begin(t, a, c, payledger.New)
		must(t, "settle")(a.Settle(ctx, "k3", "dead", []byte("s")))
		lapse()
		if e := begin(t, b, claim("k3", "alive"), payledger.Serve); string(e.Data) != "s" {
			t.Errorf("served data %q", e.Data)
		}
		ended(t, "answer")(b.End(ctx, "k3", "alive", payledger.Answer, nil, 0, 0))
		begin(t, a, claim("k3", "replay"), payledger.Spent)
	})
	t.Run("fingerprint, binding and payment ids", func(t *testing.T) {
		c := claim("k4", "o1")
		c.ID = "id:X"
		begin(t, a, c, payledger.New)
		other := claim("k4", "o2")
		other.Fingerprint = sum("another signature")
		begin(t, b, other, payledger.Conflict)
		other = claim("k4", "o2")
		other.Binding = sum("POST /r")
		begin(t, b, other, payledger.Mismatch)
		another := claim("k5", "o3")
		another.ID = "id:X"
		begin(t, b, another, payledger.Conflict) // the id names k4's payment
		must(t, "settle")(a.Settle(ctx, "k4", "o1", []byte("s")))
		granted, err := a.End(ctx, "k4", "o1", payledger.Fail, token, 3, time.Hour)
		must(t, "grant")(granted, err)
		y := claim("k4", "o4")
		y.ID = "id:Y"
		begin(t, b, y, payledger.Refused) // a new id without the token
		x := claim("k4", "o5")
		x.ID = "id:X"
		if e := begin(t, b, x, payledger.Retry); !e.KnownID {
			t.Error("id X is not known to its payment")
		}
		ended(t, "answer")(b.End(ctx, "k4", "o5", payledger.Answer, nil, 0, 0))
		y.Token = token
		if e := begin(t, a, y, payledger.Spent); e.KnownID || string(e.Data) != "s" {
			t.Errorf("id Y with the token after the good answer: %+v", e)
		}
		x.Owner = "o6"
		if e := begin(t, a, x, payledger.Spent); !e.KnownID {
			t.Error("id X after the good answer is not known")
		}
	})
	t.Run("a pending settlement is redeemed with its token", func(t *testing.T) {
		begin(t, a, claim("k6", "o1"), payledger.New)
		must(t, "pend")(a.Pend(ctx, "k6", "o1", token, []byte("p")))
		begin(t, b, claim("k6", "o2"), payledger.Refused)
		c := claim("k6", "o3")
		c.Token = token
		if e := begin(t, b, c, payledger.Redeem); string(e.Data) != "p" {
			t.Errorf("pending data %q", e.Data)
		}
		ended(t, "still pending")(b.End(ctx, "k6", "o3", payledger.Release, nil, 0, 0))
		c.Owner = "o4"
		begin(t, a, c, payledger.Redeem)
		must(t, "confirmed")(a.Settle(ctx, "k6", "o4", []byte("s")))
		granted, err := a.End(ctx, "k6", "o4", payledger.Fail, sum("new token"), 1, time.Hour)
		must(t, "the first run failed")(granted, err)
		begin(t, b, c, payledger.Refused) // the pending token was replaced
	})
	t.Run("credits lapse", func(t *testing.T) {
		begin(t, a, claim("k7", "o1"), payledger.New)
		must(t, "settle")(a.Settle(ctx, "k7", "o1", []byte("s")))
		granted, err := a.End(ctx, "k7", "o1", payledger.Fail, token, 3, time.Millisecond)
		must(t, "grant")(granted, err)
		lapse()
		c := claim("k7", "o2")
		c.Token = token
		begin(t, b, c, payledger.Spent)
	})
}

// race begins n claims at once, made by mk, alternating a and b, and counts the claims that
// took a new record and those answered other.
func race(t *testing.T, a, b payledger.Ledger, n int, mk func(i int) payledger.Claim, other payledger.Status) (taken, others int32) {
	pair := [2]payledger.Ledger{a, b}
	var nNew, nOther atomic.Int32
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e, err := pair[i%2].Begin(context.Background(), mk(i))
			switch {
			case err != nil:
				t.Error(err)
			case e.Status == payledger.New:
				nNew.Add(1)
			case e.Status == other:
				nOther.Add(1)
			}
		}()
	}
	wg.Wait()
	return nNew.Load(), nOther.Load()
}

// OneLease: 40 attempts of one payment, across a and b, begin at once: exactly one takes
// the lease.
func OneLease(t *testing.T, a, b payledger.Ledger) {
	taken, busy := race(t, a, b, 40, func(i int) payledger.Claim { return claim("race", fmt.Sprint("o", i)) }, payledger.Busy)
	if taken != 1 || busy != 39 {
		t.Errorf("%d leases taken, %d busy; want 1 and 39", taken, busy)
	}
}

// OneIDOnePayment: 20 different payments claimed at once under one payment id, across a
// and b: the id names exactly one of them, and every other claim is a conflict.
func OneIDOnePayment(t *testing.T, a, b payledger.Ledger) {
	taken, conflict := race(t, a, b, 20, func(i int) payledger.Claim {
		c := claim(fmt.Sprint("idrace-", i), fmt.Sprint("o", i))
		c.ID = "id:shared"
		return c
	}, payledger.Conflict)
	if taken != 1 || conflict != 19 {
		t.Errorf("%d payments took the id, %d conflicts; want 1 and 19", taken, conflict)
	}
}

// Run runs Conformance, OneLease and OneIDOnePayment on each pair of handles of one
// ledger, by name.
func Run[L payledger.Ledger](t *testing.T, pairs map[string][2]L) {
	for name, pair := range pairs {
		t.Run(name+"/conformance", func(t *testing.T) { Conformance(t, pair[0], pair[1]) })
		t.Run(name+"/one lease", func(t *testing.T) { OneLease(t, pair[0], pair[1]) })
		t.Run(name+"/one id, one payment", func(t *testing.T) { OneIDOnePayment(t, pair[0], pair[1]) })
	}
}
