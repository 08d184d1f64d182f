package broker_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/emqp"
	"github.com/eventmq/emq/internal/bench"
	bt "github.com/eventmq/emq/internal/brokertest"
	"github.com/eventmq/emq/internal/testutil"
	"github.com/eventmq/emq/worker"
)

// workerChildEnv makes this test binary a worker process (worker library)
// on the backend it names: it prints "RUNNING msgid" when a job starts and
// replies "late" after 3 seconds.
const workerChildEnv = "EMQ_TEST_WORKER_CHILD"

func runWorkerChild() {
	w, err := worker.New(worker.Options{
		Broker: os.Getenv(workerChildEnv), Identity: "child-worker",
		HeartbeatInterval: 50 * time.Millisecond, HeartbeatTimeout: 400 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	w.Handle("q", func(_ context.Context, j *worker.Job) ([]byte, error) {
		fmt.Println("RUNNING", j.MsgID)
		time.Sleep(3 * time.Second)
		return []byte("late"), nil
	})
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	w.Run(ctx)
	os.Exit(0)
}

// startWorkerChild runs a worker process and returns it with the lines it
// prints.
func startWorkerChild(t *testing.T, backend string) (*exec.Cmd, <-chan string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = bt.ChildEnv(workerChildEnv + "=" + backend)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	return cmd, lines
}

// A worker process SIGKILLed or SIGSTOPped mid-job: the job goes to
// another worker after the heartbeat timeout; a SIGCONTed worker's late
// REPLY is ignored.
func TestReliabilityWorkerKilledOrStopped(t *testing.T) {
	t.Parallel()
	for _, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGSTOP} {
		t.Run(sig.String(), func(t *testing.T) {
			b := bt.Start(t, "", func(o *broker.Options) {
				o.HeartbeatInterval, o.HeartbeatTimeout = 50*time.Millisecond, 500*time.Millisecond
			})
			child, lines := startWorkerChild(t, b.Backend())
			client := bt.Dial(t, b.Frontend(), "c")
			id := client.Request("q", "", nil)
			select {
			case line := <-lines:
				if line != "RUNNING "+id {
					t.Fatalf("child printed %q", line)
				}
			case <-time.After(bt.Wait):
				t.Fatal("the worker process did not start the job")
			}
			lostAt := time.Now()
			child.Process.Signal(sig)

			other := bt.Worker(t, b.Backend(), "other", "q")
			other.Ready(1)
			if got := bt.Expect[*emqp.Request](other); got.MsgID != id {
				t.Fatalf("redelivered %s, want %s", got.MsgID, id)
			}
			t.Logf("redelivered %v after the %v", time.Since(lostAt).Round(time.Millisecond), sig)
			suite.add("worker processes killed or stopped mid-job", 1)
			if sig != syscall.SIGSTOP {
				return
			}
			child.Process.Signal(syscall.SIGCONT)
			bt.Eventually(t, "the late REPLY arrived and was ignored", func() bool { return b.Stats().Ignored >= 1 })
			if n := b.Stats().Replied; n != 0 {
				t.Fatalf("the late REPLY completed the job (replied = %d)", n)
			}
			other.Reply(id, []byte("on time"))
			bt.Eventually(t, "the holder's REPLY", func() bool { return b.Stats().Replied == 1 })
		})
	}
}

// Floods of malformed messages of every error class, oversize frames and a
// queue driven past max-pending: every one is answered, the broker's
// memory stays bounded, and valid traffic keeps flowing.
func TestReliabilityFloods(t *testing.T) {
	rounds := 5 // × every error vector, and 50 oversize connections
	if os.Getenv("EMQ_TORTURE") != "" {
		rounds = 50
	}
	dir := t.TempDir()
	frontend, backend := bt.FreeEndpoint(t), bt.FreeEndpoint(t)
	t.Setenv("EMQ_TEST_MAX_PENDING", "100")
	t.Setenv("EMQ_TEST_MAX_FRAME", "65536")
	c := startChild(t, dir, frontend, backend)
	rssStart := bench.RSSMiB(strconv.Itoa(c.cmd.Process.Pid))

	// Valid traffic alongside, the whole time.
	done := make(chan int)
	client := dialRaw(t, frontend, "valid-client")
	worker := dialRaw(t, backend, "valid-worker")
	go func() {
		worker.send(&emqp.Inform{MsgID: emqp.NewID(), Queues: []emqp.Queue{{Weight: 10, Name: "valid"}}})
		n := 0
		for ; n < 500; n++ {
			worker.send(&emqp.Ready{MsgID: emqp.NewID()})
			id := emqp.NewID()
			client.send(&emqp.Request{MsgID: id, Queue: "valid", Payload: []byte("ok")})
			if !waitFor(client.in, emqp.CmdAck) || !waitFor(worker.in, emqp.CmdRequest) {
				break
			}
			worker.send(&emqp.Reply{MsgID: emqp.NewID(), OrigMsgID: id})
		}
		done <- n
	}()

	bad := dialRaw(t, frontend, "flooder")
	var vectors [][][]byte
	for _, v := range loadVectors(t) {
		if v.Error != "" && len(v.frames()) > 0 {
			vectors = append(vectors, v.frames())
		}
	}
	sent := 0
	for range rounds {
		for _, f := range vectors {
			for range 20 {
				bad.conn.WriteMsgs(f)
				sent++
			}
		}
	}
	// A queue past max-pending: 100 are taken, the rest refused.
	for range 300 {
		bad.send(&emqp.Request{MsgID: emqp.NewID(), Queue: "full", Payload: make([]byte, 1000)})
		sent++
	}
	errors, acks := 0, 0
	for errors+acks < sent {
		select {
		case m, ok := <-bad.in:
			if !ok {
				t.Fatal("the broker closed the flooder's connection")
			}
			switch m.Command() {
			case emqp.CmdError:
				errors++
			case emqp.CmdAck:
				acks++
			}
		case <-time.After(bt.Wait):
			t.Fatalf("answers to %d of %d messages", errors+acks, sent)
		}
	}
	if acks != 100 {
		t.Errorf("%d jobs taken on a queue limited to 100", acks)
	}
	// Oversize frames, each on its own connection.
	for range rounds * 10 {
		nc := rawDial(t, frontend)
		nc.Write(zmtpHello("big"))
		nc.Write(binary.BigEndian.AppendUint64([]byte{0x02}, 1<<40))
		nc.SetReadDeadline(time.Now().Add(bt.Wait))
		io.Copy(io.Discard, nc)
		nc.Close()
	}
	if n := testutil.RecvWithin(t, 5*time.Minute, done, "the valid traffic's end"); n != 500 {
		t.Fatalf("valid traffic stopped after %d jobs", n)
	}
	rssEnd := bench.RSSMiB(strconv.Itoa(c.cmd.Process.Pid))
	t.Logf("%d malformed or refused messages answered (%d ERRORs, %d ACKs); broker RSS %.0f MiB → %.0f MiB",
		sent, errors, acks, rssStart, rssEnd)
	suite.add("malformed or refused messages answered", errors)
	if rssEnd > rssStart+200 {
		t.Errorf("broker memory grew from %.0f to %.0f MiB under the flood", rssStart, rssEnd)
	}
}

// waitFor reads from in until a message with command cmd, or a timeout.
func waitFor(in <-chan emqp.Message, cmd emqp.Command) bool {
	deadline := time.After(bt.Wait)
	for {
		select {
		case m, ok := <-in:
			if !ok {
				return false
			}
			if m.Command() == cmd {
				return true
			}
		case <-deadline:
			return false
		}
	}
}
