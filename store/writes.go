package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"time"
)

// index returns the index bucket of a state.
func index(s State) []byte {
	switch s {
	case Dead:
		return BucketDead
	case Done:
		return BucketDone
	case Cancelled:
		return BucketCancelled
	case Waiting:
		return BucketWaiting
	}
	return BucketPending
}

func (jn *Core) validate(j *Job) error {
	size := len(j.MsgID) + len(j.Queue) + len(j.Headers) + len(j.Payload) + len(j.ClientID) + len(j.LastError)
	switch {
	case size > jn.opts.MaxJobSize:
		return fmt.Errorf("%w: job %s is %d bytes, over the journal's limit of %d", ErrTooLarge, j.MsgID, size, jn.opts.MaxJobSize)
	case j.MsgID == "" || len(j.MsgID) > MaxIDLen:
		return fmt.Errorf("%w: msgid must be 1 to %d bytes, got %d", ErrInvalidJob, MaxIDLen, len(j.MsgID))
	case j.Queue == "" || len(j.Queue) > MaxQueueLen:
		return fmt.Errorf("%w: queue name must be 1 to %d bytes, got %d", ErrInvalidJob, MaxQueueLen, len(j.Queue))
	case len(j.Unique) > MaxUniqueLen:
		return fmt.Errorf("%w: unique key must be at most %d bytes, got %d", ErrInvalidJob, MaxUniqueLen, len(j.Unique))
	case len(j.After) > MaxAfter:
		return fmt.Errorf("%w: a job waits for at most %d jobs, not %d", ErrInvalidJob, MaxAfter, len(j.After))
	case len(j.Batch) > MaxQueueLen || len(j.AfterBatch) > MaxQueueLen:
		return fmt.Errorf("%w: a batch name must be at most %d bytes", ErrInvalidJob, MaxQueueLen)
	}
	for _, p := range j.After {
		if p == "" || len(p) > MaxIDLen {
			return fmt.Errorf("%w: a job waited for has a msgid of 1 to %d bytes", ErrInvalidJob, MaxIDLen)
		}
	}
	return nil
}

// Append implements Journal. The record is encoded on the caller's
// goroutine; the committer only sets its sequence.
func (jn *Core) Append(j *Job, done func(dup bool, err error)) {
	op, err := jn.newAppend(j)
	if err != nil {
		if done != nil {
			done(false, err)
		}
		return
	}
	jn.enqueue(write{
		apply: op.apply,
		reads: op.reads,
		finish: func(err error) {
			dup := op.finish(err)
			if done != nil {
				done(dup, err)
			}
		},
		size: len(j.Payload) + len(j.Headers),
		job:  j.MsgID, takes: true, plain: op.uk == nil && op.f == nil,
	})
}

// appendOp is one job's Append: checked and encoded on the caller's
// goroutine (newAppend), applied on the committer, its outcome told to
// the job (finish).
type appendOp struct {
	j     *Job
	rec   Job    // what is stored
	val   []byte // rec encoded; a workflow's once its state is known
	id    []byte
	uk    []byte // its unique index key, if it has one
	f     *flow  // a workflow's work; nil for another job
	reads []Key
	dup   bool
	seq   uint64
}

// newAppend checks j and prepares its Append.
func (jn *Core) newAppend(j *Job) (*appendOp, error) {
	if err := jn.validate(j); err != nil {
		return nil, err
	}
	op := &appendOp{j: j, rec: *j, id: []byte(j.MsgID)}
	op.rec.State = Pending
	if op.rec.Enqueued.IsZero() {
		op.rec.Enqueued = time.Now()
	}
	op.reads = takenReads(op.id)
	if j.Unique != "" {
		op.uk = uniqueKey(j.Queue, j.Unique)
		op.reads = append(op.reads, Key{Bucket: BucketUnique, Key: op.uk})
	}
	if !op.rec.workflow() {
		op.val = op.rec.encode()
		if k := jn.keys.Load(); k != nil { // here, not on the committer; the sequence stays in clear
			var err error
			if op.val, err = k.encryptJob(op.id, op.val); err != nil {
				return nil, err
			}
		}
		return op, nil
	}
	jn.workflows.Store(true) // before it is queued: no Complete is held past it (holdOver)
	op.f = jn.newFlow(op.rec.Enqueued)
	for _, p := range j.After {
		op.reads = append(op.reads, Key{Bucket: BucketJobs, Key: []byte(p)}, Key{Bucket: BucketResults, Key: []byte(p)})
	}
	for _, b := range []string{j.Batch, j.AfterBatch} {
		if b != "" {
			op.reads = append(op.reads, Key{Bucket: BucketBatches, Key: []byte(b)})
		}
	}
	return op, nil
}

