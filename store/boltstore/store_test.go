package boltstore_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/eventmq/emq/internal/testutil"
	"github.com/eventmq/emq/store"
	"github.com/eventmq/emq/store/boltstore"
	bolt "go.etcd.io/bbolt"
)

func openJournal(t testing.TB, path string) *boltstore.Journal {
	t.Helper()
	j, err := boltstore.Open(path, boltstore.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	return j
}

func tempJournal(t testing.TB) (*boltstore.Journal, string) {
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

func TestOpenErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()

	t.Run("locked", func(t *testing.T) {
		path := filepath.Join(dir, "locked.db")
		openJournal(t, path)
		opts := boltstore.DefaultOptions()
		opts.LockTimeout = 100 * time.Millisecond
		_, err := boltstore.Open(path, opts)
		if !errors.Is(err, store.ErrLocked) || !bytes.Contains([]byte(err.Error()), []byte(path)) {
			t.Fatalf("second open: %v; want ErrLocked naming the file", err)
		}
		ro := opts
		ro.ReadOnly = true
		if _, err := boltstore.Open(path, ro); !errors.Is(err, store.ErrLocked) {
			t.Fatalf("read-only open of a held file: %v; want ErrLocked", err)
		}
	})
	t.Run("not a bbolt file", func(t *testing.T) {
		path := filepath.Join(dir, "garbage.db")
		garbage := bytes.Repeat([]byte("not a journal "), 1000)
		if err := os.WriteFile(path, garbage, 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := boltstore.Open(path, boltstore.DefaultOptions())
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
			b, _ := tx.CreateBucketIfNotExists(store.BucketMeta)
			return b.Put([]byte("schema"), []byte("999"))
		})
		db.Close()
		_, err = boltstore.Open(path, boltstore.DefaultOptions())
		if !errors.Is(err, store.ErrTooNew) {
			t.Fatalf("open of a newer file: %v; want ErrTooNew", err)
		}
	})
	t.Run("folder in the way", func(t *testing.T) {
		if _, err := boltstore.Open(dir, boltstore.DefaultOptions()); err == nil {
			t.Fatal("opened a folder as the journal")
		}
	})
	t.Run("MaxJobSize over bbolt's limit", func(t *testing.T) {
		opts := boltstore.DefaultOptions()
		opts.MaxJobSize = 2 << 30
		if _, err := boltstore.Open(filepath.Join(dir, "huge.db"), opts); err == nil || !strings.Contains(err.Error(), "MaxJobSize") {
			t.Fatalf("MaxJobSize of 2 GiB: %v; want an error naming MaxJobSize", err)
		}
	})
}

func TestReadOnlyOpen(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "journal.db")
	j := openJournal(t, path)
	mustAppend(t, j, job("a", "q"))
	j.Close()
	opts := boltstore.DefaultOptions()
	opts.ReadOnly = true
	ro, err := boltstore.Open(path, opts)
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

