package storetest

import (
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/eventmq/emq/store"
)

// Unique jobs and cancelling: a unique key is held by one job of a queue
// at a time, while it is pending and for its hold after it is done; a
// cancelled job leaves its queue for good.

func uniqueJob(id, queue, key string, hold time.Duration) *store.Job {
	j := job(id, queue)
	j.Unique, j.UniqueFor = key, hold
	return j
}

// appendErr appends a job, waits, and returns the outcome.
func (f *fixture) appendErr(jb *store.Job) (bool, error) {
	return store.Wait(func(done func(bool, error)) { f.j.Append(jb, done) })
}

// duplicate checks that appending jb is refused because holder holds its
// key, changing nothing.
func (f *fixture) duplicate(jb *store.Job, holder string) {
	f.t.Helper()
	f.refused("append of "+jb.MsgID+" with key "+jb.Unique, store.ErrDuplicate, func() error {
		_, err := f.appendErr(jb)
		var ue *store.UniqueError
		if errors.As(err, &ue) && (ue.Holder != holder || ue.Key != jb.Unique || ue.Queue != jb.Queue) {
			f.t.Errorf("append of %s: %+v; want the key %q of %q held by %s", jb.MsgID, ue, jb.Unique, jb.Queue, holder)
		}
		return err
	})
}

func (f *fixture) cancel(id string, keepUntil time.Time) *store.Job {
	f.t.Helper()
	return f.jobWrite("cancel "+id, func(done func(*store.Job, error)) { f.j.Cancel(id, keepUntil, nil, done) })
}

// A key is held while its job is pending, across a reopen: another
// msgid with it is refused, naming the holder; the same msgid is the
// ordinary duplicate; the same key in another queue is another key. The
// record keeps the key and its hold.
func uniqueHeldWhilePending(t *testing.T, f *fixture) {
	a := uniqueJob("a", "q", "user-42", time.Hour)
	f.append(a)
	want := *a
	got := f.get("a")
	want.State, want.Payload, want.Enqueued = store.Pending, []byte("payload of a"), got.Enqueued
	if d := diffJob(got, &want); d != "" {
		t.Fatalf("get a: %s", d)
	}
	for range 2 {
		f.duplicate(uniqueJob("b", "q", "user-42", 0), "a")
		if !f.appendDup(uniqueJob("a", "q", "user-42", time.Hour)) {
			t.Error("append of a again: not a duplicate")
		}
		f.reopen()
	}
	f.append(uniqueJob("other-queue", "r", "user-42", 0), uniqueJob("other-key", "q", "user-43", 0), job("no-key", "q"))
	if !f.complete("other-key", nil, time.Time{}) {
		t.Fatal("complete other-key: not found")
	}
	f.append(uniqueJob("b", "q", "user-43", 0)) // other-key had no hold: its key is free at once
	if got := f.load(); len(got) != 4 {
		t.Errorf("loaded %v; want a, other-queue, no-key, b", ids(got))
	}
}

// Done, a job holds its key for its hold: another msgid is refused, the
// same one is a duplicate (it ran). After the hold the key is free, and
// ExpireResults sweeps what is left of it. A new hold of a key is not
// swept by the entry of an older one.
func uniqueHeldForItsHold(t *testing.T, f *fixture) {
	f.append(uniqueJob("a", "q", "k", time.Hour), uniqueJob("s", "q", "short", time.Second))
	f.complete("a", []byte("r"), time.Time{})
	f.complete("s", nil, time.Time{})
	f.gone("a")
	f.reopen()
	f.duplicate(uniqueJob("b", "q", "k", 0), "a")
	f.unchanged("append of a again within its hold", func() {
		if !f.appendDup(uniqueJob("a", "q", "k", time.Hour)) {
			t.Error("append of a again within its hold: not a duplicate")
		}
	})
	// "short" was held for a second: free once it has passed.
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := f.appendErr(uniqueJob("t", "q", "short", time.Hour))
		if err == nil {
			break
		}
		if !errors.Is(err, store.ErrDuplicate) || time.Now().After(deadline) {
			t.Fatalf("append of t with a key whose hold of a second ended: %v", err)
		}
		time.Sleep(50 * time.Millisecond) // a poll for the hold's end, not a synchronisation
	}
	f.expire(time.Now().Add(2 * time.Hour)) // sweeps a's hold; t's is that of a pending job
	f.append(uniqueJob("b", "q", "k", 0))
	f.duplicate(uniqueJob("u", "q", "short", 0), "t")
}

// A job that dies, is cancelled, removed or purged lets its key go at
// once: nothing will run under it.
func uniqueLetGo(t *testing.T, f *fixture) {
	f.append(uniqueJob("dead", "q", "k1", time.Hour), uniqueJob("cancelled", "q", "k2", time.Hour),
		uniqueJob("removed", "q", "k3", time.Hour), uniqueJob("purged", "p", "k4", time.Hour))
	f.bury("dead", "no more attempts")
	f.cancel("cancelled", time.Time{})
	f.remove("removed")
	f.purge("p")
	f.reopen()
	f.append(uniqueJob("n1", "q", "k1", 0), uniqueJob("n2", "q", "k2", 0), uniqueJob("n3", "q", "k3", 0), uniqueJob("n4", "p", "k4", 0))
}

