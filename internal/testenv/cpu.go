package testenv

import (
	"syscall"
	"testing"
	"time"
)

// SelfCPU is the CPU time this process has used (user and system); 0 where getrusage fails.
func SelfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// ReportCPU reports this process's CPU time per op since before (a SelfCPU reading) as
// cpu-ns/op, which the load of other processes changes less than the wall-clock ns/op:
//
//	defer testenv.ReportCPU(b, testenv.SelfCPU())
func ReportCPU(b *testing.B, before time.Duration) {
	b.ReportMetric(float64((SelfCPU()-before).Nanoseconds())/float64(b.N), "cpu-ns/op")
}
