//go:build unix

package worker_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/eventmq/emq/emqp"
	bt "github.com/eventmq/emq/internal/brokertest"
	"github.com/eventmq/emq/internal/testutil"
)

// EventMQ's own job manager (Python, bin/emq-jobmanager of
// github.com/eventmq/eventmq) gets a CANCEL for the job it runs, a command
// it has no handler for: it logs so and goes on, connected, and REPLYs to
// that job and the next. EMQ_EVENTMQ_SRC names a checkout of EventMQ (CI
// has none: the test is skipped, or fails under EMQ_REQUIRE_EVENTMQ); its
// job manager needs python3-zmq, python3-six and python3-future.
func TestEventMQJobManagerIgnoresCancel(t *testing.T) {
	t.Parallel()
	fb := startFakeBroker(t)
	logs := startJobManager(t, fb.Endpoint())

	// fakeBroker ACKs the INFORM and sends a HEARTBEAT: the job manager
	// starts its worker processes on its first HEARTBEAT, and each says
	// READY once started.
	id := fb.Accept()
	expect[*emqp.Ready](fb)

	// The first job blocks in cat until the test writes to a FIFO.
	fifo := filepath.Join(t.TempDir(), "release")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	first := emqp.NewID()
	fb.Send(id, eventmqJob(first, "subprocess", "getoutput", `"cat `+fifo+`"`))
	var fd int
	bt.Eventually(t, "the job reading the FIFO", func() bool {
		var err error
		fd, err = syscall.Open(fifo, syscall.O_WRONLY|syscall.O_NONBLOCK, 0) // ENXIO until a reader has it open
		return err == nil
	})
	fb.Send(id, &emqp.Cancel{MsgID: emqp.NewID(), OrigMsgID: first})
	const noHandler = "No handler for CANCEL"
	bt.Eventually(t, "the job manager logging the CANCEL", func() bool { return strings.Contains(logs.String(), noHandler) })
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, noHandler) {
			t.Logf("the job manager logged: %s", line)
		}
	}
	syscall.Write(fd, []byte("released\n"))
	syscall.Close(fd)
	if r := expect[*emqp.Reply](fb); r.OrigMsgID != first || string(r.Payload) != `{"value": "released"}` {
		t.Fatalf("REPLY for %s: %s; want the cancelled job's", r.OrigMsgID, r.Payload)
	}
	expect[*emqp.Ready](fb)

	next := emqp.NewID()
	fb.Send(id, eventmqJob(next, "os.path", "join", `"a", "b"`))
	if r := expect[*emqp.Reply](fb); r.OrigMsgID != next || string(r.Payload) != `{"value": "a/b"}` {
		t.Fatalf("REPLY for %s: %s; want the next job's", r.OrigMsgID, r.Payload)
	}
	expect[*emqp.Ready](fb)
}

// startJobManager runs EventMQ's job manager (one worker process, queue
// default) against the broker at addr, until the test ends; the test is
// skipped without EventMQ's source (EMQ_EVENTMQ_SRC) or its modules.
func startJobManager(t *testing.T, addr string) *testutil.Buffer {
	t.Helper()
	src := os.Getenv("EMQ_EVENTMQ_SRC")
	if src == "" {
		testutil.Missing(t, "EMQ_REQUIRE_EVENTMQ", "EMQ_EVENTMQ_SRC is not set: it names a checkout of github.com/eventmq/eventmq, whose job manager this test runs")
	}
	python := testutil.Python(t, false)
	env := append(os.Environ(), "PYTHONPATH="+src, "PYTHONUNBUFFERED=1",
		"EVENTMQ_CONFIG_FILE="+filepath.Join(t.TempDir(), "none.conf"), // not /etc/eventmq.conf
		`EVENTMQ_QUEUES=[[10, "default"]]`)
	probe := exec.Command(python, "-c", "import eventmq.jobmanager")
	probe.Env = env
	if out, err := probe.CombinedOutput(); err != nil {
		testutil.Missing(t, "EMQ_REQUIRE_EVENTMQ", "EventMQ's job manager in %s does not import (apt-get install -y python3-zmq python3-six python3-future): %v\n%s", src, err, out)
	}
	jm := exec.Command(python, filepath.Join(src, "bin", "emq-jobmanager"), "--broker-addr", addr, "--jobs", "1")
	jm.Env = env
	logs := new(testutil.Buffer)
	jm.Stdout, jm.Stderr = logs, logs
	testutil.DieWithParent(jm)
	jm.SysProcAttr.Setpgid = true // its worker processes and multiprocessing's manager too
	if err := jm.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopJobManager(t, jm, logs) })
	return logs
}

