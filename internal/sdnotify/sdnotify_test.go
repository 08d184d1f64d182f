package sdnotify

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/eventmq/emq/internal/testutil"
)

// socket is a NOTIFY_SOCKET the test listens on, as systemd does.
type socket struct {
	t    *testing.T
	name string
	conn *net.UnixConn
}

// listen listens on the unixgram socket name ('@': an abstract one)
// until the test ends, and points NOTIFY_SOCKET at it.
func listen(t *testing.T, name string) *socket {
	t.Helper()
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	t.Setenv("NOTIFY_SOCKET", name)
	return &socket{t: t, name: name, conn: conn}
}

// next is the next notification's lines.
func (s *socket) next() []string {
	s.t.Helper()
	s.conn.SetReadDeadline(time.Now().Add(testutil.Wait))
	buf := make([]byte, 4096)
	n, err := s.conn.Read(buf)
	if err != nil {
		s.t.Fatalf("no notification on %s: %v", s.name, err)
	}
	msg := string(buf[:n])
	if !strings.HasSuffix(msg, "\n") {
		s.t.Errorf("notification %q does not end its last line", msg)
	}
	return strings.Split(strings.TrimSuffix(msg, "\n"), "\n")
}

// expect fails the test unless the next notification is want.
func (s *socket) expect(want ...string) {
	s.t.Helper()
	if got := s.next(); !slices.Equal(got, want) {
		s.t.Fatalf("notification %q, want %q", got, want)
	}
}

// silent fails the test if a notification came and was not taken: it
// sends itself one and sees it come next (a socket's datagrams queue in
// order).
func (s *socket) silent() {
	s.t.Helper()
	conn, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: s.name, Net: "unixgram"})
	if err != nil {
		s.t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("TEST_LAST=1\n")); err != nil {
		s.t.Fatal(err)
	}
	if got := s.next(); !slices.Equal(got, []string{"TEST_LAST=1"}) {
		s.t.Fatalf("notification %q, want none", got)
	}
}

func discard() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// READY=1 is said once, with the status; later statuses come alone, and
// nothing comes after STOPPING=1.
func TestReadyStatusStopping(t *testing.T) {
	sock := listen(t, filepath.Join(t.TempDir(), "notify"))
	n := New(discard())
	n.Ready("serving")
	sock.expect("READY=1", "STATUS=serving")
	n.Ready("leader")
	sock.expect("STATUS=leader")
	n.Stopping("draining")
	sock.expect("STOPPING=1", "STATUS=draining")
	n.Ready("leader again")
	sock.silent()
}

// A reload is RELOADING=1 with the monotonic clock, then READY=1 with
// the status before it or the one the reload gives; before READY=1 and
// after STOPPING=1 the reload runs and nothing is said.
func TestReload(t *testing.T) {
	sock := listen(t, filepath.Join(t.TempDir(), "notify"))
	n := New(discard())
	ran := 0
	do := func(status string) func() string {
		return func() string { ran++; return status }
	}
	n.Reload("reloading", do(""))
	sock.silent()

	n.Ready("serving")
	sock.expect("READY=1", "STATUS=serving")
	n.Reload("reloading", do(""))
	reloading := sock.next()
	if !slices.Equal(reloading[:2], []string{"RELOADING=1", "STATUS=reloading"}) {
		t.Fatalf("a reload began with %q, want RELOADING=1 and its status", reloading)
	}
	if runtime.GOOS == "linux" {
		usec, ok := strings.CutPrefix(reloading[len(reloading)-1], "MONOTONIC_USEC=")
		if n, err := strconv.ParseInt(usec, 10, 64); !ok || err != nil || n <= 0 {
			t.Errorf("RELOADING=1 came with %q, want MONOTONIC_USEC= the monotonic clock in microseconds", reloading)
		}
	}
	sock.expect("READY=1", "STATUS=serving")
	n.Reload("reloading", do("the old credentials stay"))
	sock.next()
	sock.expect("READY=1", "STATUS=the old credentials stay")

	n.Stopping("draining")
	sock.next()
	n.Reload("reloading", do(""))
	sock.silent()
	if ran != 4 {
		t.Errorf("the reload ran %d times of 4", ran)
	}
}

// The socket may be an abstract one ('@'); no NOTIFY_SOCKET, or one of
// another kind, sends nothing.
func TestAbstractSocket(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("abstract unix socket names are Linux's")
	}
	sock := listen(t, fmt.Sprintf("@emq-sdnotify-test-%d-%d", os.Getpid(), time.Now().UnixNano()))
	New(discard()).Ready("here")
	sock.expect("READY=1", "STATUS=here")
	for _, env := range []string{"", "vsock:2:1234"} {
		t.Setenv("NOTIFY_SOCKET", env)
		if n := New(discard()); n.addr != nil {
			t.Errorf("NOTIFY_SOCKET=%q: a notifier to %v, want none", env, n.addr)
		}
	}
}

// A socket nobody listens on is logged once, not at every watchdog
// ping, and its recovery once.
func TestFailureLoggedOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "notify")
	var out bytes.Buffer
	t.Setenv("NOTIFY_SOCKET", path)
	n := New(slog.New(slog.NewTextHandler(&out, nil)))
	for range 5 {
		n.send("WATCHDOG=1")
	}
	if got := strings.Count(out.String(), "systemd was not told"); got != 1 {
		t.Fatalf("%d warnings for 5 failed messages, want 1:\n%s", got, out.String())
	}
	sock := listen(t, path)
	n.Ready("back")
	n.Ready("back")
	sock.expect("READY=1", "STATUS=back")
	sock.expect("STATUS=back")
	if got := strings.Count(out.String(), "systemd is told again"); got != 1 {
		t.Errorf("%d recovery lines, want 1:\n%s", got, out.String())
	}
}

// The watchdog pings every half of WATCHDOG_USEC, and not at all when
// WATCHDOG_PID names another process.
func TestWatchdogEvery(t *testing.T) {
	for _, c := range []struct {
		usec, pid string
		want      time.Duration
	}{
		{"", "", 0},
		{"200000", "", 100 * time.Millisecond},
		{"200000", strconv.Itoa(os.Getpid()), 100 * time.Millisecond},
		{"200000", strconv.Itoa(os.Getpid() + 1), 0},
		{"nonsense", "", 0},
	} {
		t.Setenv("WATCHDOG_USEC", c.usec)
		t.Setenv("WATCHDOG_PID", c.pid)
		if got := watchdogEvery(); got != c.want {
			t.Errorf("WATCHDOG_USEC=%q WATCHDOG_PID=%q: every %v, want %v", c.usec, c.pid, got, c.want)
		}
	}
}

// Watchdog pings until its context ends; without WATCHDOG_USEC it
// returns at once.
func TestWatchdogPings(t *testing.T) {
	sock := listen(t, filepath.Join(t.TempDir(), "notify"))
	t.Setenv("WATCHDOG_PID", "")
	t.Setenv("WATCHDOG_USEC", "")
	returned := make(chan struct{})
	go func() { New(discard()).Watchdog(context.Background()); close(returned) }()
	testutil.Recv(t, returned, "Watchdog's return without WATCHDOG_USEC")

	t.Setenv("WATCHDOG_USEC", "20000")
	ctx, cancel := context.WithCancel(context.Background())
	returned = make(chan struct{})
	go func() { New(discard()).Watchdog(ctx); close(returned) }()
	for range 3 {
		sock.expect("WATCHDOG=1")
	}
	cancel()
	testutil.Recv(t, returned, "Watchdog's return when its context ends")
}
