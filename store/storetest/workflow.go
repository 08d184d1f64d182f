package storetest

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/eventmq/emq/store"
)

// Workflows: jobs that wait for other jobs or for a batch, released when
// those are done, cancelled (or run anyway) when one fails; batches and
// their counts.

// followed is what the journal told its follower.
type followed struct {
	mu                  sync.Mutex
	released, cancelled []string
}

func (f *fixture) follow() *followed {
	w := &followed{}
	f.j.Follow(func(c store.WorkflowChange) {
		w.mu.Lock()
		defer w.mu.Unlock()
		for _, j := range c.Released {
			if j.State != store.Pending || j.Payload != nil || j.Queue == "" {
				panic(fmt.Sprintf("a released job as told: %+v; want it pending, without its payload", j))
			}
			w.released = append(w.released, j.MsgID)
		}
		for _, j := range c.Cancelled {
			w.cancelled = append(w.cancelled, j.MsgID)
		}
	}, 0)
	return w
}

// took returns what was released and cancelled so far, each sorted.
func (w *followed) took() (released, cancelled []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Sorted(slices.Values(w.released)), slices.Sorted(slices.Values(w.cancelled))
}

func after(id, queue string, parents ...string) *store.Job {
	j := job(id, queue)
	j.After = parents
	return j
}

func (f *fixture) state(id string) store.State {
	f.t.Helper()
	j, err := f.j.Get(id)
	if errors.Is(err, store.ErrNotFound) {
		return 0
	}
	if err != nil {
		f.t.Fatalf("get %s: %v", id, err)
	}
	return j.State
}

// A job waits for every parent: stored Waiting (not loaded, counted and
// listed as waiting, across a reopen), one wait less per parent done,
// pending once the last is, at its queue's tail by its own sequence, and
// told to the follower.
func workflowWaitsForEveryParent(t *testing.T, f *fixture) {
	f.append(job("p1", "q"), job("p2", "q"))
	c := after("c", "q", "p1", "p2")
	f.append(c)
	if c.State != store.Waiting || c.Waits != 2 {
		t.Fatalf("appended: state %s, waits %d; want waiting for 2", c.State, c.Waits)
	}
	f.reopen()
	w := f.follow()
	if got := f.pending()["q"]; !slices.Equal(got, []string{"p1", "p2"}) {
		t.Fatalf("loaded %v; want the parents alone", got)
	}
	if n := f.counts()["q"].Waiting; n != 1 {
		t.Fatalf("counts: %d waiting; want 1", n)
	}
	if got := ids(f.list(store.ListOptions{State: store.Waiting})); !slices.Equal(got, []string{"c"}) {
		t.Fatalf("list of waiting jobs: %v", got)
	}
	if kids, err := f.j.Children("p1", 0); err != nil || !slices.Equal(kids, []string{"c"}) {
		t.Fatalf("children of p1: %v, %v", kids, err)
	}
	f.append(job("later", "q"))
	f.complete("p1", nil, time.Time{})
	if got := f.get("c"); got.State != store.Waiting || got.Waits != 1 || !slices.Equal(got.After, []string{"p1", "p2"}) {
		t.Fatalf("after p1: %s waits %d after %v; want waiting for 1 more", got.State, got.Waits, got.After)
	}
	f.complete("p2", nil, time.Time{})
	if released, _ := w.took(); !slices.Equal(released, []string{"c"}) {
		t.Fatalf("released %v; want c", released)
	}
	got := f.get("c")
	if got.State != store.Pending || got.Waits != 0 || string(got.Payload) != "payload of c" || got.Trail[len(got.Trail)-1].Kind != "released" {
		t.Fatalf("released job: %s, waits %d, payload %q, trail %v", got.State, got.Waits, got.Payload, got.Trail)
	}
	if q := f.pending()["q"]; !slices.Equal(q, []string{"c", "later"}) {
		t.Fatalf("pending after the release: %v; want c before later (its own sequence)", q)
	}
	if kids, _ := f.j.Children("p1", 0); len(kids) != 0 {
		t.Fatalf("children of a settled parent: %v", kids)
	}
}

