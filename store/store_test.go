package store_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/eventmq/emq/migrations"
	"github.com/eventmq/emq/store"
	bolt "go.etcd.io/bbolt"
)

func openJournal(t testing.TB, path string) *store.Bolt {
	t.Helper()
	j, err := store.Open(path, store.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	return j
}

func tempJournal(t testing.TB) (*store.Bolt, string) {
	path := filepath.Join(t.TempDir(), "data", "journal.db")
	return openJournal(t, path), path
}

func job(id, queue string) *store.Job {
	return &store.Job{MsgID: id, Queue: queue, Headers: "timeout:5", Payload: []byte("payload " + id), ClientID: []byte{0, 1, 2}}
}

func mustAppend(t testing.TB, j store.Journal, jobs ...*store.Job) {
	t.Helper()
	for _, jb := range jobs {
		dup, err := store.Wait(func(done func(bool, error)) { j.Append(jb, done) })
		if err != nil || dup {
			t.Fatalf("append %s: dup=%v err=%v", jb.MsgID, dup, err)
		}
	}
}

func loadAll(t testing.TB, j store.Journal) []*store.Job {
	t.Helper()
	var out []*store.Job
	if err := j.Load(func(jb *store.Job) error { out = append(out, jb); return nil }); err != nil {
		t.Fatal(err)
	}
	return out
}

func ids(jobs []*store.Job) []string {
	var out []string
	for _, j := range jobs {
		out = append(out, j.MsgID)
	}
	return out
}

func TestAppendStoresEverything(t *testing.T) {
	j, _ := tempJournal(t)
	in := job("m1", "email")
	in.Enqueued = time.Unix(1700000000, 5)
	in.Payload = []byte{0, 0xff, 'x'}
	mustAppend(t, j, in)
	got, err := j.Get("m1")
	if err != nil {
		t.Fatal(err)
	}
	want := *in
	want.State, want.Seq = store.Pending, got.Seq
	if !reflect.DeepEqual(got, &want) {
		t.Fatalf("stored\n %+v\nwant\n %+v", got, &want)
	}
	if got.Seq == 0 {
		t.Fatal("no sequence given")
	}
}

func TestAppendDuplicate(t *testing.T) {
	j, _ := tempJournal(t)
	mustAppend(t, j, job("m1", "q"))
	other := job("m1", "q")
	other.Payload = []byte("different")
	dup, err := store.Wait(func(done func(bool, error)) { j.Append(other, done) })
	if err != nil || !dup {
		t.Fatalf("second append of m1: dup=%v err=%v; want dup", dup, err)
	}
	got := loadAll(t, j)
	if len(got) != 1 || string(got[0].Payload) != "payload m1" {
		t.Fatalf("after a duplicate: %v", ids(got))
	}
	// Duplicates inside one batch too: many appends of one msgid at once.
	results := make(chan bool, 50)
	for range 50 {
		j.Append(job("m2", "q"), func(dup bool, err error) {
			if err != nil {
				t.Error(err)
			}
			results <- dup
		})
	}
	fresh := 0
	for range 50 {
		if !<-results {
			fresh++
		}
	}
	if fresh != 1 {
		t.Fatalf("%d appends of m2 stored it, want exactly 1", fresh)
	}
}

// A job that is done with its result kept is still known: sent again,
// its msgid is a duplicate. Once the result has expired, or when none was
// kept, the msgid is free again.
func TestAppendAfterComplete(t *testing.T) {
	j, _ := tempJournal(t)
	mustAppend(t, j, job("kept", "q"), job("expired", "q"), job("plain", "q"))
	for id, until := range map[string]time.Time{
		"kept": time.Now().Add(time.Hour), "expired": time.Now().Add(-time.Second), "plain": {},
	} {
		if _, err := store.Wait(func(d func(bool, error)) { j.Complete(id, []byte("r"), until, d) }); err != nil {
			t.Fatal(err)
		}
	}
	for id, want := range map[string]bool{"kept": true, "expired": false, "plain": false} {
		dup, err := store.Wait(func(done func(bool, error)) { j.Append(job(id, "q"), done) })
		if err != nil || dup != want {
			t.Errorf("append of done job %s: dup=%v err=%v, want dup=%v", id, dup, err, want)
		}
	}
}

func TestAppendRejectsInvalid(t *testing.T) {
	j, _ := tempJournal(t)
	for _, bad := range []*store.Job{{Queue: "q"}, {MsgID: "m"}, {MsgID: string(make([]byte, 256)), Queue: "q"}} {
		_, err := store.Wait(func(done func(bool, error)) { j.Append(bad, done) })
		if !errors.Is(err, store.ErrInvalidJob) {
			t.Errorf("append %+v: %v, want ErrInvalidJob", bad, err)
		}
	}
}

func TestAppendRejectsTooLarge(t *testing.T) {
	opts := store.DefaultOptions()
	opts.MaxJobSize = 1000
	j, err := store.Open(filepath.Join(t.TempDir(), "journal.db"), opts)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	big := job("big", "q")
	big.Payload = make([]byte, 1000)
	_, err = store.Wait(func(done func(bool, error)) { j.Append(big, done) })
	if !errors.Is(err, store.ErrTooLarge) || !strings.Contains(err.Error(), "over the journal's limit of 1000") {
		t.Fatalf("append of a job over MaxJobSize: %v", err)
	}
	mustAppend(t, j, job("small", "q"))
	if got := ids(loadAll(t, j)); !reflect.DeepEqual(got, []string{"small"}) {
		t.Fatalf("stored %v, want only small", got)
	}
	opts.MaxJobSize = 2 << 30
	if _, err := store.Open(filepath.Join(t.TempDir(), "x.db"), opts); err == nil || !strings.Contains(err.Error(), "MaxJobSize") {
		t.Fatalf("MaxJobSize of 2 GiB: %v; want an error naming MaxJobSize", err)
	}
}

func TestOperations(t *testing.T) {
	future := time.Now().Add(time.Hour)
	cases := []struct {
		name  string
		do    func(t *testing.T, j store.Journal)
		left  []string // pending msgids after, in load order
		dead  []string
		check func(t *testing.T, j store.Journal)
	}{
		{"complete removes", func(t *testing.T, j store.Journal) {
			found, err := store.Wait(func(d func(bool, error)) { j.Complete("a", nil, time.Time{}, d) })
			if !found || err != nil {
				t.Fatalf("complete: %v %v", found, err)
			}
		}, []string{"b", "c"}, nil, func(t *testing.T, j store.Journal) {
			if _, err := j.Result("a"); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("a result kept without being asked: %v", err)
			}
		}},
		{"complete keeps a result", func(t *testing.T, j store.Journal) {
			_, _ = store.Wait(func(d func(bool, error)) { j.Complete("b", []byte("42"), future, d) })
		}, []string{"a", "c"}, nil, func(t *testing.T, j store.Journal) {
			if r, err := j.Result("b"); err != nil || string(r) != "42" {
				t.Fatalf("result = %q, %v", r, err)
			}
		}},
		{"complete of an unknown msgid", func(t *testing.T, j store.Journal) {
			found, err := store.Wait(func(d func(bool, error)) { j.Complete("zz", []byte("x"), future, d) })
			if found || err != nil {
				t.Fatalf("complete zz: %v %v", found, err)
			}
		}, []string{"a", "b", "c"}, nil, func(t *testing.T, j store.Journal) {
			if _, err := j.Result("zz"); !errors.Is(err, store.ErrNotFound) {
				t.Fatal("a result kept for a job that was not stored")
			}
		}},
		{"remove", func(t *testing.T, j store.Journal) {
			_, _ = store.Wait(func(d func(bool, error)) { j.Remove("c", d) })
		}, []string{"a", "b"}, nil, nil},
		{"record an attempt", func(t *testing.T, j store.Journal) {
			nb := time.Unix(1800000000, 0)
			got, err := store.Wait(func(d func(*store.Job, error)) { j.RecordAttempt("b", "worker lost", nb, d) })
			if err != nil || got.Attempts != 1 || got.LastError != "worker lost" || !got.NotBefore.Equal(nb) {
				t.Fatalf("attempt: %+v %v", got, err)
			}
		}, []string{"a", "b", "c"}, nil, func(t *testing.T, j store.Journal) {
			got, _ := j.Get("b")
			if got.Attempts != 1 || got.LastError != "worker lost" {
				t.Fatalf("attempt not stored: %+v", got)
			}
		}},
		{"attempt on an unknown msgid", func(t *testing.T, j store.Journal) {
			_, err := store.Wait(func(d func(*store.Job, error)) { j.RecordAttempt("zz", "x", time.Time{}, d) })
			if !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("attempt zz: %v", err)
			}
		}, []string{"a", "b", "c"}, nil, nil},
		{"bury", func(t *testing.T, j store.Journal) {
			got, err := store.Wait(func(d func(*store.Job, error)) { j.Bury("a", "boom", d) })
			if err != nil || got.State != store.Dead || got.Attempts != 1 {
				t.Fatalf("bury: %+v %v", got, err)
			}
			dup, _ := store.Wait(func(d func(bool, error)) { j.Append(job("a", "q"), d) })
			if !dup {
				t.Fatal("a dead job's msgid appended as a new job")
			}
		}, []string{"b", "c"}, []string{"a"}, nil},
		{"bury then revive goes to the tail", func(t *testing.T, j store.Journal) {
			_, _ = store.Wait(func(d func(*store.Job, error)) { j.Bury("a", "boom", d) })
			got, err := store.Wait(func(d func(*store.Job, error)) { j.Revive("a", d) })
			if err != nil || got.State != store.Pending || got.Attempts != 0 {
				t.Fatalf("revive: %+v %v", got, err)
			}
			if _, err := store.Wait(func(d func(*store.Job, error)) { j.Revive("b", d) }); err == nil {
				t.Fatal("revive of a pending job worked")
			}
		}, []string{"b", "c", "a"}, nil, nil},
		{"remove a dead job", func(t *testing.T, j store.Journal) {
			_, _ = store.Wait(func(d func(*store.Job, error)) { j.Bury("a", "boom", d) })
			found, _ := store.Wait(func(d func(bool, error)) { j.Remove("a", d) })
			if !found {
				t.Fatal("dead job not found")
			}
		}, []string{"b", "c"}, nil, nil},
		{"purge a queue", func(t *testing.T, j store.Journal) {
			mustAppend(t, j, job("x1", "qa"), job("x2", "qb")) // per-queue order only: same-length names sort by name
			n, err := store.Wait(func(d func(int, error)) { j.PurgeQueue("q", d) })
			if n != 3 || err != nil {
				t.Fatalf("purge: %d %v", n, err)
			}
		}, []string{"x1", "x2"}, nil, nil},
		{"expire results", func(t *testing.T, j store.Journal) {
			past := time.Now().Add(-time.Second)
			_, _ = store.Wait(func(d func(bool, error)) { j.Complete("a", []byte("old"), past, d) })
			_, _ = store.Wait(func(d func(bool, error)) { j.Complete("b", []byte("new"), future, d) })
			if _, err := j.Result("a"); !errors.Is(err, store.ErrNotFound) {
				t.Fatal("an expired result is still served")
			}
			n, err := store.Wait(func(d func(int, error)) { j.ExpireResults(time.Now(), d) })
			if n != 1 || err != nil {
				t.Fatalf("expire: %d %v", n, err)
			}
		}, []string{"c"}, nil, func(t *testing.T, j store.Journal) {
			if r, _ := j.Result("b"); string(r) != "new" {
				t.Fatal("a live result was expired")
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			j, _ := tempJournal(t)
			mustAppend(t, j, job("a", "q"), job("b", "q"), job("c", "q"))
			c.do(t, j)
			if got := ids(loadAll(t, j)); !reflect.DeepEqual(got, c.left) {
				t.Fatalf("pending %v, want %v", got, c.left)
			}
			page, err := j.List(store.ListOptions{State: store.Dead})
			if err != nil {
				t.Fatal(err)
			}
			if got := ids(page.Jobs); !reflect.DeepEqual(got, c.dead) {
				t.Fatalf("dead %v, want %v", got, c.dead)
			}
			if c.check != nil {
				c.check(t, j)
			}
		})
	}
}

