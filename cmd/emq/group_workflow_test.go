package main

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/eventmq/emq/client"
	"github.com/eventmq/emq/emqp"
	bt "github.com/eventmq/emq/internal/brokertest"
	"github.com/eventmq/emq/internal/etcdtest"
)

// A fan-out of 1,000 jobs in a batch with a callback after it, and a chain
// of three, half run when the leader is killed: the new leader, from
// etcd, runs the rest, then the callback once after them all, and the
// chain in order.
func TestGroupFailoverKeepsWorkflows(t *testing.T) {
	etcd := etcdtest.Start(t, 3)
	a, b := newGroupBroker(t, etcd.Endpoints(), "a"), newGroupBroker(t, etcd.Endpoints(), "b")
	leader := leaderOf(t, a, b)
	standby := a
	if leader == a {
		standby = b
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := client.New(client.Options{Broker: leader.frontend, Logger: bt.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fan := map[string]bool{}
	for range 1000 {
		id, err := c.Send(ctx, "fan", nil, client.Batch("b", false))
		if err != nil {
			t.Fatal(err)
		}
		fan[id] = true
	}
	callback, err := c.Send(ctx, "fan", []byte("callback"), client.AfterBatch("b"))
	if err != nil {
		t.Fatal(err)
	}
	var chain []string
	for i := range 3 {
		var opts []client.Option
		if i > 0 {
			opts = append(opts, client.After(chain[i-1]))
		}
		id, err := c.Send(ctx, "chain", nil, opts...)
		if err != nil {
			t.Fatal(err)
		}
		chain = append(chain, id)
	}
	w := bt.Worker(t, leader.backend, "w", "fan")
	ran := map[string]bool{}
	for range 500 {
		w.Ready(1)
		req := bt.Expect[*emqp.Request](w)
		ran[req.MsgID] = true
		w.Reply(req.MsgID, nil)
	}
	w.Sync() // the REPLYs are in before the kill (their Completes may not be: then they run again)

	leader.kill()
	leaderOf(t, standby)
	w2 := bt.Worker(t, standby.backend, "w2", `[[10,"fan"],[5,"chain"]]`)
	w2.Ready(1)
	var order []string
	for {
		req := bt.Expect[*emqp.Request](w2)
		w2.Reply(req.MsgID, nil)
		if req.MsgID == callback {
			for id := range fan {
				if !ran[id] {
					t.Fatalf("the callback ran before job %s of its batch", id)
				}
			}
		}
		if fan[req.MsgID] {
			ran[req.MsgID] = true
		} else {
			order = append(order, req.MsgID)
		}
		if len(order) == 4 {
			break
		}
		w2.Ready(1)
	}
	if slices.Index(order, callback) < 0 || !slices.Equal(slices.DeleteFunc(order, func(id string) bool { return id == callback }), chain) {
		t.Fatalf("after the failover ran %v; want the callback once and the chain %v in order", order, chain)
	}
}
