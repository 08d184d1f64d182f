//go:build !linux

package main

// monotonicUsec has no systemd to serve off Linux.
func monotonicUsec() (int64, bool) { return 0, false }
