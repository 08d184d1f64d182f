package storetest

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/eventmq/emq/store"
)

// AppendBulk: many jobs in one write, all or none.

// bulk appends jobs in one AppendBulk and waits for it.
func (f *fixture) bulk(jobs ...*store.Job) ([]bool, error) {
	f.t.Helper()
	return store.Wait(func(done func([]bool, error)) { f.j.AppendBulk(jobs, done) })
}

// bulkOf makes n jobs of queue, their msgids prefix and a number.
func bulkOf(prefix, queue string, n int) []*store.Job {
	jobs := make([]*store.Job, n)
	for i := range jobs {
		jobs[i] = job(fmt.Sprintf("%s%05d", prefix, i), queue)
	}
	return jobs
}

// A bulk stores every job, at its queue's tail in the bulk's order,
// each with its Seq set; sent again it is all duplicates, nothing stored
// twice; a bulk of new and stored jobs stores the new ones alone.
func bulkStoresEveryJobInOrder(t *testing.T, f *fixture) {
	f.append(job("before", "a"))
	var jobs []*store.Job
	for i := range 6 {
		jobs = append(jobs, job(fmt.Sprintf("j%d", i), []string{"a", "b"}[i%2]))
	}
	dups, err := f.bulk(jobs...)
	if err != nil || !slices.Equal(dups, make([]bool, len(jobs))) {
		t.Fatalf("bulk: dups %v, %v; want %d new jobs", dups, err, len(jobs))
	}
	for i, j := range jobs {
		if j.Seq == 0 || j.State != store.Pending || i > 0 && j.Seq <= jobs[i-1].Seq {
			t.Fatalf("job %d of the bulk: seq %d, state %s (the one before: seq %d)", i, j.Seq, j.State, jobs[max(i-1, 0)].Seq)
		}
		if got := f.get(j.MsgID); got.Seq != j.Seq || !bytes.Equal(got.Payload, j.Payload) {
			t.Fatalf("stored %s: seq %d, payload %q; want seq %d, %q", j.MsgID, got.Seq, got.Payload, j.Seq, j.Payload)
		}
	}
	want := map[string][]string{"a": {"before", "j0", "j2", "j4"}, "b": {"j1", "j3", "j5"}}
	check := func(when string) {
		t.Helper()
		if got := f.pending(); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("%s: queues %v; want %v", when, got, want)
		}
		if c := f.counts(); c["a"].Pending != len(want["a"]) || c["b"].Pending != len(want["b"]) {
			t.Fatalf("%s: counts %+v", when, c)
		}
	}
	check("after the bulk")

	resent := bulkOf("", "", 0)
	for _, j := range jobs {
		resent = append(resent, job(j.MsgID, j.Queue))
	}
	f.unchanged("the bulk sent again", func() {
		dups, err := f.bulk(resent...)
		if err != nil || slices.Contains(dups, false) || len(dups) != len(jobs) {
			t.Errorf("the bulk sent again: dups %v, %v; want all", dups, err)
		}
	})
	dups, err = f.bulk(job("j1", "b"), job("new", "a"), job("before", "a"), job("new", "a"))
	if want := []bool{true, false, true, true}; err != nil || !slices.Equal(dups, want) {
		t.Fatalf("a bulk of stored and new jobs (new twice): dups %v, %v; want %v", dups, err, want)
	}
	want["a"] = append(want["a"], "new")
	check("after a bulk of stored and new jobs")
	f.reopen()
	check("after a reopen")
}

// One job that cannot be stored refuses the whole bulk: a BulkError
// naming it (index, msgid) that wraps Append's refusal, and nothing of
// the bulk stored, whether the refusal comes before the bulk is queued
// (a bad msgid, a job too large) or in the commit (a unique key held,
// outside the bulk or by a job before it in the bulk; a parent unknown).
func bulkIsRefusedWhole(t *testing.T, f *fixture) {
	f.append(uniqueJob("holder", "q", "k1", 0))
	big := job("big", "q")
	big.Payload = make([]byte, f.opts.MaxJobSize)
	for _, c := range []struct {
		name   string
		bad    *store.Job
		index  int
		target error
		holder string
	}{
		{"an empty msgid", job("", "q"), 2, store.ErrInvalidJob, ""},
		{"a queue name too long", job("long", strings.Repeat("q", store.MaxQueueLen+1)), 2, store.ErrInvalidJob, ""},
		{"a job too large", big, 2, store.ErrTooLarge, ""},
		{"a unique key held outside the bulk", uniqueJob("u", "q", "k1", 0), 2, store.ErrDuplicate, "holder"},
		{"a unique key held by a job before it in the bulk", uniqueJob("u", "q", "k2", 0), 3, store.ErrDuplicate, "first-k2"},
		{"an unknown parent", after("w", "q", "nobody"), 2, store.ErrUnknownParent, ""},
	} {
		jobs := []*store.Job{job("ok0", "q"), uniqueJob("first-k2", "q", "k2", 0), job("ok2", "other")}
		jobs = slices.Insert(jobs, c.index, c.bad)
		f.refused(c.name, c.target, func() error {
			dups, err := f.bulk(jobs...)
			var be *store.BulkError
			switch {
			case !errors.As(err, &be):
				t.Errorf("%s: %v; want a *store.BulkError", c.name, err)
			case be.Index != c.index || be.MsgID != c.bad.MsgID || !strings.Contains(err.Error(), fmt.Sprint(c.index)):
				t.Errorf("%s: %v names job %d (%q); want job %d (%q)", c.name, err, be.Index, be.MsgID, c.index, c.bad.MsgID)
			case dups != nil:
				t.Errorf("%s: dups %v with the refusal", c.name, dups)
			}
			var ue *store.UniqueError
			if c.holder != "" && (!errors.As(err, &ue) || ue.Holder != c.holder) {
				t.Errorf("%s: %v; want a UniqueError naming %s as holder", c.name, err, c.holder)
			}
			for _, j := range jobs {
				if j.Seq != 0 {
					t.Errorf("%s: job %s of a refused bulk has seq %d", c.name, j.MsgID, j.Seq)
				}
			}
			return err
		})
		f.gone("ok0")
		f.gone("first-k2")
	}
	// The same jobs without the bad one are stored, keys and all.
	dups, err := f.bulk(job("ok0", "q"), uniqueJob("first-k2", "q", "k2", 0))
	if err != nil || slices.Contains(dups, true) {
		t.Fatalf("the bulk without its bad job: %v, %v", dups, err)
	}
	f.duplicate(uniqueJob("u2", "q", "k2", 0), "first-k2")
}

