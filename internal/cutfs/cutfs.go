// Package cutfs is a file system for tests that can lose power: a FUSE
// layer (github.com/hanwen/go-fuse/v2) over a folder that holds every
// write in memory until the file is flushed (fsync, fdatasync), as a
// disk's cache does. Cut drops what was not flushed (and, asked, lets a
// random prefix of the last write through: a torn write), then fails
// every operation until the layer is unmounted; the folder holds what a
// machine would find after a power cut. FailSyncs makes flushes fail
// with EIO, losing what they held, as Linux does after a failed
// writeback.
//
// What it models: file data is lost unless flushed; names and sizes
// (create, rename, unlink, truncate, fallocate) are kept at once, as a
// journaling file system keeps its metadata. Reads see the process's own
// writes. It needs root and /dev/fuse.
//
// The process that mounts a layer must not map a file of it (mmap, as
// bbolt does its file): a page fault there waits on this process's own
// FUSE server, whose goroutines a stop of the world for the garbage
// collector never lets run again, and the process hangs. A journal on a
// layer runs in a child process, or keeps only its log there.
package cutfs

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// FS is a mounted layer.
type FS struct {
	root, mnt string
	server    *fuse.Server

	mu        sync.Mutex
	files     map[uint64]*dirty // by the underlying file's inode
	last      *lastWrite        // the latest write not flushed
	failSyncs int
	cut       bool
	cutAfter  *pendingCut      // a cut armed to land on a write
	cutRemove *removeCut       // a cut armed to land on a removal
	synced    map[string]int64 // flushes done, by the path under the mount a file was opened by

	// Syncs counts the flushes done; Failed those failed on purpose.
	Syncs, Failed atomic.Int64
}

type dirty struct {
	writes []write
	size   int64 // the size the process sees; -1: the underlying file's
}

type write struct {
	off  int64
	data []byte
}

type pendingCut struct {
	writes int
	tear   bool
	rng    *rand.Rand
	done   chan string
}

type removeCut struct {
	match func(name string) bool
	tear  bool
	rng   *rand.Rand
	done  chan string
}

type lastWrite struct {
	ino  uint64
	path string
	w    write
}

// Mount mounts a layer over root at mnt (made if missing).
func Mount(root, mnt string) (*FS, error) {
	if err := os.MkdirAll(mnt, 0o755); err != nil {
		return nil, err
	}
	c := &FS{root: root, mnt: mnt, files: map[uint64]*dirty{}, synced: map[string]int64{}}
	lr, err := fs.NewLoopbackRoot(root)
	if err != nil {
		return nil, err
	}
	ln := lr.(*fs.LoopbackNode)
	top := &node{LoopbackNode: ln, c: c}
	ln.RootData.RootNode = top
	zero := time.Duration(0)
	c.server, err = fs.Mount(mnt, top, &fs.Options{
		MountOptions: fuse.MountOptions{FsName: "cutfs", Name: "cutfs", DirectMount: true, DisableXAttrs: true},
		AttrTimeout:  &zero, EntryTimeout: &zero, NegativeTimeout: &zero,
	})
	if err != nil {
		return nil, fmt.Errorf("cutfs: mount %s over %s: %w", mnt, root, err)
	}
	return c, nil
}

// Dir is where the layer is mounted.
func (c *FS) Dir() string { return c.mnt }

// FailSyncs makes the next n flushes fail with EIO, losing what they
// held.
func (c *FS) FailSyncs(n int) {
	c.mu.Lock()
	c.failSyncs = n
	c.mu.Unlock()
}

// Cut is the power cut: what was not flushed is lost, but with tear a
// random prefix of the latest unflushed write reaches the folder. Every
// operation fails from now on. It says what it did.
func (c *FS) Cut(tear bool, rng *rand.Rand) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cutLocked(tear, rng)
}

// CutAfter arms a cut that lands right after the nth write from now,
// whichever file it is to: the place a timer rarely finds, between a
// write and its flush. The channel gets what the cut did.
func (c *FS) CutAfter(n int, tear bool, rng *rand.Rand) <-chan string {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := &pendingCut{writes: n, tear: tear, rng: rng, done: make(chan string, 1)}
	c.cutAfter = p
	return p.done
}

