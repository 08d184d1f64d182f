package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/client"
	"github.com/eventmq/emq/emqp"
	bt "github.com/eventmq/emq/internal/brokertest"
	"github.com/eventmq/emq/store"
)

// Priority orders the queue; Unique refuses a second job with the key as
// ErrDuplicate naming the first; Cancel takes a job out, and says
// ErrConflict and ErrNotFound for what it cannot cancel.
func TestPriorityUniqueAndCancel(t *testing.T) {
	t.Parallel()
	b := bt.Start(t, "", func(o *broker.Options) { o.ResultTTL = time.Hour })
	c := newClient(t, b.Frontend())
	ctx := context.Background()

	later, err := c.Send(ctx, "q", nil, client.Priority(9))
	if err != nil {
		t.Fatal(err)
	}
	first, err := c.Send(ctx, "q", nil, client.Priority(0), client.Unique("user-42", time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Send(ctx, "q", nil, client.Unique("user-42", 0))
	var be *client.BrokerError
	if !errors.Is(err, client.ErrDuplicate) || !errors.As(err, &be) || be.Holder != first {
		t.Fatalf("second Send with the key: %v (%+v); want ErrDuplicate held by %s", err, be, first)
	}
	w := bt.Worker(t, b.Backend(), "w", "q")
	w.Ready(1)
	if req := bt.Expect[*emqp.Request](w); req.MsgID != first {
		t.Fatalf("first job given: %s; want the priority 0 one %s", req.MsgID, first)
	}

	if err := c.Cancel(ctx, later); err != nil {
		t.Fatalf("Cancel: %v", err)
	}
	if j, _, err := b.Job(ctx, later); err != nil || j.State != store.Cancelled {
		t.Fatalf("cancelled job: %+v, %v", j, err)
	}
	if err := c.Cancel(ctx, later); !errors.Is(err, client.ErrConflict) {
		t.Fatalf("Cancel again: %v; want ErrConflict", err)
	}
	if err := c.Cancel(ctx, "never-sent"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("Cancel of an unknown job: %v; want ErrNotFound", err)
	}
	if err := c.Cancel(ctx, first); err != nil { // in flight
		t.Fatalf("Cancel of the running job: %v", err)
	}
	if m := bt.Expect[*emqp.Cancel](w); m.OrigMsgID != first {
		t.Fatalf("CANCEL for %s", m.OrigMsgID)
	}
	// Cancelled, it lets its key go.
	if _, err := c.Send(ctx, "q", nil, client.Unique("user-42", 0)); err != nil {
		t.Fatalf("Send with the key of a cancelled job: %v", err)
	}
}
