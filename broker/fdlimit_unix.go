//go:build unix

package broker

import "syscall"

// defaultMaxConnections is three quarters of the process's file
// descriptor limit (what the rest leaves for the journal, the admin API
// and the process itself), at least 64.
func defaultMaxConnections() int {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil || l.Cur > 1<<30 { // unknown, or unlimited
		return 100000
	}
	return max(64, int(l.Cur)*3/4)
}
