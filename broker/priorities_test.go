package broker_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"testing"

	"github.com/eventmq/emq/emqp"
	bt "github.com/eventmq/emq/internal/brokertest"
)

// prioritised sends jobs with the given priorities (-1: no header) in
// that order and returns their msgids in the order they must run: by
// priority, lower first, the header's absence counting as 1024, then in
// the order they were sent.
func prioritised(t *testing.T, client *bt.Peer, queue string, prios []int) []string {
	t.Helper()
	type sent struct {
		id   string
		prio int
	}
	var all []sent
	for i, p := range prios {
		h := ""
		if p >= 0 {
			h = "priority:" + strconv.Itoa(p)
		} else {
			p = emqp.DefaultPriority
		}
		all = append(all, sent{client.Request(queue, h, []byte(fmt.Sprint(i))), p})
	}
	slices.SortStableFunc(all, func(a, b sent) int { return a.prio - b.prio })
	var want []string
	for _, s := range all {
		want = append(want, s.id)
	}
	return want
}

// takeOneByOne has the worker take n jobs one slot at a time, replying to
// each, and returns their msgids in the order they came.
func takeOneByOne(t *testing.T, w *bt.Peer, n int) []string {
	t.Helper()
	var got []string
	for range n {
		w.Ready(1)
		req := bt.Expect[*emqp.Request](w)
		got = append(got, req.MsgID)
		w.Reply(req.MsgID, nil)
	}
	return got
}

var mixedPriorities = []int{5, -1, 0, 5, 70, 1023, 1025, 0, -1, 65535, 1024, 5, 3}

// Within a queue the lowest priority runs first, FIFO among equals, the
// default (1024) between; a restart keeps the order, and a job its worker
// lost goes back to the head of its own priority, not of the queue.
func TestPrioritiesRunLowestFirst(t *testing.T) {
	t.Parallel()
	b := bt.Start(t, "", fast)
	client := bt.Dial(t, b.Frontend(), "c")
	want := prioritised(t, client, "q", mixedPriorities)
	w := bt.Worker(t, b.Backend(), "w", "q")
	if got := takeOneByOne(t, w, len(want)); !slices.Equal(got, want) {
		t.Fatalf("ran %v\nwant %v", got, want)
	}

	// Across a restart.
	want = prioritised(t, client, "q", mixedPriorities)
	client.Close()
	w.Close()
	dir := b.Dir
	if err := b.Stop(); err != nil {
		t.Fatal(err)
	}
	b = bt.Start(t, dir, fast)
	w = bt.Worker(t, b.Backend(), "w2", "q")
	if got := takeOneByOne(t, w, len(want)); !slices.Equal(got, want) {
		t.Fatalf("after a restart, ran %v\nwant %v", got, want)
	}

	// A lost job: back at the head of its priority, behind none of its
	// equals sent after it and ahead of them.
	client = bt.Dial(t, b.Frontend(), "c2")
	hi := client.Request("q", "priority:1", nil)
	lo1 := client.Request("q", "priority:9", nil)
	lo2 := client.Request("q", "priority:9", nil)
	lost := bt.Worker(t, b.Backend(), "lost", "q")
	lost.Ready(2)
	if a, c := bt.Expect[*emqp.Request](lost).MsgID, bt.Expect[*emqp.Request](lost).MsgID; a != hi || c != lo1 {
		t.Fatalf("the first two jobs given: %s %s, want %s %s", a, c, hi, lo1)
	}
	lost.Send(&emqp.Kbye{MsgID: emqp.NewID()})
	bt.Eventually(t, "the lost worker's jobs back in their queue", func() bool {
		held, err := b.InFlight(context.Background(), "q")
		return err == nil && len(held) == 0
	})
	if got, want := takeOneByOne(t, w, 3), []string{hi, lo1, lo2}; !slices.Equal(got, want) {
		t.Fatalf("after their worker left, ran %v; want %v", got, want)
	}
}

// Priorities order a queue, not the worker's queues: a worker still takes
// from its highest-weight queue first, whatever the priorities in the
// others.
func TestPrioritiesStayWithinTheirQueue(t *testing.T) {
	t.Parallel()
	b := bt.Start(t, "", fast)
	client := bt.Dial(t, b.Frontend(), "c")
	low := client.Request("light", "priority:0", nil)
	heavy := client.Request("heavy", "priority:65535", nil)
	w := bt.Worker(t, b.Backend(), "w", `[[20, "heavy"], [1, "light"]]`)
	if got := takeOneByOne(t, w, 2); !slices.Equal(got, []string{heavy, low}) {
		t.Fatalf("ran %v; want the heavier queue's job first: %v", got, []string{heavy, low})
	}
}
