// Package sdnotify tells systemd how a service does, by the sd_notify
// protocol: a datagram of VAR=value lines to the unix socket named by
// $NOTIFY_SOCKET, as a unit of Type=notify (or notify-reload) waits for.
//
//	n := sdnotify.New(log)
//	go n.Watchdog(ctx)          // WATCHDOG=1, if WatchdogSec= asks for it
//	n.Ready("serving on :5555") // READY=1, STATUS=serving on :5555
//	n.Ready("leader")           // STATUS=leader: ready already
//	n.Reload("re-reading", do)  // RELOADING=1 ... READY=1
//	n.Stopping("draining")      // STOPPING=1; nothing is said after it
//
// Without NOTIFY_SOCKET (not started by systemd, or not Type=notify)
// every call does nothing. A message that cannot be sent is logged,
// never returned: systemd acts on the silence (its start or watchdog
// timeout).
package sdnotify

import (
	"context"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Notifier sends a service's notifications to systemd. It is safe for
// concurrent use.
type Notifier struct {
	addr    *net.UnixAddr // nil: nobody to tell
	log     *slog.Logger
	failing atomic.Bool // the last message could not be sent

	mu       sync.Mutex
	ready    bool   // READY=1 was sent
	stopping bool   // STOPPING=1 was sent: nothing more is said
	status   string // the last status, said again after a reload
}

// New is a Notifier to $NOTIFY_SOCKET, a path or an abstract name
// ('@'); log takes its warnings. Any other NOTIFY_SOCKET (systemd's
// vsock: addresses, for a service in a VM) is logged and not told.
func New(log *slog.Logger) *Notifier {
	n := &Notifier{log: log}
	switch name := os.Getenv("NOTIFY_SOCKET"); {
	case name == "":
	case name[0] == '/' || name[0] == '@':
		// Go's net package turns a leading '@' into the NUL of Linux's
		// abstract socket names, as systemd means it.
		n.addr = &net.UnixAddr{Name: name, Net: "unixgram"}
	default:
		log.Warn("NOTIFY_SOCKET is not a unix socket: systemd is not told when the service is ready", "socket", name)
	}
	return n
}

// Ready says READY=1 with status the first time, then status alone: a
// service says it is ready once, and what it does as often as that
// changes. Nothing is said once Stopping was; an empty status is no
// STATUS= line.
func (n *Notifier) Ready(status string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.stopping {
		return
	}
	n.status = status
	if n.ready {
		if status != "" {
			n.send(statusLine(status))
		}
		return
	}
	n.ready = true
	n.send("READY=1", statusLine(status))
}

// Reload runs do between RELOADING=1 (with the status reloading) and
// READY=1, when the service is ready and not stopping; otherwise it only
// runs it. The status after it is the one do returns, or the one before
// when do returns "". MONOTONIC_USEC= goes with RELOADING=1, as systemd
// 253 and later want it.
func (n *Notifier) Reload(reloading string, do func() (status string)) {
	n.mu.Lock()
	defer n.mu.Unlock()
	tell := n.ready && !n.stopping
	if tell {
		lines := []string{"RELOADING=1", statusLine(reloading)}
		if usec, ok := monotonicUsec(); ok {
			lines = append(lines, "MONOTONIC_USEC="+strconv.FormatInt(usec, 10))
		}
		n.send(lines...)
	}
	status := do()
	if tell {
		if status == "" {
			status = n.status
		}
		n.send("READY=1", statusLine(status))
	}
}

// Stopping says STOPPING=1 with status: the service is shutting down.
// Nothing is said after it.
func (n *Notifier) Stopping(status string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.stopping = true
	n.send("STOPPING=1", statusLine(status))
}

// Watchdog sends WATCHDOG=1 every half of $WATCHDOG_USEC until ctx ends,
// if systemd asks for it (WatchdogSec=); otherwise it returns at once.
// It vouches that the process lives and its goroutines run, no more.
func (n *Notifier) Watchdog(ctx context.Context) {
	every := watchdogEvery()
	if n.addr == nil || every <= 0 {
		return
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			n.send("WATCHDOG=1")
		}
	}
}

// statusLine is status as a STATUS= line, "" for none.
func statusLine(status string) string {
	if status == "" {
		return ""
	}
	return "STATUS=" + status
}

// send sends lines, but empty ones, as one notification. A failure is
// logged once until a message goes through again.
func (n *Notifier) send(lines ...string) {
	if n.addr == nil {
		return
	}
	var msg strings.Builder
	for _, l := range lines {
		if l != "" {
			msg.WriteString(l + "\n")
		}
	}
	// A socket for each message, as libsystemd's sd_notify does: a
	// systemd that re-executed itself listens on a new socket of the
	// same name.
	conn, err := net.DialUnix("unixgram", nil, n.addr)
	if err == nil {
		conn.SetWriteDeadline(time.Now().Add(time.Second))
		_, err = conn.Write([]byte(msg.String()))
		conn.Close()
	}
	// The first failure is logged, and the recovery: a watchdog pings
	// every few hundred milliseconds, and an unusable socket stays so.
	switch {
	case err != nil && !n.failing.Swap(true):
		n.log.Warn("NOTIFY_SOCKET: systemd was not told (logged once until it works again)", "socket", n.addr.Name,
			"message", strings.TrimSpace(msg.String()), "err", err)
	case err == nil && n.failing.Swap(false):
		n.log.Info("NOTIFY_SOCKET: systemd is told again", "socket", n.addr.Name)
	}
}

// watchdogEvery is half of $WATCHDOG_USEC, or 0 when it is not set or
// $WATCHDOG_PID names another process (one this process inherited it
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
