package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"time"
)

// Workflows: jobs that wait for other jobs (Job.After) or for a batch
// (Job.AfterBatch), and batches (Job.Batch). The journal decides, in the
// committer, in the same transactions as the jobs' own changes:
//
//   - Append of a job that waits checks each parent: one pending or
//     waiting is waited for (an edge in the after index, under a marker
//     key of the parent); one done is no wait; one dead or cancelled
//     refuses the job (ErrParentFailed) unless it runs anyway
//     (RunIfFailed); one unknown refuses it (ErrUnknownParent). A batch
//     waited for must be known: complete, it is no wait. The job is
//     stored Waiting, with the number of waits left, in the waiting
//     index; no parent can be the job itself, or younger than it, so a
//     cycle cannot be made.
//   - A parent that ends settles its children: done (Complete), each
//     child has one wait less, and with none left it is pending, at the
//     tail of its queue by its own sequence; dead, cancelled or removed
//     (Bury, Cancel, Remove, PurgeQueue), each child runs anyway
//     (RunIfFailed) or is cancelled, which settles its own children as
//     failed in turn. A batch that completes (closed, nothing waiting or
//     pending) settles the jobs that wait for it the same way, failed
//     when any of its jobs died, was cancelled or removed.
//   - Settling is part of the parent's write. A backend that bounds one
//     write (etcd: BulkLimit) settles that many children in it and the
//     rest in writes that follow, the parent noted in the settling
//     bucket meanwhile: a crash between them leaves the note, and the
//     next start finishes the work (Resume).
//   - Each commit's releases and cancels are told to the follower
//     (Journal.Follow): the broker adds released jobs to its queues.
//
// A batch's record counts its jobs by state (waiting, pending, done,
// dead, cancelled, removed by an admin while live); done, dead and
// cancelled count jobs that ended so, whether or not their records are
// still kept. A batch is open while more jobs are to come (OpenBatch, or
// a job with batch-open) and closed otherwise; a batch never opened is
// closed from its first job, so it is complete as soon as its jobs are:
// open it first to add jobs over time.

// Refusals of a workflow's Append (jobErrors: nothing is stored).
var (
	ErrUnknownParent = errors.New("a job it waits for is not stored")
	ErrParentFailed  = errors.New("a job it waits for is dead or cancelled")
	ErrUnknownBatch  = errors.New("the batch it waits for is not known")
)

// MaxAfter bounds the parents of one job.
const MaxAfter = 1000

// WorkflowChange is what a commit did to jobs that waited: those it
// released (now pending, without their payloads, as Load gives them) and
// those it cancelled because a job or batch they waited for failed.
type WorkflowChange struct {
	Released  []*Job
	Cancelled []*Job
}

// Batch is a batch of jobs as the journal keeps it.
type Batch struct {
	Name      string    `json:"name"`
	Open      bool      `json:"open"` // more jobs are to come: not complete while open
	Created   time.Time `json:"created"`
	Completed time.Time `json:"completed,omitzero"` // when it was last complete; zero while it is not
	Waiting   int       `json:"waiting"`
	Pending   int       `json:"pending"`
	Done      int       `json:"done"`
	Dead      int       `json:"dead"`
	Cancelled int       `json:"cancelled"`
	Removed   int       `json:"removed"`
	Waiters   int       `json:"waiters"` // jobs waiting for it to complete (after-batch)
}

// Live is the batch's jobs that may still run.
func (b *Batch) Live() int { return b.Waiting + b.Pending }

// Complete reports whether the batch is closed with nothing left to run.
func (b *Batch) Complete() bool { return !b.Open && b.Live() == 0 }

// Failed reports whether a job of the batch died, was cancelled or
// removed: its waiters follow their after-failed rule.
func (b *Batch) Failed() bool { return b.Dead+b.Cancelled+b.Removed > 0 }

func (b *Batch) count(s State) *int {
	switch s {
	case Waiting:
		return &b.Waiting
	case Pending:
		return &b.Pending
	case Done:
		return &b.Done
	case Dead:
		return &b.Dead
	case Cancelled:
		return &b.Cancelled
	}
	return &b.Removed
}

// Follow implements Journal; nil stops telling.
func (jn *Core) Follow(fn func(WorkflowChange), keep time.Duration) {
	jn.retain.Store(int64(keep))
	if fn == nil {
		jn.follower.Store(nil)
		return
	}
	jn.follower.Store(&fn)
}

