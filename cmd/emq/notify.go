package main

import (
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/group"
)

// notifier tells systemd how the broker is doing, by the sd_notify
// protocol: a datagram of VAR=value lines to the unix socket named by
// $NOTIFY_SOCKET. Without NOTIFY_SOCKET (not started by systemd, or not
// Type=notify) every call does nothing.
type notifier struct {
	addr    *net.UnixAddr // nil: nobody to tell
	log     *slog.Logger
	failing atomic.Bool // the last message could not be sent

	mu       sync.Mutex
	ready    bool   // READY=1 was sent
	stopping bool   // STOPPING=1 was sent: READY=1 is not sent again
	status   string // the last STATUS= line
}

// groupPoll is how often a group's role is looked at: the group has no
// channel that says when it changes.
const groupPoll = 100 * time.Millisecond

func newNotifier(log *slog.Logger) *notifier {
	n := &notifier{log: log}
	switch name := os.Getenv("NOTIFY_SOCKET"); {
	case name == "":
	case name[0] == '/' || name[0] == '@':
		// Go's net package turns a leading '@' into the NUL of Linux's
		// abstract socket names, as systemd means it.
		n.addr = &net.UnixAddr{Name: name, Net: "unixgram"}
	default:
		// systemd also passes vsock: addresses, to a service in a VM.
		log.Warn("NOTIFY_SOCKET is not a unix socket: systemd is not told when the broker is ready", "socket", name)
	}
	return n
}

// send sends lines as one notification. A failure is logged, never
// fatal: systemd acts on the silence (its start or watchdog timeout).
func (n *notifier) send(lines ...string) {
	if n.addr == nil {
		return
	}
	msg := strings.Join(lines, "\n") + "\n"
	// A socket for each message, as libsystemd's sd_notify does: a
	// systemd that re-executed itself listens on a new socket of the
	// same name.
	conn, err := net.DialUnix("unixgram", nil, n.addr)
	if err == nil {
		conn.SetWriteDeadline(time.Now().Add(time.Second))
		_, err = conn.Write([]byte(msg))
		conn.Close()
	}
	// The first failure is logged, and the recovery: a watchdog pings
	// every few hundred milliseconds, and an unusable socket stays so.
	switch {
	case err != nil && !n.failing.Swap(true):
		n.log.Warn("NOTIFY_SOCKET: systemd was not told (logged once until it works again)", "socket", n.addr.Name,
			"message", strings.TrimSpace(msg), "err", err)
	case err == nil && n.failing.Swap(false):
		n.log.Info("NOTIFY_SOCKET: systemd is told again", "socket", n.addr.Name)
	}
}

// whenReady sends READY=1 once b serves, unless done closes first. A
// broker serves once its journal is replayed and its endpoints are
// bound. A group's broker is ready once it has joined the group, as
// standby or leader: a standby is started (its admin API answers, it
// campaigns and takes over when elected) and an election may be far
// off; STATUS= says which it is and follows its changes. One that cannot
// reach etcd is not ready: systemd's start timeout fails it and
// Restart= tries again.
func (n *notifier) whenReady(b runner, done <-chan struct{}) {
	switch b := b.(type) {
	case *broker.Broker:
		select {
		case <-b.Ready():
			n.readied("STATUS=serving: clients on " + b.Frontend() + ", workers on " + b.Backend())
		case <-done:
		}
	case *group.Group:
		t := time.NewTicker(groupPoll)
		defer t.Stop()
		said := ""
		for {
			if status := groupStatus(b); status != said {
				said = status
				n.readied(status)
			}
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}
}

// groupStatus is a STATUS= line for g's role, "" while it has not
// joined its group.
func groupStatus(g *group.Group) string {
	info := g.Info()
	switch {
	case info.Role == group.RoleLeader:
		return "STATUS=leader of the group, as " + info.Name
	case info.Role != group.RoleStandby:
		return ""
	case info.Leader == "":
		return "STATUS=standby in the group, as " + info.Name + "; no leader yet"
	}
	return "STATUS=standby in the group, as " + info.Name + "; the leader is " + info.Leader
}

// readied sends READY=1 with status the first time, then status alone;
// "" is not ready yet. Nothing is sent once the drain has started.
func (n *notifier) readied(status string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if status == "" || n.stopping {
		return
	}
	n.status = status
	if n.ready {
		n.send(status)
		return
	}
	n.ready = true
	n.send("READY=1", status)
}

// reload runs do, SIGHUP's re-reading of the credentials, between
// RELOADING=1 and READY=1 (with a STATUS= line saying how it went) when
// the broker is ready and not stopping; otherwise it only runs it.
// MONOTONIC_USEC= is what systemd 253 and later want with RELOADING=1.
func (n *notifier) reload(do func() error) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	tell := n.ready && !n.stopping
	if tell {
		lines := []string{"RELOADING=1", "STATUS=SIGHUP: re-reading the CURVE clients and PLAIN users"}
		if usec, ok := monotonicUsec(); ok {
			lines = append(lines, "MONOTONIC_USEC="+strconv.FormatInt(usec, 10))
		}
		n.send(lines...)
	}
	err := do()
	if tell {
		status := n.status
		if err != nil {
			status = fmt.Sprintf("STATUS=SIGHUP: the credentials were not re-read, the old ones stay: %v", err)
		}
		n.send("READY=1", status)
	}
	return err
}

// draining sends STOPPING=1: the drain has started.
func (n *notifier) draining() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.stopping = true
	n.send("STOPPING=1", "STATUS=draining: no new jobs, the jobs in flight may finish; a second SIGTERM stops at once")
}

// watchdog sends WATCHDOG=1 every half of $WATCHDOG_USEC until done
// closes, if systemd asks for it (WatchdogSec=). It vouches that the
// process lives and its goroutines run, no more: a broker that is up but
// not serving is /readyz's and the metrics' to tell.
func (n *notifier) watchdog(done <-chan struct{}) {
	every := watchdogEvery()
	if n.addr == nil || every <= 0 {
		return
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
			n.send("WATCHDOG=1")
		}
	}
}

// watchdogEvery is half of $WATCHDOG_USEC, or 0 when it is not set or
// $WATCHDOG_PID names another process (one this broker inherited it
// from).
func watchdogEvery() time.Duration {
	usec, err := strconv.ParseInt(os.Getenv("WATCHDOG_USEC"), 10, 64)
	if err != nil || usec <= 0 {
		return 0
	}
	if pid := os.Getenv("WATCHDOG_PID"); pid != "" && pid != strconv.Itoa(os.Getpid()) {
		return 0
	}
	return time.Duration(usec) * time.Microsecond / 2
}
