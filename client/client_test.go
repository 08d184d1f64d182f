package client_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/client"
	"github.com/eventmq/emq/emqp"
	bt "github.com/eventmq/emq/internal/brokertest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newClient(t *testing.T, frontend string) *client.Client {
	t.Helper()
	c, err := client.New(client.Options{Broker: frontend, ResendAfter: 200 * time.Millisecond, Logger: bt.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestBrokerErrorIsAGoError(t *testing.T) {
	t.Parallel()
	b := bt.Start(t, "", func(o *broker.Options) { o.MaxPending = 1 })
	c := newClient(t, b.Frontend())
	ctx := context.Background()
	if _, err := c.Send(ctx, "q", nil); err != nil {
		t.Fatal(err)
	}
	_, err := c.Send(ctx, "q", nil)
	var be *client.BrokerError
	if !errors.As(err, &be) || be.Code != emqp.CodeQueueFull || !strings.Contains(err.Error(), "max-pending") {
		t.Fatalf("second Send: %v, want a queue_full BrokerError", err)
	}
	if _, err := c.Send(ctx, "other", nil, client.Header("timeout", "soon")); !errors.As(err, &be) || be.Code != emqp.CodeBadRequest {
		t.Fatalf("bad header: %v, want bad_request", err)
	}
	if _, err := c.Send(ctx, "", nil); err == nil {
		t.Fatal("an empty queue name was sent")
	}
}

// A payload over the broker's frame limit is a BrokerError at once, not
// a resend until the context ends.
func TestTooLargeIsAnError(t *testing.T) {
	t.Parallel()
	b := bt.Start(t, "", func(o *broker.Options) { o.MaxFrameSize = 4096 })
	c := newClient(t, b.Frontend())
	ctx, cancel := context.WithTimeout(context.Background(), bt.Wait)
	defer cancel()
	_, err := c.Send(ctx, "q", make([]byte, 5000))
	var be *client.BrokerError
	if !errors.As(err, &be) || be.Code != emqp.CodeTooLarge {
		t.Fatalf("Send of 5000 bytes to a 4096-byte limit: %v, want a too_large BrokerError", err)
	}
	if _, err := c.Send(ctx, "q", make([]byte, 100)); err != nil {
		t.Fatalf("the client did not recover from the closed connection: %v", err)
	}
}

func TestSameMsgIDIsOneJob(t *testing.T) {
	t.Parallel()
	b := bt.Start(t, "", nil)
	c := newClient(t, b.Frontend())
	id := emqp.NewID()
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				_, err := c.Send(context.Background(), "q", nil, client.MsgID(id))
				if err == nil {
					return
				}
				if !strings.Contains(err.Error(), "in flight") {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	worker := bt.Dial(t, b.Backend(), "w")
	worker.Inform("q")
	worker.Ready(2)
	if got := bt.Expect[*emqp.Request](worker); got.MsgID != id {
		t.Fatal(got.MsgID)
	}
	if m, ok := worker.TryRecv(200 * time.Millisecond); ok {
		t.Fatalf("a second job: %+v", m)
	}
	if n, d := b.Stats().Acked, b.Stats().Duplicates; n != 1 || d != 2 {
		t.Errorf("stored %d, duplicates %d; want 1 and 2", n, d)
	}
}

// Sends made while no broker runs succeed once one starts.
func TestSendWaitsForTheBroker(t *testing.T) {
	t.Parallel()
	frontend := bt.FreeEndpoint(t)
	c := newClient(t, frontend)
	ctx, cancel := context.WithTimeout(context.Background(), bt.Wait)
	defer cancel()
	errs := make(chan error, 1)
	go func() { _, err := c.Send(ctx, "q", []byte("early")); errs <- err }()
	bt.Start(t, "", func(o *broker.Options) { o.Frontend = frontend })
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
}

func TestNoBrokerNamesTheAddress(t *testing.T) {
	t.Parallel()
	frontend := bt.FreeEndpoint(t)
	c := newClient(t, frontend)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err := c.Send(ctx, "q", nil)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), frontend) ||
		!strings.Contains(err.Error(), "is the broker running?") {
		t.Fatalf("Send without a broker: %v", err)
	}
}

// Schedule keeps a schedule in the broker: its jobs reach a worker, the
// first at once and then each interval; a bad cron expression is a
// BrokerError; Unschedule removes it from the journal.
func TestScheduleAndUnschedule(t *testing.T) {
	t.Parallel()
	b := bt.Start(t, "", nil)
	c := newClient(t, b.Frontend())
	ctx := t.Context()
	w := bt.Worker(t, b.Backend(), "w", "ticks")
	w.Ready(10)
	if err := c.Schedule(ctx, "ticks", client.Every(time.Second), []byte("tick"), client.ScheduleID("tick")); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for len(seen) < 2 {
		r := bt.Expect[*emqp.Request](w)
		if string(r.Payload) != "tick" || !strings.HasPrefix(r.MsgID, "schedule-") {
			t.Fatalf("a fire's job: %q %q", r.MsgID, r.Payload)
		}
		seen[r.MsgID] = true
		w.Reply(r.MsgID, nil)
	}
	var be *client.BrokerError
	if err := c.Schedule(ctx, "ticks", client.At("61 * * * *"), []byte("x")); !errors.As(err, &be) || be.Code != emqp.CodeBadRequest {
		t.Fatalf("bad cron: %v, want bad_request", err)
	}
	if err := c.Schedule(ctx, "ticks", client.Every(0), []byte("x")); err == nil || !strings.Contains(err.Error(), "Every") {
		t.Fatalf("Every(0): %v, want an error", err)
	}
	if err := c.Unschedule(ctx, "ticks", []byte("tick"), client.ScheduleID("tick")); err != nil {
		t.Fatal(err)
	}
	ss, _, err := b.Schedules("", 0)
	if err != nil || len(ss) != 0 {
		t.Fatalf("after Unschedule: %+v %v", ss, err)
	}
}
