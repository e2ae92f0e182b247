package facilitator

import (
	"context"
	"errors"
	"math/big"
	"testing"
	"time"
)

// waitQueued waits until n settles wait in p's queue.
func waitQueued(t *testing.T, p *pool, n int) {
	t.Helper()
	for i := 0; ; i++ {
		p.mu.Lock()
		got := len(p.waiting)
		p.mu.Unlock()
		if got == n {
			return
		}
		if i == 10_000 {
			t.Fatalf("%d settles wait for a lane, want %d", got, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestPoolServesWaitersInOrder: settles that wait for a full lane get its slots in the
// order they came, each slot handed on as the one before releases it, so none waits
// behind later ones (at 64 concurrent settles on one key, waking every waiter at once
// let some wait for seconds).
func TestPoolServesWaitersInOrder(t *testing.T) {
	ln := &lane{}
	p := &pool{lanes: []*lane{ln}, max: 1}
	first, err := p.acquire(context.Background(), nil)
	if err != nil || first != ln {
		t.Fatalf("acquire = %v, %v", first, err)
	}
	const waiters = 8
	order := make(chan int, waiters)
	for i := range waiters {
		go func() {
			got, err := p.acquire(context.Background(), nil)
			if err != nil {
				t.Errorf("waiter %d: %v", i, err)
				order <- -1
				return
			}
			order <- i
			p.release(got, nil)
		}()
		waitQueued(t, p, i+1)
	}
	p.release(first, nil)
	for want := range waiters {
		if got := <-order; got != want {
			t.Fatalf("waiter %d took the lane in turn %d", got, want)
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if ln.pending != 0 || len(p.waiting) != 0 {
		t.Fatalf("after every release: %d in flight, %d waiting; want 0, 0", ln.pending, len(p.waiting))
	}
}

// TestPoolWaiterThatGivesUpLeavesItsPlace: a settle whose caller goes away while it waits
// leaves the queue; the slot goes to the next in line, and no slot is lost.
func TestPoolWaiterThatGivesUpLeavesItsPlace(t *testing.T) {
	ln := &lane{}
	p := &pool{lanes: []*lane{ln}, max: 1}
	held, _ := p.acquire(context.Background(), nil)
	ctx, cancel := context.WithCancel(context.Background())
	gone := make(chan error, 1)
	go func() {
		_, err := p.acquire(ctx, nil)
		gone <- err
	}()
	waitQueued(t, p, 1)
	next := make(chan *lane, 1)
	go func() {
		got, err := p.acquire(context.Background(), nil)
		if err != nil {
			t.Error(err)
		}
		next <- got
	}()
	waitQueued(t, p, 2)
	cancel()
	if err := <-gone; !errors.Is(err, context.Canceled) {
		t.Fatalf("the settle that gave up: %v, want context.Canceled", err)
	}
	waitQueued(t, p, 1)
	p.release(held, nil)
	if got := <-next; got != ln {
		t.Fatalf("the next in line got %v", got)
	}
	p.release(ln, nil)
	p.mu.Lock()
	defer p.mu.Unlock()
	if ln.pending != 0 {
		t.Fatalf("%d in flight after every release, want 0", ln.pending)
	}
}

// TestPoolWaitersFailWhenTheirLaneLeavesThePool: a settle waiting for the only lane it
// may take fails with ErrRelayerInsufficientFunds when that lane's balance falls under
// the minimum, instead of waiting for a slot it can never get.
func TestPoolWaitersFailWhenTheirLaneLeavesThePool(t *testing.T) {
	ln := &lane{balance: big.NewInt(1000)}
	p := &pool{lanes: []*lane{ln}, max: 1, min: big.NewInt(100)}
	if _, err := p.acquire(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	failed := make(chan error, 1)
	go func() {
		_, err := p.acquire(context.Background(), ln)
		failed <- err
	}()
	waitQueued(t, p, 1)
	p.setBalance(ln, big.NewInt(10))
	if err := <-failed; !errors.Is(err, ErrRelayerInsufficientFunds) {
		t.Fatalf("waiting settle: %v, want ErrRelayerInsufficientFunds", err)
	}
}
