package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/eventmq/emq/store"
)

// Import (a queue moved from another journal) keeps a job as it was
// there: pending or dead, its attempts, last error, not-before time,
// receipt and unique key, at the tail of its queue. Imported again it
// is a duplicate that changes nothing; a done job or one of a workflow
// is refused.
func importKeepsTheJob(t *testing.T, f *fixture) {
	enq := time.Unix(1_790_000_000, 123_000_000)
	f.append(job("here-first", "q"))
	p := uniqueJob("moved-pending", "q", "user-7", time.Hour)
	p.State, p.Attempts, p.LastError, p.NotBefore, p.Enqueued = store.Pending, 2, "worker lost", enq.Add(time.Hour), enq
	d := job("moved-dead", "q")
	d.State, d.Attempts, d.LastError, d.Enqueued = store.Dead, 4, "boom", enq
	for _, jb := range []*store.Job{p, d} {
		dup, err := store.Wait(func(done func(bool, error)) { f.j.Import(jb, done) })
		if err != nil || dup {
			t.Fatalf("import %s: dup %v, %v", jb.MsgID, dup, err)
		}
	}
	check := func() {
		t.Helper()
		for _, want := range []*store.Job{p, d} {
			got := f.get(want.MsgID)
			w := *want
			w.Seq = got.Seq
			if d := diffJob(got, &w); d != "" {
				t.Fatalf("imported %s: %s", want.MsgID, d)
			}
		}
		if got := f.pending()["q"]; len(got) != 2 || got[0] != "here-first" || got[1] != "moved-pending" {
			t.Fatalf("queue q loads as %v; want here-first, then the imported moved-pending", got)
		}
		if c := f.counts()["q"]; c.Pending != 2 || c.Dead != 1 {
			t.Fatalf("counts of q: %+v; want 2 pending, 1 dead", c)
		}
	}
	check()
	f.unchanged("import of moved-pending again", func() {
		dup, err := store.Wait(func(done func(bool, error)) { f.j.Import(p, done) })
		if err != nil || !dup {
			t.Fatalf("import of moved-pending again: dup %v, %v; want a duplicate", dup, err)
		}
	})
	f.duplicate(uniqueJob("other", "q", "user-7", 0), "moved-pending")
	done := job("done", "q")
	done.State = store.Done
	flow := job("child", "q")
	flow.After = []string{"parent"}
	for _, bad := range []*store.Job{done, flow} {
		_, err := store.Wait(func(fn func(bool, error)) { f.j.Import(bad, fn) })
		if !errors.Is(err, store.ErrInvalidJob) {
			t.Fatalf("import of %s: %v, want ErrInvalidJob", bad.MsgID, err)
		}
	}
	f.reopen()
	check()
}
