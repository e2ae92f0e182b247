package txsender

import (
	"testing"
	"time"
)

// TestReceiptPollSchedule: after the first receipt poll misses (the node accepted the
// transaction but has not mined it yet), the next comes within half a millisecond (anvil
// has the receipt a fraction of a millisecond after it answered), not a block time later,
// and the schedule still backs off: the interval doubles up to receiptPollMax, and the
// first second costs the node at most a dozen polls.
func TestReceiptPollSchedule(t *testing.T) {
	if receiptPollMin > 500*time.Microsecond {
		t.Fatalf("the poll after a miss waits %v, want at most 0.5ms", receiptPollMin)
	}
	polls, at, delay := 1, time.Duration(0), receiptPollMin
	for at+delay <= time.Second {
		at += delay
		polls++
		next := nextReceiptPoll(delay)
		if next > receiptPollMax || (next != 2*delay && next != receiptPollMax) {
			t.Fatalf("after %v the interval is %v, want double up to %v", delay, next, receiptPollMax)
		}
		delay = next
	}
	if polls > 12 {
		t.Errorf("%d receipt polls in the first second, want at most 12", polls)
	}
}
