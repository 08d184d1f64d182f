package storetest

import (
	"reflect"
	"testing"
	"time"

	"github.com/eventmq/emq/store"
)

// The changes of a job's life: attempts, the dead letters and back,
// completion and removal.

// RecordAttempt counts one attempt and keeps its reason and the time the
// job may run again, to the nanosecond, through a reopen; the job keeps
// its place in its queue.
func recordAttemptKeeps(t *testing.T, f *fixture) {
	f.appendAtOnce(job("a", "q"), job("b", "q"), job("c", "q"))
	want := *f.get("b")
	first := time.Unix(1800000000, 123456789)
	got := f.attempt("b", "worker lost", first)
	want.Attempts, want.LastError, want.NotBefore = 1, "worker lost", first
	if d := diffJob(got, &want); d != "" {
		t.Fatalf("first attempt gave back: %s", d)
	}
	later := first.Add(1500*time.Millisecond + 1)
	got = f.attempt("b", "job timed out", later)
	want.Attempts, want.LastError, want.NotBefore = 2, "job timed out", later
	if d := diffJob(got, &want); d != "" {
		t.Fatalf("second attempt gave back: %s", d)
	}
	if d := diffJob(f.get("b"), &want); d != "" {
		t.Fatalf("get after two attempts: %s", d)
	}

	f.reopen()
	loaded := f.load()
	if got := ids(loaded); !reflect.DeepEqual(got, []string{"a", "b", "c"}) {
		t.Fatalf("after attempts and a reopen, load gave %v; want [a b c]", got)
	}
	if d := diffJob(loaded[1], &want); d != "" {
		t.Fatalf("b loaded after a reopen: %s", d)
	}

	// A zero time: the job may run at once.
	if got := f.attempt("b", "worker gone", time.Time{}); !got.NotBefore.IsZero() || got.Attempts != 3 {
		t.Errorf("attempt without a time: %s; want attempt 3 and no NotBefore", describe(got))
	}
	if got := f.get("b"); !got.NotBefore.IsZero() {
		t.Errorf("stored NotBefore %v after an attempt without one", got.NotBefore)
	}

	f.refused("attempt of an unknown msgid", store.ErrNotFound, func() error {
		_, err := store.Wait(func(done func(*store.Job, error)) { f.j.RecordAttempt("unknown", "x", first, nil, done) })
		return err
	})
}

// Bury counts a last attempt and moves the job to the dead letters: it no
// longer loads, it lists as dead, and its msgid is still taken.
func buryMovesToDead(t *testing.T, f *fixture) {
	f.appendAtOnce(job("a", "q"), job("b", "q"), job("c", "q"))
	f.attempt("a", "worker lost", time.Time{})
	want := *f.get("a")
	got := f.bury("a", "boom")
	if got.State != store.Dead || got.Attempts != 2 || got.LastError != "boom" {
		t.Fatalf("bury gave back %s; want dead, 2 attempts, boom", describe(got))
	}
	want.State, want.Attempts, want.LastError = store.Dead, 2, "boom"
	stored := f.get("a")
	want.NotBefore = stored.NotBefore // a dead job's NotBefore is not the contract's
	if d := diffJob(stored, &want); d != "" {
		t.Fatalf("get of a buried job: %s", d)
	}
	if got := ids(f.load()); !reflect.DeepEqual(got, []string{"b", "c"}) {
		t.Fatalf("pending after bury %v; want [b c]", got)
	}
	if got := ids(f.list(store.ListOptions{State: store.Dead})); !reflect.DeepEqual(got, []string{"a"}) {
		t.Fatalf("dead after bury %v; want [a]", got)
	}
	f.unchanged("append of a dead msgid", func() {
		if !f.appendDup(job("a", "q")) {
			t.Error("a dead job's msgid was appended as a new job")
		}
	})
	f.refused("bury of a dead job", store.ErrWrongState, func() error {
		_, err := store.Wait(func(done func(*store.Job, error)) { f.j.Bury("a", "again", nil, done) })
		return err
	})
	f.refused("bury of an unknown msgid", store.ErrNotFound, func() error {
		_, err := store.Wait(func(done func(*store.Job, error)) { f.j.Bury("unknown", "x", nil, done) })
		return err
	})
}

