package boltstore_test

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eventmq/emq/internal/testutil"
	"github.com/eventmq/emq/store"
	"github.com/eventmq/emq/store/boltstore"
)

// smallSegments are options that rotate the log every MiB and never
// checkpoint on their own while a test writes a few MiB: what the files
// hold is what the test made them hold. Commits of 16 jobs of 4 KiB stay
// records of the log, well under DirectBytes. The journal logs to t.Log.
func smallSegments(t testing.TB) boltstore.Options {
	opts := boltstore.DefaultOptions()
	opts.Logger = slog.New(slog.NewTextHandler(newTestLog(t), nil))
	opts.SegmentSize = 1 << 20
	opts.DirectBytes = 256 << 10
	opts.MaxBatch = 16
	opts.CheckpointEvery = time.Hour
	opts.CheckpointBytes, opts.MaxLogBytes = 64<<20, 64<<20
	return opts
}

// testLog writes to t.Log while the test runs, and drops what comes
// after it: a journal's background check of its file may log after
// Close.
type testLog struct {
	mu   sync.Mutex
	t    testing.TB
	done bool
}

func newTestLog(t testing.TB) *testLog {
	w := &testLog{t: t}
	t.Cleanup(func() { w.mu.Lock(); w.done = true; w.mu.Unlock() })
	return w
}

func (w *testLog) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done {
		return len(p), nil
	}
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// numbered is the jobs numbered from up to to (excluded), keyed by
// msgid, each with a payload of 4 KiB of its own.
func numbered(from, to int) map[string][]byte {
	jobs := map[string][]byte{}
	for i := from; i < to; i++ {
		jobs[fmt.Sprintf("job-%04d", i)] = append([]byte(fmt.Sprintf("job %04d ", i)), bytes.Repeat([]byte{'a' + byte(i%26)}, 4000)...)
	}
	return jobs
}

func openWith(t testing.TB, path string, opts boltstore.Options) *boltstore.Journal {
	t.Helper()
	j, err := boltstore.Open(path, opts)
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	return j
}

func closeOK(t testing.TB, j *boltstore.Journal) {
	t.Helper()
	if err := j.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
}

// appendAll appends the jobs at once (the committer groups them) and
// returns when every one is acknowledged.
func appendAll(t testing.TB, j store.Journal, jobs map[string][]byte) {
	t.Helper()
	errs := make(chan error, len(jobs))
	for _, id := range slices.Sorted(maps.Keys(jobs)) {
		j.Append(&store.Job{MsgID: id, Queue: "q", Payload: jobs[id]}, func(dup bool, err error) {
			if err == nil && dup {
				err = fmt.Errorf("%s taken as a duplicate", id)
			}
			errs <- err
		})
	}
	for range jobs {
		if err := testutil.Recv(t, errs, "an append's outcome"); err != nil {
			t.Fatalf("append: %v", err)
		}
	}
}

// completeAll completes the jobs (no result kept) and returns when every
// one is acknowledged.
func completeAll(t testing.TB, j store.Journal, ids []string) {
	t.Helper()
	errs := make(chan error, len(ids))
	for _, id := range ids {
		j.Complete(id, nil, time.Time{}, nil, func(found bool, err error) {
			if err == nil && !found {
				err = fmt.Errorf("%s not found", id)
			}
			errs <- err
		})
	}
	for range ids {
		if err := testutil.Recv(t, errs, "a complete's outcome"); err != nil {
			t.Fatalf("complete: %v", err)
		}
	}
}

