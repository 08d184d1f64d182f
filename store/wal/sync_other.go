//go:build !linux

package wal

import "os"

// fdatasync is fsync where there is no fdatasync.
func fdatasync(f *os.File) error { return f.Sync() }

// preallocate writes size zeros: there is no fallocate here.
func preallocate(f *os.File, size int64) error { return writeZeros(f, size) }
