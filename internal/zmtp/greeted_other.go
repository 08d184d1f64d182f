//go:build !unix

package zmtp

import (
	"context"
	"net"
	"time"
)

// greeted is not checked here: the first connection made is kept.
func greeted(context.Context, net.Conn, time.Duration) error { return nil }