// apply stores the job, or finds it a duplicate (op.dup), or refuses it
// with a jobError before it has changed anything.
func (op *appendOp) apply(t Tx) error {
	var err error
	if op.dup, err = taken(t, op.id); op.dup || err != nil {
		return err
	}
	var attached func(id []byte) error
	if op.f != nil {
		if attached, err = op.f.attach(t, &op.rec); err != nil {
			return err
		}
	}
	if op.uk != nil {
		if op.dup, err = takeUnique(t, op.uk, op.id, op.rec.Queue, op.rec.Unique); op.dup || err != nil {
			return err
		}
	}
	if op.seq, err = t.NextSeq(); err != nil {
		return err
	}
	if op.f != nil {
		op.rec.Seq = op.seq
		op.val = op.rec.encode()
	} else {
		binary.BigEndian.PutUint64(op.val[recSeq:], op.seq)
	}
	if err := t.Put(BucketJobs, op.id, op.val); err != nil {
		return err
	}
	if err := t.Put(index(op.rec.State), queueKey(op.rec.Queue, op.seq), op.id); err != nil {
		return err
	}
	if attached != nil {
		return attached(op.id)
	}
	return nil
}

// finish tells the job the outcome of its write (err nil: durable) and
// returns its dup.
func (op *appendOp) finish(err error) (dup bool) {
	if err == nil && !op.dup {
		op.j.Seq = op.seq // only once it is stored: a failed commit stored nothing
		op.j.State, op.j.Waits = op.rec.State, op.rec.Waits
	}
	if op.f != nil {
		op.f.told(err)
	}
	return op.dup && err == nil
}

// taken reports whether msgid id is stored (pending, dead, or done with
// its result kept), as Append and a schedule's fire see it; a done job
// whose time is up (not yet swept) is deleted, its msgid free again.
func taken(t Tx, id []byte) (bool, error) {
	rec := headOf(t, BucketJobs, id)
	switch {
	case rec == nil:
		return resultKept(t, id), nil
	case len(rec) <= recState || !State(rec[recState]).finished() || resultKept(t, id):
		return true, nil
	}
	_, err := deleteRecord(t, id, rec)
	return false, err
}

// takeUnique gives unique key uk to job id, unless another job holds
// it: a pending one, or one done less than its UniqueFor ago (a
// UniqueError). dup reports that id itself holds it, done within its
// hold: sent again, it is the same job, not a new one.
func takeUnique(t Tx, uk, id []byte, queue, key string) (dup bool, err error) {
	if v := t.Get(BucketUnique, uk); len(v) >= 8 {
		exp, holder := int64(binary.BigEndian.Uint64(v[:8])), v[8:]
		held := exp == 0 || exp > time.Now().UnixNano()
		switch {
		case held && bytes.Equal(holder, id):
			return true, nil
		case held:
			return false, jobError{&UniqueError{Queue: queue, Key: key, Holder: string(holder)}}
		}
	}
	return false, t.Put(BucketUnique, uk, append(make([]byte, 8, 8+len(id)), id...))
}

// releaseUnique lets go of the unique key of a live job's record rec:
// at once, or, done with a hold, when the hold ends. A job that is not
// pending holds no key (one done may hold it for its hold, which is
// swept).
func releaseUnique(t Tx, id, rec []byte, done bool, now time.Time) error {
	if len(rec) <= recState || recVersion(rec) < uniqueVersion || !State(rec[recState]).live() {
		return nil
	}
	queue, key, hold, err := uniqueOf(id, rec)
	if err != nil {
		return jobError{err}
	}
	if len(key) == 0 { // a workflow's record, without a key
		return nil
	}
	uk := uniqueKey(string(queue), string(key))
	if !done || hold <= 0 {
		return t.Delete(BucketUnique, uk)
	}
	exp := ExpiryBytes(now.Add(hold).UnixNano())
	if err := t.Put(BucketUnique, uk, append(exp, id...)); err != nil {
		return err
	}
	return t.Put(BucketUniqueExp, append(exp[:8:8], uk...), nil)
}

// takenReads are the keys taken reads.
func takenReads(id []byte) []Key {
	return []Key{{Bucket: BucketJobs, Key: id}, {Bucket: BucketResults, Key: id}}
}

