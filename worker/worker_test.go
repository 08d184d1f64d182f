package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/client"
	"github.com/eventmq/emq/emqp"
	bt "github.com/eventmq/emq/internal/brokertest"
	"github.com/eventmq/emq/internal/testutil"
	"github.com/eventmq/emq/worker"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func fast(o *broker.Options) {
	o.HeartbeatInterval = 50 * time.Millisecond
	o.HeartbeatTimeout = 500 * time.Millisecond
	o.RetryBackoff = 10 * time.Millisecond
}

// startWorker runs a worker until the test ends; stop stops it early and
// returns Run's error.
func startWorker(t *testing.T, backend string, opts worker.Options, handlers map[string]worker.Handler) (stop func() error) {
	t.Helper()
	opts.Broker = backend
	opts.Logger = bt.Logger(t)
	if opts.HeartbeatInterval == 0 {
		opts.HeartbeatInterval, opts.HeartbeatTimeout = 50*time.Millisecond, 500*time.Millisecond
	}
	w, err := worker.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	for q, h := range handlers {
		w.Handle(q, h)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	var once sync.Once
	var runErr error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case runErr = <-done:
			case <-time.After(bt.Wait):
				runErr = errors.New("worker did not stop")
			}
		})
		return runErr
	}
	t.Cleanup(func() { stop() })
	return stop
}

func newClient(t *testing.T, frontend string) *client.Client {
	t.Helper()
	c, err := client.New(client.Options{Broker: frontend, ResendAfter: 200 * time.Millisecond, Logger: bt.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func ctxWait(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), bt.Wait)
	t.Cleanup(cancel)
	return ctx
}

func TestRoundTrip(t *testing.T) {
	t.Parallel()
	b := bt.Start(t, "", fast)
	startWorker(t, b.Backend(), worker.Options{}, map[string]worker.Handler{
		"echo": func(_ context.Context, j *worker.Job) ([]byte, error) {
			return append([]byte("echo:"), j.Payload...), nil
		},
	})
	c := newClient(t, b.Frontend())
	ctx := ctxWait(t)
	reply, err := c.Request(ctx, "echo", []byte("hi"))
	if err != nil || string(reply) != "echo:hi" {
		t.Fatalf("Request: %q, %v", reply, err)
	}
	id, err := c.Send(ctx, "echo", []byte("fire and forget"))
	if err != nil || id == "" {
		t.Fatalf("Send: %q, %v", id, err)
	}
	bt.Eventually(t, "both replied", func() bool { return b.Stats().Replied == 2 })
}

func TestEveryQueueNeedsAHandler(t *testing.T) {
	t.Parallel()
	w, err := worker.New(worker.Options{Broker: "tcp://127.0.0.1:1", Queues: []worker.Queue{{Name: "a"}, {Name: "b"}}})
	if err != nil {
		t.Fatal(err)
	}
	w.Handle("a", func(context.Context, *worker.Job) ([]byte, error) { return nil, nil })
	if err := w.Run(context.Background()); err == nil || !strings.Contains(err.Error(), `queue "b" has no handler`) {
		t.Fatalf("Run with a queue and no handler: %v", err)
	}
}

// A queue name the broker would refuse fails Run at once, by name,
// rather than a worker that connects, is refused and tries again.
func TestABadQueueNameFailsRun(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("q", emqp.MaxQueueLen+1)
	for _, name := range []string{long, "\xff"} {
		w, err := worker.New(worker.Options{Broker: "tcp://127.0.0.1:1"})
		if err != nil {
			t.Fatal(err)
		}
		w.Handle(name, func(context.Context, *worker.Job) ([]byte, error) { return nil, nil })
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err = w.Run(ctx)
		cancel()
		if err == nil || !strings.Contains(err.Error(), "a queue name is 1 to") || len(err.Error()) > 300 {
			t.Fatalf("Run with queue %.20q: %v", name, err)
		}
	}
}

func TestConcurrencyIsHonoured(t *testing.T) {
	t.Parallel()
	b := bt.Start(t, "", fast)
	var running, peak atomic.Int32
	gate := make(chan struct{})
	startWorker(t, b.Backend(), worker.Options{Concurrency: 3}, map[string]worker.Handler{
		"q": func(ctx context.Context, _ *worker.Job) ([]byte, error) {
			n := running.Add(1)
			defer running.Add(-1)
			for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
			}
			<-gate
			return nil, nil
		},
	})
	c := newClient(t, b.Frontend())
	ctx := ctxWait(t)
	var wg sync.WaitGroup
	for range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := c.Request(ctx, "q", nil); err != nil {
				t.Error(err)
			}
		}()
	}
	bt.Eventually(t, "3 jobs running", func() bool { return running.Load() == 3 })
	close(gate)
	wg.Wait()
	if p := peak.Load(); p != 3 {
		t.Fatalf("at most %d jobs ran at once, want 3", p)
	}
}

