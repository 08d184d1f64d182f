// Package boltstore is the journal in one bbolt file: the default, a
// store.Journal on one machine (store/doc.go says what it promises).
package boltstore

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/eventmq/emq/migrations"
	"github.com/eventmq/emq/store"
)

// Options configure a bbolt journal.
type Options struct {
	// LockTimeout is how long Open waits for another process to let go of
	// the file before it fails with store.ErrLocked.
	LockTimeout time.Duration
	// MaxBatch is the most writes one transaction (one fsync) takes.
	MaxBatch int
	// MaxJobSize bounds a job's stored size (payload, headers, ids and
	// error text); a larger Append fails with ErrTooLarge and nothing
	// else is touched. At most 1 GiB (bbolt's value limit is 2 GiB).
	MaxJobSize int
	// ReadOnly opens the file without the write lock and without
	// migrating, for looking at a journal another process may hold. Writes
	// fail with ErrReadOnly.
	ReadOnly bool
	// OnCommit, if set, is called after each commit with the number of
	// writes it held and how long it took (for metrics).
	OnCommit func(writes int, took time.Duration)
	// LazyDelay is how long Completes, when nothing else is queued, wait
	// for a write that cannot wait (an Append) to share its commit: one
	// fsync for both instead of two in a row. 0 = commit at once.
	LazyDelay time.Duration
}

// DefaultOptions returns the defaults.
func DefaultOptions() Options {
	return Options{LockTimeout: time.Second, MaxBatch: 8192, MaxJobSize: 256 << 20, LazyDelay: 2 * time.Millisecond}
}

// Validate reports the first bad option.
func (o Options) Validate() error {
	if o.LockTimeout <= 0 {
		return fmt.Errorf("store: LockTimeout must be > 0, got %v", o.LockTimeout)
	}
	if o.MaxJobSize <= 0 || o.MaxJobSize > 1<<30 {
		return fmt.Errorf("store: MaxJobSize must be 1 byte to 1 GiB, got %d", o.MaxJobSize)
	}
	if o.MaxBatch <= 0 {
		return fmt.Errorf("store: MaxBatch must be > 0, got %d", o.MaxBatch)
	}
	if o.LazyDelay < 0 || o.LazyDelay > time.Second {
		return fmt.Errorf("store: LazyDelay must be 0 to 1s, got %v", o.LazyDelay)
	}
	return nil
}

// Journal is the store.Journal in one bbolt file. Its commits are bbolt
// transactions, each fsynced; the committer is store.Core's.
type Journal struct {
	*store.Core
	path string
	opts Options

	dbmu    sync.RWMutex // held for reading by every use of db; for writing by a compaction's swap
	db      *bolt.DB
	dropped time.Time // the committer's last dropMapping
}

var (
	_ store.Journal   = (*Journal)(nil)
	_ store.Compactor = (*Journal)(nil)
)

// Open opens (or creates) the journal file at path, creating its folder
// and applying migrations. It never rewrites a file it cannot read.
func Open(path string, opts Options) (*Journal, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if !opts.ReadOnly {
		if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
			return nil, fmt.Errorf("journal %s: cannot create its folder: %w", path, err)
		}
	}
	db, err := openBolt(path, opts)
	if err != nil {
		return nil, err
	}
	if opts.ReadOnly {
		if _, _, err := migrations.Check(db); err != nil {
			db.Close()
			return nil, fmt.Errorf("journal %s: %w", path, err)
		}
	} else if _, _, err := migrations.Apply(db); err != nil {
		db.Close()
		return nil, fmt.Errorf("journal %s: %w", path, err)
	}
	b := &Journal{path: path, db: db, opts: opts}
	// Opening walks every page of the file (bbolt rebuilds its free list,
	// NoFreelistSync below): none of them is needed in memory now.
	b.drop()
	b.Core = store.StartCore(path, boltKV{b}, store.CoreOptions{MaxBatch: opts.MaxBatch, MaxJobSize: opts.MaxJobSize,
		ReadOnly: opts.ReadOnly, OnCommit: opts.OnCommit, LazyDelay: opts.LazyDelay, AfterCommit: b.dropAfterCommit})
	return b, nil
}

func openBolt(path string, opts Options) (*bolt.DB, error) {
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		return nil, fmt.Errorf("journal %s is a folder, not a file", path)
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{
		Timeout:      opts.LockTimeout,
		ReadOnly:     opts.ReadOnly,
		FreelistType: bolt.FreelistMapType,
		// The freelist is rebuilt at open instead of written at every
		// commit: fewer pages per fsync.
		NoFreelistSync: true,
	})
	switch {
	case err == nil:
		return db, nil
	case errors.Is(err, berrors.ErrTimeout):
		return nil, fmt.Errorf("%w: %s is held by another process (a running broker? use its admin API, or stop it)", store.ErrLocked, path)
	case errors.Is(err, berrors.ErrInvalid), errors.Is(err, berrors.ErrVersionMismatch),
		errors.Is(err, berrors.ErrChecksum), errors.Is(err, berrors.ErrInvalidMapping):
		return nil, fmt.Errorf("%w: %s: %v (the file was left as it is)", store.ErrCorrupt, path, err)
	}
	return nil, fmt.Errorf("journal %s: %w", path, err)
}

// Path returns the journal file's path.
func (b *Journal) Path() string { return b.path }

// String names the journal in logs.
func (b *Journal) String() string { return "bbolt " + b.path }

