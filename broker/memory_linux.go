package broker

import (
	"math"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
)

// defaultReceiveBuffer is an eighth of the memory this process may use,
// at least 256 MiB: the default Options.MaxReceiveBuffer.
func defaultReceiveBuffer() int64 {
	return max(memoryLimit()/8, 256<<20)
}

// memoryLimit is the least of the machine's memory, the control group's
// limit (a container's: cgroup v2, else v1) and GOMEMLIMIT.
func memoryLimit() int64 {
	limit := int64(8 << 30) // when the machine's memory cannot be read
	var si syscall.Sysinfo_t
	if syscall.Sysinfo(&si) == nil {
		limit = int64(si.Totalram) * int64(si.Unit)
	}
	for _, f := range []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"} {
		if text, err := os.ReadFile(f); err == nil {
			if n, ok := cgroupLimit(string(text)); ok {
				limit = min(limit, n)
			}
			break
		}
	}
	if n := debug.SetMemoryLimit(-1); n != math.MaxInt64 {
		limit = min(limit, n)
	}
	return limit
}

// cgroupLimit reads a control group's memory limit file: a byte count,
// or "max" (cgroup v1 says no limit with a huge count).
func cgroupLimit(text string) (int64, bool) {
	n, err := strconv.ParseInt(strings.TrimSpace(text), 10, 64)
	if err != nil || n <= 0 || n >= 1<<60 {
		return 0, false
	}
	return n, true
}
