package store

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Core is what every backend shares: the queue of writes, the one
// goroutine that commits them (group commit), and the journal's logic
// over a KV. A backend (boltstore, etcdstore) makes one with StartCore,
// embeds it, and adds its storage and Close.
//
// One goroutine (the committer) owns every write. Writes queue under qmu;
// the committer takes all that are queued (up to MaxBatch), applies them in
// one transaction, commits, and then calls their done functions. While one
// commit runs the next batch gathers, so concurrent writers share commits
// without any fixed delay. Reads use their own transactions and never
// wait for the committer.
type Core struct {
	name string // names the journal in errors: a file's path, or etcd's prefix
	opts CoreOptions
	kv   KV

	qmu          sync.Mutex
	queue        []write
	closing      bool
	quarantining map[string]bool // damaged keys whose move aside is queued (quarantine.go)
	wake         chan struct{}   // cap 1: there are writes queued
	stopping     chan struct{}   // closed when Stop begins: long reads (Backup) give up
	stopped      chan struct{}   // closed when the committer has finished
	follower     follower        // told of each commit's workflow changes (workflow.go)
	retain       atomic.Int64    // how long jobs a workflow cancels are kept (Follow)

	// Pipelined commits (CoreOptions.Pipeline): batches submitted and
	// not yet reported, reported in order by the reporter goroutine.
	flights  chan flight
	slots    chan struct{} // one per batch in flight
	landed   chan struct{} // cap 1: a batch in flight was reported
	reported chan struct{} // closed when the reporter has finished

	// gathered: the last batch taken held more than one write that gates
	// an ACK (Gather); the committer's own.
	gathered bool
	// appended: how many Appends the last batch taken held (holdOver);
	// the committer's own.
	appended int
	// workflows: the journal may hold workflow state (found by the
	// committer's first look, looked is set; or a workflow's Append or
	// OpenBatch queued since). Its Completes are then never held: a
	// Complete settles what waits for its job or its batch (workflow.go),
	// which must not wait with it, nor be passed by an Append.
	workflows atomic.Bool
	looked    bool

	keys  atomic.Pointer[Keyring] // CoreOptions.Keys, swapped by SetKeys (rekey.go)
	rekey rekeyState
}

// flight is a batch submitted to a Pipeliner, waiting for its commit.
type flight struct {
	batch []write
	own   []error
	start time.Time
	wait  func() error
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
	apply  func(t Tx) error
	reads  []Key // keys apply will read, fetched ahead where that helps
	alone  func()
	finish func(commitErr error)
	lazy   bool // may wait LazyDelay for company (see Options)
	size   int  // bytes it stores (an Append's record)

	// What HoldCompletes needs to know of a job's write: its msgid, and
	// whether it is an Append (takes a place for a new job; plain: no
	// unique key, no workflow, so it reads only its own msgid's keys) or
	// a Complete that deletes its job (frees one). held: when it was
	// first held over (zero: never).
	job          string
	takes, plain bool
	frees        bool
	held         time.Time
}