// assertHolds fails unless the open journal gives back exactly the
// pending jobs want, each once, with its payload.
func assertHolds(t testing.TB, what string, j store.Journal, want map[string][]byte) {
	t.Helper()
	seen := map[string]int{}
	if err := j.Load(func(jb *store.Job) error { seen[jb.MsgID]++; return nil }); err != nil {
		t.Fatalf("%s: load: %v", what, err)
	}
	for id, n := range seen {
		if _, ok := want[id]; !ok {
			t.Errorf("%s: job %s loaded: never acknowledged, or completed", what, id)
		} else if n != 1 {
			t.Errorf("%s: job %s loaded %d times", what, id, n)
		}
	}
	ids := slices.Sorted(maps.Keys(want))
	err := j.Payloads(ids, func(i int, p []byte, err error) {
		if err != nil || !bytes.Equal(p, want[ids[i]]) {
			t.Errorf("%s: job %s: payload of %d bytes, %v; want its own %d", what, ids[i], len(p), err, len(want[ids[i]]))
		}
	})
	if err != nil {
		t.Fatalf("%s: payloads: %v", what, err)
	}
	if len(seen) != len(want) {
		t.Fatalf("%s: %d jobs loaded, want %d", what, len(seen), len(want))
	}
}

// copyFileTo copies the file from to the file to, made or replaced.
func copyFileTo(t testing.TB, from, to string) {
	t.Helper()
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	if err := os.MkdirAll(filepath.Dir(to), 0o750); err != nil {
		t.Fatal(err)
	}
	out, err := os.Create(to)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

// snapshot copies the journal file at from and its log to the
// journal at to. Taken while the journal is open, the copy is what a
// SIGKILL leaves: every write made, none after.
func snapshot(t testing.TB, from, to string) {
	t.Helper()
	copyFileTo(t, from, to)
	entries, err := os.ReadDir(boltstore.LogDir(from))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(boltstore.LogDir(to), 0o750); err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		copyFileTo(t, filepath.Join(boltstore.LogDir(from), e.Name()), filepath.Join(boltstore.LogDir(to), e.Name()))
	}
}

// logSegments lists the log's segment files of the journal at path.
func logSegments(t testing.TB, path string) []string {
	t.Helper()
	segs, err := filepath.Glob(filepath.Join(boltstore.LogDir(path), "*.wal"))
	if err != nil {
		t.Fatal(err)
	}
	return segs
}

// intoFile opens the journal at path (made if new), runs write on it and
// closes it with everything in bbolt's file, nothing left in the log to
// replay: what a stopped broker leaves.
func intoFile(t testing.TB, path string, write func(j *boltstore.Journal)) {
	t.Helper()
	j := openWith(t, path, smallSegments(t))
	write(j)
	closeOK(t, j)
	if rep, err := boltstore.Check(path); err != nil || !rep.OK() || rep.Records != 0 {
		t.Fatalf("the closed journal: %+v, %v; want every record in the file", rep, err)
	}
}