// deleteJob removes a job and its index entry; found is false when it
// was not stored.
func deleteJob(t Tx, id []byte) (found bool, err error) {
	return deleteRecord(t, id, headOf(t, BucketJobs, id))
}

// deleteRecord is deleteJob of a job whose record (or head) rec was read
// already.
func deleteRecord(t Tx, id, rec []byte) (found bool, err error) {
	if rec == nil {
		return false, nil
	}
	state, key, err := indexKey(id, rec)
	if err != nil {
		return false, jobError{err}
	}
	if err := t.Delete(index(state), key); err != nil {
		return false, err
	}
	return true, t.Delete(BucketJobs, id)
}

// keepDone makes a stored job done: its state, its finish time and its
// index entry move; found is false when it was not stored.
func keepDone(t Tx, id []byte, now time.Time, trail []TrailEvent) (found bool, err error) {
	rec := t.Get(BucketJobs, id)
	if rec == nil {
		return false, nil
	}
	j, err := decodeJob(id, rec, true)
	if err != nil {
		return false, jobError{err}
	}
	key := queueKey(j.Queue, j.Seq)
	if err := t.Delete(index(j.State), key); err != nil {
		return false, err
	}
	if err := t.Put(BucketDone, key, id); err != nil {
		return false, err
	}
	j.State, j.Finished, j.NotBefore = Done, now, time.Time{}
	j.Trail = withTrail(j.Trail, trail)
	return true, t.Put(BucketJobs, id, j.encode())
}

// Complete implements Journal.
func (jn *Core) Complete(msgid string, result []byte, keepUntil time.Time, trail []TrailEvent, done func(found bool, err error)) {
	id := []byte(msgid)
	now := time.Now()
	var found bool
	f := jn.newFlow(now)
	jn.enqueue(write{
		apply: func(t Tx) (err error) {
			var rec []byte
			if keepUntil.IsZero() {
				rec = headOf(t, BucketJobs, id)
			} else {
				rec = t.Get(BucketJobs, id) // kept whole, with its result
			}
			batch, err := workflowOf(id, rec)
			if err != nil {
				return err
			}
			if err := releaseUnique(t, id, rec, true, now); err != nil {
				return err
			}
			if keepUntil.IsZero() || !jn.fits(len(rec)+len(result)) {
				if found, err = deleteRecord(t, id, rec); err != nil || !found {
					return err
				}
			} else {
				if found, err = keepDone(t, id, now, trail); err != nil || !found {
					return err
				}
				exp := ExpiryBytes(keepUntil.UnixNano())
				if err := t.Put(BucketResults, id, append(exp, result...)); err != nil {
					return err
				}
				if err := t.Put(BucketResultExp, ResultExpKey(exp, id), nil); err != nil {
					return err
				}
			}
			if err := f.moved(t, batch, Pending, Done); err != nil {
				return err
			}
			return f.ended(t, id, true)
		},
		reads: []Key{{Bucket: BucketJobs, Key: id, Whole: !keepUntil.IsZero()}, {Bucket: BucketAfter, Key: afterKey(id, nil)}},
		finish: func(err error) {
			f.told(err)
			if done != nil {
				done(found && err == nil, err)
			}
		},
		lazy: true,
		job:  msgid, frees: keepUntil.IsZero(),
	})
}

// fits reports whether a write storing n bytes of values fits in one
// commit of the backend (etcd bounds a request; bbolt does not).
func (jn *Core) fits(n int) bool { return jn.opts.MaxWrite == 0 || n+keepRoom <= jn.opts.MaxWrite }

// keepRoom is what a kept job's write stores beside its record and
// result: keys, the expiry, trail events.
const keepRoom = 8 << 10

// resultKept reports whether the job msgid is done and its result not yet
// expired: sent again, it is a duplicate, not a new job.
func resultKept(t Tx, id []byte) bool {
	v := headOf(t, BucketResults, id)
	return len(v) >= 8 && int64(binary.BigEndian.Uint64(v[:8])) >= time.Now().UnixNano()
}

