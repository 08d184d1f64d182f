package zmtp

import (
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/eventmq/emq/internal/testutil"
)

// lines counts the log lines in logs.
func lines(logs *testutil.Buffer) int { return strings.Count(logs.String(), "\n") }

// Connections beyond the limit are closed at once and counted; those
// that never finish their handshake give their place back when it times
// out; a flood of either writes a few log lines, not one each.
func TestConnLimit(t *testing.T) {
	t.Parallel()
	var logs testutil.Buffer
	limit := NewConnLimit(3, 0)
	in := newInbox()
	r, err := Listen("tcp://127.0.0.1:0", Options{Receive: in.receive, Limit: limit, HandshakeTimeout: 300 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	addr := strings.TrimPrefix(r.Endpoint(), "tcp://")
	var silent []net.Conn
	for range 40 { // say nothing: no handshake
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		silent = append(silent, nc)
		t.Cleanup(func() { nc.Close() })
	}
	testutil.Eventually(t, "37 refused", func() bool { return limit.Refused() == 37 })
	if n := limit.Connections(); n != 3 {
		t.Fatalf("%d connections hold a place, want 3", n)
	}
	closed := 0
	for _, nc := range silent { // the refused ones were closed: EOF at once
		nc.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		if _, err := nc.Read(make([]byte, 1)); err == io.EOF {
			closed++
		}
	}
	if closed < 37 {
		t.Fatalf("%d of the refused connections were closed, want 37", closed)
	}
	testutil.Eventually(t, "the silent handshakes timed out", func() bool { return limit.HandshakesFailed() == 3 && limit.Connections() == 0 })
	c := dial(t, r, "legit") // their places are free again
	waitConnected(t, r, "legit")
	if err := c.WriteMsgs(frames("hello")); err != nil {
		t.Fatal(err)
	}
	in.wait(t, "hello")
	if n := lines(&logs); n == 0 || n > 2*logBurst {
		t.Fatalf("40 refused or failed connections wrote %d log lines, want a few:\n%s", n, logs.String())
	}
}

// One address may hold at most PerIP places.
func TestConnLimitPerIP(t *testing.T) {
	t.Parallel()
	limit := NewConnLimit(0, 2)
	r := listen(t, newInbox(), Options{Limit: limit})
	for range 5 {
		nc, err := net.Dial("tcp", strings.TrimPrefix(r.Endpoint(), "tcp://"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nc.Close() })
	}
	testutil.Eventually(t, "3 refused", func() bool { return limit.Refused() == 3 })
	if n := limit.Connections(); n != 2 {
		t.Fatalf("%d connections from one address, want 2", n)
	}
}
