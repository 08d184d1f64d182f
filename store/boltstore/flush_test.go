package boltstore_test

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eventmq/emq/internal/cutfs"
	"github.com/eventmq/emq/internal/testutil"
	"github.com/eventmq/emq/store"
	"github.com/eventmq/emq/store/boltstore"
)

// mountCut mounts a power-cut layer (internal/cutfs) over a temporary
// folder, or skips (fails with EMQ_REQUIRE_FUSE set, as in CI).
func mountCut(t *testing.T) *cutfs.FS {
	t.Helper()
	if os.Geteuid() != 0 {
		testutil.Missing(t, "EMQ_REQUIRE_FUSE", "cutfs needs root to mount FUSE")
	}
	c, err := cutfs.Mount(t.TempDir(), filepath.Join(t.TempDir(), "mnt"))
	if err != nil {
		testutil.Missing(t, "EMQ_REQUIRE_FUSE", "cannot mount FUSE (/dev/fuse, fuse3): %v", err)
	}
	t.Cleanup(func() { c.Unmount() })
	return c
}

// A group commit flushes the log once. The committer held while 64
// Appends queue, the 64 go in one commit and one fdatasync of the log.
// Then 8 writers append at will, the log in segments of 1 MiB: the
// segments are flushed exactly once a commit (each commit here holds
// Appends, none of them ACKed before that flush), those that start a
// segment too. cutfs counts every flush of each file by name: the next
// segment is zero-filled (in the background) and its header flushed
// under the spare's name (next.wal.tmp), before it is a segment.
func TestOneFlushOfTheLogPerCommit(t *testing.T) {
	t.Parallel()
	fs := mountCut(t)
	// The log's folder on the layer, bbolt's file beside it on the disk:
	// bbolt maps its file, and a page fault that this very process's FUSE
	// server must answer waits for ever once the garbage collector stops
	// the world (the broker's power-cut tests run the journal in a child
	// process instead).
	path := filepath.Join(t.TempDir(), "journal.db")
	if err := os.Symlink(fs.Dir(), boltstore.LogDir(path)); err != nil {
		t.Fatal(err)
	}
	var commits, writes atomic.Int64
	opts := boltstore.DefaultOptions()
	opts.SegmentSize, opts.DirectBytes = 1<<20, 256<<10
	opts.CheckpointEvery = time.Hour // no checkpoint: the segments stay, and are counted
	opts.OnCommit = func(n int, _ time.Duration) { commits.Add(1); writes.Add(int64(n)) }
	j, err := boltstore.Open(path, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	flushes := func() int64 {
		return fs.SyncsOf(func(p string) bool { return filepath.Ext(p) == ".wal" })
	}
	segments := func() int {
		m, err := filepath.Glob(filepath.Join(boltstore.LogDir(path), "*.wal"))
		if err != nil {
			t.Fatal(err)
		}
		return len(m)
	}
	appendAll := func(ids []string, payload []byte) <-chan error {
		errs := make(chan error, len(ids))
		for _, id := range ids {
			j.Append(&store.Job{MsgID: id, Queue: "q", Payload: payload}, func(_ bool, err error) { errs <- err })
		}
		return errs
	}

	f0, c0, w0 := flushes(), commits.Load(), writes.Load()
	stalled, running := make(chan struct{}), make(chan struct{})
	j.Alone(func() { close(running); <-stalled }, func(err error) { t.Errorf("stall: %v", err) })
	testutil.Recv(t, running, "the committer held")
	var ids []string
	for i := range 64 {
		ids = append(ids, fmt.Sprintf("held-%02d", i))
	}
	errs := appendAll(ids, []byte("payload"))
	close(stalled)
	for range ids {
		if err := testutil.Recv(t, errs, "an Append's outcome"); err != nil {
			t.Fatal(err)
		}
	}
	if c, w, f := commits.Load()-c0, writes.Load()-w0, flushes()-f0; c != 1 || w != 64 || f != 1 {
		t.Fatalf("64 Appends queued behind the held committer: %d commits of %d writes, %d flushes of the log; want 1 commit of 64, 1 flush", c, w, f)
	}

	f0, c0, s0 := flushes(), commits.Load(), segments()
	payload := make([]byte, 1000)
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := range 400 {
				errs := appendAll([]string{fmt.Sprintf("w%d-%03d", w, i)}, payload)
				if err := <-errs; err != nil { // the test's goroutine waits on wg, with a deadline
					t.Error(err)
					return
				}
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	testutil.RecvWithin(t, time.Minute, done, "3,200 Appends from 8 writers")
	c, started, f := commits.Load()-c0, int64(segments()-s0), flushes()-f0
	t.Logf("3,200 Appends from 8 writers: %d commits, %d segments started, %d flushes of the log", c, started, f)
	if started < 2 {
		t.Fatalf("%d segments started by 3 MiB of Appends in 1 MiB segments; want 2 or more", started)
	}
	if f != c {
		t.Fatalf("%d flushes of the log's segments for %d commits (%d segments started); want exactly one a commit", f, c, started)
	}
}
