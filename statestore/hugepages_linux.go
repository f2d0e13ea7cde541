package statestore

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// hugePageSize is the transparent huge page size of x86-64 and arm64 with
// 4 KiB base pages.
const hugePageSize = 2 << 20

// adviseHugePages asks the kernel to back the 2 MiB-aligned interior of s
// with transparent huge pages. Why: the hot index is a table of tens of
// MiB probed at random, one probe per chain block. With 4 KiB pages nearly
// every probe also misses the TLB and pays a page walk; with 2 MiB pages
// the whole table needs a handful of TLB entries. The memory stays on the
// Go heap (the slice holds no pointers, the GC never scans it); the advice
// is only a hint, so a kernel with THP off (or "never") simply ignores it,
// and errors are dropped for the same reason.
//
// It must run before the pages are first touched: Go hands out fresh
// large spans untouched, and a fault in an advised range then maps a huge
// page directly (defrag "madvise", the common default).
func adviseHugePages[T any](s []T) {
	if len(s) == 0 {
		return
	}
	size := uintptr(len(s)) * unsafe.Sizeof(s[0])
	if size < 2*hugePageSize {
		return
	}
	start := uintptr(unsafe.Pointer(&s[0]))
	lo := (start + hugePageSize - 1) &^ (hugePageSize - 1)
	hi := (start + size) &^ (hugePageSize - 1)
	if hi <= lo {
		return
	}
	b := unsafe.Slice((*byte)(unsafe.Add(unsafe.Pointer(&s[0]), lo-start)), hi-lo)
	_ = unix.Madvise(b, unix.MADV_HUGEPAGE)
}
