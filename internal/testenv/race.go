package testenv

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
)

// Race runs f n times concurrently, released together, and counts the nil results; a
// result matching want is a loss, any other error fails t.
func Race(t testing.TB, n int, want error, f func(i int) error) (wins int) {
	t.Helper()
	var (
		wg     sync.WaitGroup
		start  = make(chan struct{})
		won    atomic.Int64
		mu     sync.Mutex
		others []error
	)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			<-start
			err := f(i)
			switch {
			case err == nil:
				won.Add(1)
			case errors.Is(err, want):
			default:
				mu.Lock()
				others = append(others, err)
				mu.Unlock()
			}
		}(i)
	}
	close(start)
	wg.Wait()
	if len(others) > 0 {
		t.Fatalf("%d unexpected errors, first: %v", len(others), others[0])
	}
	return int(won.Load())
}
