package cutfs

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/eventmq/emq/internal/testutil"
)

// mount mounts a layer for a test, or skips (fails with EMQ_REQUIRE_FUSE).
func mount(t *testing.T) (*FS, string) {
	t.Helper()
	if os.Geteuid() != 0 {
		testutil.Missing(t, "EMQ_REQUIRE_FUSE", "cutfs needs root to mount FUSE")
	}
	root := t.TempDir()
	c, err := Mount(root, filepath.Join(t.TempDir(), "mnt"))
	if err != nil {
		testutil.Missing(t, "EMQ_REQUIRE_FUSE", "cannot mount FUSE (/dev/fuse, fuse3): %v", err)
	}
	t.Cleanup(func() { c.Unmount() })
	return c, root
}

// What was flushed survives a cut; what was not is lost; the process
// reads its own writes, through read(2) and a shared mapping, meanwhile.
func TestCutLosesWhatWasNotFlushed(t *testing.T) {
	c, root := mount(t)
	path := filepath.Join(c.Dir(), "f")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("kept "), 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("lost"), 5); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 9)
	if _, err := f.ReadAt(got, 0); err != nil || string(got) != "kept lost" {
		t.Fatalf("read before the cut: %q %v", got, err)
	}
	m, err := syscall.Mmap(int(f.Fd()), 0, 9, syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	if string(m) != "kept lost" {
		t.Fatalf("mapped before the cut: %q", m)
	}
	syscall.Munmap(m)
	c.Cut(false, rand.New(rand.NewPCG(1, 1)))
	if _, err := f.WriteAt([]byte("x"), 0); err == nil {
		t.Fatal("a write after the cut succeeded")
	}
	f.Close()
	if err := c.Unmount(); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "f")); string(b) != "kept " {
		t.Fatalf("after the cut the disk holds %q, want %q", b, "kept ")
	}
}

// A torn cut lets a prefix of the last write through; a failed flush
// says EIO and loses what it held.
func TestTornCutAndFailedFlush(t *testing.T) {
	c, root := mount(t)
	f, err := os.OpenFile(filepath.Join(c.Dir(), "g"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt([]byte("first"), 0)
	c.FailSyncs(1)
	if err := f.Sync(); err == nil {
		t.Fatal("a flush set to fail succeeded")
	}
	f.WriteAt(bytes.Repeat([]byte("z"), 100), 0)
	c.Cut(true, rand.New(rand.NewPCG(2, 2)))
	f.Close()
	c.Unmount()
	b, _ := os.ReadFile(filepath.Join(root, "g"))
	if len(b) == 0 || len(b) >= 100 || !bytes.Equal(b, bytes.Repeat([]byte("z"), len(b))) {
		t.Fatalf("after a torn cut: %q, want a strict prefix of the last write (and nothing of the failed flush)", b)
	}
}

// An armed cut lands right after the nth write: that write and any
// other unflushed one are lost, what was flushed before is kept.
func TestCutAfterWrite(t *testing.T) {
	c, root := mount(t)
	f, err := os.OpenFile(filepath.Join(c.Dir(), "h"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	f.WriteAt([]byte("one "), 0)
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	done := c.CutAfter(2, false, rand.New(rand.NewPCG(1, 2)))
	if _, err := f.WriteAt([]byte("two "), 4); err != nil {
		t.Fatal(err)
	}
	select {
	case what := <-done:
		t.Fatalf("cut after one write of two: %s", what)
	default:
	}
	if _, err := f.WriteAt([]byte("three"), 8); err != nil {
		t.Fatalf("the write the cut lands after failed: %v", err)
	}
	t.Log(<-done)
	if err := f.Sync(); err == nil {
		t.Fatal("a flush after the cut succeeded")
	}
	f.Close()
	if err := c.Unmount(); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "h")); string(b) != "one " {
		t.Fatalf("after the cut the disk holds %q, want %q", b, "one ")
	}
}

// Flushes are counted by file: the path under the mount each file was
// opened by.
func TestSyncsOfCountsEachFile(t *testing.T) {
	c, _ := mount(t)
	a, err := os.Create(filepath.Join(c.Dir(), "a.wal"))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := os.Create(filepath.Join(c.Dir(), "b.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for i := range 3 {
		a.WriteAt([]byte("x"), int64(i))
		if err := a.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Sync(); err != nil {
		t.Fatal(err)
	}
	wal := func(p string) bool { return filepath.Ext(p) == ".wal" }
	if n := c.SyncsOf(wal); n != 3 {
		t.Fatalf("a.wal flushed %d times, want 3", n)
	}
	if n := c.SyncsOf(func(p string) bool { return p == "b.db" }); n != 1 {
		t.Fatalf("b.db flushed %d times, want 1", n)
	}
}

// An armed cut lands right after the removal of a file it matches, not
// before: that file is gone, and what was not flushed is lost.
func TestCutAfterRemove(t *testing.T) {
	c, root := mount(t)
	for _, name := range []string{"keep", "1.wal", "2.wal"} {
		if err := os.WriteFile(filepath.Join(c.Dir(), name), []byte(name), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	f, err := os.OpenFile(filepath.Join(c.Dir(), "keep"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	f.WriteAt([]byte("lost"), 0)
	done := c.CutAfterRemove(func(name string) bool { return name == "2.wal" }, false, rand.New(rand.NewPCG(3, 3)))
	if err := os.Remove(filepath.Join(c.Dir(), "1.wal")); err != nil {
		t.Fatalf("a removal the cut does not match: %v", err)
	}
	if err := os.Remove(filepath.Join(c.Dir(), "2.wal")); err != nil {
		t.Fatalf("the removal the cut lands after: %v", err)
	}
	select {
	case what := <-done:
		t.Log(what)
	default:
		t.Fatal("no cut after 2.wal was removed")
	}
	if _, err := f.WriteAt([]byte("x"), 0); err == nil {
		t.Fatal("a write after the cut succeeded")
	}
	f.Close()
	if err := c.Unmount(); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "keep")); string(b) != "keep" {
		t.Fatalf("after the cut keep holds %q, want what was flushed", b)
	}
	if _, err := os.Stat(filepath.Join(root, "2.wal")); !os.IsNotExist(err) {
		t.Fatalf("2.wal after the cut: %v, want it removed", err)
	}
}