// follower is the Core's Follow function.
type follower = atomic.Pointer[func(WorkflowChange)]

// flow is one write's workflow work, told to the follower once it is
// durable.
type flow struct {
	jn      *Core
	now     time.Time
	change  WorkflowChange
	more    [][]byte // settling notes left for writes that follow
	budget  int      // children this write may still settle (0: no bound)
	bounded bool
}

// newFlow starts a write's workflow work. Where one write is bounded
// (BulkLimit), it settles at most half as many children: each costs a
// few keys, and the write has its own.
func (jn *Core) newFlow(now time.Time) *flow {
	return &flow{jn: jn, now: now, budget: max(1, jn.opts.BulkLimit/2), bounded: jn.opts.BulkLimit > 0}
}

// told reports the write's changes, and queues the settling left.
func (f *flow) told(err error) {
	if err != nil {
		return
	}
	if fn := f.jn.follower.Load(); fn != nil && (len(f.change.Released) > 0 || len(f.change.Cancelled) > 0) {
		(*fn)(f.change)
	}
	for _, note := range f.more {
		f.jn.settleLater(note)
	}
}

// marker is the value of a parent's marker key: not empty, as Get tells
// an empty value from none in no backend.
var marker = []byte{1}

// afterKey is the key of an edge (child waits for parent) in the after
// index, or with child nil the parent's marker: one key read tells a
// parent that ends whether anything waits for it.
func afterKey(parent, child []byte) []byte {
	k := make([]byte, 0, 1+len(parent)+len(child))
	k = append(k, byte(len(parent)))
	k = append(k, parent...)
	return append(k, child...)
}

// Settling notes: what a parent's or a batch's end left to settle.
const (
	noteJob   = 'j'
	noteBatch = 'b'
	settleOK  = 1 // children released
	settleBad = 2 // children follow their after-failed rule
)

func settleNote(kind byte, name []byte) []byte { return append([]byte{kind}, name...) }

// attach is a new job's workflow in Append, before anything is written:
// it checks the parents and the batch waited for, and sets the job's
// state and waits. It returns the writes to make once the job is stored.
func (f *flow) attach(t Tx, j *Job) (write func(id []byte) error, err error) {
	waits := 0
	var parents [][]byte
	for _, p := range j.After {
		pid := []byte(p)
		if p == j.MsgID {
			return nil, jobError{fmt.Errorf("%w: %s is the job itself", ErrUnknownParent, p)}
		}
		rec := headOf(t, BucketJobs, pid)
		if len(rec) <= recState {
			if resultKept(t, pid) { // done, its record gone with its result still kept
				continue
			}
			return nil, jobError{fmt.Errorf("%w: %s", ErrUnknownParent, p)}
		}
		switch s := State(rec[recState]); {
		case s.live():
			waits++
			parents = append(parents, pid)
		case s == Done:
		case !j.RunIfFailed:
			return nil, jobError{fmt.Errorf("%w: %s is %s (after-failed:cancel)", ErrParentFailed, p, s)}
		}
	}
	var batch *Batch
	if j.AfterBatch != "" {
		b, err := getBatch(t, j.AfterBatch)
		switch {
		case err != nil:
			return nil, err
		case b == nil:
			return nil, jobError{fmt.Errorf("%w: %s", ErrUnknownBatch, j.AfterBatch)}
		case !b.Complete():
			waits++
			batch = b
		case b.Failed() && !j.RunIfFailed:
			return nil, jobError{fmt.Errorf("%w: batch %s is complete with jobs that failed (after-failed:cancel)", ErrParentFailed, j.AfterBatch)}
		}
	}
	j.State, j.Waits = Pending, waits
	if waits > 0 {
		j.State = Waiting
	}
	return func(id []byte) error {
		for _, p := range parents {
			if err := t.Put(BucketAfter, afterKey(p, nil), marker); err != nil {
				return err
			}
			if err := t.Put(BucketAfter, afterKey(p, id), nil); err != nil {
				return err
			}
		}
		if batch != nil {
			batch.Waiters++
			if err := putBatch(t, batch); err != nil {
				return err
			}
			if err := t.Put(BucketAfterB, afterKey([]byte(batch.Name), id), nil); err != nil {
				return err
			}
		}
		if j.Batch == "" {
			return nil
		}
		return f.joinBatch(t, j.Batch, 0, j.State, j.BatchOpen)
	}, nil
}