func TestTimeoutCancelsTheHandler(t *testing.T) {
	t.Parallel()
	b := bt.Start(t, "", fast)
	got := make(chan error, 1)
	startWorker(t, b.Backend(), worker.Options{}, map[string]worker.Handler{
		"slow": func(ctx context.Context, j *worker.Job) ([]byte, error) {
			if j.Attempt > 1 {
				return []byte("second time"), nil
			}
			<-ctx.Done()
			got <- ctx.Err()
			return nil, ctx.Err()
		},
	})
	c := newClient(t, b.Frontend())
	reply, err := c.Request(ctxWait(t), "slow", nil, client.Timeout(time.Second))
	if err != nil || string(reply) != "second time" {
		t.Fatalf("Request: %q, %v", reply, err)
	}
	if err := <-got; !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("handler's context ended with %v, want the deadline", err)
	}
}

func TestPanicFailsAndIsRetried(t *testing.T) {
	t.Parallel()
	b := bt.Start(t, "", fast)
	startWorker(t, b.Backend(), worker.Options{}, map[string]worker.Handler{
		"fragile": func(_ context.Context, j *worker.Job) ([]byte, error) {
			if j.Attempt == 1 {
				panic("first attempt breaks")
			}
			return []byte(fmt.Sprint("attempt ", j.Attempt)), nil
		},
	})
	c := newClient(t, b.Frontend())
	reply, err := c.Request(ctxWait(t), "fragile", nil)
	if err != nil || string(reply) != "attempt 2" {
		t.Fatalf("Request: %q, %v", reply, err)
	}
	if b.Stats().Failed != 1 {
		t.Errorf("failed = %d, want the panic's FAIL", b.Stats().Failed)
	}
}

func TestGracefulStopFinishesRunningJobs(t *testing.T) {
	t.Parallel()
	b := bt.Start(t, "", fast)
	started, release := make(chan struct{}), make(chan struct{})
	var finished atomic.Bool
	stop := startWorker(t, b.Backend(), worker.Options{Concurrency: 2}, map[string]worker.Handler{
		"q": func(ctx context.Context, _ *worker.Job) ([]byte, error) {
			close(started)
			<-release
			finished.Store(true)
			return []byte("finished"), nil
		},
	})
	c := newClient(t, b.Frontend())
	replied := requestAsync(t, c, "q")
	<-started
	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()
	select {
	case <-stopped:
		t.Fatal("the worker stopped before its running job finished")
	case <-time.After(100 * time.Millisecond): // it must still be waiting
	}
	close(release)
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	if !finished.Load() {
		t.Fatal("Run returned before the job finished")
	}
	if r := <-replied; string(r) != "finished" {
		t.Fatalf("the client got %q", r)
	}
}

