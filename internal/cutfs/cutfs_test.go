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