// Revive puts a dead job at the tail of its queue, its attempts reset and
// free to run at once.
func reviveAppendsAtTail(t *testing.T, f *fixture) {
	delayed := job("a", "q")
	delayed.NotBefore = time.Now().Add(time.Hour)
	f.appendAtOnce(delayed, job("b", "q"), job("c", "q"), job("x", "other"))
	f.attempt("a", "worker lost", time.Now().Add(time.Hour))
	f.bury("a", "boom")
	got := f.revive("a")
	if got.State != store.Pending || got.Attempts != 0 || !got.NotBefore.IsZero() {
		t.Fatalf("revive gave back %s; want pending, 0 attempts, no NotBefore", describe(got))
	}
	if d := diffJob(f.get("a"), got); d != "" {
		t.Fatalf("get of a revived job differs from what revive gave back: %s", d)
	}
	want := map[string][]string{"q": {"b", "c", "a"}, "other": {"x"}}
	if got := f.pending(); !reflect.DeepEqual(got, want) {
		t.Fatalf("pending after revive %v; want %v", got, want)
	}
	if got := f.list(store.ListOptions{State: store.Dead}); len(got) != 0 {
		t.Fatalf("dead after revive: %v", ids(got))
	}
	f.reopen()
	if got := f.pending(); !reflect.DeepEqual(got, want) {
		t.Fatalf("pending after revive and a reopen %v; want %v", got, want)
	}
	f.refused("revive of a pending job", store.ErrWrongState, func() error {
		_, err := store.Wait(func(done func(*store.Job, error)) { f.j.Revive("b", nil, done) })
		return err
	})
	f.refused("revive of an unknown msgid", store.ErrNotFound, func() error {
		_, err := store.Wait(func(done func(*store.Job, error)) { f.j.Revive("unknown", nil, done) })
		return err
	})
}

// Complete deletes the job; of a msgid not stored it reports found=false,
// without an error, and changes nothing.
func completeDeletes(t *testing.T, f *fixture) {
	f.appendAtOnce(job("a", "q"), job("b", "q"))
	if !f.complete("a", []byte("done"), time.Time{}) {
		t.Fatal("complete of a stored job: not found")
	}
	f.gone("a")
	if got := ids(f.load()); !reflect.DeepEqual(got, []string{"b"}) {
		t.Fatalf("pending after complete %v; want [b]", got)
	}
	f.unchanged("complete of an unknown msgid", func() {
		if f.complete("unknown", []byte("r"), time.Now().Add(time.Hour)) {
			t.Error("complete of an unknown msgid: found")
		}
		if f.complete("a", nil, time.Time{}) {
			t.Error("second complete of a: found")
		}
	}, "unknown", "a")
}

// Remove deletes a job whatever its state; of a msgid not stored it
// reports found=false, without an error. A removed msgid is free again.
func removeDeletesInAnyState(t *testing.T, f *fixture) {
	f.appendAtOnce(job("p", "q"), job("d", "q"), job("c", "q"))
	f.bury("d", "boom")
	for _, id := range []string{"p", "d"} {
		if !f.remove(id) {
			t.Fatalf("remove of %s: not found", id)
		}
		f.gone(id)
	}
	if got := ids(f.list(store.ListOptions{})); !reflect.DeepEqual(got, []string{"c"}) {
		t.Fatalf("after removing p and d, list gave %v; want [c]", got)
	}
	f.unchanged("remove of an unknown msgid", func() {
		if f.remove("p") {
			t.Error("second remove of p: found")
		}
	})
	if f.appendDup(job("p", "q")) {
		t.Error("a removed msgid is still taken")
	}
}

// PurgeQueue removes every pending job of one queue, and only those: not
// its dead jobs, not other queues'. It returns how many it removed.
func purgeQueueRemovesOnlyItsPending(t *testing.T, f *fixture) {
	f.appendAtOnce(job("q1", "q"), job("o1", "other"), job("q2", "q"), job("q3", "q"), job("q4", "q"), job("qq1", "qq"))
	f.bury("q4", "boom")
	if n := f.purge("q"); n != 3 {
		t.Fatalf("purge of q removed %d, want 3", n)
	}
	if got, want := f.pending(), map[string][]string{"other": {"o1"}, "qq": {"qq1"}}; !reflect.DeepEqual(got, want) {
		t.Fatalf("pending after purge %v; want %v", got, want)
	}
	if got := ids(f.list(store.ListOptions{State: store.Dead})); !reflect.DeepEqual(got, []string{"q4"}) {
		t.Fatalf("dead after purge %v; want [q4]", got)
	}
	for _, id := range []string{"q1", "q2", "q3"} {
		f.gone(id)
	}
	f.unchanged("purge of a queue without jobs", func() {
		if n := f.purge("none"); n != 0 {
			t.Errorf("purge of a queue without jobs removed %d", n)
		}
	})
	if f.appendDup(job("q1", "q")) {
		t.Error("a purged msgid is still taken")
	}
}
