//go:build unix

package worker_test

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
	"github.com/eventmq/emq/store"
	"github.com/eventmq/emq/worker"
)

// The payload is the command's standard input, its standard output the
// result; the job is in its environment; a non-zero exit is an error
// with the end of its standard error; the job's timeout kills it.
func TestExec(t *testing.T) {
	t.Parallel()
	h, err := emqp.ParseHeaders("colour:blue,max-size:10")
	if err != nil {
		t.Fatal(err)
	}
	job := &worker.Job{MsgID: "m1", Queue: "q", Attempt: 2, Headers: h, Payload: []byte("hello")}
	out, err := worker.Exec(`tr a-z A-Z; echo " $EMQ_MSGID $EMQ_QUEUE $EMQ_ATTEMPT $EMQ_HEADER_COLOUR $EMQ_HEADER_MAX_SIZE $EMQ_HEADERS"`)(context.Background(), job)
	if want := "HELLO m1 q 2 blue 10 " + h.String() + "\n"; err != nil || string(out) != want {
		t.Fatalf("Exec: %q, %v; want %q", out, err, want)
	}

	_, err = worker.Exec(`head -c 5000 /dev/zero | tr '\0' x >&2; echo "the mail server said no" >&2; exit 3`)(context.Background(), job)
	if err == nil {
		t.Fatal("a command that exits 3: no error")
	}
	if msg := err.Error(); !strings.Contains(msg, "exit status 3") || !strings.HasSuffix(msg, "xthe mail server said no") {
		t.Fatalf("a failed command: …%s; want its exit status and the end of its standard error", msg[max(0, len(msg)-80):])
	} else if len(msg) > 2300 {
		t.Errorf("a failed command's error is %d bytes; want the last 2 KiB of its standard error", len(msg))
	}

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := worker.Exec(`sleep 300`)(ctx, job); !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "killed") {
		t.Fatalf("a command past its timeout: %v; want it killed at the deadline", err)
	}
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

// readPid is the pid a command wrote to file.
func readPid(t *testing.T, file string) int {
	t.Helper()
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil {
		t.Fatalf("pid file: %q", raw)
	}
	return pid
}

// A CANCEL kills the job's whole process group, what the command left in
// the background too, and the job FAILs saying it was cancelled; the
// command's progress line reaches the broker first.
func TestExecCancelKillsTheProcessGroup(t *testing.T) {
	t.Parallel()
	fb := startFakeBroker(t)
	pidFile := filepath.Join(t.TempDir(), "pid")
	startWorker(t, fb.Endpoint(), fakeOpts(1), map[string]worker.Handler{
		"q": worker.Exec(`sleep 300 & echo $! > ` + pidFile + `; echo 30 started >&3; wait`)})
	id := fb.Accept()
	expect[*emqp.Ready](fb)

	job := emqp.NewID()
	fb.Send(id, &emqp.Request{MsgID: job, Queue: "q"})
	p := expect[*emqp.Progress](fb)
	if percent, ok := p.Percent(); p.OrigMsgID != job || p.Text != "30 started" || !ok || percent != 30 || p.Note() != "started" {
		t.Fatalf("PROGRESS %+v; want \"30 started\" for job %s", p, job)
	}
	pid := readPid(t, pidFile) // written before the progress line
	if processGone(pid) {
		t.Fatalf("the background sleep %d is gone before the CANCEL", pid)
	}

	fb.Send(id, &emqp.Cancel{MsgID: emqp.NewID(), OrigMsgID: job})
	fail := expect[*emqp.Fail](fb)
	if fail.OrigMsgID != job || !strings.Contains(fail.Reason, "killed") || !strings.Contains(fail.Reason, "cancelled") {
		t.Fatalf("FAIL %+v; want one for %s saying it was killed as cancelled", fail, job)
	}
	bt.Eventually(t, "the background sleep killed with the group", func() bool { return processGone(pid) })
	expect[*emqp.Ready](fb)
}