// A parent must be stored: unknown (or the job itself) is refused, done
// and kept is no wait, dead or cancelled refuses the job unless it runs
// anyway. A refused job leaves nothing behind.
func workflowParentsMustBeKnown(t *testing.T, f *fixture) {
	f.append(job("done", "q"), job("dead", "q"), job("gone", "q"))
	f.complete("done", []byte("r"), time.Now().Add(time.Hour))
	f.bury("dead", "no")
	f.complete("gone", nil, time.Time{})
	for _, c := range []struct {
		job  *store.Job
		want error
	}{
		{after("x1", "q", "never-stored"), store.ErrUnknownParent},
		{after("x2", "q", "gone"), store.ErrUnknownParent},
		{after("x3", "q", "x3"), store.ErrUnknownParent},
		{after("x4", "q", "dead"), store.ErrParentFailed},
	} {
		f.refused("append of "+c.job.MsgID, c.want, func() error { _, err := f.appendErr(c.job); return err })
	}
	runs := after("runs", "q", "dead", "done")
	runs.RunIfFailed = true
	f.append(runs)
	if runs.State != store.Pending {
		t.Fatalf("a job whose parents are dead (run anyway) and done: %s; want pending", runs.State)
	}
}

// A parent that dies or is cancelled or removed cancels its waiting
// children (with the journal's Retain they are kept cancelled; here
// deleted), and theirs in turn; a child that runs anyway is released.
func workflowFailedParentsCancelOrRelease(t *testing.T, f *fixture) {
	w := f.follow()
	f.append(job("p", "q"), job("p2", "q"), job("p3", "q"))
	f.append(after("c", "q", "p"), after("gc", "q", "c"))
	anyway := after("anyway", "q", "p")
	anyway.RunIfFailed = true
	f.append(anyway, after("of-cancelled", "q", "p2"), after("of-removed", "q", "p3"))
	f.bury("p", "broken")
	f.cancel("p2", time.Time{})
	f.remove("p3")
	released, cancelled := w.took()
	if !slices.Equal(released, []string{"anyway"}) || !slices.Equal(cancelled, []string{"c", "gc", "of-cancelled", "of-removed"}) {
		t.Fatalf("released %v, cancelled %v", released, cancelled)
	}
	for _, id := range []string{"c", "gc", "of-cancelled", "of-removed"} {
		if s := f.state(id); s != 0 {
			t.Errorf("%s is %s; want it gone (cancelled, not kept)", id, s)
		}
	}
	if s := f.state("anyway"); s != store.Pending {
		t.Errorf("anyway is %s; want pending", s)
	}
}

// A waiting job can be cancelled and purged; its parents' end then finds
// nothing to release.
func workflowWaitingJobsCancelAndPurge(t *testing.T, f *fixture) {
	w := f.follow()
	f.append(job("p", "q"))
	f.append(after("c1", "q", "p"), after("c2", "q", "p"), after("c3", "other", "p"))
	if j := f.cancel("c1", time.Now().Add(time.Hour)); j.State != store.Cancelled {
		t.Fatalf("cancel of a waiting job: %s", j.State)
	}
	if n := f.purge("other"); n != 1 {
		t.Fatalf("purge of a queue with one waiting job: %d", n)
	}
	f.complete("p", nil, time.Time{})
	if released, _ := w.took(); !slices.Equal(released, []string{"c2"}) {
		t.Fatalf("released %v; want c2 alone", released)
	}
}

