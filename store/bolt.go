package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/eventmq/emq/migrations"
	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// Options configure a bbolt journal.
type Options struct {
	// LockTimeout is how long Open waits for another process to let go of
	// the file before it fails with ErrLocked.
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

// Bolt is the Journal in one bbolt file.
//
// One goroutine (the committer) owns every write. Writes queue under qmu;
// the committer takes all that are queued (up to MaxBatch), applies them in
// one transaction, commits (bbolt fsyncs), and then calls their done
// functions. While one commit runs the next batch gathers, so concurrent
// writers share fsyncs without any fixed delay. Reads use their own
// read-only transactions and never wait for the committer.
type Bolt struct {
	path string
	opts Options

	dbmu sync.RWMutex // held for reading by every use of db; for writing by a compaction's swap
	db   *bolt.DB

	qmu     sync.Mutex
	queue   []write
	closing bool
	wake    chan struct{} // cap 1: there are writes queued
	stopped chan struct{} // closed when the committer has finished
	dropped time.Time     // the committer's last dropMapping
}

// write is one queued change. apply runs inside the transaction; it
// returns a refusal that concerns only its own job (not found, damaged,
// wrong state) as a jobError, before it has changed anything, and any
// other error aborts the whole transaction. finish runs after the commit
// with the write's outcome: nil when durable, its own refusal, or the
// transaction's failure. A write with alone set instead runs it on the
// committer between two transactions (compaction), and gets finish only
// if it never ran.
type write struct {
	apply  func(tx *bolt.Tx) error
	alone  func()
	finish func(commitErr error)
	lazy   bool // may wait LazyDelay for company (see Options)
	size   int  // bytes it stores (an Append's record)
}

var (
	_ Journal   = (*Bolt)(nil)
	_ Compactor = (*Bolt)(nil)
)

// Open opens (or creates) the journal file at path, creating its folder
// and applying migrations. It never rewrites a file it cannot read.
func Open(path string, opts Options) (*Bolt, error) {
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
	b := &Bolt{path: path, opts: opts, db: db, wake: make(chan struct{}, 1), stopped: make(chan struct{})}
	// Opening walks every page of the file (bbolt rebuilds its free list,
	// NoFreelistSync below): none of them is needed in memory now.
	_ = b.view(func(tx *bolt.Tx) error { dropMapping(tx); return nil })
	go b.commitLoop()
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
		return nil, fmt.Errorf("%w: %s is held by another process (a running broker? use its admin API, or stop it)", ErrLocked, path)
	case errors.Is(err, berrors.ErrInvalid), errors.Is(err, berrors.ErrVersionMismatch),
		errors.Is(err, berrors.ErrChecksum), errors.Is(err, berrors.ErrInvalidMapping):
		return nil, fmt.Errorf("%w: %s: %v (the file was left as it is)", ErrCorrupt, path, err)
	}
	return nil, fmt.Errorf("journal %s: %w", path, err)
}

// Path returns the journal file's path.
func (b *Bolt) Path() string { return b.path }

// String names the journal in logs.
func (b *Bolt) String() string { return "bbolt " + b.path }

// enqueue queues a write for the committer.
func (b *Bolt) enqueue(w write) {
	if b.opts.ReadOnly && w.alone == nil {
		w.finish(fmt.Errorf("%w: %s", ErrReadOnly, b.path))
		return
	}
	b.qmu.Lock()
	if b.closing {
		b.qmu.Unlock()
		w.finish(ErrClosed)
		return
	}
	b.queue = append(b.queue, w)
	b.qmu.Unlock()
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// commitLoop is the committer: it runs until Close and the queue is empty.
func (b *Bolt) commitLoop() {
	defer close(b.stopped)
	var batch []write
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		var closing bool
		batch, closing = b.take(batch[:0])
		if len(batch) > 0 && !closing && b.opts.LazyDelay > 0 && allLazy(batch) {
			// Only Completes: give an Append the chance to share the fsync.
			timer.Reset(b.opts.LazyDelay)
		wait:
			for allLazy(batch) && len(batch) < b.opts.MaxBatch {
				select {
				case <-b.wake:
					batch, closing = b.take(batch)
				case <-timer.C:
					break wait
				}
			}
			timer.Stop()
		}
		if len(batch) > 0 {
			b.commitAll(batch)
			clear(batch)
			continue
		}
		if closing {
			return
		}
		<-b.wake
	}
}

