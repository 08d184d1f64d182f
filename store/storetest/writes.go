package storetest

import (
	"errors"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eventmq/emq/store"
)

// What every write promises: call order, Close, and many callers at once.

// Writes queued back to back, without waiting, apply in the order they
// were made: each sees the ones before it.
func writesApplyInOrder(t *testing.T, f *fixture) {
	second := job("w", "q")
	second.Payload = []byte("second")
	b := f.batch()
	// x: appended and completed at once leaves nothing.
	f.j.Append(job("x", "q"), b.flag("append x", false))
	f.j.Complete("x", []byte("r"), time.Time{}, nil, b.flag("complete x", true))
	// y: appended, buried and revived at once ends pending.
	f.j.Append(job("y", "q"), b.flag("append y", false))
	f.j.Bury("y", "boom", nil, b.job("bury y", store.Dead, 1))
	f.j.Revive("y", nil, b.job("revive y", store.Pending, 0))
	// z: two attempts, then buried: dead, three attempts.
	f.j.Append(job("z", "q"), b.flag("append z", false))
	f.j.RecordAttempt("z", "lost", time.Time{}, nil, b.job("first attempt of z", store.Pending, 1))
	f.j.RecordAttempt("z", "lost", time.Time{}, nil, b.job("second attempt of z", store.Pending, 2))
	f.j.Bury("z", "boom", nil, b.job("bury z", store.Dead, 3))
	// w: appended, removed, appended again: the second one is stored.
	f.j.Append(job("w", "q"), b.flag("first append of w", false))
	f.j.Remove("w", b.flag("remove w", true))
	f.j.Append(second, b.flag("second append of w", false))
	// u: completed before it is appended: the Complete finds nothing.
	f.j.Complete("u", nil, time.Time{}, nil, b.flag("complete u before its append", false))
	f.j.Append(job("u", "q"), b.flag("append u", false))
	// v: appended, purged with its queue, appended again.
	f.j.Append(job("v", "purged"), b.flag("first append of v", false))
	f.j.PurgeQueue("purged", b.count("purge", 1))
	f.j.Append(job("v", "purged"), b.flag("second append of v", false))
	b.wait()

	if got, want := f.pending(), map[string][]string{"q": {"y", "w", "u"}, "purged": {"v"}}; !reflect.DeepEqual(got, want) {
		t.Errorf("pending %v; want %v", got, want)
	}
	if got := ids(f.list(store.ListOptions{State: store.Dead})); !reflect.DeepEqual(got, []string{"z"}) {
		t.Errorf("dead %v; want [z]", got)
	}
	f.gone("x")
	if got := f.get("w"); string(got.Payload) != "second" {
		t.Errorf("w holds %q; want the second append's", got.Payload)
	}
}

// Close finishes every write queued before it (each done is called, with
// nil, before Close returns), and they are all there after a reopen. A
// nil done is allowed.
func closeFinishesQueuedWrites(t *testing.T, f *fixture) {
	var called atomic.Int32
	want := map[string][]string{}
	for i := range 300 {
		id := fmt.Sprintf("m%03d", i)
		f.j.Append(job(id, "q"), func(dup bool, err error) {
			if dup || err != nil {
				t.Errorf("append %s queued before Close: %v, %v", id, dup, err)
			}
			called.Add(1)
		})
		if i >= 100 {
			want["q"] = append(want["q"], id)
		}
	}
	for i := range 100 {
		id := fmt.Sprintf("m%03d", i)
		f.j.Complete(id, nil, time.Time{}, nil, func(found bool, err error) {
			if !found || err != nil {
				t.Errorf("complete %s queued before Close: %v, %v", id, found, err)
			}
			called.Add(1)
		})
	}
	f.j.Append(job("quiet", "q"), nil)
	f.j.Remove("m100", nil)
	want["q"] = append(want["q"][1:], "quiet")

	j := f.j
	f.j = nil
	if err := j.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if n := called.Load(); n != 400 {
		t.Fatalf("%d of 400 writes queued before Close were done when it returned", n)
	}
	f.j = f.mustOpen()
	if got := f.pending(); !reflect.DeepEqual(got, want) {
		t.Fatalf("after reopening, pending %v; want %v", got, want)
	}
}

