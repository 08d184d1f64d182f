//go:build !linux

package boltstore

// dropPages does nothing where MADV_DONTNEED is not used (see
// pages_linux.go).
func dropPages([]byte) {}

func dropRange(start, end uintptr) {}
