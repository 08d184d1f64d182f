//go:build unix

package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/emqp"
	bt "github.com/eventmq/emq/internal/brokertest"
	"github.com/eventmq/emq/internal/zmtp"
	"github.com/eventmq/emq/store"
)

// rawBroker is the test playing the broker on a raw ZMTP ROUTER, to see
// each message the worker sends (CANCEL's FAIL, PROGRESS) as it comes. It
// ACKs each INFORM, answers each HEARTBEAT, and hands the test everything
// else.
type rawBroker struct {
	t      *testing.T
	router *zmtp.Router
	ready  chan struct{} // closed once router is set
	in     chan rawMsg
}

type rawMsg struct {
	id  string // the routing id it came from
	msg emqp.Message
}

func startRawBroker(t *testing.T) *rawBroker {
	t.Helper()
	rb := &rawBroker{t: t, ready: make(chan struct{}), in: make(chan rawMsg, 1024)}
	r, err := zmtp.Listen("tcp://127.0.0.1:0", zmtp.Options{Logger: bt.Logger(t), Receive: rb.receive})
	if err != nil {
		t.Fatal(err)
	}
	rb.router = r
	close(rb.ready)
	t.Cleanup(func() { r.Close() })
	return rb
}

func (rb *rawBroker) receive(id string, frames [][]byte, _ zmtp.Held) {
	<-rb.ready
	m, err := emqp.Decode(frames)
	if err != nil {
		rb.t.Errorf("the broker got a message it cannot decode: %v", err)
		return
	}
	switch m := m.(type) {
	case *emqp.Heartbeat:
		_ = rb.router.Send(id, emqp.Encode(&emqp.Heartbeat{MsgID: emqp.NewID()}))
		return
	case *emqp.Routes: // a worker asks where its queues are: no shards here
		_ = rb.router.Send(id, emqp.Encode(&emqp.Routes{MsgID: m.MsgID, Table: []byte("{}")}))
		return
	case *emqp.Inform:
		_ = rb.router.Send(id, emqp.Encode(&emqp.Ack{MsgID: emqp.NewID(), AckedID: m.MsgID}))
	}
	rb.in <- rawMsg{id, m}
}

func (rb *rawBroker) send(id string, m emqp.Message) {
	rb.t.Helper()
	if err := rb.router.Send(id, emqp.Encode(m)); err != nil {
		rb.t.Fatalf("send %s to the worker: %v", m.Command(), err)
	}
}

// recv returns the next message but HEARTBEATs; it fails unless it is a T.
func recv[T emqp.Message](rb *rawBroker) (string, T) {
	rb.t.Helper()
	var v T
	select {
	case m := <-rb.in:
		v, ok := m.msg.(T)
		if !ok {
			rb.t.Fatalf("the broker got %s %+v, want %T", m.msg.Command(), m.msg, v)
		}
		return m.id, v
	case <-time.After(bt.Wait):
		rb.t.Fatalf("no %T from the worker within %v", v, bt.Wait)
	}
	return "", v
}

// processGone reports whether pid has ended: no such process, or one
// dead and not yet reaped (a zombie, which kill(pid, 0) still finds).
func processGone(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false // reaped meanwhile (ESRCH next time), or no /proc here
	}
	// "pid (comm) state ...", where comm may hold spaces and parentheses.
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && (s[i+2] == 'Z' || s[i+2] == 'X')
}

// A CANCEL kills the job's whole process group, what the command left in
// the background too, and the job FAILs saying it was cancelled; the
// command's progress line reaches the broker first.
func TestWorkerExecCancelKillsTheProcessGroup(t *testing.T) {
	t.Parallel()
	rb := startRawBroker(t)
	pidFile := filepath.Join(t.TempDir(), "pid")
	startWorkerProcess(t, "--broker", rb.router.Endpoint(), "--queues", "q",
		"--exec", `sleep 300 & echo $! > `+pidFile+`; echo 30 started >&3; wait`)
	id, _ := recv[*emqp.Inform](rb)
	recv[*emqp.Ready](rb)

	job := emqp.NewID()
	rb.send(id, &emqp.Request{MsgID: job, Queue: "q"})
	_, p := recv[*emqp.Progress](rb)
	if percent, ok := p.Percent(); p.OrigMsgID != job || p.Text != "30 started" || !ok || percent != 30 || p.Note() != "started" {
		t.Fatalf("PROGRESS %+v; want \"30 started\" for job %s", p, job)
	}
	raw, err := os.ReadFile(pidFile) // written before the progress line
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil {
		t.Fatalf("pid file: %q", raw)
	}
	if processGone(pid) {
		t.Fatalf("the background sleep %d is gone before the CANCEL", pid)
	}

	rb.send(id, &emqp.Cancel{MsgID: emqp.NewID(), OrigMsgID: job})
	_, fail := recv[*emqp.Fail](rb)
	if fail.OrigMsgID != job || !strings.Contains(fail.Reason, "killed") || !strings.Contains(fail.Reason, "cancelled") {
		t.Fatalf("FAIL %+v; want one for %s saying it was killed as cancelled", fail, job)
	}
	bt.Eventually(t, "the background sleep killed with the group", func() bool { return processGone(pid) })
	recv[*emqp.Ready](rb)
}