// The broker restarts while a client sends and a worker works: every
// Send succeeds (the client resends until ACKed), every ACKed job runs,
// and the worker reconnects by itself.
func TestBrokerRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	frontend, backend := bt.FreeEndpoint(t), bt.FreeEndpoint(t)
	onPorts := func(o *broker.Options) { fast(o); o.Frontend, o.Backend = frontend, backend }
	b := bt.Start(t, dir, onPorts)
	var mu sync.Mutex
	ran := map[string]bool{}
	startWorker(t, backend, worker.Options{Concurrency: 4}, map[string]worker.Handler{
		"q": func(_ context.Context, j *worker.Job) ([]byte, error) {
			mu.Lock()
			ran[j.MsgID] = true
			mu.Unlock()
			return nil, nil
		},
	})
	c := newClient(t, frontend)
	ctx := ctxWait(t)
	var sent sync.Map
	var wg sync.WaitGroup
	var count atomic.Int32
	for s := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 100 {
				id, err := c.Send(ctx, "q", []byte(fmt.Sprint(s, "-", i)))
				if err != nil {
					t.Errorf("Send across a broker restart: %v", err)
					return
				}
				sent.Store(id, true)
				count.Add(1)
			}
		}()
	}
	bt.Eventually(t, "some jobs sent", func() bool { return count.Load() > 50 })
	if err := b.Stop(); err != nil {
		t.Fatal(err)
	}
	bt.Start(t, dir, onPorts)
	wg.Wait()
	bt.Eventually(t, "every ACKed job ran", func() bool {
		mu.Lock()
		defer mu.Unlock()
		missing := 0
		sent.Range(func(k, _ any) bool {
			if !ran[k.(string)] {
				missing++
			}
			return true
		})
		return missing == 0
	})
}

// An EventMQ-style Python client (python3-zmq) reaches a Go function
// registered for its ["run", {...}] payload.
func TestEventMQPayloadFromPython(t *testing.T) {
	t.Parallel()
	python := testutil.Python(t, false)
	b := bt.Start(t, "", fast)
	var calls worker.Callables
	calls.Register("mathjobs:add", func(_ context.Context, args []json.RawMessage, kwargs map[string]json.RawMessage) (any, error) {
		var x, y int
		if len(args) != 2 || json.Unmarshal(args[0], &x) != nil || json.Unmarshal(args[1], &y) != nil {
			return nil, fmt.Errorf("want two numbers, got %s", args)
		}
		var scale int = 1
		if v, ok := kwargs["scale"]; ok {
			json.Unmarshal(v, &scale)
		}
		return (x + y) * scale, nil
	})
	startWorker(t, b.Backend(), worker.Options{}, map[string]worker.Handler{"default": calls.Handler()})
	out, err := exec.Command(python, "testdata/eventmq_client.py", b.Frontend()).CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "50" {
		t.Fatalf("eventmq_client.py: %v\n%s", err, out)
	}
}

// A job running while the connection breaks finishes, and its REPLY is
// delivered on the worker's new connection (the broker still counts it:
// same routing id, within the heartbeat timeout).
func TestReplyAfterReconnect(t *testing.T) {
	t.Parallel()
	b := bt.Start(t, "", func(o *broker.Options) { fast(o); o.HeartbeatTimeout = 5 * time.Second })
	started, release := make(chan struct{}), make(chan struct{})
	startWorker(t, b.Backend(), worker.Options{Identity: "steady-worker"}, map[string]worker.Handler{
		"q": func(context.Context, *worker.Job) ([]byte, error) {
			close(started)
			<-release
			return []byte("done anyway"), nil
		},
	})
	c := newClient(t, b.Frontend())
	replied := requestAsync(t, c, "q")
	<-started
	// A connection with the worker's routing id takes it over: the
	// worker's own connection is closed under it.
	thief := bt.Dial(t, b.Backend(), "steady-worker")
	thief.Send(&emqp.Heartbeat{MsgID: emqp.NewID()})
	bt.Eventually(t, "the worker back on its routing id", thief.Gone)
	close(release)
	if r := <-replied; string(r) != "done anyway" {
		t.Fatalf("client got %q", r)
	}
	if n := b.Stats().Dispatched; n != 1 {
		t.Errorf("dispatched %d times, want once", n)
	}
}

// requestAsync sends a Request on queue and returns where its REPLY's
// payload arrives.
func requestAsync(t *testing.T, c *client.Client, queue string) <-chan []byte {
	replied := make(chan []byte, 1)
	go func() {
		r, err := c.Request(ctxWait(t), queue, nil)
		if err != nil {
			t.Error(err)
		}
		replied <- r
	}()
	return replied
}