func TestListAndCounts(t *testing.T) {
	j, _ := tempJournal(t)
	var want []string
	for i := range 25 {
		q := []string{"a", "b", "ab"}[i%3]
		id := fmt.Sprintf("m%02d", i)
		mustAppend(t, j, job(id, q))
		if q == "a" {
			want = append(want, id)
		}
	}
	_, _ = store.Wait(func(d func(*store.Job, error)) { j.Bury("m00", "x", d) })
	want = want[1:]

	// Page through queue a, 3 at a time: every pending job once, in order.
	var got []string
	after := ""
	for {
		page, err := j.List(store.ListOptions{Queue: "a", State: store.Pending, After: after, Limit: 3})
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, ids(page.Jobs)...)
		if page.Next == "" {
			break
		}
		after = page.Next
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("paged %v, want %v", got, want)
	}
	// Without a state: pending first, then dead, across pages.
	var all []string
	after = ""
	for {
		page, err := j.List(store.ListOptions{After: after, Limit: 4})
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, ids(page.Jobs)...)
		if after = page.Next; after == "" {
			break
		}
	}
	if len(all) != 25 || all[24] != "m00" {
		t.Fatalf("listing of everything: %v", all)
	}
	if _, err := j.List(store.ListOptions{After: "nonsense"}); err == nil {
		t.Fatal("a made-up cursor was accepted")
	}

	counts, err := j.Counts()
	if err != nil {
		t.Fatal(err)
	}
	byQueue := map[string]store.Count{}
	for _, c := range counts {
		byQueue[c.Queue] = c
	}
	if byQueue["a"] != (store.Count{Queue: "a", Pending: 8, Dead: 1}) || byQueue["b"].Pending != 8 || byQueue["ab"].Pending != 8 {
		t.Fatalf("counts %+v", counts)
	}
}

