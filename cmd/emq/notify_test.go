package main

import (
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	bt "github.com/eventmq/emq/internal/brokertest"
	"github.com/eventmq/emq/internal/etcdtest"
)

// `emq broker` under a NOTIFY_SOCKET, as systemd runs a Type=notify
// unit: READY=1 comes once it serves (its /readyz says so and a REQUEST
// is ACKed at that moment), WATCHDOG=1 every half of WATCHDOG_USEC,
// RELOADING=1 then READY=1 around SIGHUP's reload, STOPPING=1 at SIGTERM.
func TestNotifySystemd(t *testing.T) {
	t.Parallel()
	sock := listenNotify(t, filepath.Join(t.TempDir(), "notify"))
	frontend := bt.FreeEndpoint(t)
	bp := startNotifiedBroker(t, sock, "--frontend", frontend, "--backend", bt.FreeEndpoint(t),
		"--data-dir", t.TempDir(), "--publisher-incoming", "", "--publisher-outgoing", "")

	ready := sock.next(t)
	if ready[0] != "READY=1" {
		t.Fatalf("the first notification is %q, want READY=1\n%s", ready, bp.logs.String())
	}
	if code := bp.readyz(); code != http.StatusOK {
		t.Fatalf("READY=1 came while /readyz answered %d", code)
	}
	bt.Dial(t, frontend, "c").Request("q", "", []byte("at READY=1")) // fails unless ACKed
	if want := "STATUS=serving: clients on " + frontend; !hasPrefix(ready, want) {
		t.Errorf("READY=1 came with %q, want a line starting %q", ready, want)
	}

	pings := sock.pings.Load()
	bt.Eventually(t, "three WATCHDOG=1 more", func() bool { return sock.pings.Load() >= pings+3 })

	bp.cmd.Process.Signal(syscall.SIGHUP)
	reloading := sock.next(t)
	if reloading[0] != "RELOADING=1" {
		t.Fatalf("after SIGHUP: %q, want RELOADING=1", reloading)
	}
	if usec := lineValue(reloading, "MONOTONIC_USEC="); !isPositive(usec) {
		t.Errorf("RELOADING=1 came with MONOTONIC_USEC=%q, want the monotonic clock in microseconds", usec)
	}
	if again := sock.next(t); again[0] != "READY=1" || !hasPrefix(again, "STATUS=serving") {
		t.Fatalf("after RELOADING=1: %q, want READY=1 and the serving status", again)
	}

	bp.cmd.Process.Signal(syscall.SIGTERM)
	if stopping := sock.next(t); stopping[0] != "STOPPING=1" {
		t.Fatalf("after SIGTERM: %q, want STOPPING=1", stopping)
	}
	select {
	case err := <-bp.exited:
		bp.exited <- err // for the cleanup
		if err != nil {
			t.Fatalf("emq broker exited with %v\n%s", err, bp.logs.String())
		}
	case <-time.After(bt.Wait):
		t.Fatalf("emq broker still running %v after SIGTERM\n%s", bt.Wait, bp.logs.String())
	}
}

// A broker that cannot serve (its frontend's port is taken) never says
// READY=1: it exits with the error, and systemd's start fails.
func TestNotifyNotReadyWhenItCannotServe(t *testing.T) {
	t.Parallel()
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	sock := listenNotify(t, filepath.Join(t.TempDir(), "notify"))
	bp := startNotifiedBroker(t, sock, "--frontend", "tcp://"+taken.Addr().String(), "--backend", bt.FreeEndpoint(t),
		"--data-dir", t.TempDir(), "--publisher-incoming", "", "--publisher-outgoing", "")
	select {
	case err := <-bp.exited:
		bp.exited <- err // for the cleanup
		if err == nil {
			t.Fatalf("emq broker exited with status 0 on a taken port\n%s", bp.logs.String())
		}
	case <-time.After(bt.Wait):
		t.Fatalf("emq broker still running %v on a taken port\n%s", bt.Wait, bp.logs.String())
	}
	if got := sock.rest(t); len(got) > 0 {
		t.Errorf("a broker that never served said %q", got)
	}
}

