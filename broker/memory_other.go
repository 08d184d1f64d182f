//go:build !linux

package broker

// defaultReceiveBuffer is 1 GiB where the machine's memory is not read.
func defaultReceiveBuffer() int64 { return 1 << 30 }