// getBatch reads a batch's record; nil when it is not known.
func getBatch(t Tx, name string) (*Batch, error) {
	v := t.Get(BucketBatches, []byte(name))
	if v == nil {
		return nil, nil
	}
	b, err := decodeBatch(name, v)
	if err != nil {
		return nil, jobError{err}
	}
	return b, nil
}

func putBatch(t Tx, b *Batch) error {
	return t.Put(BucketBatches, []byte(b.Name), b.encode())
}

// A batch's record: version 1, flags (1: open), created and completed
// as varint unix nanoseconds (0: none), then the counts as uvarints:
// waiting, pending, done, dead, cancelled, removed, waiters. Every job
// of a batch changes it, twice: it is small and cheap to read.
const batchVersion = 1

func (b *Batch) encode() []byte {
	out := make([]byte, 0, 2+9*binary.MaxVarintLen64)
	flags := byte(0)
	if b.Open {
		flags |= 1
	}
	out = append(out, batchVersion, flags)
	out = binary.AppendVarint(out, unixNano(b.Created))
	out = binary.AppendVarint(out, unixNano(b.Completed))
	for _, n := range []int{b.Waiting, b.Pending, b.Done, b.Dead, b.Cancelled, b.Removed, b.Waiters} {
		out = binary.AppendUvarint(out, uint64(n))
	}
	return out
}

func decodeBatch(name string, v []byte) (*Batch, error) {
	if len(v) < 2 || v[0] != batchVersion {
		return nil, fmt.Errorf("%w: the record of batch %q has an unknown version", ErrCorrupt, name)
	}
	b := &Batch{Name: name, Open: v[1]&1 != 0}
	r := reader{b: v[2:]}
	if ns := r.varint(); ns != 0 {
		b.Created = time.Unix(0, ns)
	}
	if ns := r.varint(); ns != 0 {
		b.Completed = time.Unix(0, ns)
	}
	for _, n := range []*int{&b.Waiting, &b.Pending, &b.Done, &b.Dead, &b.Cancelled, &b.Removed, &b.Waiters} {
		*n = int(min(r.uvarint(), math.MaxInt32))
	}
	if r.bad {
		return nil, fmt.Errorf("%w: the record of batch %q is truncated", ErrCorrupt, name)
	}
	return b, nil
}

// moved counts a job of batch name going from state from (0: new) to
// state to (0: removed while live), and settles the batch's waiters when
// that completes it.
func (f *flow) moved(t Tx, name string, from, to State) error {
	if name == "" || from == to || to == 0 && !from.live() {
		return nil // an ended job's record removed: it counts as it ended
	}
	return f.joinBatch(t, name, from, to, false)
}

// joinBatch is moved, for a new job (from 0) also opening the batch.
func (f *flow) joinBatch(t Tx, name string, from, to State, open bool) error {
	b, err := getBatch(t, name)
	if err != nil {
		return err
	}
	if b == nil {
		b = &Batch{Name: name, Created: f.now}
	}
	if from != 0 {
		if n := b.count(from); *n > 0 {
			*n--
		}
	}
	(*b.count(to))++
	b.Open = b.Open || open
	return f.checkBatch(t, b)
}

// checkBatch writes b back, settling its waiters if it just completed.
func (f *flow) checkBatch(t Tx, b *Batch) error {
	switch complete := b.Complete(); {
	case complete && b.Completed.IsZero():
		b.Completed = f.now
		waiters := b.Waiters
		b.Waiters = 0
		if err := putBatch(t, b); err != nil {
			return err
		}
		if waiters == 0 {
			return nil
		}
		status := byte(settleOK)
		if b.Failed() {
			status = settleBad
		}
		return f.settle(t, noteBatch, []byte(b.Name), status)
	case !complete:
		b.Completed = time.Time{} // a job joined again: open anew
	}
	return putBatch(t, b)
}

// ended settles the children of job id, which ended: done (ok) or not.
// A job nothing waits for costs one key read.
func (f *flow) ended(t Tx, id []byte, ok bool) error {
	if t.Get(BucketAfter, afterKey(id, nil)) == nil {
		return nil
	}
	status := byte(settleOK)
	if !ok {
		status = settleBad
	}
	return f.settle(t, noteJob, id, status)
}