// CutAfterRemove arms a cut that lands right after the next removal of
// a file whose name match accepts (a log segment deleted once a
// checkpoint holds what it held): the moment when the flush of that
// checkpoint is all that keeps those records. The channel gets what the
// cut did.
func (c *FS) CutAfterRemove(match func(name string) bool, tear bool, rng *rand.Rand) <-chan string {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := &removeCut{match: match, tear: tear, rng: rng, done: make(chan string, 1)}
	c.cutRemove = p
	return p.done
}

// SyncsOf is how many flushes were done of the files whose path under
// the mount (the one each was opened by) match accepts.
func (c *FS) SyncsOf(match func(path string) bool) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := int64(0)
	for path, k := range c.synced {
		if match(path) {
			n += k
		}
	}
	return n
}

func (c *FS) cutLocked(tear bool, rng *rand.Rand) string {
	c.cut = true
	what := "nothing unflushed"
	n := 0
	for _, d := range c.files {
		n += len(d.writes)
	}
	if n > 0 {
		what = fmt.Sprintf("%d unflushed writes lost", n)
	}
	if tear && c.last != nil && len(c.last.w.data) > 1 {
		k := 1 + rng.IntN(len(c.last.w.data)-1)
		if f, err := os.OpenFile(c.last.path, os.O_WRONLY, 0); err == nil {
			if _, err := f.WriteAt(c.last.w.data[:k], c.last.w.off); err == nil && f.Sync() == nil {
				what += fmt.Sprintf("; the last one torn: %d of its %d bytes at offset %d of %s reached the disk",
					k, len(c.last.w.data), c.last.w.off, filepath.Base(c.last.path))
			}
			f.Close()
		}
	}
	c.files, c.last = map[uint64]*dirty{}, nil
	return what
}

// Unmount takes the layer away (lazily, if a process still holds a file).
func (c *FS) Unmount() error {
	var err error
	for range 50 {
		if err = c.server.Unmount(); err == nil {
			return nil
		}
		time.Sleep(20 * time.Millisecond) // a killed process's files close as the kernel reaps it
	}
	if out, lerr := exec.Command("umount", "-l", c.mnt).CombinedOutput(); lerr != nil {
		return fmt.Errorf("cutfs: unmount %s: %v; umount -l: %v %s", c.mnt, err, lerr, out)
	}
	return nil
}

// node is a loopback node whose files are this layer's.
type node struct {
	*fs.LoopbackNode
	c *FS
}

var (
	_ fs.NodeWrapChilder = (*node)(nil)
	_ fs.NodeOpener      = (*node)(nil)
	_ fs.NodeCreater     = (*node)(nil)
	_ fs.NodeGetattrer   = (*node)(nil)
	_ fs.NodeSetattrer   = (*node)(nil)
	_ fs.NodeUnlinker    = (*node)(nil)
)

func (n *node) WrapChild(_ context.Context, ops fs.InodeEmbedder) fs.InodeEmbedder {
	return &node{LoopbackNode: ops.(*fs.LoopbackNode), c: n.c}
}

func (n *node) path() string { return filepath.Join(n.RootData.Path, n.Path(n.Root())) }

func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	if n.c.failed() {
		return nil, 0, syscall.EIO
	}
	return n.c.open(n.path(), flags)
}

func (n *node) Create(ctx context.Context, name string, flags, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	if n.c.failed() {
		return nil, nil, 0, syscall.EIO
	}
	in, fh, _, errno := n.LoopbackNode.Create(ctx, name, flags, mode, out)
	if errno != 0 {
		return nil, nil, 0, errno
	}
	if r, ok := fh.(fs.FileReleaser); ok { // this layer's own handle instead
		r.Release(ctx)
	}
	h, ff, errno := n.c.open(filepath.Join(n.path(), name), flags&^(syscall.O_CREAT|syscall.O_EXCL|syscall.O_TRUNC))
	return in, h, ff, errno
}

func (n *node) Getattr(ctx context.Context, f fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	if n.c.failed() {
		return syscall.EIO
	}
	if h, ok := f.(*handle); ok {
		return h.Getattr(ctx, out)
	}
	var st syscall.Stat_t
	if err := syscall.Lstat(n.path(), &st); err != nil {
		return fs.ToErrno(err)
	}
	out.FromStat(&st)
	n.c.adjust(st.Ino, &out.Attr)
	return 0
}