// A revived job takes its key back, unless another job took it
// meanwhile: then it runs without one, and says so in its trail.
func uniqueRevive(t *testing.T, f *fixture) {
	f.append(uniqueJob("a", "q", "k", 0), uniqueJob("b", "q", "j", 0))
	f.bury("a", "x")
	f.bury("b", "x")
	f.append(uniqueJob("taker", "q", "k", 0))
	if got := f.revive("a"); got.Unique != "" || len(got.Trail) == 0 {
		t.Errorf("revive of a, whose key another job took: %s, trail %v; want no key and a trail event", describe(got), got.Trail)
	}
	f.complete("taker", nil, time.Time{})
	f.append(uniqueJob("c", "q", "k", 0)) // a does not hold it
	if got := f.revive("b"); got.Unique != "j" {
		t.Errorf("revive of b, its key free: %s; want key j", describe(got))
	}
	f.duplicate(uniqueJob("d", "q", "j", 0), "b")
}

// Appends of one key under a thousand msgids at once store one job; the
// others are refused naming it.
func uniqueAppendsAtOnce(t *testing.T, f *fixture) {
	const n = 1000
	var mu sync.Mutex
	var stored []string
	holders := map[string]int{}
	var wg sync.WaitGroup
	wg.Add(n)
	for i := range n {
		id := fmt.Sprintf("m%04d", i)
		f.j.Append(uniqueJob(id, "q", "the-key", 0), func(dup bool, err error) {
			defer wg.Done()
			mu.Lock()
			defer mu.Unlock()
			var ue *store.UniqueError
			switch {
			case err == nil && !dup:
				stored = append(stored, id)
			case errors.As(err, &ue):
				holders[ue.Holder]++
			default:
				t.Errorf("append %s: dup %v, %v", id, dup, err)
			}
		})
	}
	wg.Wait()
	if len(stored) != 1 || holders[stored[0]] != n-1 {
		t.Fatalf("stored %v, refusals naming holders %v; want one stored, %d refusals naming it", stored, holders, n-1)
	}
	if got := f.pending(); !reflect.DeepEqual(got, map[string][]string{"q": stored}) {
		t.Errorf("pending %v", got)
	}
}

// Cancel takes a pending job out of its queue: it no longer loads, and
// without a keep time it is gone. A job dead, done, cancelled, or not
// stored is refused, nothing changed.
func cancelTakesOut(t *testing.T, f *fixture) {
	f.append(job("a", "q"), job("b", "q"), job("c", "q"), job("dead", "q"), job("done", "q"))
	f.bury("dead", "x")
	f.complete("done", []byte("r"), time.Now().Add(time.Hour))
	if got := f.cancel("b", time.Time{}); got.State != store.Cancelled || got.Finished.IsZero() {
		t.Errorf("cancel b gave %s", describe(got))
	}
	f.gone("b")
	f.reopen()
	if got := ids(f.load()); !reflect.DeepEqual(got, []string{"a", "c"}) {
		t.Errorf("loaded %v after cancelling b; want [a c]", got)
	}
	for id, want := range map[string]error{"unknown": store.ErrNotFound, "b": store.ErrNotFound, "dead": store.ErrWrongState, "done": store.ErrWrongState} {
		f.refused("cancel of "+id, want, func() error {
			_, err := store.Wait(func(done func(*store.Job, error)) { f.j.Cancel(id, time.Now().Add(time.Hour), nil, done) })
			return err
		}, "done")
	}
}

// With a keep time a cancelled job is kept in its own state, with its
// trail: listed, counted, its msgid a duplicate, no result; it is swept
// as a done job is, and then its msgid is free.
func cancelledAreKept(t *testing.T, f *fixture) {
	f.append(job("a", "q"), job("b", "q"))
	trail := []store.TrailEvent{{Time: time.Unix(1800000000, 0), Kind: "cancelled", Reason: "by admin"}}
	got, err := store.Wait(func(done func(*store.Job, error)) { f.j.Cancel("a", time.Now().Add(time.Hour), trail, done) })
	if err != nil || got.State != store.Cancelled {
		t.Fatalf("cancel a: %s, %v", describe(got), err)
	}
	f.reopen()
	a := f.get("a")
	if a.State != store.Cancelled || a.Finished.IsZero() || len(a.Trail) != 1 || a.Trail[0].Reason != "by admin" {
		t.Errorf("get a after its cancel: %s, trail %v", describe(a), a.Trail)
	}
	if l := f.list(store.ListOptions{State: store.Cancelled}); !reflect.DeepEqual(ids(l), []string{"a"}) {
		t.Errorf("cancelled jobs listed: %v", ids(l))
	}
	if c := f.counts()["q"]; c.Cancelled != 1 || c.Pending != 1 {
		t.Errorf("counts of q: %+v; want 1 pending, 1 cancelled", c)
	}
	f.noResult("a")
	if !f.appendDup(job("a", "q")) {
		t.Error("append of a, cancelled and kept: not a duplicate")
	}
	if got := ids(f.load()); !reflect.DeepEqual(got, []string{"b"}) {
		t.Errorf("loaded %v; want [b]", got)
	}
	f.expire(time.Now().Add(2 * time.Hour))
	f.gone("a")
	f.append(job("a", "q"))
}