// CoreOptions are what a backend tells the journal's core: its own
// Options' share of them, and what its storage needs.
type CoreOptions struct {
	// MaxBatch is the most writes one transaction (one commit) takes.
	MaxBatch int
	// MaxJobSize bounds a job's stored size; a larger Append fails with
	// ErrTooLarge.
	MaxJobSize int
	// ReadOnly: every write fails with ErrReadOnly.
	ReadOnly bool
	// OnCommit, if set, is called after each commit with the number of
	// writes it held and how long it took (for metrics).
	OnCommit func(writes int, took time.Duration)
	// LazyDelay is how long Completes, when nothing else is queued, wait
	// for a write that cannot wait (an Append) to share its commit.
	LazyDelay time.Duration
	// Gather, if set, is how long a batch that gates ACKs waits for the
	// next write before it commits, while writes keep coming (up to
	// 4×Gather in all), when the commit before it carried more than one
	// such write. Senders that each wait for their ACK before they send
	// again come back together just after a commit: without it the
	// first of them to come back starts the next commit alone, and the
	// senders settle into halves that take turns (measured on etcd at
	// 16 senders: 8 jobs a commit). A lone sender never waits.
	Gather time.Duration

	// AfterCommit, if set, runs after each batch is reported, with the
	// bytes it stored: on the committer, or on the reporter when
	// pipelined.
	AfterCommit func(size int)
	// BulkLimit, if set, bounds what one write of PurgeQueue or
	// ExpireResults removes; they go on in more writes.
	BulkLimit int
	// MaxWrite, if set, bounds the bytes one write may store (etcd: one
	// request): a result too large to keep beside its job is not kept,
	// and a schedule whose fire would not fit is refused.
	MaxWrite int
	// MaxWriteKeys, if set, bounds the keys one write may change (etcd:
	// a transaction's operations): a larger AppendBulk is refused.
	MaxWriteKeys int
	// LoadChunk is how many records Load reads at once (0 = 256): what
	// it holds at most (a backend whose reads copy the records keeps it
	// small).
	LoadChunk int
	// OnDamage, if set, is told of each stored value found failing its
	// checksum, once, as it is moved aside (quarantine.go).
	OnDamage func(d Damage)
	// Pipeline, when over 1 and the KV is a Pipeliner, is how many
	// batches may be committing at once. Their writes are reported in
	// the order the batches were taken.
	Pipeline int
	// HoldCompletes, if set, is about how long a batch's Completes
	// beyond its Appends may wait, batch after batch, for Appends to
	// share their commit (holdOver; up to a LazyDelay more on each
	// side), as many as the last batches' Appends, and none while the
	// journal holds workflows. On etcd a job deleted in the transaction
	// that stores another costs one put over the same key (etcdstore's
	// slots); a Complete with no Append beside it costs a delete. The
	// price: a job completed stays stored that much longer, and a
	// failover meanwhile runs it again.
	HoldCompletes time.Duration
	// Keys, if set, encrypt what users would not print before the
	// backend has it (encrypt.go); the backend calls CheckKeys and
	// NoteKeys at open. SetKeys swaps them (rekey.go).
	Keys *Keyring
}

// StartCore starts the committer of a journal named name (in errors: a
// file's path, or etcd's prefix) over kv.
func StartCore(name string, kv KV, opts CoreOptions) *Core {
	if opts.LoadChunk == 0 {
		opts.LoadChunk = 256
	}
	j := &Core{name: name, opts: opts, kv: kv, wake: make(chan struct{}, 1), stopping: make(chan struct{}), stopped: make(chan struct{}),
		quarantining: map[string]bool{}}
	j.keys.Store(opts.Keys)
	if _, ok := kv.(Pipeliner); ok && opts.Pipeline > 1 {
		j.flights = make(chan flight, opts.Pipeline)
		j.slots = make(chan struct{}, opts.Pipeline)
		j.reported = make(chan struct{})
		j.landed = make(chan struct{}, 1)
		go j.reportLoop()
	}
	go j.commitLoop()
	return j
}

// Write queues a write of the backend's own (not a job's): apply runs in
// a transaction of the committer, done gets the outcome once durable.
func (j *Core) Write(apply func(t Tx) error, done func(error)) {
	j.enqueue(write{apply: apply, finish: done})
}

// Alone runs fn on the committer between two transactions, when every
// write queued before it is done (a compaction swaps the storage then);
// skipped is called instead if the journal closed first.
func (j *Core) Alone(fn func(), skipped func(error)) {
	j.enqueue(write{alone: fn, finish: skipped})
}

// enqueue queues a write for the committer.
func (j *Core) enqueue(w write) {
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
func (j *Core) commitLoop() {
	defer close(j.stopped)
	if j.flights != nil {
		defer func() { close(j.flights); <-j.reported }()
	}
	var batch, held []write
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		var closing bool
		batch, closing = j.take(append(batch[:0], held...))
		clear(held)
		held = held[:0]
		if len(batch) > 0 && !closing && j.opts.LazyDelay > 0 && allLazy(batch) {
			// Only Completes: give an Append the chance to share the fsync.
			timer.Reset(j.opts.LazyDelay)
		wait:
			for allLazy(batch) && len(batch) < j.opts.MaxBatch && !closing {
				select {
				case <-j.wake:
					batch, closing = j.take(batch)
				case <-timer.C:
					break wait
				}
			}
			timer.Stop()
		}
		if j.opts.Gather > 0 && len(batch) > 0 && !closing {
			batch, closing = j.gather(batch, timer)
		}
		// Pipelined: a small batch goes beside one in flight only once it
		// has company (pipelineMin), else when that one is done, so that
		// overlap does not cut the same writes into more transactions.
		for j.flights != nil && len(batch) > 0 && len(batch) < pipelineMin && len(j.slots) > 0 && !closing {
			select {
			case <-j.wake:
				batch, closing = j.take(batch)
			case <-j.landed:
			}
		}
		if j.opts.HoldCompletes > 0 && !closing && !j.hasWorkflows() {
			batch, held, j.appended = holdOver(batch, held, j.appended, time.Now(), j.opts.HoldCompletes)
		}
		if len(batch) > 0 {
			j.commitAll(batch)
			clear(batch)
			continue
		}
		if len(held) > 0 { // and nothing else: wait for company, or until one must go
			first := held[0].held
			for _, w := range held[1:] {
				if w.held.Before(first) {
					first = w.held
				}
			}
			j.qmu.Lock()
			queued := len(j.queue) > 0 // left by a take that was full
			j.qmu.Unlock()
			if !queued {
				timer.Reset(time.Until(first.Add(j.opts.HoldCompletes)))
				select {
				case <-j.wake:
				case <-timer.C:
				}
				timer.Stop()
			}
			continue
		}
		if closing {
			return
		}
		<-j.wake
	}
}