// A bulk as large as the backend takes in one write is stored, in
// order: 10,000 jobs, or as many as one write holds (MaxBulk); one job
// more than that is refused with ErrTooLarge, nothing stored, and so is
// one whose workflow keys are more than the write holds.
func bulkOfManyJobs(t *testing.T, f *fixture) {
	n := 10_000
	most := 0
	if m, ok := f.j.(interface{ MaxBulk() int }); ok && m.MaxBulk() > 0 {
		most = m.MaxBulk()
		n = most
		f.refused("a bulk of one job more than a write holds", store.ErrTooLarge, func() error {
			_, err := f.bulk(bulkOf("over", "q", most+1)...)
			if err != nil && !strings.Contains(err.Error(), fmt.Sprint(most)) {
				t.Errorf("a bulk of %d jobs: %v; want the limit (%d) named", most+1, err, most)
			}
			return err
		})
		// Jobs that wait for another change more keys than the bulk's
		// count: the write itself is refused, nothing stored.
		f.append(job("parent", "p"))
		waiting := bulkOf("child", "q", most)
		for _, j := range waiting {
			j.After = []string{"parent"}
		}
		f.refused("a bulk of workflow jobs over what a write holds", store.ErrTooLarge, func() error {
			_, err := f.bulk(waiting...)
			return err
		})
	}
	jobs := bulkOf("many", "q", n)
	dups, err := f.bulk(jobs...)
	if err != nil || len(dups) != n || slices.Contains(dups, true) {
		t.Fatalf("a bulk of %d jobs: %d dups, %v", n, len(dups), err)
	}
	if got, want := f.pending()["q"], ids(jobs); !slices.Equal(got, want) {
		t.Fatalf("a bulk of %d jobs: %d in the queue", n, len(got))
	}
}

// A bulk queued among single Appends (and a bulk refused) shares their
// commit, and each write is answered as if alone, in the order they were
// made: an Append before the bulk holds a unique key the bulk wants, so
// the bulk is refused; an Append of a msgid in a bulk before it is a
// duplicate; the others are stored.
func bulkAmongAppends(t *testing.T, f *fixture) {
	good := bulkOf("good", "q", 20)
	refused := []*store.Job{job("r0", "q"), uniqueJob("r1", "q", "key", 0)}
	b := f.batch()
	f.j.Append(job("single0", "q"), b.flag("append single0", false))
	f.j.Append(uniqueJob("holder", "q", "key", 0), b.flag("append holder", false))
	b.wg.Add(2)
	f.j.AppendBulk(good, func(dups []bool, err error) {
		defer b.wg.Done()
		if err != nil || len(dups) != len(good) || slices.Contains(dups, true) {
			t.Errorf("the good bulk: dups %v, %v", dups, err)
		}
	})
	f.j.AppendBulk(refused, func(dups []bool, err error) {
		defer b.wg.Done()
		var be *store.BulkError
		if !errors.As(err, &be) || be.Index != 1 || !errors.Is(err, store.ErrDuplicate) || dups != nil {
			t.Errorf("the bulk whose unique key is held: dups %v, %v; want a BulkError naming job 1", dups, err)
		}
	})
	f.j.Append(job("good00003", "q"), b.flag("append of a msgid of the bulk", true))
	f.j.Append(job("single1", "q"), b.flag("append single1", false))
	b.wait()
	want := append(append([]string{"single0", "holder"}, ids(good)...), "single1")
	if got := f.pending()["q"]; !slices.Equal(got, want) {
		t.Fatalf("queue %v; want %v", got, want)
	}
	f.gone("r0")
}

// A bulk's job may wait for a job before it in the bulk, and several
// may join one batch: the journal counts them as Appends one after
// another would.
func bulkWithWorkflows(t *testing.T, f *fixture) {
	a, b, c := job("a", "q"), after("b", "q", "a"), after("c", "q", "a", "b")
	a.Batch, b.Batch, c.Batch = "nightly", "nightly", "nightly"
	if dups, err := f.bulk(a, b, c); err != nil || slices.Contains(dups, true) {
		t.Fatalf("bulk: %v, %v", dups, err)
	}
	if b.State != store.Waiting || b.Waits != 1 || c.Waits != 2 || a.State != store.Pending {
		t.Fatalf("states told: a %s, b %s (waits %d), c %s (waits %d)", a.State, b.State, b.Waits, c.State, c.Waits)
	}
	if bt, err := f.j.GetBatch("nightly"); err != nil || bt.Pending != 1 || bt.Waiting != 2 {
		t.Fatalf("batch: %+v, %v; want 1 pending, 2 waiting", bt, err)
	}
	w := f.follow()
	f.complete("a", nil, time.Time{})
	f.complete("b", nil, time.Time{})
	if released, _ := w.took(); !slices.Equal(released, []string{"b", "c"}) {
		t.Fatalf("released %v; want b then c", released)
	}
}