// Every write made after Close fails with ErrClosed, and changes nothing.
func writesAfterCloseFail(t *testing.T, f *fixture) {
	f.appendAtOnce(job("p", "q"), job("d", "q"), job("r", "q"))
	f.bury("d", "boom")
	f.complete("r", []byte("kept"), time.Now().Add(time.Hour))
	before := f.snapshot("r")
	j := f.j
	f.j = nil
	if err := j.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	for what, write := range map[string]func() error{
		"append": func() error {
			_, err := store.Wait(func(done func(bool, error)) { j.Append(job("new", "q"), done) })
			return err
		},
		"complete": func() error {
			_, err := store.Wait(func(done func(bool, error)) { j.Complete("p", nil, time.Time{}, nil, done) })
			return err
		},
		"remove": func() error {
			_, err := store.Wait(func(done func(bool, error)) { j.Remove("p", done) })
			return err
		},
		"record an attempt": func() error {
			_, err := store.Wait(func(done func(*store.Job, error)) { j.RecordAttempt("p", "x", time.Time{}, nil, done) })
			return err
		},
		"bury": func() error {
			_, err := store.Wait(func(done func(*store.Job, error)) { j.Bury("p", "x", nil, done) })
			return err
		},
		"revive": func() error {
			_, err := store.Wait(func(done func(*store.Job, error)) { j.Revive("d", nil, done) })
			return err
		},
		"purge a queue": func() error {
			_, err := store.Wait(func(done func(int, error)) { j.PurgeQueue("q", done) })
			return err
		},
		"expire results": func() error {
			_, err := store.Wait(func(done func(int, error)) { j.ExpireResults(time.Now().Add(2*time.Hour), done) })
			return err
		},
	} {
		if err := write(); !errors.Is(err, store.ErrClosed) {
			t.Errorf("%s after Close: %v; want ErrClosed", what, err)
		}
	}
	f.j = f.mustOpen()
	if after := f.snapshot("r"); after != before {
		t.Errorf("writes after Close changed what is stored:\nbefore\n%s\nafter\n%s", before, after)
	}
}

// Many goroutines appending and completing, and others reading, at once:
// nothing is lost, nothing is stored twice, no read fails.
func concurrentUseLosesNothing(t *testing.T, f *fixture) {
	const writers, each = 8, 40
	j := f.j
	stop := make(chan struct{})
	var readers sync.WaitGroup
	for range 2 {
		readers.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if err := readOnce(j); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}

	var winners atomic.Int32
	var writing sync.WaitGroup
	for w := range writers {
		writing.Go(func() {
			q := fmt.Sprintf("q%d", w)
			for i := range each {
				id := fmt.Sprintf("w%d-%03d", w, i)
				dup, err := store.Wait(func(done func(bool, error)) { j.Append(job(id, q), done) })
				if err != nil || dup {
					t.Errorf("append %s: %v, %v", id, dup, err)
					return
				}
				if i%2 == 1 {
					found, err := store.Wait(func(done func(bool, error)) { j.Complete(id, nil, time.Time{}, nil, done) })
					if err != nil || !found {
						t.Errorf("complete %s: %v, %v", id, found, err)
						return
					}
				}
				if i == each/2 {
					dup, err := store.Wait(func(done func(bool, error)) { j.Append(job("shared", "shared"), done) })
					if err != nil {
						t.Errorf("append of shared by writer %d: %v", w, err)
					} else if !dup {
						winners.Add(1)
					}
				}
			}
		})
	}
	writing.Wait()
	close(stop)
	readers.Wait()

	want := map[string][]string{"shared": {"shared"}}
	for w := range writers {
		q := fmt.Sprintf("q%d", w)
		for i := 0; i < each; i += 2 {
			want[q] = append(want[q], fmt.Sprintf("w%d-%03d", w, i))
		}
	}
	if n := winners.Load(); n != 1 {
		t.Errorf("%d writers stored shared, want 1", n)
	}
	if got := f.pending(); !reflect.DeepEqual(got, want) {
		t.Errorf("pending %v; want %v", got, want)
	}
	for q, c := range f.counts() {
		if c.Pending != len(want[q]) || c.Dead != 0 {
			t.Errorf("counts of %s: %+v; want %d pending", q, c, len(want[q]))
		}
	}
}

// readOnce makes one of each read while writers are busy: none may fail,
// and Load must still give each queue in FIFO order.
func readOnce(j store.Journal) error {
	last := map[string]uint64{}
	if err := j.Load(func(jb *store.Job) error {
		if jb.Seq <= last[jb.Queue] {
			return fmt.Errorf("load gave %s (seq %d) after seq %d in queue %s", jb.MsgID, jb.Seq, last[jb.Queue], jb.Queue)
		}
		last[jb.Queue] = jb.Seq
		return nil
	}); err != nil {
		return fmt.Errorf("load while writing: %w", err)
	}
	if _, err := j.List(store.ListOptions{Queue: "q0", Limit: 10}); err != nil {
		return fmt.Errorf("list while writing: %w", err)
	}
	if _, err := j.Counts(); err != nil {
		return fmt.Errorf("counts while writing: %w", err)
	}
	if _, err := j.Get("w0-000"); err != nil && !errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("get while writing: %w", err)
	}
	return nil
}
