package broker

import "syscall"

// defaultReceiveBuffer is an eighth of the machine's memory, at least
// 256 MiB: the default Options.MaxReceiveBuffer.
func defaultReceiveBuffer() int64 {
	var si syscall.Sysinfo_t
	if err := syscall.Sysinfo(&si); err != nil {
		return 1 << 30
	}
	return max(int64(si.Totalram)*int64(si.Unit)/8, 256<<20)
}
