//go:build !unix

package broker

func defaultMaxConnections() int { return 10000 }