// Remove implements Journal. A done job's kept result goes with it, so
// its msgid is free again.
func (jn *Core) Remove(msgid string, done func(found bool, err error)) {
	id := []byte(msgid)
	var found bool
	f := jn.newFlow(time.Now())
	jn.enqueue(write{
		apply: func(t Tx) (err error) {
			rec := headOf(t, BucketJobs, id)
			batch, err := workflowOf(id, rec)
			if err != nil {
				return err
			}
			if err := releaseUnique(t, id, rec, false, time.Time{}); err != nil {
				return err
			}
			if found, err = deleteRecord(t, id, rec); err != nil || !found {
				return err
			}
			if err := t.Delete(BucketResults, id); err != nil { // its expiry entry finds nothing to delete
				return err
			}
			if state := State(rec[recState]); state.live() {
				if err := f.moved(t, batch, state, 0); err != nil {
					return err
				}
				return f.ended(t, id, false)
			}
			return nil
		},
		reads: []Key{{Bucket: BucketJobs, Key: id}, {Bucket: BucketAfter, Key: afterKey(id, nil)}},
		finish: func(err error) {
			f.told(err)
			if done != nil {
				done(found && err == nil, err)
			}
		},
	})
}

// change reads one job, lets fn change it (and its index entries), and
// writes it back. fn refuses with a jobError before it changes anything.
func (jn *Core) change(msgid string, fn func(t Tx, j *Job) error, done func(*Job, error)) {
	jn.changeFlow(msgid, fn, nil, done)
}

// changeFlow is change for a write with workflow work (f).
func (jn *Core) changeFlow(msgid string, fn func(t Tx, j *Job) error, f *flow, done func(*Job, error)) {
	jn.rewrite(msgid, func(t Tx, j *Job, _ []byte) (bool, error) { return true, fn(t, j) }, f, done)
}

// rewrite is change for an fn that may delete the job instead (keep
// false: rewrite writes nothing back); fn also gets the stored record.
func (jn *Core) rewrite(msgid string, fn func(t Tx, j *Job, rec []byte) (keep bool, err error), f *flow, done func(*Job, error)) {
	id := []byte(msgid)
	var out *Job
	jn.enqueue(write{
		reads: []Key{{Bucket: BucketJobs, Key: id, Whole: true}, {Bucket: BucketAfter, Key: afterKey(id, nil)}},
		apply: func(t Tx) error {
			rec := t.Get(BucketJobs, id)
			if rec == nil {
				return jobError{fmt.Errorf("%w: %s", ErrNotFound, msgid)}
			}
			j, err := decodeJob(id, rec, true)
			if err != nil {
				return jobError{err}
			}
			keep, err := fn(t, j, rec)
			if err != nil {
				return err
			}
			out = j
			if !keep {
				return nil
			}
			return t.Put(BucketJobs, id, j.encode())
		},
		finish: func(err error) {
			if f != nil {
				f.told(err)
			}
			if done == nil {
				return
			}
			if err != nil {
				out = nil
			}
			done(out, err)
		},
	})
}

// RecordAttempt implements Journal.
func (jn *Core) RecordAttempt(msgid, reason string, notBefore time.Time, trail []TrailEvent, done func(*Job, error)) {
	jn.change(msgid, func(_ Tx, j *Job) error {
		if j.State != Pending {
			return jobError{fmt.Errorf("%w: job %s is %s, not pending", ErrWrongState, msgid, j.State)}
		}
		j.Attempts++
		j.LastError, j.NotBefore = reason, notBefore
		j.Trail = withTrail(j.Trail, trail)
		return nil
	}, done)
}

// Bury implements Journal.
func (jn *Core) Bury(msgid, reason string, trail []TrailEvent, done func(*Job, error)) {
	f := jn.newFlow(time.Now())
	jn.changeFlow(msgid, func(t Tx, j *Job) error {
		if j.State != Pending {
			return jobError{fmt.Errorf("%w: job %s is %s already", ErrWrongState, msgid, j.State)}
		}
		key := queueKey(j.Queue, j.Seq)
		if err := t.Delete(BucketPending, key); err != nil {
			return err
		}
		if j.Unique != "" { // a dead job lets its key go: see doc.go
			if err := t.Delete(BucketUnique, uniqueKey(j.Queue, j.Unique)); err != nil {
				return err
			}
		}
		j.Attempts++
		j.LastError, j.State, j.NotBefore = reason, Dead, time.Time{}
		j.Trail = withTrail(j.Trail, trail)
		if err := t.Put(BucketDead, key, []byte(msgid)); err != nil {
			return err
		}
		if err := f.moved(t, j.Batch, Pending, Dead); err != nil {
			return err
		}
		return f.ended(t, []byte(msgid), false)
	}, f, done)
}

