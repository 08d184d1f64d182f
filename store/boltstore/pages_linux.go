package boltstore

import (
	"os"
	"syscall"
	"unsafe"
)

// bbolt maps the journal file read-only (PROT_READ, MAP_SHARED), and every
// page a read touches stays in the process's resident set. Reading a
// backlog larger than memory (replay, then each payload as it is
// dispatched) would fill it with file pages. dropPages and dropMapping tell
// the kernel those pages are not needed any more: they stay in the page
// cache and are faulted in again if touched. On a read-only file mapping
// MADV_DONTNEED changes no data.

var pageSize = uintptr(os.Getpagesize())

// dropPages releases the whole pages that b, a slice of the mapping, lies
// on. Callers hold a read transaction, so the mapping cannot move.
func dropPages(b []byte) {
	if len(b) < 2*int(pageSize) {
		return // not worth a system call
	}
	start := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	dropRange(start, start+uintptr(len(b)))
}

// dropRange releases the whole pages within [start, end).
func dropRange(start, end uintptr) {
	first := (start + pageSize - 1) &^ (pageSize - 1)
	last := end &^ (pageSize - 1)
	if last > first {
		_, _, _ = syscall.Syscall(syscall.SYS_MADVISE, first, last-first, syscall.MADV_DONTNEED)
	}
}
