//go:build !unix

package storebench

import "time"

func processCPU() (time.Duration, bool) { return 0, false }