func TestCompact(t *testing.T) {
	t.Parallel()
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
		if err := testutil.Recv(t, errs, "an append's outcome"); err != nil {
			t.Fatal(err)
		}
	}
	// Closed, every job is in the file (the log checkpointed); then most
	// are removed from it, leaving their pages free.
	j.Close()
	j = openJournal(t, path)
	for i := range total - keep {
		j.Remove(fmt.Sprintf("m%06d", i), func(_ bool, err error) { errs <- err })
	}
	for range total - keep {
		if err := testutil.Recv(t, errs, "a remove's outcome"); err != nil {
			t.Fatal(err)
		}
	}
	j.Close()
	j = openJournal(t, path)
	st, err := j.Compact()
	if err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Stat(path)
	t.Logf("compact: %d -> %d bytes", st.Before, st.After)
	// Half the jobs are gone; the file keeps some slack (bbolt's free
	// list, the pages of the last writes), so it shrinks by a third or more.
	if st.After > st.Before*2/3 || fi.Size() != st.After {
		t.Fatalf("compact: %d -> %d bytes (file %d); want it to shrink", st.Before, st.After, fi.Size())
	}
	got := loadAll(t, j)
	if len(got) != keep || got[0].MsgID != fmt.Sprintf("m%06d", total-keep) {
		t.Fatalf("after compact: %d jobs, first %v", len(got), got[0].MsgID)
	}
	if first, err := j.Get(got[0].MsgID); err != nil || !bytes.Equal(first.Payload, payload) {
		t.Fatalf("after compact, the first job: %v; want its payload kept", err)
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

// A record whose bytes fail their checksum is given as missing: the
// writes that touch it find no job, the appends that share their
// transaction are stored and acknowledged, OnDamage hears of it once, and
// it is moved aside (an undecodable record to the damaged bucket, named
// by its key); the journal goes on.
func TestDamagedRecordIsMovedAside(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "journal.db")
	j := openJournal(t, path)
	mustAppend(t, j, job("bad", "q"), job("flipped", "q"))
	j.Close()
	alterJobs(t, path, func(b *bolt.Bucket) error {
		v := bytes.Clone(b.Get([]byte("flipped")))
		v[len(v)-6] ^= 0x10 // in its payload: it still decodes
		if err := b.Put([]byte("flipped"), v); err != nil {
			return err
		}
		return b.Put([]byte("bad"), []byte{1, 1, 0}) // does not decode
	})
	j, heard := openHearing(t, path)

	removed := make(chan error, 1)
	attempted := make(chan error, 1)
	appended := make(chan error, 100)
	j.Remove("bad", func(found bool, err error) {
		if err == nil && found {
			err = errors.New("found")
		}
		removed <- err
	})
	j.RecordAttempt("bad", "x", time.Time{}, nil, func(_ *store.Job, err error) { attempted <- err })
	for i := range 100 {
		j.Append(job(fmt.Sprintf("ok%d", i), "q"), func(_ bool, err error) { appended <- err })
	}
	if err := testutil.Recv(t, removed, "the remove's outcome"); err != nil {
		t.Fatalf("remove of a damaged record: %v; want it not found", err)
	}
	if err := testutil.Recv(t, attempted, "the attempt's outcome"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("attempt on a damaged record: %v; want ErrNotFound", err)
	}
	for range 100 {
		if err := testutil.Recv(t, appended, "an append's outcome"); err != nil {
			t.Fatalf("an append beside a damaged record failed: %v", err)
		}
	}
	if d := testutil.Recv(t, heard, "the damage heard"); string(d.Bucket) != "jobs" || string(d.Key) != "bad" || !strings.Contains(d.Reason, path) {
		t.Fatalf("damage heard: %+v; want jobs/bad in %s", d, path)
	}
	// The other one is found by a read; it still decodes: a dead letter
	// saying why, never pending again.
	if _, err := j.Get("flipped"); !errors.Is(err, store.ErrDamaged) || !strings.Contains(err.Error(), "flipped") {
		t.Fatalf("reading the flipped record: %v; want ErrDamaged naming it", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, err := j.Get("flipped")
		list, lerr := j.Damaged()
		if err == nil && got.State == store.Dead && strings.Contains(got.LastError, "damaged in the journal") &&
			lerr == nil && len(list) == 1 && list[0].Bucket == "jobs" && list[0].Key == "bad" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("moved aside: %+v %v; damaged list %+v %v", got, err, list, lerr)
		}
		time.Sleep(5 * time.Millisecond)
	}
	for _, jb := range loadAll(t, j) {
		if jb.MsgID == "bad" || jb.MsgID == "flipped" {
			t.Fatalf("%s was loaded as pending", jb.MsgID)
		}
	}
}

// Opening does not read every byte of a backlog of large jobs: a large
// record is loaded from its fields, and checked whole when its payload is
// read. One whose payload was changed on disk is loaded, then refused as
// damaged at that read and moved aside; one whose fields no longer decode
// is checked at once, and not loaded. Small records are checked at open.
func TestLargeRecordIsCheckedWhenItsPayloadIsRead(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "journal.db")
	j := openJournal(t, path)
	big := func(id string) *store.Job {
		jb := job(id, "q")
		jb.Payload = bytes.Repeat([]byte(id), 128<<10/len(id))
		return jb
	}
	mustAppend(t, j, big("big"), big("undecodable"), big("whole"), job("small", "q"))
	j.Close()
	alterJobs(t, path, func(b *bolt.Bucket) error {
		v := bytes.Clone(b.Get([]byte("big")))
		v[len(v)/2] ^= 0x10 // in its payload: its fields still decode
		if err := b.Put([]byte("big"), v); err != nil {
			return err
		}
		v = bytes.Clone(b.Get([]byte("undecodable")))
		v[0] = 0xff // an unknown version
		return b.Put([]byte("undecodable"), v)
	})
	j, heard := openHearing(t, path)

	var ids []string
	for _, jb := range loadAll(t, j) {
		ids = append(ids, jb.MsgID)
	}
	if want := []string{"big", "whole", "small"}; fmt.Sprint(ids) != fmt.Sprint(want) {
		t.Fatalf("loaded %v, want %v", ids, want)
	}
	if d := testutil.Recv(t, heard, "the damage heard at open"); string(d.Key) != "undecodable" {
		t.Fatalf("damage heard at open: %+v, want the undecodable record", d)
	}
	errs := map[string]error{}
	err := j.Payloads([]string{"big", "whole"}, func(i int, p []byte, err error) {
		if i == 1 && err == nil && !bytes.Equal(p, big("whole").Payload) {
			err = errors.New("a payload that is not what was stored")
		}
		errs[[]string{"big", "whole"}[i]] = err
	})
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(errs["big"], store.ErrCorrupt) || errs["whole"] != nil {
		t.Fatalf("payloads read: %v; want big refused as damaged, whole given", errs)
	}
	if d := testutil.Recv(t, heard, "the damage heard at the read"); string(d.Key) != "big" {
		t.Fatalf("damage heard at the read: %+v, want big", d)
	}
	testutil.Eventually(t, "the damaged records moved aside", func() bool {
		got, err := j.Get("big")
		return err == nil && got.State == store.Dead
	})
}

