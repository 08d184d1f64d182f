//go:build unix

package zmtp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"time"
)

// greeted waits up to timeout (or ctx's end) for nc's first byte, and
// leaves it unread (MSG_PEEK): the handshake reads it as it comes.
func greeted(ctx context.Context, nc net.Conn, timeout time.Duration) error {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return err
	}
	stop := context.AfterFunc(ctx, func() { nc.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()
	nc.SetReadDeadline(time.Now().Add(timeout))
	defer nc.SetReadDeadline(time.Time{})
	var peekErr error
	buf := make([]byte, 1)
	err = rc.Read(func(fd uintptr) bool {
		n, _, e := syscall.Recvfrom(int(fd), buf, syscall.MSG_PEEK)
		switch {
		case errors.Is(e, syscall.EAGAIN) || errors.Is(e, syscall.EINTR):
			return false // wait until readable
		case e != nil:
			peekErr = e
		case n == 0:
			peekErr = io.EOF
		}
		return true
	})
	if err == nil {
		err = peekErr
	}
	if err == nil && ctx.Err() != nil {
		err = ctx.Err()
	}
	if err != nil {
		return fmt.Errorf("%s: no greeting from the server: %w", nc.RemoteAddr(), err)
	}
	return nil
}
