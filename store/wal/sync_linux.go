package wal

import (
	"os"
	"syscall"
)

// fdatasync flushes f's data and what is needed to read it back, not its
// times: a segment is zero-filled to its size first, so no metadata
// changes.
func fdatasync(f *os.File) error { return syscall.Fdatasync(int(f.Fd())) }

// preallocate gives f size bytes of allocated blocks that read as zeros
// (fallocate); where the file system cannot, zeros are written.
func preallocate(f *os.File, size int64) error {
	for {
		err := syscall.Fallocate(int(f.Fd()), 0, 0, size)
		switch err {
		case nil:
			return nil
		case syscall.EINTR:
			continue
		case syscall.EOPNOTSUPP, syscall.ENOSYS:
			return writeZeros(f, size)
		}
		return err
	}
}
