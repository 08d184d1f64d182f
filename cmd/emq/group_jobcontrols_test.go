package main

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/eventmq/emq/client"
	"github.com/eventmq/emq/emqp"
	bt "github.com/eventmq/emq/internal/brokertest"
	"github.com/eventmq/emq/internal/etcdtest"
)

// After a failover the new leader dispatches by priority as the old one
// would have (it loads the queue from etcd in FIFO order and orders it
// again), and a unique key held before it is held still.
func TestGroupFailoverKeepsPrioritiesAndUniqueKeys(t *testing.T) {
	etcd := etcdtest.Start(t, 3)
	a, b := newGroupBroker(t, etcd.Endpoints(), "a"), newGroupBroker(t, etcd.Endpoints(), "b")
	leader := leaderOf(t, a, b)
	standby := a
	if leader == a {
		standby = b
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.New(client.Options{Broker: leader.frontend, Logger: bt.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	type sent struct {
		id   string
		prio uint16
	}
	var jobs []sent
	for _, p := range []uint16{7, 3, 1024, 0, 3, 7, 65535, 1} {
		id, err := c.Send(ctx, "q", nil, client.Priority(p))
		if err != nil {
			t.Fatal(err)
		}
		jobs = append(jobs, sent{id, p})
	}
	holder, err := c.Send(ctx, "u", nil, client.Unique("nightly-report", time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	slices.SortStableFunc(jobs, func(x, y sent) int { return int(x.prio) - int(y.prio) })
	var want []string
	for _, j := range jobs {
		want = append(want, j.id)
	}

	leader.kill()
	leaderOf(t, standby)
	c2, err := client.New(client.Options{Broker: standby.frontend, Logger: bt.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	_, err = c2.Send(ctx, "u", nil, client.Unique("nightly-report", 0))
	var be *client.BrokerError
	if !errors.Is(err, client.ErrDuplicate) || !errors.As(err, &be) || be.Holder != holder {
		t.Fatalf("the key after the failover: %v; want ErrDuplicate held by %s", err, holder)
	}
	w := bt.Worker(t, standby.backend, "w", "q")
	var got []string
	for range want {
		w.Ready(1)
		req := bt.Expect[*emqp.Request](w)
		got = append(got, req.MsgID)
		w.Reply(req.MsgID, nil)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("after the failover, ran %v\nwant %v", got, want)
	}
}
