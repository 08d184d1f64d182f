package broker_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"

	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/emqp"
	bt "github.com/eventmq/emq/internal/brokertest"
	"github.com/eventmq/emq/store"
)

// inFlightFixture is a broker whose worker holds held jobs of queue q,
// and waiting more jobs pending behind them; it returns the held msgids.
func inFlightFixture(t *testing.T, held, waiting int) (*bt.Broker, map[string]bool) {
	t.Helper()
	b := bt.Start(t, "", fast)
	client := bt.Dial(t, b.Frontend(), "c")
	w := bt.Worker(t, b.Backend(), "w", "q")
	ids := map[string]bool{}
	for range held + waiting {
		client.Request("q", "", []byte("x"))
	}
	w.Ready(held)
	for range held {
		ids[bt.Expect[*emqp.Request](w).MsgID] = true
	}
	return b, ids
}

// Admin calls whose callers give up at any moment (a context cancelled
// before, during or after the loop answers, thousands of times, under
// -race) never race the loop, and every answer that comes is whole.
// Before the named API, a caller that gave up could read a map the loop
// was still filling: a fatal concurrent map write that ended the broker.
func TestAdminCallsCancelledMidFlight(t *testing.T) {
	t.Parallel()
	const held, waiting = 300, 50
	b, ids := inFlightFixture(t, held, waiting)
	var some string
	for id := range ids {
		some = id
		break
	}
	calls := []struct {
		name string
		call func(ctx context.Context) error
	}{
		{"InFlight", func(ctx context.Context) error {
			m, err := b.InFlight(ctx, "q")
			if err == nil && len(m) != held {
				return fmt.Errorf("%d jobs in flight, want %d", len(m), held)
			}
			return err
		}},
		{"Queues", func(ctx context.Context) error {
			qs, err := b.Queues(ctx)
			if err == nil && (len(qs) != 1 || qs[0].InFlight != held || qs[0].Pending != waiting) {
				return fmt.Errorf("queues %+v, want q with %d in flight and %d pending", qs, held, waiting)
			}
			return err
		}},
		{"Job", func(ctx context.Context) error {
			j, h, err := b.Job(ctx, some)
			if err == nil && (j.MsgID != some || h.Worker != "w") {
				return fmt.Errorf("job %s held by %q, want %s held by w", j.MsgID, h.Worker, some)
			}
			return err
		}},
		{"ListJobs", func(ctx context.Context) error {
			l, err := b.ListJobs(ctx, store.ListOptions{Queue: "q", Limit: 1000}, true)
			if err == nil && len(l.Jobs) != held {
				return fmt.Errorf("%d jobs listed in flight, want %d", len(l.Jobs), held)
			}
			return err
		}},
		{"State", func(ctx context.Context) error {
			s, err := b.State(ctx)
			if err == nil && (s.Workers != 1 || len(s.Queues) != 1 || s.Queues[0].InFlight != held) {
				return fmt.Errorf("state %+v, want one worker and q with %d in flight", s, held)
			}
			return err
		}},
		{"Workers", func(ctx context.Context) error {
			ws, err := b.Workers(ctx)
			if err == nil && (len(ws) != 1 || ws[0].InFlight != held) {
				return fmt.Errorf("workers %+v, want w holding %d", ws, held)
			}
			return err
		}},
		{"ChangeQueue", func(ctx context.Context) error {
			n := rand.IntN(1000) + held // the worker has no slot free: no limit that changes anything
			s, err := b.ChangeQueue(ctx, "q", broker.QueueChange{Concurrency: &n})
			if err == nil && s.Concurrency != n {
				return fmt.Errorf("concurrency %d, want %d", s.Concurrency, n)
			}
			return err
		}},
	}
	rounds := 3000
	if testing.Short() {
		rounds = 500
	}
	var wg sync.WaitGroup
	errs := make(chan error, rounds)
	answered, gaveUp := make([]int, len(calls)), make([]int, len(calls))
	var mu sync.Mutex
	for i := range rounds {
		k := i % len(calls)
		c := calls[k]
		ctx, cancel := context.WithCancel(context.Background())
		wg.Go(func() {
			err := c.call(ctx)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				answered[k]++
			case errors.Is(err, context.Canceled):
				gaveUp[k]++
			default:
				errs <- fmt.Errorf("%s: %w", c.name, err)
			}
		})
		// The caller gives up at once, after a moment, or not before the
		// answer: the three places a context can end.
		switch i % 3 {
		case 0:
			cancel()
		case 1:
			go func() { runtime.Gosched(); cancel() }()
		default:
			defer cancel()
		}
		if i%64 == 63 {
			wg.Wait() // a bounded number of callers at once
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for k, c := range calls {
		if answered[k] == 0 {
			t.Errorf("%s: never answered in %d calls", c.name, answered[k]+gaveUp[k])
		}
		t.Logf("%s: %d answered, %d given up", c.name, answered[k], gaveUp[k])
	}
	// The loop is whole: it answers, and its state is as it was.
	if m, err := b.InFlight(context.Background(), "q"); err != nil || len(m) != held {
		t.Fatalf("after the calls: %d in flight, %v; want %d", len(m), err, held)
	}
}
