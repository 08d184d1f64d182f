package zmtp

import (
	"bytes"
	"errors"
	"io"
	"net"
	"testing"
	"time"
)

// FuzzHandshakeServer gives a CURVE or PLAIN server (by the first byte)
// arbitrary bytes after a well-formed greeting: it may refuse them, never
// panic, admit nobody it should not, or hang past its deadline.
func FuzzHandshakeServer(f *testing.F) {
	f.Add([]byte{0})
	f.Add(append([]byte{0, flagCommand, 200, 5}, "HELLO"...))
	f.Add(append([]byte{1, flagCommand, 12, 5}, "HELLO\x03ann\x02pw"...))
	f.Add(append([]byte{1, flagCommand | flagLong, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, "HELLO"...))
	long := append([]byte{1, flagCommand | flagLong, 0, 0, 0, 0, 0, 0, 1, 8, 5}, "HELLO"...)
	f.Add(append(append(long, 255), bytes.Repeat([]byte("u"), 258)...)) // a user of 255 bytes
	f.Add(append(append([]byte{0, flagCommand | flagLong, 0, 0, 0, 0, 0, 0, 1, 7, 5}, "ERROR"...), append([]byte{255}, bytes.Repeat([]byte("r"), 255)...)...))
	_, secret, _ := NewKeyPair()
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		f.Fatal(err)
	}
	defer ln.Close()
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) == 0 {
			return
		}
		mechanism := Curve
		if data[0]&1 == 1 {
			mechanism = Plain
		}
		ss := &ServerSecurity{Curve: &secret, Plain: true, Admit: func(a *Auth, password string) error {
			if a.Mechanism == Plain && a.Name == "ann" && password == "pw" {
				return nil
			}
			return errors.New("no")
		}}
		// A TCP pair: the peer writes its bytes, then half-closes, so
		// the server reads to their end and stops at once, while its own
		// writes (greeting, WELCOME) still go through.
		peer, err := net.DialTCP("tcp", nil, ln.Addr().(*net.TCPAddr))
		if err != nil {
			t.Fatal(err)
		}
		server, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			g := greeting(mechanism, false)
			_, _ = peer.Write(append(g[:], data[1:]...))
			_ = peer.CloseWrite()
			_, _ = io.Copy(io.Discard, peer) // the server's answers
		}()
		c, err := secureOpen(server, "ROUTER", nil, ss, nil, 1024, time.Second, 4096)
		server.Close()
		peer.Close()
		if err == nil && (c.Auth == nil || c.Auth.Name != "ann") {
			t.Fatalf("admitted %+v from arbitrary bytes", c.Auth)
		}
	})
}

// FuzzMeta: metadata is read without panic, and what appendMeta writes
// reads back.
func FuzzMeta(f *testing.F) {
	f.Add([]byte{}, "Socket-Type", "DEALER")
	f.Add([]byte{5, 'a', 'b', 'c', 'd', 'e', 0, 0, 0, 9}, "Identity", "")
	f.Fuzz(func(t *testing.T, data []byte, name, value string) {
		_, _ = parseMeta(data)
		if len(name) > 255 {
			return
		}
		m, err := parseMeta(appendMeta(nil, name, value))
		if err != nil || m[name] != value {
			t.Fatalf("round trip of %q=%q: %v %v", name, value, m, err)
		}
	})
}

// FuzzCurveMessage: a MESSAGE is opened without panic; arbitrary bytes
// never open; a sealed frame opens to itself once, and not twice.
func FuzzCurveMessage(f *testing.F) {
	f.Add([]byte("\x07MESSAGE\x00\x00\x00\x00\x00\x00\x00\x02"), []byte("hello"), byte(1))
	f.Fuzz(func(t *testing.T, msg, body []byte, flags byte) {
		var shared [32]byte
		shared[0] = 7
		rx := &curveCodec{shared: shared, recvPrefix: nonceToServer}
		if _, _, err := rx.open(msg, make([]byte, len(msg))); err == nil {
			t.Fatal("arbitrary bytes opened")
		}
		tx := &curveCodec{shared: shared, sendPrefix: nonceToServer, sendNonce: 1}
		frame := tx.seal(nil, flags&3, body)
		hdr := 2
		if frame[0]&flagLong != 0 {
			hdr = 9
		}
		got, out, err := rx.open(frame[hdr:], make([]byte, len(frame)))
		if err != nil || !bytes.Equal(out, body) || (got&flagMore != 0) != (flags&1 != 0) || (got&flagCommand != 0) != (flags&2 != 0) {
			t.Fatalf("round trip: %v %q %#x", err, out, got)
		}
		if _, _, err := rx.open(frame[hdr:], make([]byte, len(frame))); err == nil {
			t.Fatal("a replayed MESSAGE opened")
		}
	})
}
