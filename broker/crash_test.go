package broker_test

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/eventmq/emq/admin"
	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/broker/boltjournal"
	"github.com/eventmq/emq/emqp"
	bt "github.com/eventmq/emq/internal/brokertest"
	"github.com/eventmq/emq/internal/testutil"
	"github.com/eventmq/emq/internal/zmtp"
	"github.com/eventmq/emq/store"
)

// The crash tests run the broker as a child process: this test binary,
// started again with childEnv set.
const childEnv = "EMQ_TEST_BROKER_CHILD"

// runChild is the child's main: a broker on the endpoints and data dir in
// its environment, until SIGTERM (or SIGKILL).
func runChild() {
	opts := broker.DefaultOptions()
	opts.OpenJournal = boltjournal.Open
	opts.DataDir = os.Getenv(childEnv)
	opts.Frontend, opts.Backend = os.Getenv("EMQ_TEST_FRONTEND"), os.Getenv("EMQ_TEST_BACKEND")
	opts.PublisherIncoming, opts.PublisherOutgoing = "", ""
	opts.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	aopts := admin.DefaultOptions()
	aopts.Addr, aopts.Logger = os.Getenv("EMQ_TEST_ADMIN"), opts.Logger
	srv, err := admin.New(aopts)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	opts.Observer = srv.Observer()
	if v := os.Getenv("EMQ_TEST_MAX_PENDING"); v != "" {
		opts.MaxPending, _ = strconv.Atoi(v)
	}
	if v := os.Getenv("EMQ_TEST_MAX_FRAME"); v != "" {
		opts.MaxFrameSize, _ = strconv.ParseInt(v, 10, 64)
	}
	if v := os.Getenv("EMQ_TEST_MAX_RECEIVE"); v != "" {
		opts.MaxReceiveBuffer, _ = strconv.ParseInt(v, 10, 64)
	}
	opts.JournalRecover = os.Getenv("EMQ_TEST_RECOVER") != ""
	if v := os.Getenv("EMQ_TEST_SEGMENT"); v != "" {
		opts.JournalSegmentSize, _ = strconv.ParseInt(v, 10, 64)
	}
	if v := os.Getenv("EMQ_TEST_JOURNAL_KEYS"); v != "" {
		if opts.JournalKeys, err = store.ReadKeyring(v); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	var clock *fileClock
	if path := os.Getenv(clockEnv); path != "" {
		var err error
		if clock, err = childClock(path); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		opts.Now = clock.Now
	}
	b, err := broker.New(opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	srv.Serve(b)
	if err := srv.Start(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer srv.Close()
	if clock != nil {
		go clock.follow(b)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	if err := b.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(0)
}

type child struct {
	cmd               *exec.Cmd
	frontend, backend string
	exited            chan error // tryChild's: its Wait, which kill must not repeat
}

// startChild starts a broker process on dir and waits until it serves;
// env adds EMQ_TEST_* settings (see runChild).
func startChild(t *testing.T, dir, frontend, backend string, env ...string) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = bt.ChildEnv(append([]string{childEnv + "=" + dir, "EMQ_TEST_FRONTEND=" + frontend, "EMQ_TEST_BACKEND=" + backend}, env...)...)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: cmd, frontend: frontend, backend: backend}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	bt.Eventually(t, "child broker serving", func() bool {
		conn, err := zmtp.Dial(context.Background(), backend, zmtp.DialOptions{Timeout: time.Second})
		if err != nil {
			return false
		}
		conn.Close()
		return true
	})
	return c
}

func (c *child) kill() {
	c.cmd.Process.Signal(syscall.SIGKILL)
	c.cmd.Wait()
}

// rawPeer is a zmtp DEALER with a reader goroutine.
type rawPeer struct {
	conn *zmtp.Conn
	in   chan emqp.Message
}

func dialRaw(t testing.TB, endpoint, id string) *rawPeer {
	t.Helper()
	conn, err := zmtp.Dial(context.Background(), endpoint, zmtp.DialOptions{Identity: []byte(id)})
	if err != nil {
		t.Fatal(err)
	}
	p := &rawPeer{conn: conn, in: make(chan emqp.Message, 4096)}
	go func() {
		defer close(p.in)
		for {
			m, err := emqp.ReadMessage(conn.ReadMsg, func(err error) { t.Errorf("undecodable message: %v", err) })
			if err != nil {
				return
			}
			p.in <- m
		}
	}()
	t.Cleanup(func() { conn.Close() })
	return p
}

func (p *rawPeer) send(m emqp.Message) error { return p.conn.WriteMsgs(emqp.Encode(m)) }

// next is p's next message, or false once its connection is closed; the
// test fails, naming what it waited for, when nothing comes within
// bt.Wait.
func (p *rawPeer) next(t testing.TB, what string) (emqp.Message, bool) {
	t.Helper()
	timer := time.NewTimer(bt.Wait)
	defer timer.Stop()
	select {
	case m, ok := <-p.in:
		return m, ok
	case <-timer.C:
		t.Fatalf("%s: nothing within %v", what, bt.Wait)
	}
	return nil, false
}

// Every ACKed job is delivered after the broker is SIGKILLed under load
// and restarted on the same journal, 10 times (100 with EMQ_TORTURE). A job
// is delivered twice only across a kill, never twice by one broker run:
// duplicates are jobs that were in flight.
func TestCrashRestartLosesNoAckedJob(t *testing.T) {
	t.Parallel()
	rounds := 10
	if os.Getenv("EMQ_TORTURE") != "" {
		rounds = 100
	}
	dir := t.TempDir()
	frontend, backend := bt.FreeEndpoint(t), bt.FreeEndpoint(t)
	acked := map[string]bool{}
	delivered := map[string]bool{}
	duplicates := 0
	// deliver records a delivery in the run of one broker process.
	deliver := func(run map[string]bool, id string) {
		if run[id] {
			t.Errorf("job %s delivered twice by one broker run", id)
		}
		run[id] = true
		if delivered[id] {
			duplicates++
		}
		delivered[id] = true
	}
	for round := range rounds {
		c := startChild(t, dir, frontend, backend)
		// A worker replies to what it gets while a client pipelines jobs.
		worker := dialRaw(t, backend, "crash-worker")
		worker.send(&emqp.Inform{MsgID: emqp.NewID(), Queues: []emqp.Queue{{Weight: 10, Name: "crash"}}})
		for range 8 {
			worker.send(&emqp.Ready{MsgID: emqp.NewID()})
		}
		var mu sync.Mutex
		workerDone := make(chan struct{})
		run := map[string]bool{}
		go func() {
			defer close(workerDone)
			for m := range worker.in {
				if r, ok := m.(*emqp.Request); ok {
					mu.Lock()
					deliver(run, r.MsgID)
					mu.Unlock()
					worker.send(&emqp.Reply{MsgID: emqp.NewID(), OrigMsgID: r.MsgID})
					worker.send(&emqp.Ready{MsgID: emqp.NewID()})
				}
			}
		}()
		client := dialRaw(t, frontend, "crash-client")
		killAt := 50 + rand.IntN(400)
		window := make(chan struct{}, 256) // REQUESTs not ACKed yet
		roundOver := make(chan struct{})
		senderDone := make(chan struct{})
		go func() {
			defer close(senderDone)
			for i := 0; ; i++ {
				select {
				case window <- struct{}{}:
				case <-roundOver: // the broker is gone
					return
				}
				err := client.send(&emqp.Request{MsgID: emqp.NewID(), Queue: "crash", Payload: []byte(strconv.Itoa(i))})
				if err != nil {
					return
				}
			}
		}()
		n := 0
		for {
			m, open := client.next(t, fmt.Sprintf("round %d: an ACK, or the connection's end at the kill", round))
			if !open {
				break
			}
			if a, ok := m.(*emqp.Ack); ok {
				<-window
				mu.Lock()
				acked[a.AckedID] = true
				mu.Unlock()
				if n++; n == killAt {
					c.kill()
				}
			}
		}
		close(roundOver)
		testutil.Recv(t, senderDone, "the sender's end")
		testutil.Recv(t, workerDone, "the worker's end, its connection closed by the kill")
		t.Logf("round %d: killed after %d ACKs", round, killAt)
	}
	suite.add("broker SIGKILLs survived", rounds)

	// A last start: everything ACKed and not yet delivered comes out.
	startChild(t, dir, frontend, backend)
	worker := dialRaw(t, backend, "final-worker")
	worker.send(&emqp.Inform{MsgID: emqp.NewID(), Queues: []emqp.Queue{{Weight: 10, Name: "crash"}}})
	for range 64 {
		worker.send(&emqp.Ready{MsgID: emqp.NewID()})
	}
	waiting := map[string]bool{} // ACKed, not delivered yet
	for id := range acked {
		if !delivered[id] {
			waiting[id] = true
		}
	}
	deadline := time.After(time.Minute)
	last := map[string]bool{}
	for len(waiting) > 0 {
		select {
		case m := <-worker.in:
			if r, ok := m.(*emqp.Request); ok {
				deliver(last, r.MsgID)
				delete(waiting, r.MsgID)
				worker.send(&emqp.Reply{MsgID: emqp.NewID(), OrigMsgID: r.MsgID})
				worker.send(&emqp.Ready{MsgID: emqp.NewID()})
			}
		case <-deadline:
			t.Fatalf("%d of %d ACKed jobs were never delivered", len(waiting), len(acked))
		}
	}
	t.Logf("%d rounds, %d ACKed jobs, all delivered; %d duplicates", rounds, len(acked), duplicates)
	suite.add("ACKed jobs across kills", len(acked))
	suite.add("ACKed jobs lost", 0)
	suite.add("duplicate deliveries (in flight at a kill)", duplicates)
}

// A graceful stop under load: every ACKed job is in the journal afterwards,
// REQUESTs that arrive while stopping are refused with ERROR unavailable
// (or not read at all), workers get KBYE.
func TestGracefulStopUnderLoad(t *testing.T) {
	t.Parallel()
	// A long heartbeat timeout: on a loaded machine (CI's race run) a
	// stall of half a second would drop the worker before the stop, and
	// a worker dropped gets no KBYE.
	b := bt.Start(t, "", func(o *broker.Options) { fast(o); o.HeartbeatTimeout = time.Minute })
	worker := bt.Dial(t, b.Backend(), "w")
	worker.Inform("other")
	worker.KeepAlive(50 * time.Millisecond) // a worker until the stop, however long the load takes
	client := dialRaw(t, b.Frontend(), "c")
	go func() {
		for client.send(&emqp.Request{MsgID: emqp.NewID(), Queue: "q", Payload: []byte("x")}) == nil {
		}
	}()
	acked, refused := map[string]bool{}, 0
	stopped := make(chan error, 1)
	for {
		m, open := client.next(t, "an ACK or an ERROR, or the connection's end at the stop")
		if !open {
			break
		}
		switch m := m.(type) {
		case *emqp.Ack:
			acked[m.AckedID] = true
			if len(acked) == 500 {
				go func() { stopped <- b.Stop() }()
			}
		case *emqp.Error:
			if m.Code != emqp.CodeUnavailable {
				t.Fatalf("ERROR %+v while stopping, want unavailable", m)
			}
			refused++
		}
	}
	if err := testutil.RecvWithin(t, time.Minute, stopped, "the stop's end"); err != nil {
		t.Fatal(err)
	}
	if m, ok := worker.TryRecv(bt.Wait); !ok || m.Command() != emqp.CmdKbye {
		t.Fatalf("worker got %v, want KBYE", m)
	}
	b2 := bt.Start(t, b.Dir, fast)
	w2 := bt.Worker(t, b2.Backend(), "w2", "q")
	w2.Ready(len(acked) + 1000) // jobs stored whose ACK was not read come too
	for len(acked) > 0 {
		m, ok := w2.TryRecv(bt.Wait)
		if !ok {
			t.Fatalf("%d ACKed jobs missing after a graceful stop", len(acked))
		}
		delete(acked, m.(*emqp.Request).MsgID)
	}
	t.Logf("refused while stopping: %d", refused)
}