// A batch counts its jobs by state; a job that waits for it is released
// when it completes (closed, nothing left to run), and cancelled when a
// job of it failed; an open batch is complete only once closed.
func workflowBatches(t *testing.T, f *fixture) {
	w := f.follow()
	in := func(id, name string) *store.Job { j := job(id, "q"); j.Batch = name; return j }
	waits := func(id, name string) *store.Job { j := job(id, "cb"); j.AfterBatch = name; return j }
	f.refused("a job after an unknown batch", store.ErrUnknownBatch, func() error { _, err := f.appendErr(waits("x", "none")); return err })

	f.append(in("a1", "a"), in("a2", "a"), waits("after-a", "a"))
	b, err := f.j.GetBatch("a")
	if err != nil || b.Pending != 2 || b.Waiters != 1 || b.Open || b.Complete() {
		t.Fatalf("batch a: %+v, %v", b, err)
	}
	f.complete("a1", nil, time.Time{})
	f.complete("a2", nil, time.Time{})
	if released, _ := w.took(); !slices.Equal(released, []string{"after-a"}) {
		t.Fatalf("released %v; want after-a", released)
	}
	if b, _ = f.j.GetBatch("a"); b.Done != 2 || !b.Complete() || b.Completed.IsZero() {
		t.Fatalf("batch a done: %+v", b)
	}
	f.append(waits("after-done-a", "a"))
	if s := f.state("after-done-a"); s != store.Pending {
		t.Fatalf("a job after a complete batch: %s; want pending", s)
	}

	// Open: complete only once closed, whatever its jobs do.
	if _, err := store.Wait(func(done func(*store.Batch, error)) { f.j.OpenBatch("o", true, done) }); err != nil {
		t.Fatal(err)
	}
	f.append(in("o1", "o"), waits("after-o", "o"))
	f.complete("o1", nil, time.Time{})
	if s := f.state("after-o"); s != store.Waiting {
		t.Fatalf("after an open batch whose jobs are done: %s; want waiting", s)
	}
	f.append(in("o2", "o"))
	f.complete("o2", nil, time.Time{})
	if b, err := store.Wait(func(done func(*store.Batch, error)) { f.j.OpenBatch("o", false, done) }); err != nil || !b.Complete() {
		t.Fatalf("close: %+v, %v", b, err)
	}
	if s := f.state("after-o"); s != store.Pending {
		t.Fatalf("after a closed batch: %s; want pending", s)
	}

	// Failed: one job dead cancels the waiter; counts say so.
	f.append(in("f1", "f"), in("f2", "f"), waits("after-f", "f"))
	f.bury("f1", "no")
	f.complete("f2", nil, time.Time{})
	if _, cancelled := w.took(); !slices.Contains(cancelled, "after-f") {
		t.Fatalf("cancelled %v; want after-f", cancelled)
	}
	if b, _ := f.j.GetBatch("f"); b.Dead != 1 || b.Done != 1 || !b.Failed() {
		t.Fatalf("batch f: %+v", b)
	}
	if list, _, err := f.j.ListBatches("", 0); err != nil || len(list) != 3 || list[0].Name != "a" || list[2].Name != "o" {
		t.Fatalf("batches: %+v, %v", list, err)
	}
}

// A parent with many children releases them all, however many one write
// of the backend may hold, and a reopen keeps them.
func workflowManyChildren(t *testing.T, f *fixture) {
	w := f.follow()
	f.append(job("p", "q"))
	var kids []*store.Job
	var want []string
	for i := range 300 {
		id := fmt.Sprintf("c%03d", i)
		kids = append(kids, after(id, "q", "p"))
		want = append(want, id)
	}
	f.appendAtOnce(kids...)
	f.complete("p", nil, time.Time{})
	deadline := time.Now().Add(30 * time.Second)
	for {
		released, _ := w.took()
		if slices.Equal(released, want) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of 300 children released after 30 s", len(released))
		}
		time.Sleep(10 * time.Millisecond) // a poll with a deadline: the rest settles in writes that follow
	}
	f.reopen()
	if got := f.pending()["q"]; !slices.Equal(got, want) {
		t.Fatalf("after a reopen, pending %d; want the 300 children in order", len(got))
	}
}