// alterJobs changes the jobs bucket of the closed journal at path behind
// its back, as a failing disk would.
func alterJobs(t *testing.T, path string, fn func(b *bolt.Bucket) error) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Update(func(tx *bolt.Tx) error { return fn(tx.Bucket(store.BucketJobs)) }); err != nil {
		t.Fatal(err)
	}
}

// openHearing opens the journal at path with its damage reported on heard.
func openHearing(t *testing.T, path string) (j *boltstore.Journal, heard chan store.Damage) {
	t.Helper()
	heard = make(chan store.Damage, 4)
	opts := boltstore.DefaultOptions()
	opts.OnDamage = func(d store.Damage) { heard <- d }
	j, err := boltstore.Open(path, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	return j, heard
}

// A Complete with nothing else queued waits LazyDelay for an Append to
// share its commit: one fsync for both.
func TestCompleteWaitsForCompany(t *testing.T) {
	t.Parallel()
	commits := make(chan int, 16)
	opts := boltstore.DefaultOptions()
	opts.LazyDelay = time.Second // long enough for the Append below to arrive
	opts.OnCommit = func(writes int, _ time.Duration) { commits <- writes }
	j, err := boltstore.Open(filepath.Join(t.TempDir(), "j.db"), opts)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	mustAppend(t, j, job("a", "q"))
	testutil.Recv(t, commits, "the append's commit")
	done := make(chan error, 2)
	j.Complete("a", nil, time.Time{}, nil, func(_ bool, err error) { done <- err })
	j.Append(job("b", "q"), func(_ bool, err error) { done <- err })
	for range 2 {
		if err := testutil.Recv(t, done, "an outcome"); err != nil {
			t.Fatal(err)
		}
	}
	if n := testutil.Recv(t, commits, "the commit of the Complete and the Append"); n != 2 {
		t.Fatalf("the Complete and the Append took a commit of %d writes, want one of 2", n)
	}
	// Alone, a Complete still commits (after LazyDelay).
	if found, err := store.Wait(func(d func(bool, error)) { j.Complete("b", nil, time.Time{}, nil, d) }); err != nil || !found {
		t.Fatalf("Complete alone: %v %v", found, err)
	}
}

// A backup of a journal holding a value that fails its checksum fails,
// naming it, instead of leaving it out; the value is moved aside
// meanwhile, and the next backup, holding it in the damaged bucket,
// succeeds.
func TestBackupRefusesDamage(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "journal.db")
	j := openJournal(t, path)
	mustAppend(t, j, job("ok", "q"), job("bad", "q"))
	j.Close()
	alterJobs(t, path, func(b *bolt.Bucket) error { return b.Put([]byte("bad"), []byte{1, 1, 0}) })
	j, heard := openHearing(t, path)
	if _, err := j.Backup(io.Discard, store.BackupHeader{}); !errors.Is(err, store.ErrDamaged) || !strings.Contains(err.Error(), `jobs/"bad"`) {
		t.Fatalf("backup of a damaged journal: %v; want ErrDamaged naming jobs/bad", err)
	}
	testutil.Recv(t, heard, "the damage heard")
	testutil.Eventually(t, "a backup once the damage is moved aside", func() bool {
		st, err := j.Backup(io.Discard, store.BackupHeader{})
		return err == nil && st.Jobs == 1
	})
}

// A backup reads every bucket, meta too: the schema version, which is
// not sealed, is not taken for damage (it was moved aside, out of meta,
// by every backup).
func TestBackupLeavesTheSchema(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "journal.db")
	j, heard := openHearing(t, path)
	mustAppend(t, j, job("ok", "q"))
	if _, err := j.Backup(io.Discard, store.BackupHeader{}); err != nil {
		t.Fatal(err)
	}
	j.Close()
	select {
	case d := <-heard:
		t.Fatalf("damage heard during a backup: %v", d)
	default:
	}
	j = openJournal(t, path)
	if ds, err := j.Damaged(); err != nil || len(ds) != 0 {
		t.Fatalf("damaged after a backup: %v, %v", ds, err)
	}
}
