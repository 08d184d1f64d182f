package portmux_test

import (
	"io"
	"net"
	"testing"
	"time"

	"github.com/eventmq/emq/internal/portmux"
)

// Each connection goes to the side its first byte names, with that byte
// still to be read; one that says nothing goes to the other side once
// the wait is over.
func TestSplitByTheFirstByte(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	zl, hl := portmux.Split(ln, 200*time.Millisecond)
	defer zl.Close()
	accepted := func(l net.Listener) <-chan net.Conn {
		ch := make(chan net.Conn, 1)
		go func() {
			c, err := l.Accept()
			if err == nil {
				ch <- c
			}
		}()
		return ch
	}
	dial := func(first []byte) net.Conn {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if first != nil {
			if _, err := c.Write(first); err != nil {
				t.Fatal(err)
			}
		}
		return c
	}
	expect := func(what string, ch <-chan net.Conn, want string) {
		t.Helper()
		select {
		case c := <-ch:
			defer c.Close()
			if want == "" {
				return
			}
			got := make([]byte, len(want))
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			if _, err := io.ReadFull(c, got); err != nil || string(got) != want {
				t.Fatalf("%s: read %q, %v; want %q", what, got, err, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: not handed to its side", what)
		}
	}
	zc := accepted(zl)
	dial([]byte{0xFF, 0, 0, 0, 0, 0, 0, 0, 1, 0x7F})
	expect("a ZMTP greeting", zc, "\xff\x00\x00\x00\x00\x00\x00\x00\x01\x7f")
	hc := accepted(hl)
	dial([]byte("GET / HTTP/1.1\r\n"))
	expect("an HTTP request", hc, "GET / HTTP/1.1\r\n")
	hc = accepted(hl)
	dial([]byte{0x16, 3, 1})
	expect("a TLS handshake", hc, "\x16\x03\x01")
	hc = accepted(hl)
	dial(nil)
	expect("a silent connection", hc, "")
}

// Closing one side closes the port and the other side.
func TestCloseEndsBoth(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	zl, hl := portmux.Split(ln, time.Second)
	done := make(chan error, 1)
	go func() { _, err := hl.Accept(); done <- err }()
	zl.Close()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("Accept on the other side after Close: a connection")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Accept on the other side still waits after Close")
	}
	if _, err := net.Dial("tcp", ln.Addr().String()); err == nil {
		t.Fatal("the port still accepts after Close")
	}
}
