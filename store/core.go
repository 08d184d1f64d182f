package store

import (
	"errors"
	"fmt"
	"sync"
	"time"
)

// journal is what every backend shares: the queue of writes, the one
// goroutine that commits them (group commit), and the journal's logic
// over a kvStore. Bolt and Etcd embed it and add their storage.
//
// One goroutine (the committer) owns every write. Writes queue under qmu;
// the committer takes all that are queued (up to MaxBatch), applies them in
// one transaction, commits, and then calls their done functions. While one
// commit runs the next batch gathers, so concurrent writers share commits
// without any fixed delay. Reads use their own transactions and never
// wait for the committer.
type journal struct {
	name string // names the journal in errors: a file's path, or etcd's prefix
	opts Options
	kv   kvStore
	// afterCommit, if set, runs on the committer after each batch is
	// reported, with the bytes it stored.
	afterCommit func(size int)
	// bulkLimit, if set, bounds what one write of PurgeQueue or
	// ExpireResults removes; they go on in more writes.
	bulkLimit int
	// maxWrite, if set, bounds the bytes one write may store (etcd: one
	// request): a result too large to keep beside its job is not kept,
	// and a schedule whose fire would not fit is refused.
	maxWrite int
	// loadChunk is how many records Load reads at once: what it holds
	// at most (a backend whose reads copy the records keeps it small).
	loadChunk int

	qmu     sync.Mutex
	queue   []write
	closing bool
	wake    chan struct{} // cap 1: there are writes queued
	stopped chan struct{} // closed when the committer has finished
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
	apply  func(t kvTx) error
	reads  []bkey // keys apply will read, fetched ahead where that helps
	alone  func()
	finish func(commitErr error)
	lazy   bool // may wait LazyDelay for company (see Options)
	size   int  // bytes it stores (an Append's record)
}

func (j *journal) start(name string, opts Options, kv kvStore) {
	j.name, j.opts, j.kv = name, opts, kv
	if j.loadChunk == 0 {
		j.loadChunk = 256
	}
	j.wake, j.stopped = make(chan struct{}, 1), make(chan struct{})
	go j.commitLoop()
}

// enqueue queues a write for the committer.
func (j *journal) enqueue(w write) {
	if j.opts.ReadOnly && w.alone == nil {
		w.finish(fmt.Errorf("%w: %s", ErrReadOnly, j.name))
		return
	}
	j.qmu.Lock()
	if j.closing {
		j.qmu.Unlock()
		w.finish(ErrClosed)
		return
	}
	j.queue = append(j.queue, w)
	j.qmu.Unlock()
	select {
	case j.wake <- struct{}{}:
	default:
	}
}

// commitLoop is the committer: it runs until Close and the queue is empty.
func (j *journal) commitLoop() {
	defer close(j.stopped)
	var batch []write
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		var closing bool
		batch, closing = j.take(batch[:0])
		if len(batch) > 0 && !closing && j.opts.LazyDelay > 0 && allLazy(batch) {
			// Only Completes: give an Append the chance to share the fsync.
			timer.Reset(j.opts.LazyDelay)
		wait:
			for allLazy(batch) && len(batch) < j.opts.MaxBatch {
				select {
				case <-j.wake:
					batch, closing = j.take(batch)
				case <-timer.C:
					break wait
				}
			}
			timer.Stop()
		}
		if len(batch) > 0 {
			j.commitAll(batch)
			clear(batch)
			continue
		}
		if closing {
			return
		}
		<-j.wake
	}
}

// take moves queued writes to batch, up to MaxBatch in all.
func (j *journal) take(batch []write) ([]write, bool) {
	j.qmu.Lock()
	defer j.qmu.Unlock()
	n := min(len(j.queue), j.opts.MaxBatch-len(batch))
	batch = append(batch, j.queue[:n]...)
	rest := copy(j.queue, j.queue[n:])
	clear(j.queue[rest:])
	j.queue = j.queue[:rest]
	return batch, j.closing
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
func (j *journal) commitAll(batch []write) {
	for len(batch) > 0 {
		i := 0
		for i < len(batch) && batch[i].alone == nil {
			i++
		}
		if i > 0 {
			j.commit(batch[:i])
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
func (j *journal) commit(batch []write) {
	start := time.Now()
	own := make([]error, len(batch))
	err := j.kv.update(func(t kvTx, mark func() error) error {
		if p, ok := t.(prefetcher); ok {
			var keys []bkey
			for _, w := range batch {
				keys = append(keys, w.reads...)
			}
			p.prefetch(keys)
		}
		for i, w := range batch {
			if err := w.apply(t); err != nil {
				var je jobError
				if !errors.As(err, &je) {
					return err
				}
				own[i] = je.error
			}
			if err := t.err(); err != nil {
				return err
			}
			if err := mark(); err != nil && own[i] == nil {
				own[i] = err // its changes were taken back
			}
		}
		return nil
	})
	durable := func(int) bool { return err == nil }
	if err != nil {
		var p partial
		if errors.As(err, &p) {
			durable, err = func(i int) bool { return p.ok[i] }, p.err
		}
		if !errors.Is(err, ErrFenced) && !errors.Is(err, ErrTooLarge) {
			err = fmt.Errorf("journal %s: write failed: %w", j.name, err)
		}
	} else if j.opts.OnCommit != nil {
		j.opts.OnCommit(len(batch), time.Since(start))
	}
	size := 0
	for i, w := range batch {
		size += w.size
		if durable(i) {
			w.finish(own[i])
		} else {
			w.finish(err)
		}
	}
	if j.afterCommit != nil {
		j.afterCommit(size)
	}
}

// prefetcher is a transaction that reads ahead the keys a batch's writes
// will read.
type prefetcher interface{ prefetch(keys []bkey) }

// stop finishes the queued writes and stops the committer; it reports
// whether an earlier call had stopped it already.
func (j *journal) stop() (already bool) {
	j.qmu.Lock()
	already = j.closing
	j.closing = true
	j.qmu.Unlock()
	select {
	case j.wake <- struct{}{}:
	default:
	}
	<-j.stopped
	return already
}