// Each line the command writes to EMQ_PROGRESS_FD is a report, a long one
// cut to emqp.MaxProgressLen; the command waits on a FIFO for the test to
// have seen each one.
func TestExecProgressLines(t *testing.T) {
	t.Parallel()
	fb := startFakeBroker(t)
	fifo := filepath.Join(t.TempDir(), "go")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	startWorker(t, fb.Endpoint(), fakeOpts(1), map[string]worker.Handler{
		"q": worker.Exec(`[ "$EMQ_PROGRESS_FD" = 3 ] || exit 9
wait_go() { while ! read x < ` + fifo + `; do :; done; } # an EOF (a writer gone before the read) is no go
echo "10 first" >&3; wait_go
head -c 3000 /dev/zero | tr '\0' x >&3; echo >&3; wait_go
echo 'last, no number' >&3; wait_go
echo done`)})
	id := fb.Accept()
	expect[*emqp.Ready](fb)
	job := emqp.NewID()
	fb.Send(id, &emqp.Request{MsgID: job, Queue: "q"})

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
		p := expect[*emqp.Progress](fb)
		if p.OrigMsgID != job || p.Text != want {
			t.Fatalf("PROGRESS for %s: %.40q (%d bytes); want %.40q (%d bytes)", p.OrigMsgID, p.Text, len(p.Text), want, len(want))
		}
		release()
	}
	if r := expect[*emqp.Reply](fb); r.OrigMsgID != job || string(r.Payload) != "done\n" {
		t.Fatalf("REPLY %+v", r)
	}
}

// A job that carries a trace gives the command TRACEPARENT and
// TRACESTATE: with no SDK recording, the job's own.
func TestExecGetsTheJobsTrace(t *testing.T) {
	t.Parallel()
	fb := startFakeBroker(t)
	startWorker(t, fb.Endpoint(), fakeOpts(1), map[string]worker.Handler{
		"q": worker.Exec(`printf '%s|%s' "$TRACEPARENT" "$TRACESTATE"`)})
	id := fb.Accept()
	expect[*emqp.Ready](fb)
	const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	h := emqp.HeadersFrom(emqp.Header{Name: emqp.HeaderTraceparent, Value: traceparent},
		emqp.Header{Name: emqp.HeaderTracestate, Value: "vendor=a,other=b"})
	traced, plain := emqp.NewID(), emqp.NewID()
	fb.Send(id, &emqp.Request{MsgID: traced, Queue: "q", Headers: h})
	if r := expect[*emqp.Reply](fb); r.OrigMsgID != traced || string(r.Payload) != traceparent+"|vendor=a,other=b" {
		t.Fatalf("REPLY for %s: %q; want the job's TRACEPARENT|TRACESTATE", r.OrigMsgID, r.Payload)
	}
	expect[*emqp.Ready](fb)
	fb.Send(id, &emqp.Request{MsgID: plain, Queue: "q"})
	if r := expect[*emqp.Reply](fb); r.OrigMsgID != plain || string(r.Payload) != "|" {
		t.Fatalf("REPLY for %s: %q; want no trace for a job without one", r.OrigMsgID, r.Payload)
	}
}

// The same through a real broker: an operator cancels the job a command
// runs; the broker shows the command's progress, then the command's whole
// process group is killed, the job is kept cancelled, the worker's FAIL
// after it is ignored, and the worker runs the next job.
func TestExecCancelledThroughTheBroker(t *testing.T) {
	t.Parallel()
	b := bt.Start(t, "", func(o *broker.Options) {
		o.HeartbeatInterval, o.HeartbeatTimeout = 100*time.Millisecond, time.Second
		o.ResultTTL = time.Hour
	})
	pidFile := filepath.Join(t.TempDir(), "pid")
	startWorker(t, b.Backend(), worker.Options{}, map[string]worker.Handler{
		"q": worker.Exec(`[ -s ` + pidFile + ` ] && { echo second; exit 0; }; sleep 300 & echo $! > ` + pidFile + `; echo 30 started >&3; wait`)})
	client := bt.Dial(t, b.Frontend(), "c")
	job := client.Request("q", "reply-requested", nil)
	ctx := context.Background()
	bt.Eventually(t, "the command's progress at the broker", func() bool {
		p, err := b.JobProgress(ctx, job)
		return err == nil && p != nil && p.Percent == 30 && p.Note == "started"
	})
	pid := readPid(t, pidFile)
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
