package group

import (
	"time"

	"golang.org/x/sys/unix"
)

// uptime is CLOCK_BOOTTIME: it counts the time a suspended machine slept
// (a laptop lid, a VM suspended to disk), as etcd's lease timers on the
// other machines do, and nobody steps it (NTP, an operator), so that
// neither is taken for, or hides, a pause of this broker.
func uptime() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		return time.Since(processStart) // not on Linux before 2.6.39
	}
	return time.Duration(ts.Nano())
}

var processStart = time.Now()