func (n *node) Setattr(ctx context.Context, f fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if n.c.failed() {
		return syscall.EIO
	}
	if size, ok := in.GetSize(); ok {
		var st syscall.Stat_t
		if err := syscall.Lstat(n.path(), &st); err == nil {
			n.c.truncate(st.Ino, int64(size))
		}
	}
	if h, ok := f.(*handle); ok {
		f = h.inner
	}
	errno := n.LoopbackNode.Setattr(ctx, f, in, out)
	var st syscall.Stat_t
	if syscall.Lstat(n.path(), &st) == nil {
		n.c.adjust(st.Ino, &out.Attr)
	}
	return errno
}

func (n *node) Unlink(ctx context.Context, name string) syscall.Errno {
	if n.c.failed() {
		return syscall.EIO
	}
	var st syscall.Stat_t
	if syscall.Lstat(filepath.Join(n.path(), name), &st) == nil {
		n.c.mu.Lock()
		delete(n.c.files, st.Ino)
		n.c.mu.Unlock()
	}
	errno := n.LoopbackNode.Unlink(ctx, name)
	c := n.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if p := c.cutRemove; errno == 0 && p != nil && p.match(name) {
		c.cutRemove = nil
		p.done <- fmt.Sprintf("cut after %s was removed: %s", name, c.cutLocked(p.tear, p.rng))
	}
	return errno
}

func (c *FS) failed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cut
}

// open opens path for a process, its writes held by the layer.
func (c *FS) open(path string, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	fd, err := syscall.Open(path, int(flags)|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, 0, fs.ToErrno(err)
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		syscall.Close(fd)
		return nil, 0, fs.ToErrno(err)
	}
	if flags&syscall.O_TRUNC != 0 {
		c.truncate(st.Ino, 0)
	}
	return &handle{inner: fs.NewLoopbackFile(fd), fd: fd, ino: st.Ino, path: path, c: c}, 0, 0
}

// truncate cuts a file's held writes at size (the truncation itself is
// kept at once, as metadata).
func (c *FS) truncate(ino uint64, size int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	d := c.files[ino]
	if d == nil {
		return
	}
	kept := d.writes[:0]
	for _, w := range d.writes {
		if w.off >= size {
			continue
		}
		if end := w.off + int64(len(w.data)); end > size {
			w.data = w.data[:size-w.off]
		}
		kept = append(kept, w)
	}
	d.writes, d.size = kept, size
}

// adjust sets a's size to what the process sees.
func (c *FS) adjust(ino uint64, a *fuse.Attr) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if d := c.files[ino]; d != nil && d.size >= 0 {
		a.Size = uint64(d.size)
	}
}

// handle is an open file of the layer.
type handle struct {
	inner fs.FileHandle // the loopback file: releases, locks, seeks
	fd    int
	ino   uint64
	path  string
	c     *FS
}

var (
	_ fs.FileReader    = (*handle)(nil)
	_ fs.FileWriter    = (*handle)(nil)
	_ fs.FileFsyncer   = (*handle)(nil)
	_ fs.FileGetattrer = (*handle)(nil)
	_ fs.FileAllocater = (*handle)(nil)
	_ fs.FileReleaser  = (*handle)(nil)
	_ fs.FileFlusher   = (*handle)(nil)
	_ fs.FileGetlker   = (*handle)(nil)
	_ fs.FileSetlker   = (*handle)(nil)
	_ fs.FileSetlkwer  = (*handle)(nil)
)

func (h *handle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	c := h.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cut {
		return nil, syscall.EIO
	}
	size := h.size()
	n := max(0, min(int64(len(dest)), size-off))
	buf := dest[:n]
	clear(buf)
	if _, err := syscall.Pread(h.fd, buf, off); err != nil {
		return nil, fs.ToErrno(err)
	}
	if d := c.files[h.ino]; d != nil {
		for _, w := range d.writes {
			lo, hi := max(off, w.off), min(off+n, w.off+int64(len(w.data)))
			if lo < hi {
				copy(buf[lo-off:hi-off], w.data[lo-w.off:hi-w.off])
			}
		}
	}
	return fuse.ReadResultData(buf), 0
}