// A checkpoint writes the memtable into bbolt, in one transaction, with
// the log position it reached, then deletes the segments that position
// covers. A crash at each step leaves files that open to exactly the jobs
// acknowledged, each once, with their payloads, and open so again. Each
// state is real files, copied while the journal runs (what a SIGKILL
// leaves): before any checkpoint; with OnCheckpoint holding the
// checkpointer between bbolt's commit and the deletion, once with records
// after the checkpoint and once with none; and after the deletion. (A
// crash inside bbolt's commit is the state before it: the commit is
// atomic.)
func TestReplayAfterACrashAtEveryStepOfACheckpoint(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	live := filepath.Join(dir, "live", "journal.db")
	crashed := func(state string) string { return filepath.Join(dir, state, "journal.db") }
	const (
		beforeAny   = "before any checkpoint"
		records     = "between a commit and its deletion, records after it"
		beforeGone  = "between the last commit and its deletion"
		segsDeleted = "after the segments were deleted"
	)

	// Session 1: jobs acknowledged, never checkpointed.
	j := openWith(t, live, smallSegments(t))
	first := numbered(0, 500)
	appendAll(t, j, first)
	snapshot(t, live, crashed(beforeAny))
	closeOK(t, j)

	// Session 2: its first two checkpoints are held where bbolt has
	// committed and the segments are still there.
	opts := smallSegments(t)
	opts.CheckpointEvery = 5 * time.Millisecond
	held, resume, stop := make(chan struct{}), make(chan struct{}), make(chan struct{})
	holds := 0
	opts.OnCheckpoint = func(int, time.Duration) {
		if holds++; holds > 2 { // only the checkpointer's goroutine calls it before Close
			return
		}
		select {
		case held <- struct{}{}:
		case <-stop:
			return
		}
		select {
		case <-resume:
		case <-stop:
		}
	}
	isHeld := func(what string) {
		t.Helper()
		select {
		case <-held:
		case <-time.After(testutil.Wait):
			t.Fatalf("no checkpoint of %s within %v", what, testutil.Wait)
		}
	}
	j = openWith(t, live, opts)
	defer j.Close()
	defer close(stop)
	appendAll(t, j, numbered(500, 510))
	isHeld("the first jobs")
	appendAll(t, j, numbered(510, 1000)) // 2 MiB more: two segments at least
	all := numbered(0, 1000)
	var completed []string
	for i := 0; i < 1000; i += 5 {
		id := fmt.Sprintf("job-%04d", i)
		completed = append(completed, id)
		delete(all, id)
	}
	completeAll(t, j, completed)
	snapshot(t, live, crashed(records))
	resume <- struct{}{}
	isHeld("everything")
	snapshot(t, live, crashed(beforeGone))
	if n := len(logSegments(t, live)); n < 2 {
		t.Fatalf("the log has %d segments before the deletion; want several (1 MiB each)", n)
	}
	resume <- struct{}{}
	testutil.Eventually(t, "the checkpointed segments deleted", func() bool { return len(logSegments(t, live)) == 1 })
	snapshot(t, live, crashed(segsDeleted))
	closeOK(t, j)

	for _, c := range []struct {
		state    string
		want     map[string][]byte
		replayed bool // the log holds records after bbolt's checkpoint
	}{
		{beforeAny, first, true},
		{records, all, true},
		{beforeGone, all, false},
		{segsDeleted, all, false},
	} {
		t.Run(c.state, func(t *testing.T) {
			path := crashed(c.state)
			rep, err := boltstore.Check(path)
			if err != nil || !rep.OK() {
				t.Fatalf("check of the crashed journal: %+v, %v; a crash is not damage", rep, err)
			}
			if c.replayed != (rep.Records > 0) {
				t.Fatalf("the crashed journal's log holds %d records after its checkpoint %d: not the state meant", rep.Records, rep.Checkpoint)
			}
			for _, open := range []string{"first open", "second open"} {
				j := openWith(t, path, smallSegments(t))
				assertHolds(t, open, j, c.want)
				if n := len(logSegments(t, path)); !c.replayed && n != 1 {
					t.Fatalf("%s: %d segments on disk; the ones the checkpoint covers go at open", open, n)
				}
				closeOK(t, j)
			}
		})
	}
}

// A running journal's checkpoints delete each segment of its log they
// cover: after a burst that went through several 1 MiB segments, only
// the last is left on disk, and nothing acknowledged went with the others.
func TestCheckpointDeletesTheSegmentsItCovers(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "journal.db")
	opts := smallSegments(t)
	opts.CheckpointEvery = 10 * time.Millisecond
	j := openWith(t, path, opts)
	defer j.Close()
	jobs := numbered(0, 1000) // 4 MiB
	appendAll(t, j, jobs)
	testutil.Eventually(t, "the log down to one segment", func() bool { return len(logSegments(t, path)) == 1 })
	if last := filepath.Base(logSegments(t, path)[0]); last == "00000000000000000001.wal" {
		t.Fatalf("the one segment left is the first (%s): the log never rotated", last)
	}
	closeOK(t, j)
	j = openWith(t, path, opts)
	defer j.Close()
	assertHolds(t, "reopened", j, jobs)
}
