package boltstore_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eventmq/emq/internal/testutil"
	"github.com/eventmq/emq/store"
	"github.com/eventmq/emq/store/boltstore"
)

// A value of 1 KiB or more stays in the log until its checkpoint: the
// memtable keeps where it lies, and each read takes it from there. So
// what the journal holds in memory does not grow with payloads, and
// every read (Load, Payloads, Get, a backup) still gives every byte.
func TestMemtableHoldsNoLargeValue(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "live", "journal.db")
	j := openWith(t, path, smallSegments(t)) // never checkpoints on its own
	defer j.Close()
	jobs := numbered(0, 500) // 2 MiB of 4 KiB payloads
	appendAll(t, j, jobs)
	// A job costs its key, its head and the pending index's entry, a few
	// hundred bytes, whatever its payload.
	perJob := func() int64 { return j.MemtableBytes() / int64(len(jobs)) }
	if n := perJob(); n > 512 {
		t.Fatalf("the memtable holds %d bytes a job of 4 KiB: it keeps payloads", n)
	}
	assertHolds(t, "from the log", j, jobs)
	got, err := j.Get("job-0007")
	if err != nil || !bytes.Equal(got.Payload, jobs["job-0007"]) {
		t.Fatalf("get: %v, payload of %d bytes", err, len(got.Payload))
	}
	// Replayed after a crash, the log's records are again held as places.
	snapshot(t, path, filepath.Join(dir, "crashed", "journal.db"))
	again := openWith(t, filepath.Join(dir, "crashed", "journal.db"), smallSegments(t))
	defer again.Close()
	if n := again.MemtableBytes() / int64(len(jobs)); n > 512 {
		t.Fatalf("replayed, the memtable holds %d bytes a job of 4 KiB: it keeps payloads", n)
	}
	assertHolds(t, "replayed", again, jobs)
}

// A read that began before a checkpoint reads the memtable it took,
// whose values lie in the log: the segments the checkpoint covers stay
// until that read ends, and then go.
func TestReadBeforeACheckpointOutlivesItsSegments(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "journal.db")
	j := openWith(t, path, smallSegments(t))
	defer j.Close()
	jobs := numbered(0, 800) // 3 MiB: three segments of 1 MiB at least
	appendAll(t, j, jobs)
	if n := len(logSegments(t, path)); n < 3 {
		t.Fatalf("%d segments; want several", n)
	}
	w := &heldWriter{started: make(chan struct{}), release: make(chan struct{})}
	defer w.free() // a failure below leaves no backup blocked under Close
	backed := make(chan error, 1)
	go func() {
		_, err := j.Backup(w, store.BackupHeader{})
		backed <- err
	}()
	select {
	case <-w.started: // the backup's view holds the memtable, and has written its first bytes
	case err := <-backed:
		t.Fatalf("backup ended before it wrote: %v", err)
	case <-time.After(testutil.Wait):
		t.Fatal("the backup wrote nothing")
	}
	if err := j.CheckpointNow(); err != nil {
		t.Fatalf("checkpoint: %v", err)
	}
	if n := len(logSegments(t, path)); n < 3 {
		t.Fatalf("%d segments left while a read holds them; want every one it may read", n)
	}
	w.free()
	select {
	case err := <-backed:
		if err != nil {
			t.Fatalf("the backup begun before the checkpoint: %v", err)
		}
	case <-time.After(testutil.Wait):
		t.Fatal("the backup did not end")
	}
	r := openWith(t, filepath.Join(t.TempDir(), "journal.db"), smallSegments(t))
	defer r.Close()
	if _, err := r.Restore(bytes.NewReader(w.buf.Bytes()), false); err != nil {
		t.Fatalf("restore: %v", err)
	}
	assertHolds(t, "restored", r, jobs)
	testutil.Eventually(t, "the segments the checkpoint covers deleted once the read ended", func() bool {
		return len(logSegments(t, path)) == 1
	})
}

// heldWriter takes a backup's first write, then waits to be released.
type heldWriter struct {
	buf     bytes.Buffer
	started chan struct{}
	release chan struct{}
	once    sync.Once
}

func (w *heldWriter) free() { w.once.Do(func() { close(w.release) }) }

func (w *heldWriter) Write(p []byte) (int, error) {
	if w.buf.Len() == 0 {
		close(w.started)
		<-w.release
	}
	return w.buf.Write(p)
}