// Jobs appended to two queues in an interleaved order load back in FIFO
// order per queue, after a restart.
func TestRestartKeepsFIFOPerQueue(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.db")
	j := openJournal(t, path)
	var wantA, wantB []string
	for i := range 200 {
		id := emqpLikeID(i)
		q := "a"
		if i%3 == 0 {
			q = "b"
		}
		mustAppend(t, j, job(id, q))
		if q == "a" {
			wantA = append(wantA, id)
		} else {
			wantB = append(wantB, id)
		}
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	j = openJournal(t, path)
	var gotA, gotB []string
	for _, jb := range loadAll(t, j) {
		if jb.Queue == "a" {
			gotA = append(gotA, jb.MsgID)
		} else {
			gotB = append(gotB, jb.MsgID)
		}
	}
	if !reflect.DeepEqual(gotA, wantA) || !reflect.DeepEqual(gotB, wantB) {
		t.Fatalf("after restart:\n a %v\n b %v", gotA, gotB)
	}
}

// emqpLikeID makes ids that do not sort in append order, as v4 UUIDs
// do not: order must come from the index, not the ids.
func emqpLikeID(i int) string { return fmt.Sprintf("%08x-%d", uint32(i)*2654435761, i) }

func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()

	t.Run("locked", func(t *testing.T) {
		path := filepath.Join(dir, "locked.db")
		openJournal(t, path)
		opts := store.DefaultOptions()
		opts.LockTimeout = 100 * time.Millisecond
		_, err := store.Open(path, opts)
		if !errors.Is(err, store.ErrLocked) || !bytes.Contains([]byte(err.Error()), []byte(path)) {
			t.Fatalf("second open: %v; want ErrLocked naming the file", err)
		}
		ro := opts
		ro.ReadOnly = true
		if _, err := store.Open(path, ro); !errors.Is(err, store.ErrLocked) {
			t.Fatalf("read-only open of a held file: %v; want ErrLocked", err)
		}
	})
	t.Run("not a bbolt file", func(t *testing.T) {
		path := filepath.Join(dir, "garbage.db")
		garbage := bytes.Repeat([]byte("not a journal "), 1000)
		if err := os.WriteFile(path, garbage, 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := store.Open(path, store.DefaultOptions())
		if !errors.Is(err, store.ErrCorrupt) || !bytes.Contains([]byte(err.Error()), []byte(path)) {
			t.Fatalf("open of garbage: %v; want ErrCorrupt naming the file", err)
		}
		after, _ := os.ReadFile(path)
		if !bytes.Equal(after, garbage) {
			t.Fatal("the unreadable file was changed")
		}
	})
	t.Run("schema too new", func(t *testing.T) {
		path := filepath.Join(dir, "new.db")
		db, err := bolt.Open(path, 0o600, nil)
		if err != nil {
			t.Fatal(err)
		}
		_ = db.Update(func(tx *bolt.Tx) error {
			b, _ := tx.CreateBucketIfNotExists(migrations.Meta)
			return b.Put([]byte("schema"), []byte("999"))
		})
		db.Close()
		_, err = store.Open(path, store.DefaultOptions())
		if !errors.Is(err, store.ErrTooNew) {
			t.Fatalf("open of a newer file: %v; want ErrTooNew", err)
		}
	})
	t.Run("folder in the way", func(t *testing.T) {
		if _, err := store.Open(dir, store.DefaultOptions()); err == nil {
			t.Fatal("opened a folder as the journal")
		}
	})
}

func TestReadOnlyOpen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.db")
	j := openJournal(t, path)
	mustAppend(t, j, job("a", "q"))
	j.Close()
	opts := store.DefaultOptions()
	opts.ReadOnly = true
	ro, err := store.Open(path, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if got := ids(loadAll(t, ro)); !reflect.DeepEqual(got, []string{"a"}) {
		t.Fatalf("read-only load: %v", got)
	}
	if _, err := store.Wait(func(d func(bool, error)) { ro.Remove("a", d) }); err == nil {
		t.Fatal("a read-only journal took a write")
	}
}

func TestCloseFinishesQueuedWrites(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.db")
	j := openJournal(t, path)
	acked := make(chan string, 1000)
	for i := range 1000 {
		id := fmt.Sprintf("m%d", i)
		j.Append(job(id, "q"), func(_ bool, err error) {
			if err == nil {
				acked <- id
			}
		})
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	if len(acked) != 1000 {
		t.Fatalf("%d of 1000 queued appends finished before Close returned", len(acked))
	}
	if _, err := store.Wait(func(d func(bool, error)) { j.Append(job("late", "q"), d) }); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("append after Close: %v", err)
	}
	j = openJournal(t, path)
	if n := len(loadAll(t, j)); n != 1000 {
		t.Fatalf("%d jobs after reopening, want 1000", n)
	}
}

func TestCompact(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 100,000 jobs")
	}
	j, path := tempJournal(t)
	const total, keep = 100000, 1000
	payload := bytes.Repeat([]byte("x"), 200)
	errs := make(chan error, total)
	for i := range total {
		j.Append(&store.Job{MsgID: fmt.Sprintf("m%06d", i), Queue: "q", Payload: payload}, func(_ bool, err error) { errs <- err })
	}
	for range total {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	for i := range total - keep {
		j.Remove(fmt.Sprintf("m%06d", i), func(_ bool, err error) { errs <- err })
	}
	for range total - keep {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	st, err := j.Compact()
	if err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Stat(path)
	t.Logf("compact: %d -> %d bytes", st.Before, st.After)
	if st.After >= st.Before/4 || fi.Size() != st.After {
		t.Fatalf("compact: %d -> %d bytes (file %d); want it to shrink", st.Before, st.After, fi.Size())
	}
	got := loadAll(t, j)
	if len(got) != keep || got[0].MsgID != fmt.Sprintf("m%06d", total-keep) || !bytes.Equal(got[0].Payload, payload) {
		t.Fatalf("after compact: %d jobs, first %v", len(got), got[0].MsgID)
	}
	// It still takes writes, and the sequence goes on after the old ones.
	mustAppend(t, j, job("after", "q"))
	got = loadAll(t, j)
	if got[len(got)-1].MsgID != "after" {
		t.Fatal("a job appended after compaction is not at the tail")
	}
	if _, err := os.Stat(path + ".compact"); !os.IsNotExist(err) {
		t.Fatal("the compaction copy was left behind")
	}
}

// A damaged record fails only the write that touches it: appends that
// share its transaction are stored and acknowledged.
func TestDamagedRecordFailsOnlyItsWrite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.db")
	j := openJournal(t, path)
	mustAppend(t, j, job("bad", "q"))
	j.Close()
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	_ = db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(migrations.Jobs).Put([]byte("bad"), []byte{1, 1, 0})
	})
	db.Close()
	j = openJournal(t, path)

	removed := make(chan error, 1)
	attempted := make(chan error, 1)
	appended := make(chan error, 100)
	j.Remove("bad", func(_ bool, err error) { removed <- err })
	j.RecordAttempt("bad", "x", time.Time{}, func(_ *store.Job, err error) { attempted <- err })
	for i := range 100 {
		j.Append(job(fmt.Sprintf("ok%d", i), "q"), func(_ bool, err error) { appended <- err })
	}
	if err := <-removed; !errors.Is(err, store.ErrCorrupt) || !strings.Contains(err.Error(), `"bad"`) {
		t.Fatalf("remove of a damaged record: %v; want ErrCorrupt naming it", err)
	}
	if err := <-attempted; !errors.Is(err, store.ErrCorrupt) {
		t.Fatalf("attempt on a damaged record: %v; want ErrCorrupt", err)
	}
	for range 100 {
		if err := <-appended; err != nil {
			t.Fatalf("an append beside a damaged record failed: %v", err)
		}
	}
	if got, err := j.Get("ok99"); err != nil || got.MsgID != "ok99" {
		t.Fatalf("ok99 after the batch: %v, %v", got, err)
	}
}

// A Complete with nothing else queued waits LazyDelay for an Append to
// share its commit: one fsync for both.
func TestCompleteWaitsForCompany(t *testing.T) {
	commits := make(chan int, 16)
	opts := store.DefaultOptions()
	opts.LazyDelay = time.Second // long enough for the Append below to arrive
	opts.OnCommit = func(writes int, _ time.Duration) { commits <- writes }
	j, err := store.Open(filepath.Join(t.TempDir(), "j.db"), opts)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	mustAppend(t, j, job("a", "q"))
	<-commits
	done := make(chan error, 2)
	j.Complete("a", nil, time.Time{}, func(_ bool, err error) { done <- err })
	j.Append(job("b", "q"), func(_ bool, err error) { done <- err })
	for range 2 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if n := <-commits; n != 2 {
		t.Fatalf("the Complete and the Append took a commit of %d writes, want one of 2", n)
	}
	// Alone, a Complete still commits (after LazyDelay).
	if found, err := store.Wait(func(d func(bool, error)) { j.Complete("b", nil, time.Time{}, d) }); err != nil || !found {
		t.Fatalf("Complete alone: %v %v", found, err)
	}
}