// A group's brokers are ready once in the group, leader or standby, and
// their STATUS= follows their role: the standby says it leads once the
// leader has stopped, which says STOPPING=1.
func TestNotifyGroup(t *testing.T) {
	t.Parallel()
	etcd := etcdtest.Start(t, 1)
	notified := func(name string) (*groupBroker, *notifySocket) {
		sock := listenNotify(t, filepath.Join(t.TempDir(), "notify"))
		g := &groupBroker{t: t, name: name, frontend: bt.FreeEndpoint(t), backend: bt.FreeEndpoint(t),
			admin: strings.TrimPrefix(bt.FreeEndpoint(t), "tcp://"), command: exec.Command,
			env: []string{"NOTIFY_SOCKET=" + sock.path}}
		g.setArgs(etcd.Endpoints())
		g.start()
		t.Cleanup(g.kill)
		if ready := sock.next(t); ready[0] != "READY=1" || !hasPrefix(ready, "STATUS=") {
			t.Fatalf("%s's first notification: %q, want READY=1 with a STATUS=\n%s", name, ready, g.log())
		}
		return g, sock
	}
	a, sa := notified("a")
	sa.waitStatus(t, "STATUS=leader of the group, as a")
	leaderOf(t, a)
	b, sb := notified("b")
	sb.waitStatus(t, "STATUS=standby in the group, as b; the leader is a")

	if err := a.stop(); err != nil {
		t.Fatalf("a's exit after SIGTERM: %v\n%s", err, a.log())
	}
	if stopping := sa.next(t); stopping[0] != "STOPPING=1" {
		t.Fatalf("a after SIGTERM: %q, want STOPPING=1", stopping)
	}
	sb.waitStatus(t, "STATUS=leader of the group, as b")
	leaderOf(t, b)
}

// notifySocket is a NOTIFY_SOCKET the test listens on, as systemd does.
type notifySocket struct {
	path  string
	msgs  chan []string // each notification's lines, but WATCHDOG=1
	pings atomic.Int64  // WATCHDOG=1 notifications
	seen  [][]string    // what next and waitStatus took from msgs
}

// listenNotify listens on the unixgram socket path ('@': an abstract
// one) until the test ends.
func listenNotify(t *testing.T, path string) *notifySocket {
	t.Helper()
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	s := &notifySocket{path: path, msgs: make(chan []string, 100)}
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		buf := make([]byte, 4096)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				return
			}
			lines := strings.Split(strings.TrimSuffix(string(buf[:n]), "\n"), "\n")
			if slices.Equal(lines, []string{"WATCHDOG=1"}) {
				s.pings.Add(1)
				continue
			}
			select {
			case s.msgs <- lines:
			case <-stop:
				return
			}
		}
	}()
	t.Cleanup(func() {
		close(stop)
		conn.Close()
		<-stopped
	})
	return s
}

// next is the next notification but a watchdog ping.
func (s *notifySocket) next(t *testing.T) []string {
	t.Helper()
	select {
	case lines := <-s.msgs:
		s.seen = append(s.seen, lines)
		return lines
	case <-time.After(bt.Wait):
		t.Fatalf("no notification on %s in %v", s.path, bt.Wait)
		return nil
	}
}

// rest is every notification but watchdog pings that came and was not
// taken yet: it sends itself one and takes what comes before it (a
// socket's datagrams queue in order).
func (s *notifySocket) rest(t *testing.T) [][]string {
	t.Helper()
	conn, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: s.path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	const last = "EMQ_TEST_LAST=1"
	if _, err := conn.Write([]byte(last)); err != nil {
		t.Fatal(err)
	}
	var got [][]string
	for {
		lines := s.next(t)
		if slices.Equal(lines, []string{last}) {
			return got
		}
		got = append(got, lines)
	}
}

// waitStatus waits for a notification with the line status, unless one
// came already.
func (s *notifySocket) waitStatus(t *testing.T, status string) {
	t.Helper()
	deadline := time.After(bt.Wait)
	for !slices.ContainsFunc(s.seen, func(lines []string) bool { return slices.Contains(lines, status) }) {
		select {
		case lines := <-s.msgs:
			s.seen = append(s.seen, lines)
		case <-deadline:
			t.Fatalf("no %q on %s in %v; came: %q", status, s.path, bt.Wait, s.seen)
		}
	}
}

// startNotifiedBroker runs `emq broker ARGS --admin FREE` until the test
// ends, telling sock how it does with a watchdog of 200 ms. Unlike
// startBrokerProcess it returns at once: the test waits for READY=1.
func startNotifiedBroker(t *testing.T, sock *notifySocket, args ...string) *brokerProcess {
	t.Helper()
	return spawnBrokerProcess(t, []string{"NOTIFY_SOCKET=" + sock.path, "WATCHDOG_USEC=200000", "WATCHDOG_PID="}, args...)
}

// hasPrefix reports whether a line of lines starts with prefix.
func hasPrefix(lines []string, prefix string) bool {
	return slices.ContainsFunc(lines, func(l string) bool { return strings.HasPrefix(l, prefix) })
}

// lineValue is what follows key in the line of lines that starts with it.
func lineValue(lines []string, key string) string {
	for _, l := range lines {
		if v, ok := strings.CutPrefix(l, key); ok {
			return v
		}
	}
	return ""
}

func isPositive(s string) bool {
	n, err := strconv.ParseInt(s, 10, 64)
	return err == nil && n > 0
}