// size is the file's size as the process sees it (c.mu held).
func (h *handle) size() int64 {
	if d := h.c.files[h.ino]; d != nil && d.size >= 0 {
		return d.size
	}
	var st syscall.Stat_t
	if syscall.Fstat(h.fd, &st) != nil {
		return 0
	}
	return st.Size
}

func (h *handle) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	c := h.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cut {
		return 0, syscall.EIO
	}
	size := h.size()
	d := c.files[h.ino]
	if d == nil {
		d = &dirty{size: -1}
		c.files[h.ino] = d
	}
	w := write{off, append([]byte(nil), data...)}
	d.writes = append(d.writes, w)
	d.size = max(size, off+int64(len(data)))
	c.last = &lastWrite{h.ino, h.path, w}
	if p := c.cutAfter; p != nil {
		if p.writes--; p.writes <= 0 {
			c.cutAfter = nil
			p.done <- fmt.Sprintf("cut after a write of %d bytes to %s: %s",
				len(data), filepath.Base(h.path), c.cutLocked(p.tear, p.rng))
		}
	}
	return uint32(len(data)), 0
}

func (h *handle) Fsync(ctx context.Context, flags uint32) syscall.Errno {
	c := h.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cut {
		return syscall.EIO
	}
	d := c.files[h.ino]
	if c.failSyncs > 0 {
		c.failSyncs--
		c.Failed.Add(1)
		delete(c.files, h.ino) // lost, as a failed writeback's pages are
		if c.last != nil && c.last.ino == h.ino {
			c.last = nil
		}
		return syscall.EIO
	}
	if d != nil {
		for _, w := range d.writes {
			if _, err := syscall.Pwrite(h.fd, w.data, w.off); err != nil {
				return fs.ToErrno(err)
			}
		}
		delete(c.files, h.ino)
		if c.last != nil && c.last.ino == h.ino {
			c.last = nil
		}
	}
	if err := syscall.Fdatasync(h.fd); err != nil {
		return fs.ToErrno(err)
	}
	c.Syncs.Add(1)
	if rel, err := filepath.Rel(c.root, h.path); err == nil {
		c.synced[rel]++
	}
	return 0
}

func (h *handle) Getattr(ctx context.Context, out *fuse.AttrOut) syscall.Errno {
	if errno := h.inner.(fs.FileGetattrer).Getattr(ctx, out); errno != 0 {
		return errno
	}
	h.c.adjust(h.ino, &out.Attr)
	return 0
}

func (h *handle) Allocate(ctx context.Context, off, size uint64, mode uint32) syscall.Errno {
	if h.c.failed() {
		return syscall.EIO
	}
	errno := h.inner.(fs.FileAllocater).Allocate(ctx, off, size, mode)
	if errno == 0 && mode&1 == 0 { // not FALLOC_FL_KEEP_SIZE: the size the process sees grows too
		h.c.mu.Lock()
		if d := h.c.files[h.ino]; d != nil && d.size >= 0 {
			d.size = max(d.size, int64(off+size))
		}
		h.c.mu.Unlock()
	}
	return errno
}

func (h *handle) Release(ctx context.Context) syscall.Errno {
	return h.inner.(fs.FileReleaser).Release(ctx)
}

func (h *handle) Flush(ctx context.Context) syscall.Errno { return 0 } // closing flushes nothing to the disk

func (h *handle) Getlk(ctx context.Context, owner uint64, lk *fuse.FileLock, flags uint32, out *fuse.FileLock) syscall.Errno {
	return h.inner.(fs.FileGetlker).Getlk(ctx, owner, lk, flags, out)
}

func (h *handle) Setlk(ctx context.Context, owner uint64, lk *fuse.FileLock, flags uint32) syscall.Errno {
	return h.inner.(fs.FileSetlker).Setlk(ctx, owner, lk, flags)
}

func (h *handle) Setlkw(ctx context.Context, owner uint64, lk *fuse.FileLock, flags uint32) syscall.Errno {
	return h.inner.(fs.FileSetlkwer).Setlkw(ctx, owner, lk, flags)
}
