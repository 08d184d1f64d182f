package grouptest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eventmq/emq/client"
	bt "github.com/eventmq/emq/internal/brokertest"
	"github.com/eventmq/emq/internal/testutil"
	"github.com/eventmq/emq/worker"
)

// Load is senders and a worker given every member of a group: it
// records what was ACKed and what ran.
type Load struct {
	t       testing.TB
	mu      sync.Mutex
	acked   []string
	ran     map[string]int
	sendErr error
	cancel  context.CancelFunc // the senders'
	stopW   context.CancelFunc // the worker's
	sending sync.WaitGroup
	working sync.WaitGroup
}

// StartLoad runs senders clients sending to queue at the group's
// frontends, each a job at a time, and a worker on the group's backends.
func (c *Cluster) StartLoad(t testing.TB, senders int, queue string) *Load {
	t.Helper()
	l := &Load{t: t, ran: map[string]int{}}
	ctx, cancel := context.WithCancel(context.Background())
	wctx, wcancel := context.WithCancel(context.Background())
	l.cancel, l.stopW = cancel, wcancel
	w, err := worker.New(worker.Options{Broker: c.Backends(), Concurrency: 16, Logger: bt.Logger(t),
		HeartbeatInterval: 100 * time.Millisecond, HeartbeatTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	w.Handle(queue, func(_ context.Context, j *worker.Job) ([]byte, error) {
		l.mu.Lock()
		l.ran[j.MsgID]++
		l.mu.Unlock()
		return nil, nil
	})
	l.working.Go(func() { w.Run(wctx) })
	for range senders {
		cl, err := client.New(client.Options{Broker: c.Frontends(), ResendAfter: 500 * time.Millisecond, Logger: bt.Logger(t)})
		if err != nil {
			t.Fatal(err)
		}
		l.sending.Go(func() {
			defer cl.Close()
			for ctx.Err() == nil {
				sctx, scancel := context.WithTimeout(ctx, 30*time.Second)
				id, err := cl.Send(sctx, queue, []byte("payload"))
				scancel()
				l.mu.Lock()
				switch {
				case err == nil:
					l.acked = append(l.acked, id)
				case ctx.Err() == nil && l.sendErr == nil:
					l.sendErr = err
				}
				l.mu.Unlock()
			}
		})
	}
	t.Cleanup(func() { l.Stop(); l.stopW(); l.working.Wait() })
	return l
}

// Stop stops the senders; the worker runs on (Check stops it).
func (l *Load) Stop() { l.cancel(); l.sending.Wait() }

// Acked is how many jobs were ACKed so far.
func (l *Load) Acked() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.acked)
}

// WaitAcks waits until n more jobs are ACKed.
func (l *Load) WaitAcks(t testing.TB, n int, what string) {
	t.Helper()
	from := l.Acked()
	testutil.Eventually(t, what, func() bool { return l.Acked() >= from+n })
}

// Check stops the senders, waits until every ACKed job ran, and fails
// the test if one did not, or a send failed. It stops the worker, and
// returns how many were ACKed and how many runs were beyond a job's
// first.
func (l *Load) Check(t testing.TB) (acked, again int) {
	t.Helper()
	l.Stop()
	unrun := func() []string {
		l.mu.Lock()
		defer l.mu.Unlock()
		var ids []string
		for _, id := range l.acked {
			if l.ran[id] == 0 {
				ids = append(ids, id)
			}
		}
		return ids
	}
	deadline := time.Now().Add(Wait)
	for len(unrun()) > 0 && time.Now().Before(deadline) {
		<-time.After(10 * time.Millisecond) // polling the worker's count, with a deadline
	}
	l.stopW()
	l.working.Wait()
	if lost := unrun(); len(lost) > 0 {
		t.Errorf("%d of %d ACKed jobs never ran, among them %s", len(lost), l.Acked(), strings.Join(lost[:min(len(lost), 5)], " "))
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.sendErr != nil {
		t.Errorf("a Send returned an error: %v", l.sendErr)
	}
	for _, n := range l.ran {
		again += n - 1
	}
	return len(l.acked), again
}

// String says how much the load did.
func (l *Load) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return fmt.Sprintf("%d jobs ACKed, %d ran", len(l.acked), len(l.ran))
}
