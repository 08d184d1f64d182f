//go:build !linux

package group

import "time"

// uptime is the monotonic clock's time since the process started: never
// stepped; whether it counts a suspended machine's sleep depends on the
// system.
func uptime() time.Duration { return time.Since(processStart) }

var processStart = time.Now()