// eventmqJob is a REQUEST as EventMQ's clients send it, calling
// path.callable(args) in the job manager.
func eventmqJob(msgid, path, callable, args string) *emqp.Request {
	h, _ := emqp.ParseHeaders("reply-requested")
	payload := `["run", {"path": "` + path + `", "callable": "` + callable + `", "args": [` + args + `]}]`
	return &emqp.Request{MsgID: msgid, Queue: "default", Headers: h, Payload: []byte(payload)}
}

// stopJobManager stops the job manager as SIGTERM does (KBYE, its worker
// processes told to end, then exit), or kills its process group when it
// does not stop; its log goes to the test's when the test failed.
func stopJobManager(t *testing.T, jm *exec.Cmd, logs *testutil.Buffer) {
	jm.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- jm.Wait() }()
	select {
	case <-done:
	case <-time.After(bt.Wait):
		syscall.Kill(-jm.Process.Pid, syscall.SIGKILL)
		<-done
		t.Errorf("the job manager did not stop on SIGTERM")
	}
	if t.Failed() {
		t.Logf("the job manager's log:\n%s", logs.String())
	}
}

// The same job manager against a real EMQ broker: the job it runs is
// cancelled by an operator; the job manager logs the CANCEL, its late
// REPLY is ignored (the client that asked gets none), and it goes on to
// run the next job, whose REPLY reaches the client.
func TestEventMQJobManagerThroughBrokerCancel(t *testing.T) {
	t.Parallel()
	b := bt.Start(t, "", nil)
	logs := startJobManager(t, b.Backend())
	fifo := filepath.Join(t.TempDir(), "release")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	client := bt.Dial(t, b.Frontend(), "c")
	first := eventmqJob(emqp.NewID(), "subprocess", "getoutput", `"cat `+fifo+`"`)
	client.Send(first)
	bt.Expect[*emqp.Ack](client)
	var fd int
	bt.Eventually(t, "the job manager running the job", func() bool {
		var err error
		fd, err = syscall.Open(fifo, syscall.O_WRONLY|syscall.O_NONBLOCK, 0)
		return err == nil
	})
	if _, err := b.Cancel(context.Background(), first.MsgID, "admin"); err != nil {
		t.Fatalf("cancel: %v", err)
	}
	bt.Eventually(t, "the job manager logging the CANCEL", func() bool { return strings.Contains(logs.String(), "No handler for CANCEL") })
	ignored := b.Stats().Ignored
	syscall.Write(fd, []byte("released\n"))
	syscall.Close(fd)
	bt.Eventually(t, "the cancelled job's late REPLY ignored", func() bool { return b.Stats().Ignored > ignored })

	next := eventmqJob(emqp.NewID(), "os.path", "join", `"a", "b"`)
	client.Send(next)
	bt.Expect[*emqp.Ack](client)
	r := bt.Expect[*emqp.Reply](client) // not the cancelled job's: that would come first
	if r.OrigMsgID != next.MsgID || string(r.Payload) != `{"value": "a/b"}` {
		t.Fatalf("REPLY for %s: %s; want the next job's", r.OrigMsgID, r.Payload)
	}
}
