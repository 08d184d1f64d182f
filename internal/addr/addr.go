// Package addr answers questions about listen addresses that more than
// one package asks.
package addr

import (
	"net"
	"strings"
)

// Loopback reports whether a host:port (or tcp://host:port) only listens
// on loopback: localhost, or a loopback IP.
func Loopback(hostport string) bool {
	host, _, err := net.SplitHostPort(strings.TrimPrefix(hostport, "tcp://"))
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
