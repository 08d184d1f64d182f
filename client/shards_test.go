package client_test

import (
	"context"
	"errors"
	"testing"

	"github.com/eventmq/emq/client"
	"github.com/eventmq/emq/emqp"
	bt "github.com/eventmq/emq/internal/brokertest"
	"github.com/eventmq/emq/store"
)

// TestClientRoutesByQueue: a client given shard a's frontend stores each
// job on its queue's shard, and when a queue is placed elsewhere after
// it read the placement, follows ERROR moved to the new shard with the
// same msgid. Cancel finds a job on whichever shard holds it.
func TestClientRoutesByQueue(t *testing.T) {
	shards, table := bt.StartShards(t, "a", "b")
	table.Queues["qa"], table.Queues["qb"] = "a", "b"
	bt.SetShards(t, shards, table)

	c, err := client.New(client.Options{Broker: shards["a"].Frontend(), Logger: bt.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), bt.Wait)
	defer cancel()
	ida, err := c.Send(ctx, "qa", []byte("a"))
	if err != nil {
		t.Fatal(err)
	}
	idb, err := c.Send(ctx, "qb", []byte("b"))
	if err != nil {
		t.Fatal(err)
	}
	holds := func(shard, msgid string) bool {
		j, err := shards[shard].JournalJob(msgid)
		return err == nil && j != nil
	}
	if !holds("a", ida) || holds("b", ida) || !holds("b", idb) || holds("a", idb) {
		t.Fatal("a job is not on its queue's shard alone")
	}
	if n := shards["a"].Stats().Errors(emqp.CodeMoved); n != 0 {
		t.Fatalf("shard a refused %d jobs as moved: the client did not route by the placement", n)
	}

	// qb goes to shard a; the client still has the old placement.
	table.Queues["qb"] = "a"
	bt.SetShards(t, shards, table)
	id, err := c.Send(ctx, "qb", []byte("b again"), client.MsgID("qb-after"))
	if err != nil || id != "qb-after" || !holds("a", "qb-after") || holds("b", "qb-after") {
		t.Fatalf("after qb was placed on a: %q, %v; want it stored on a alone", id, err)
	}
	if n := shards["b"].Stats().Errors(emqp.CodeMoved); n != 1 {
		t.Fatalf("shard b answered ERROR moved %d times, want once", n)
	}
	// The job stored on b before stays there; Cancel finds it.
	if err := c.Cancel(ctx, idb); err != nil {
		t.Fatalf("cancel of a job on the other shard: %v", err)
	}
	if j, err := shards["b"].JournalJob(idb); err != nil || j.State != store.Cancelled {
		if !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("job %s on b after Cancel: %+v, %v", idb, j, err)
		}
	}
	if err := c.Cancel(ctx, "no-such-job"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("cancel of a job no shard holds: %v, want ErrNotFound", err)
	}
}
