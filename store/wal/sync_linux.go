package wal

import (
	"os"
	"syscall"
)

// fdatasync flushes f's data and what is needed to read it back, not its
// times: a segment is zero-filled to its size first, so no metadata
// changes.
func fdatasync(f *os.File) error { return syscall.Fdatasync(int(f.Fd())) }
