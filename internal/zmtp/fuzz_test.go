package zmtp

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"testing"
)

// FuzzReadMsg feeds arbitrary bytes to the frame reader (after the
// handshake) and to the handshake guard: neither may panic, allocate past
// the limit, or return a frame over it.
func FuzzReadMsg(f *testing.F) {
	f.Add([]byte{0, 2, 'h', 'i'})
	f.Add([]byte{1, 0, 0, 5, 'h', 'e', 'l', 'l', 'o'})
	f.Add(binary.BigEndian.AppendUint64([]byte{flagLong}, 1<<50))
	f.Add(append([]byte{flagCommand, 8, 4}, "PING\x00\x0aab"...))
	f.Add([]byte{flagCommand, 0})
	f.Add(append([]byte{flagCommand | flagLong, 0, 0, 0, 0, 0, 0, 1, 0, 255}, bytes.Repeat([]byte("n"), 255)...)) // a name of 255 bytes
	const max = 1024
	f.Fuzz(func(t *testing.T, data []byte) {
		local, remote := net.Pipe()
		defer local.Close()
		go io.Copy(io.Discard, remote) // PONGs
		defer remote.Close()
		c := &Conn{nc: local, r: bufio.NewReader(bytes.NewReader(data)), max: max}
		for range 100 {
			frames, err := c.ReadMsg()
			if err != nil {
				var tl *TooLargeError
				if errors.As(err, &tl) && tl.Size <= max {
					t.Fatalf("refused a frame of %d bytes under the limit", tl.Size)
				}
				break
			}
			for _, fr := range frames {
				if len(fr) > max {
					t.Fatalf("frame of %d bytes over the limit", len(fr))
				}
			}
		}
		g := &guardConn{max: max, greet: greetingLen}
		_ = g.scan(data)
	})
}