// Revive implements Journal.
func (jn *Core) Revive(msgid string, trail []TrailEvent, done func(*Job, error)) {
	f := jn.newFlow(time.Now())
	jn.changeFlow(msgid, func(t Tx, j *Job) error {
		if j.State != Dead {
			return jobError{fmt.Errorf("%w: job %s is not dead (it is %s)", ErrWrongState, msgid, j.State)}
		}
		if err := t.Delete(BucketDead, queueKey(j.Queue, j.Seq)); err != nil {
			return err
		}
		seq, err := t.NextSeq()
		if err != nil {
			return err
		}
		j.Seq, j.State, j.Attempts, j.NotBefore = seq, Pending, 0, time.Time{}
		j.Trail = withTrail(j.Trail, trail)
		if j.Unique != "" {
			// Its key back, unless another job took it meanwhile: then it
			// runs without one.
			var re jobError
			if _, err := takeUnique(t, uniqueKey(j.Queue, j.Unique), []byte(msgid), j.Queue, j.Unique); errors.As(err, &re) {
				j.Trail = withTrail(j.Trail, []TrailEvent{{Time: time.Now(), Kind: "revived", Reason: re.Error() + "; it runs without the key"}})
				j.Unique, j.UniqueFor = "", 0
			} else if err != nil {
				return err
			}
		}
		if err := t.Put(BucketPending, queueKey(j.Queue, seq), []byte(msgid)); err != nil {
			return err
		}
		return f.moved(t, j.Batch, Dead, Pending)
	}, f, done)
}

// bulk queues a write that removes up to most things (0: no bound), as
// one write, or in passes of at most bulkLimit when the backend sets one
// (etcd bounds a transaction's operations). apply removes up to limit
// (0: no bound) and says whether it left more, with a flow of its own
// for each pass; done gets the total.
func (jn *Core) bulk(most int, apply func(t Tx, limit int, f *flow) (n int, more bool, err error), done func(int, error)) {
	limit := most
	if jn.opts.BulkLimit > 0 && (limit == 0 || limit > jn.opts.BulkLimit) {
		limit = jn.opts.BulkLimit
	}
	total := 0
	var pass func()
	pass = func() {
		var n int
		var more bool
		f := jn.newFlow(time.Now())
		jn.enqueue(write{
			apply: func(t Tx) (err error) {
				n, more, err = apply(t, limit, f)
				return err
			},
			finish: func(err error) {
				f.told(err)
				if err == nil {
					total += n
				}
				if err == nil && more && (most == 0 || total < most) {
					pass() // on the committer: queued behind what came meanwhile
					return
				}
				if done != nil {
					done(total, err)
				}
			},
		})
	}
	pass()
}

// PurgeQueue implements Journal: the queue's pending and waiting jobs.
func (jn *Core) PurgeQueue(queue string, done func(removed int, err error)) {
	jn.bulk(0, func(t Tx, limit int, f *flow) (int, bool, error) {
		prefix := queuePrefix(queue)
		type item struct {
			index   []byte
			key, id []byte
			state   State
		}
		var items []item
		more := false
		for _, s := range []State{Pending, Waiting} {
			err := t.Scan(index(s), prefix, func(k, v []byte) (bool, error) {
				if !bytes.HasPrefix(k, prefix) {
					return false, nil
				}
				if more = len(items) == limit && limit > 0; more {
					return false, nil
				}
				if _, ok := splitQueueKey(k); ok { // a malformed key is left alone
					items = append(items, item{index(s), bytes.Clone(k), bytes.Clone(v), s})
				}
				return true, nil
			})
			if err != nil || more {
				if err != nil {
					return 0, false, err
				}
				break
			}
		}
		if f.bounded { // the purge's own keys come out of what the write may settle
			f.budget = max(1, f.budget-len(items))
		}
		ids := make([][]byte, len(items))
		for i, it := range items {
			ids[i] = it.id
		}
		recs := headsOf(t, BucketJobs, ids)
		for i, it := range items {
			batch, err := workflowOf(it.id, recs[i])
			if err != nil {
				return 0, false, err
			}
			if err := t.Delete(it.index, it.key); err != nil {
				return 0, false, err
			}
			if err := releaseUnique(t, it.id, recs[i], false, time.Time{}); err != nil {
				return 0, false, err
			}
			if err := t.Delete(BucketJobs, it.id); err != nil {
				return 0, false, err
			}
			if err := f.moved(t, batch, it.state, 0); err != nil {
				return 0, false, err
			}
			if err := f.ended(t, it.id, false); err != nil {
				return 0, false, err
			}
		}
		return len(items), more, nil
	}, done)
}

