//go:build unix

package storebench

import (
	"syscall"
	"time"
)

// processCPU is the CPU time the process has used, all threads (the apply
// goroutine's, Pebble's flushes and compactions, the GC's). On a shared
// machine it varies far less than wall time does.
func processCPU() (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