// Each line the command writes to EMQ_PROGRESS_FD is a report, a long one
// cut to emqp.MaxProgressLen; the command waits on a FIFO for the test to
// have seen each one.
func TestWorkerExecProgressLines(t *testing.T) {
	t.Parallel()
	rb := startRawBroker(t)
	fifo := filepath.Join(t.TempDir(), "go")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	startWorkerProcess(t, "--broker", rb.router.Endpoint(), "--queues", "q",
		"--exec", `[ "$EMQ_PROGRESS_FD" = 3 ] || exit 9
wait_go() { while ! read x < `+fifo+`; do :; done; } # an EOF (a writer gone before the read) is no go
echo "10 first" >&3; wait_go
head -c 3000 /dev/zero | tr '\0' x >&3; echo >&3; wait_go
echo 'last, no number' >&3; wait_go
echo done`)
	id, _ := recv[*emqp.Inform](rb)
	recv[*emqp.Ready](rb)
	job := emqp.NewID()
	rb.send(id, &emqp.Request{MsgID: job, Queue: "q"})

	// release lets the command go past its next read of the FIFO.
	release := func() {
		t.Helper()
		var fd int
		bt.Eventually(t, "the command reading the FIFO", func() bool {
			var err error
			fd, err = syscall.Open(fifo, syscall.O_WRONLY|syscall.O_NONBLOCK, 0) // ENXIO until a reader has it open
			return err == nil
		})
		syscall.Write(fd, []byte("\n"))
		syscall.Close(fd)
	}
	for _, want := range []string{"10 first", strings.Repeat("x", emqp.MaxProgressLen), "last, no number"} {
		_, p := recv[*emqp.Progress](rb)
		if p.OrigMsgID != job || p.Text != want {
			t.Fatalf("PROGRESS for %s: %.40q (%d bytes); want %.40q (%d bytes)", p.OrigMsgID, p.Text, len(p.Text), want, len(want))
		}
		release()
	}
	if _, r := recv[*emqp.Reply](rb); r.OrigMsgID != job || string(r.Payload) != "done\n" {
		t.Fatalf("REPLY %+v", r)
	}
}

// The same through a real broker: an operator cancels the job a command
// runs; the broker shows the command's progress, then the command's whole
// process group is killed, the job is kept cancelled, the worker's FAIL
// after it is ignored, and the worker runs the next job.
func TestWorkerExecCancelledThroughTheBroker(t *testing.T) {
	t.Parallel()
	b := bt.Start(t, "", func(o *broker.Options) {
		o.HeartbeatInterval, o.HeartbeatTimeout = 100*time.Millisecond, time.Second
		o.ResultTTL = time.Hour
	})
	pidFile := filepath.Join(t.TempDir(), "pid")
	startWorkerProcess(t, "--broker", b.Backend(), "--queues", "q",
		"--exec", `[ -s `+pidFile+` ] && { echo second; exit 0; }; sleep 300 & echo $! > `+pidFile+`; echo 30 started >&3; wait`)
	client := bt.Dial(t, b.Frontend(), "c")
	job := client.Request("q", "reply-requested", nil)
	ctx := context.Background()
	bt.Eventually(t, "the command's progress at the broker", func() bool {
		p, err := b.JobProgress(ctx, job)
		return err == nil && p != nil && p.Percent == 30 && p.Note == "started"
	})
	raw, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil {
		t.Fatalf("pid file: %q", raw)
	}
	ignored := b.Stats().Ignored
	if _, err := b.Cancel(ctx, job, "admin"); err != nil {
		t.Fatalf("cancel: %v", err)
	}
	bt.Eventually(t, "the background sleep killed with the group", func() bool { return processGone(pid) })
	bt.Eventually(t, "the worker's FAIL for the cancelled job ignored", func() bool { return b.Stats().Ignored > ignored })
	if j, _, err := b.Job(ctx, job); err != nil || j.State != store.Cancelled {
		t.Fatalf("the job after its cancel: %+v, %v", j, err)
	}
	next := client.Request("q", "reply-requested", nil)
	if r := bt.Expect[*emqp.Reply](client); r.OrigMsgID != next || string(r.Payload) != "second\n" {
		t.Fatalf("REPLY %+v; want the next job's", r)
	}
}