// ExpireBatch is the most results one ExpireResults deletes.
const ExpireBatch = 10000

// ExpireResults implements Journal. One call deletes at most ExpireBatch.
func (jn *Core) ExpireResults(now time.Time, done func(removed int, err error)) {
	limit := ExpiryBytes(now.UnixNano())
	jn.bulk(ExpireBatch, func(t Tx, most int, _ *flow) (int, bool, error) {
		var keys [][]byte
		more := false
		err := t.Scan(BucketResultExp, nil, func(k, _ []byte) (bool, error) {
			if bytes.Compare(k[:8], limit) > 0 {
				return false, nil
			}
			if more = len(keys) == most; more {
				return false, nil
			}
			keys = append(keys, bytes.Clone(k))
			return true, nil
		})
		if err != nil {
			return 0, false, err
		}
		removed := 0
		for _, k := range keys {
			if err := t.Delete(BucketResultExp, k); err != nil {
				return 0, false, err
			}
			// Only if the stored result is the one this entry is for (a
			// msgid can complete again after a re-run, and its new
			// result is not up): the count is of results, not entries.
			if v := headOf(t, BucketResults, k[8:]); len(v) >= 8 && bytes.Equal(v[:8], k[:8]) {
				if err := t.Delete(BucketResults, k[8:]); err != nil {
					return 0, false, err
				}
				if rec := headOf(t, BucketJobs, k[8:]); len(rec) > recState && State(rec[recState]).finished() {
					if _, err := deleteJob(t, k[8:]); err != nil { // the done job goes with its result
						return 0, false, err
					}
				}
				removed++
			}
		}
		if more {
			return removed, more, nil
		}
		n, more, err := expireUnique(t, limit, most-len(keys))
		return removed + n, more, err
	}, done)
}

// expireUnique deletes up to most unique keys whose hold ended by limit.
func expireUnique(t Tx, limit []byte, most int) (int, bool, error) {
	var keys [][]byte
	more := false
	err := t.Scan(BucketUniqueExp, nil, func(k, _ []byte) (bool, error) {
		if len(k) < 8 || bytes.Compare(k[:8], limit) > 0 {
			return false, nil
		}
		if more = len(keys) >= most; more {
			return false, nil
		}
		keys = append(keys, bytes.Clone(k))
		return true, nil
	})
	if err != nil {
		return 0, false, err
	}
	for _, k := range keys {
		if err := t.Delete(BucketUniqueExp, k); err != nil {
			return 0, false, err
		}
		// Only if the key's hold is the one this entry is for: a job
		// done since holds it for its own.
		if v := t.Get(BucketUnique, k[8:]); len(v) >= 8 && bytes.Equal(v[:8], k[:8]) {
			if err := t.Delete(BucketUnique, k[8:]); err != nil {
				return 0, false, err
			}
		}
	}
	return 0, more, nil
}

// Cancel implements Journal.
func (jn *Core) Cancel(msgid string, keepUntil time.Time, trail []TrailEvent, done func(*Job, error)) {
	now := time.Now()
	f := jn.newFlow(now)
	jn.rewrite(msgid, func(t Tx, j *Job, rec []byte) (bool, error) {
		id := []byte(msgid)
		if !j.State.live() {
			return false, jobError{fmt.Errorf("%w: job %s is %s", ErrWrongState, msgid, j.State)}
		}
		if err := releaseUnique(t, id, rec, false, now); err != nil {
			return false, err
		}
		key := queueKey(j.Queue, j.Seq)
		if err := t.Delete(index(j.State), key); err != nil {
			return false, err
		}
		if err := f.moved(t, j.Batch, j.State, Cancelled); err != nil {
			return false, err
		}
		if err := f.ended(t, id, false); err != nil {
			return false, err
		}
		j.State, j.Finished, j.NotBefore = Cancelled, now, time.Time{}
		j.Trail = withTrail(j.Trail, trail)
		if keepUntil.IsZero() {
			return false, t.Delete(BucketJobs, id)
		}
		if err := t.Put(BucketCancelled, key, id); err != nil {
			return false, err
		}
		exp := ExpiryBytes(keepUntil.UnixNano())
		if err := t.Put(BucketResults, id, exp); err != nil { // an empty result: kept as a done job's is
			return false, err
		}
		return true, t.Put(BucketResultExp, ResultExpKey(exp, id), nil)
	}, f, done)
}