// hasWorkflows reports whether the journal may hold workflow state; the
// first call looks (the committer's).
func (j *Core) hasWorkflows() bool {
	if !j.looked {
		j.looked = true
		err := j.kv.View(func(t Tx) error {
			for _, b := range [][]byte{BucketBatches, BucketAfter, BucketAfterB, BucketSettling} {
				if err := t.Scan(b, nil, func(_, _ []byte) (bool, error) {
					j.workflows.Store(true)
					return false, nil
				}); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			j.workflows.Store(true) // not known: as if
		}
	}
	return j.workflows.Load()
}

// holdOver moves to held the Completes of batch that no Append of it
// pairs with: as many as it has Completes that delete beyond Appends,
// from its end, none first held more than hold ago, and at most as many
// as the Appends of this batch or the last (before, at least one): what
// the next batches' Appends may pair with. The cap keeps what a failover
// runs again to about a commit's jobs; without it the Completes held,
// a sum of each batch's surplus, drift up to all those of the last hold
// (measured: 99 jobs run again a leader's kill at 8 senders, not 4.5).
// A Complete is moved only past plain Appends of other msgids, which
// read nothing it writes (with no workflows: hasWorkflows), and held
// ones go first in the next batch:
// every write still sees the ones before it as they came. It returns
// this batch's Appends.
func holdOver(batch, held []write, before int, now time.Time, hold time.Duration) (kept, _ []write, appends int) {
	since := now.Add(-hold)
	frees := 0
	for _, w := range batch {
		switch {
		case w.frees:
			frees++
		case w.takes:
			appends++
		}
	}
	surplus := min(frees-appends, max(appends, before, 1))
	if surplus <= 0 {
		return batch, held, appends
	}
	passed := map[string]bool{} // msgids of the Appends a held Complete goes past
	var moved []int             // indexes in batch, from its end
	for i := len(batch) - 1; i >= 0 && surplus > 0; i-- {
		w := batch[i]
		if w.takes && w.plain {
			passed[w.job] = true
			continue
		}
		if !w.frees || passed[w.job] || (!w.held.IsZero() && w.held.Before(since)) {
			break
		}
		moved = append(moved, i)
		surplus--
	}
	if len(moved) == 0 {
		return batch, held, appends
	}
	kept = batch[:moved[len(moved)-1]]
	for n := len(moved) - 1; n >= 0; n-- {
		w := batch[moved[n]]
		if w.held.IsZero() {
			w.held = now
		}
		held = append(held, w)
		end := len(batch)
		if n > 0 {
			end = moved[n-1]
		}
		kept = append(kept, batch[moved[n]+1:end]...)
	}
	clear(batch[len(kept):])
	return kept, held, appends
}

// gather goes on taking writes into a batch that gates an ACK, while
// they come less than Gather apart (up to 4×Gather in all), when the
// batch before it held more than one such write (CoreOptions.Gather).
func (j *Core) gather(batch []write, timer *time.Timer) ([]write, bool) {
	urgent := func() int { // how many writes gate an ACK: 0, 1, or 2 for more
		n := 0
		for _, w := range batch {
			if !w.lazy && w.alone == nil {
				if n++; n == 2 {
					break
				}
			}
		}
		return n
	}
	closing := false
	if j.gathered && urgent() > 0 {
		end := time.Now().Add(4 * j.opts.Gather)
		for len(batch) < j.opts.MaxBatch && !closing {
			left := time.Until(end)
			if left <= 0 {
				break
			}
			timer.Reset(min(j.opts.Gather, left))
			select {
			case <-j.wake:
				timer.Stop()
				batch, closing = j.take(batch)
				continue
			case <-timer.C:
			}
			break
		}
	}
	if n := urgent(); n > 0 {
		j.gathered = n > 1
	}
	return batch, closing
}

// take moves queued writes to batch, up to MaxBatch in all.
func (j *Core) take(batch []write) ([]write, bool) {
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
func (j *Core) commitAll(batch []write) {
	for len(batch) > 0 {
		i := 0
		for i < len(batch) && batch[i].alone == nil {
			i++
		}
		if i > 0 {
			j.commit(batch[:i])
		}
		if i < len(batch) {
			j.drain()
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

// commit applies a batch in one transaction and reports to each write;
// pipelined, it submits the batch and the reporter reports it.
func (j *Core) commit(batch []write) {
	start := time.Now()
	own := make([]error, len(batch))
	var damaged []Damage
	apply := func(t Tx, mark func() error) error {
		t = j.wrap(t)
		defer func() { damaged = t.Damaged() }()
		if p, ok := t.(Prefetcher); ok {
			var keys []Key
			for _, w := range batch {
				keys = append(keys, w.reads...)
			}
			p.Prefetch(keys)
		}
		for i, w := range batch {
			if err := w.apply(t); err != nil {
				var je jobError
				if !errors.As(err, &je) {
					return err
				}
				own[i] = je.error
			}
			if err := t.Err(); err != nil {
				return err
			}
			if err := mark(); err != nil && own[i] == nil {
				own[i] = err // its changes were taken back
			}
		}
		return nil
	}
	if j.flights != nil {
		j.slots <- struct{}{}
		wait := j.kv.(Pipeliner).Submit(apply, !allLazy(batch))
		j.noteDamage(damaged)
		j.flights <- flight{batch: slices.Clone(batch), own: own, start: start, wait: wait}
		return
	}
	err := j.kv.Update(apply, !allLazy(batch))
	j.noteDamage(damaged)
	j.report(batch, own, start, err)
}

// pipelineMin is the fewest writes a batch takes to go beside another in
// flight.
const pipelineMin = 16

// reportLoop reports the pipelined batches, in order, as each commit is
// done.
func (j *Core) reportLoop() {
	defer close(j.reported)
	for f := range j.flights {
		j.report(f.batch, f.own, f.start, f.wait())
		<-j.slots
		select {
		case j.landed <- struct{}{}:
		default:
		}
	}
}

// drain waits until every batch submitted is reported.
func (j *Core) drain() {
	if j.slots == nil {
		return
	}
	for range cap(j.slots) {
		j.slots <- struct{}{}
	}
	for range cap(j.slots) {
		<-j.slots
	}
}

// report tells each write of a batch its outcome: the batch's commit
// failed with err (nil: durable), or, for those own names, the write's
// own refusal.
func (j *Core) report(batch []write, own []error, start time.Time, err error) {
	durable := func(int) bool { return err == nil }
	if err != nil {
		var p *PartialError
		if errors.As(err, &p) {
			durable, err = func(i int) bool { return p.OK[i] }, p.Err
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
	if j.opts.AfterCommit != nil {
		j.opts.AfterCommit(size)
	}
}

// view runs fn in a read transaction, and moves aside what it found
// damaged.
func (j *Core) view(fn func(t Tx) error) error {
	var damaged []Damage
	err := j.kv.View(func(t Tx) error {
		t = j.wrap(t)
		defer func() { damaged = t.Damaged() }()
		return fn(t)
	})
	j.noteDamage(damaged)
	return err
}

// Name names the journal in errors and logs.
func (j *Core) Name() string { return j.name }

// Stop finishes the queued writes and stops the committer; it reports
// whether an earlier call had stopped it already. A backend's Close calls
// it first.
func (j *Core) Stop() (already bool) {
	j.qmu.Lock()
	already = j.closing
	j.closing = true
	j.qmu.Unlock()
	if !already {
		close(j.stopping)
	}
	select {
	case j.wake <- struct{}{}:
	default:
	}
	<-j.stopped
	return already
}