// A checkpoint goes into bbolt in transactions of about CheckpointBytes
// of values each, so that bbolt's pages of one stay few. A crash between
// two of them leaves bbolt with some of the values and its old
// checkpoint: the log replays them all over it, and every job comes back
// once, with its payload, the completed ones not at all.
func TestCrashBetweenTheTransactionsOfACheckpoint(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	live := filepath.Join(dir, "live", "journal.db")
	crashed := filepath.Join(dir, "crashed", "journal.db")
	j := openWith(t, live, smallSegments(t))
	defer j.Close()
	j.CheckpointTxBytes(64 << 10) // 16 jobs a transaction
	all := numbered(0, 400)
	appendAll(t, j, all)
	var completed []string
	for i := 0; i < 400; i += 3 {
		id := fmt.Sprintf("job-%04d", i)
		completed = append(completed, id)
		delete(all, id)
	}
	completeAll(t, j, completed)
	txs := 0
	j.BetweenCheckpointTxs(func() {
		if txs++; txs == 5 {
			snapshot(t, live, crashed)
		}
	})
	if err := j.CheckpointNow(); err != nil {
		t.Fatalf("checkpoint: %v", err)
	}
	if txs < 5 {
		t.Fatalf("the checkpoint took %d transactions; want many", txs+1)
	}
	rep, err := boltstore.Check(crashed)
	if err != nil || !rep.OK() || rep.Records == 0 {
		t.Fatalf("the crashed journal: %+v, %v; want a sound one whose log replays", rep, err)
	}
	for _, open := range []string{"first open", "second open"} {
		c := openWith(t, crashed, smallSegments(t))
		assertHolds(t, open, c, all)
		closeOK(t, c)
	}
	assertHolds(t, "live", j, all)
}

// A value changed in the log after it was written (the disk's damage) is
// never served: its read fails as damaged, the job goes to the dead
// letters saying so, and the others are served. The checkpoint carries
// the damage into bbolt as damage.
func TestDamagedValueInTheLogIsSetAside(t *testing.T) {
	t.Parallel()
	victim := "job-0031"
	j, heard, jobs := damagedInLog(t, victim)

	err := j.Payloads([]string{victim}, func(_ int, p []byte, err error) {
		if !errors.Is(err, store.ErrDamaged) || !strings.Contains(err.Error(), victim) {
			t.Errorf("payload of the damaged job: %d bytes, %v; want ErrDamaged naming it", len(p), err)
		}
	})
	if err != nil {
		t.Fatalf("payloads: %v", err)
	}
	if d := testutil.Recv(t, heard, "the damage heard"); string(d.Bucket) != "jobs" || string(d.Key) != victim || !strings.Contains(d.Reason, "log") {
		t.Fatalf("damage heard: %+v; want jobs/%s in the log", d, victim)
	}
	testutil.Eventually(t, "the damaged job a dead letter", func() bool {
		got, err := j.Get(victim)
		return err == nil && got.State == store.Dead && strings.Contains(got.LastError, "damaged in the journal")
	})
	delete(jobs, victim)
	assertHolds(t, "the others", j, jobs)
	if err := j.CheckpointNow(); err != nil {
		t.Fatalf("checkpoint: %v", err)
	}
	assertHolds(t, "checkpointed", j, jobs)
}

// A damaged value the checkpoint meets goes into bbolt failing its seal:
// a read of it there is refused and it is set aside, never served.
func TestCheckpointKeepsTheDamageOfALoggedValue(t *testing.T) {
	t.Parallel()
	victim := "job-0012"
	j, heard, jobs := damagedInLog(t, victim)
	if err := j.CheckpointNow(); err != nil {
		t.Fatalf("checkpoint: %v", err)
	}
	if _, err := j.Get(victim); !errors.Is(err, store.ErrDamaged) {
		t.Fatalf("get of the damaged job after its checkpoint: %v; want ErrDamaged", err)
	}
	if d := testutil.Recv(t, heard, "the damage heard"); string(d.Key) != victim {
		t.Fatalf("damage heard: %+v; want jobs/%s", d, victim)
	}
	delete(jobs, victim)
	testutil.Eventually(t, "the damaged job not pending", func() bool {
		got, err := j.Get(victim)
		return err == nil && got.State == store.Dead
	})
	assertHolds(t, "the others", j, jobs)
}

// damagedInLog opens a journal that never checkpoints on its own, hearing
// its damage, stores 50 jobs of 4 KiB, and changes a byte of victim's
// payload in the log.
func damagedInLog(t *testing.T, victim string) (*boltstore.Journal, chan store.Damage, map[string][]byte) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "journal.db")
	heard := make(chan store.Damage, 16)
	opts := smallSegments(t)
	opts.OnDamage = func(d store.Damage) { heard <- d }
	j := openWith(t, path, opts)
	t.Cleanup(func() { j.Close() })
	jobs := numbered(0, 50)
	appendAll(t, j, jobs)
	flipInLog(t, path, jobs[victim][:64])
	return j, heard, jobs
}

// flipInLog changes a byte of the log where marker lies (once).
func flipInLog(t *testing.T, path string, marker []byte) {
	t.Helper()
	for _, seg := range logSegments(t, path) {
		b, err := os.ReadFile(seg)
		if err != nil {
			t.Fatal(err)
		}
		i := bytes.Index(b, marker)
		if i < 0 {
			continue
		}
		f, err := os.OpenFile(seg, os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.WriteAt([]byte{b[i+10] ^ 0x20}, int64(i+10)); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Fatalf("%q not found in the log", marker)
}

var _ io.Writer = (*heldWriter)(nil)
