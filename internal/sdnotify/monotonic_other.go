//go:build !linux

package sdnotify

// monotonicUsec has no systemd to serve off Linux.
func monotonicUsec() (int64, bool) { return 0, false }