// A commit storing dropAfter bytes is followed by dropMapping, and any
// commit dropEvery after the last one: the committer's reads of the file
// do not pile up in memory, for a few system calls a second.
const (
	dropAfter = 8 << 20
	dropEvery = 250 * time.Millisecond
)

// dropAfterCommit is the core's AfterCommit.
func (b *Journal) dropAfterCommit(size int) {
	if size >= dropAfter || time.Since(b.dropped) >= dropEvery {
		// bbolt reads the file's mapping as it writes: it rewrites the
		// leaves next to what changed, large values included. After the
		// writes are reported: no ACK waits for this.
		b.drop()
		b.dropped = time.Now()
	}
}

// drop releases the file's mapping from the process's memory.
func (b *Journal) drop() {
	b.dbmu.RLock()
	defer b.dbmu.RUnlock()
	_ = b.db.View(func(tx *bolt.Tx) error { dropMapping(tx); return nil })
}

// dropMapping releases the pages of the file's mapping from the
// process's memory (pages_linux.go); tx keeps the mapping in place.
func dropMapping(tx *bolt.Tx) {
	data := tx.DB().Info().Data
	dropRange(data, data+uintptr(tx.Size()))
}

// Close finishes the queued writes, then closes the file. Writes made
// after Close fail with ErrClosed.
func (b *Journal) Close() error {
	if b.Stop() {
		return nil
	}
	b.dbmu.Lock()
	defer b.dbmu.Unlock()
	if err := b.db.Close(); err != nil {
		return fmt.Errorf("journal %s: close: %w", b.path, err)
	}
	return nil
}

// Load implements Journal, and then gives the pages it read back to the
// kernel.
func (b *Journal) Load(fn func(*store.Job) error) error {
	defer b.drop()
	return b.Core.Load(fn)
}

// appendFill is how full bbolt packs pages split by appends. Index keys
// (queue + sequence) and time-ordered msgids land at the tail, where
// bbolt's default of half-full pages would leave half of every page
// empty for ever; random v4 msgids cost a little more splitting.
const appendFill = 0.95

// boltKV is a Journal's storage: buckets of one bbolt file.
type boltKV struct{ b *Journal }

func (k boltKV) Update(fn func(t store.Tx, mark func() error) error) error {
	k.b.dbmu.RLock()
	defer k.b.dbmu.RUnlock()
	return k.b.db.Update(func(tx *bolt.Tx) error {
		// Index keys (queue + sequence) and time-ordered msgids land at
		// the tail.
		for _, name := range [][]byte{store.BucketJobs, store.BucketPending} {
			if bkt := tx.Bucket(name); bkt != nil {
				bkt.FillPercent = appendFill
			}
		}
		return fn(boltTx{tx}, func() error { return nil })
	})
}

func (k boltKV) View(fn func(t store.Tx) error) error {
	k.b.dbmu.RLock()
	defer k.b.dbmu.RUnlock()
	return k.b.db.View(func(tx *bolt.Tx) error { return fn(boltTx{tx}) })
}

// boltTx is a bbolt transaction as the journal's logic sees it. A bucket
// missing (a file of an older schema, open read-only) reads as empty.
type boltTx struct{ tx *bolt.Tx }

func (t boltTx) Get(bucket, key []byte) []byte {
	if bkt := t.tx.Bucket(bucket); bkt != nil {
		return bkt.Get(key)
	}
	return nil
}

func (t boltTx) Gets(bucket []byte, keys [][]byte) [][]byte {
	out := make([][]byte, len(keys))
	for i, k := range keys {
		out[i] = t.Get(bucket, k)
	}
	return out
}

func (t boltTx) Put(bucket, key, val []byte) error { return t.tx.Bucket(bucket).Put(key, val) }
func (t boltTx) Delete(bucket, key []byte) error   { return t.tx.Bucket(bucket).Delete(key) }

func (t boltTx) Scan(bucket, from []byte, fn func(k, v []byte) (bool, error)) error {
	bkt := t.tx.Bucket(bucket)
	if bkt == nil {
		return nil
	}
	c := bkt.Cursor()
	k, v := c.First()
	if from != nil {
		k, v = c.Seek(from)
	}
	for ; k != nil; k, v = c.Next() {
		if more, err := fn(k, v); !more || err != nil {
			return err
		}
	}
	return nil
}

func (t boltTx) NextSeq() (uint64, error) { return t.tx.Bucket(store.BucketJobs).NextSequence() }
func (t boltTx) Release(v []byte)         { dropPages(v) }
func (t boltTx) Err() error               { return nil }

// Migrations reports the file's schema version and each known step.
func (b *Journal) Migrations() (int, []migrations.Status, error) {
	return migrations.Check(b.db)
}

// Migrate brings the journal file at path up to the latest schema and
// returns the versions it moved between. Open does the same; this says so.
func Migrate(path string, opts Options) (from, to int, err error) {
	if err := opts.Validate(); err != nil {
		return 0, 0, err
	}
	if _, err := os.Stat(path); err != nil {
		return 0, 0, fmt.Errorf("journal %s: %w", path, err)
	}
	db, err := openBolt(path, opts)
	if err != nil {
		return 0, 0, err
	}
	defer db.Close()
	from, to, err = migrations.Apply(db)
	if err != nil {
		return from, to, fmt.Errorf("journal %s: %w", path, err)
	}
	return from, to, nil
}