// settle settles what waits for a parent (noteJob) or a batch
// (noteBatch), as far as the write's budget goes; the rest is noted for
// the writes that follow.
func (f *flow) settle(t Tx, kind byte, name []byte, status byte) error {
	bucket := BucketAfter
	if kind == noteBatch {
		bucket = BucketAfterB
	}
	prefix := afterKey(name, nil)
	var children [][]byte
	left := false
	err := t.Scan(bucket, prefix, func(k, _ []byte) (bool, error) {
		if !bytes.HasPrefix(k, prefix) {
			return false, nil
		}
		if len(k) == len(prefix) {
			return true, nil // the marker
		}
		if f.bounded && len(children) >= f.budget {
			left = true
			return false, nil
		}
		children = append(children, bytes.Clone(k))
		return true, nil
	})
	if err != nil {
		return err
	}
	note := settleNote(kind, name)
	for _, k := range children {
		if err := t.Delete(bucket, k); err != nil {
			return err
		}
		if err := f.settleChild(t, k[len(prefix):], status == settleOK, kind, name); err != nil {
			return err
		}
	}
	if f.bounded {
		f.budget -= len(children)
	}
	if left {
		f.more = append(f.more, note)
		return t.Put(BucketSettling, note, []byte{status})
	}
	if err := t.Delete(BucketSettling, note); err != nil {
		return err
	}
	if kind == noteJob {
		return t.Delete(BucketAfter, prefix)
	}
	return nil
}

// settleChild is one child's share of its parent's (or batch's) end.
func (f *flow) settleChild(t Tx, id []byte, ok bool, kind byte, parent []byte) error {
	rec := t.Get(BucketJobs, id)
	if len(rec) <= recState || State(rec[recState]) != Waiting {
		return nil // removed or cancelled meanwhile
	}
	j, err := decodeJob(id, rec, false)
	if err != nil {
		return jobError{err}
	}
	if !ok && !j.RunIfFailed {
		what := "job " + string(parent)
		if kind == noteBatch {
			what = "batch " + string(parent)
		}
		return f.cancelWaiting(t, j, rec, what+" failed (after-failed:cancel)")
	}
	if j.Waits--; j.Waits > 0 {
		return f.rewrite(t, j, rec)
	}
	key := queueKey(j.Queue, j.Seq)
	if err := t.Delete(BucketWaiting, key); err != nil {
		return err
	}
	if err := t.Put(BucketPending, key, id); err != nil {
		return err
	}
	j.State = Pending
	j.Trail = withTrail(j.Trail, []TrailEvent{{Time: f.now, Kind: "released"}})
	if err := f.rewrite(t, j, rec); err != nil {
		return err
	}
	f.change.Released = append(f.change.Released, j)
	return f.moved(t, j.Batch, Waiting, Pending)
}

// rewrite writes j back with rec's payload (j was decoded without it).
func (f *flow) rewrite(t Tx, j *Job, rec []byte) error {
	payload, err := payloadOf([]byte(j.MsgID), rec)
	if err != nil {
		return jobError{err}
	}
	j.Payload = payload
	err = t.Put(BucketJobs, []byte(j.MsgID), j.encode())
	j.Payload = nil
	return err
}

// cancelWaiting cancels a waiting job whose parent failed, kept for the
// journal's Retain, and settles its own children as failed.
func (f *flow) cancelWaiting(t Tx, j *Job, rec []byte, why string) error {
	id := []byte(j.MsgID)
	if err := releaseUnique(t, id, rec, false, f.now); err != nil {
		return err
	}
	key := queueKey(j.Queue, j.Seq)
	if err := t.Delete(BucketWaiting, key); err != nil {
		return err
	}
	j.State, j.Finished, j.NotBefore = Cancelled, f.now, time.Time{}
	j.Trail = withTrail(j.Trail, []TrailEvent{{Time: f.now, Kind: "cancelled", Reason: why}})
	f.change.Cancelled = append(f.change.Cancelled, j)
	if err := f.moved(t, j.Batch, Waiting, Cancelled); err != nil {
		return err
	}
	if retain := time.Duration(f.jn.retain.Load()); retain > 0 {
		if err := t.Put(BucketCancelled, key, id); err != nil {
			return err
		}
		exp := ExpiryBytes(f.now.Add(retain).UnixNano())
		if err := t.Put(BucketResults, id, exp); err != nil {
			return err
		}
		if err := t.Put(BucketResultExp, ResultExpKey(exp, id), nil); err != nil {
			return err
		}
		if err := f.rewrite(t, j, rec); err != nil {
			return err
		}
	} else if err := t.Delete(BucketJobs, id); err != nil {
		return err
	}
	return f.ended(t, id, false)
}