// take moves queued writes to batch, up to MaxBatch in all.
func (b *Bolt) take(batch []write) ([]write, bool) {
	b.qmu.Lock()
	defer b.qmu.Unlock()
	n := min(len(b.queue), b.opts.MaxBatch-len(batch))
	batch = append(batch, b.queue[:n]...)
	rest := copy(b.queue, b.queue[n:])
	clear(b.queue[rest:])
	b.queue = b.queue[:rest]
	return batch, b.closing
}

func allLazy(batch []write) bool {
	for _, w := range batch {
		if !w.lazy {
			return false
		}
	}
	return true
}

// commitAll commits a batch, running any write that must be alone
// between the transactions before and after it.
func (b *Bolt) commitAll(batch []write) {
	for len(batch) > 0 {
		i := 0
		for i < len(batch) && batch[i].alone == nil {
			i++
		}
		if i > 0 {
			b.commit(batch[:i])
		}
		if i < len(batch) {
			batch[i].alone()
			i++
		}
		batch = batch[i:]
	}
}

// jobError is a write's refusal that concerns only its own job: the
// other writes of its transaction go on.
type jobError struct{ error }

func (e jobError) Unwrap() error { return e.error }

// commit applies a batch in one transaction and reports to each write.
func (b *Bolt) commit(batch []write) {
	start := time.Now()
	own := make([]error, len(batch))
	err := b.update(func(tx *bolt.Tx) error {
		for i, w := range batch {
			if err := w.apply(tx); err != nil {
				var je jobError
				if !errors.As(err, &je) {
					return err
				}
				own[i] = je.error
			}
		}
		return nil
	})
	if err != nil {
		err = fmt.Errorf("journal %s: write failed: %w", b.path, err)
	} else if b.opts.OnCommit != nil {
		b.opts.OnCommit(len(batch), time.Since(start))
	}
	size := 0
	for i, w := range batch {
		size += w.size
		if err != nil {
			w.finish(err)
		} else {
			w.finish(own[i])
		}
	}
	if size >= dropAfter || time.Since(b.dropped) >= dropEvery {
		// bbolt reads the file's mapping as it writes: it rewrites the
		// leaves next to what changed, large values included. After the
		// writes are reported: no ACK waits for this.
		_ = b.view(func(tx *bolt.Tx) error { dropMapping(tx); return nil })
		b.dropped = time.Now()
	}
}

// A commit storing dropAfter bytes is followed by dropMapping, and any
// commit dropEvery after the last one: the committer's reads of the file
// do not pile up in memory, for a few system calls a second.
const (
	dropAfter = 8 << 20
	dropEvery = 250 * time.Millisecond
)

// dropMapping releases the pages of the file's mapping from the
// process's memory (pages_linux.go); tx keeps the mapping in place.
func dropMapping(tx *bolt.Tx) {
	data := tx.DB().Info().Data
	dropRange(data, data+uintptr(tx.Size()))
}

func (b *Bolt) update(fn func(tx *bolt.Tx) error) error {
	b.dbmu.RLock()
	defer b.dbmu.RUnlock()
	return b.db.Update(fn)
}

func (b *Bolt) view(fn func(tx *bolt.Tx) error) error {
	b.dbmu.RLock()
	defer b.dbmu.RUnlock()
	return b.db.View(fn)
}

// Close finishes the queued writes, then closes the file. Writes made
// after Close fail with ErrClosed.
func (b *Bolt) Close() error {
	b.qmu.Lock()
	already := b.closing
	b.closing = true
	b.qmu.Unlock()
	if already {
		<-b.stopped
		return nil
	}
	select {
	case b.wake <- struct{}{}:
	default:
	}
	<-b.stopped
	b.dbmu.Lock()
	defer b.dbmu.Unlock()
	if err := b.db.Close(); err != nil {
		return fmt.Errorf("journal %s: close: %w", b.path, err)
	}
	return nil
}

// Migrations reports the file's schema version and each known step.
func (b *Bolt) Migrations() (int, []migrations.Status, error) {
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