// settleLater queues a write that goes on settling what a note names.
func (jn *Core) settleLater(note []byte) {
	var f *flow
	jn.enqueue(write{
		apply: func(t Tx) error {
			f = jn.newFlow(time.Now())
			v := t.Get(BucketSettling, note)
			if len(v) != 1 || len(note) < 2 {
				return nil // done meanwhile
			}
			return f.settle(t, note[0], note[1:], v[0])
		},
		finish: func(err error) {
			if f != nil {
				f.told(err)
			}
		},
	})
}

// Resume queues the settling a previous run left unfinished (a crash
// between the writes of a large settle). A backend calls it once opened
// for writing.
func (jn *Core) Resume() error {
	var notes [][]byte
	err := jn.view(func(t Tx) error {
		return t.Scan(BucketSettling, nil, func(k, _ []byte) (bool, error) {
			notes = append(notes, bytes.Clone(k))
			return true, nil
		})
	})
	for _, note := range notes {
		jn.settleLater(note)
	}
	return err
}

// OpenBatch implements Journal.
func (jn *Core) OpenBatch(name string, open bool, done func(*Batch, error)) {
	var out *Batch
	f := jn.newFlow(time.Now())
	jn.workflows.Store(true) // no Complete is held once batches exist (holdOver)
	jn.enqueue(write{
		apply: func(t Tx) error {
			if name == "" || len(name) > MaxQueueLen {
				return jobError{fmt.Errorf("%w: a batch name must be 1 to %d bytes", ErrInvalidJob, MaxQueueLen)}
			}
			b, err := getBatch(t, name)
			if err != nil {
				return err
			}
			if b == nil {
				b = &Batch{Name: name, Created: f.now}
			}
			b.Open = open
			out = b
			return f.checkBatch(t, b)
		},
		finish: func(err error) {
			f.told(err)
			if done != nil {
				if err != nil {
					out = nil
				}
				done(out, err)
			}
		},
	})
}

// GetBatch implements Journal.
func (jn *Core) GetBatch(name string) (*Batch, error) {
	var b *Batch
	err := jn.view(func(t Tx) error {
		var err error
		b, err = getBatch(t, name)
		return err
	})
	if err == nil && b == nil {
		err = fmt.Errorf("%w: batch %s", ErrNotFound, name)
	}
	return b, unwrapJobError(err)
}

// ListBatches implements Journal.
func (jn *Core) ListBatches(after string, limit int) ([]*Batch, string, error) {
	if limit <= 0 {
		limit = 100
	}
	var out []*Batch
	next := ""
	err := jn.view(func(t Tx) error {
		from := []byte(after)
		if after != "" {
			from = append(from, 0)
		}
		return t.Scan(BucketBatches, from, func(k, v []byte) (bool, error) {
			if len(out) == limit {
				next = out[len(out)-1].Name
				return false, nil
			}
			b, err := decodeBatch(string(k), v)
			if err != nil {
				return false, err
			}
			out = append(out, b)
			return true, nil
		})
	})
	return out, next, err
}

// Children implements Journal.
func (jn *Core) Children(msgid string, limit int) ([]string, error) {
	var out []string
	prefix := afterKey([]byte(msgid), nil)
	err := jn.view(func(t Tx) error {
		return t.Scan(BucketAfter, prefix, func(k, _ []byte) (bool, error) {
			if !bytes.HasPrefix(k, prefix) || (limit > 0 && len(out) >= limit) {
				return false, nil
			}
			if len(k) > len(prefix) {
				out = append(out, string(k[len(prefix):]))
			}
			return true, nil
		})
	})
	return out, err
}

func unwrapJobError(err error) error {
	var je jobError
	if errors.As(err, &je) {
		return je.error
	}
	return err
}

// workflowOf reads a record's batch, when it has one (version 4), for a
// write that would otherwise not decode it.
func workflowOf(id, rec []byte) (string, error) {
	if len(rec) <= recState || recVersion(rec) < workflowVersion {
		return "", nil
	}
	j, err := decodeJob(id, rec, false)
	if err != nil {
		return "", jobError{err}
	}
	return j.Batch, nil
}
