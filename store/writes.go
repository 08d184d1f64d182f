package store

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/eventmq/emq/migrations"
	bolt "go.etcd.io/bbolt"
)

// index returns the index bucket of a state.
func index(tx *bolt.Tx, s State) *bolt.Bucket {
	switch s {
	case Dead:
		return tx.Bucket(migrations.Dead)
	case Done:
		return tx.Bucket(migrations.Done)
	}
	return tx.Bucket(migrations.Pending)
}

func (b *Bolt) validate(j *Job) error {
	size := len(j.MsgID) + len(j.Queue) + len(j.Headers) + len(j.Payload) + len(j.ClientID) + len(j.LastError)
	switch {
	case size > b.opts.MaxJobSize:
		return fmt.Errorf("%w: job %s is %d bytes, over the journal's limit of %d", ErrTooLarge, j.MsgID, size, b.opts.MaxJobSize)
	case j.MsgID == "" || len(j.MsgID) > MaxIDLen:
		return fmt.Errorf("%w: msgid must be 1 to %d bytes, got %d", ErrInvalidJob, MaxIDLen, len(j.MsgID))
	case j.Queue == "" || len(j.Queue) > MaxQueueLen:
		return fmt.Errorf("%w: queue name must be 1 to %d bytes, got %d", ErrInvalidJob, MaxQueueLen, len(j.Queue))
	}
	return nil
}

// Append implements Journal. The record is encoded on the caller's
// goroutine; the committer only sets its sequence.
func (b *Bolt) Append(j *Job, done func(dup bool, err error)) {
	if err := b.validate(j); err != nil {
		if done != nil {
			done(false, err)
		}
		return
	}
	rec := *j
	rec.State = Pending
	if rec.Enqueued.IsZero() {
		rec.Enqueued = time.Now()
	}
	val := rec.encode()
	id := []byte(j.MsgID)
	queue := j.Queue
	var dup bool
	var seq uint64
	b.enqueue(write{
		apply: func(tx *bolt.Tx) error {
			jobs, pending := tx.Bucket(migrations.Jobs), tx.Bucket(migrations.Pending)
			jobs.FillPercent, pending.FillPercent = appendFill, appendFill
			var err error
			if dup, err = taken(tx, id); dup || err != nil {
				return err
			}
			if seq, err = jobs.NextSequence(); err != nil {
				return err
			}
			binary.BigEndian.PutUint64(val[recSeq:], seq)
			if err := jobs.Put(id, val); err != nil {
				return err
			}
			return pending.Put(queueKey(queue, seq), id)
		},
		finish: func(err error) {
			if err == nil && !dup {
				j.Seq = seq // only once it is stored: a failed commit stored nothing
			}
			if done != nil {
				done(dup && err == nil, err)
			}
		},
		size: len(val),
	})
}

// taken reports whether msgid id is stored (pending, dead, or done with
// its result kept), as Append and a schedule's fire see it; a done job
// whose time is up (not yet swept) is deleted, its msgid free again.
func taken(tx *bolt.Tx, id []byte) (bool, error) {
	rec := tx.Bucket(migrations.Jobs).Get(id)
	switch {
	case rec == nil:
		return resultKept(tx, id), nil
	case len(rec) <= recState || State(rec[recState]) != Done || resultKept(tx, id):
		return true, nil
	}
	_, err := deleteJob(tx, id)
	return false, err
}

// appendFill is how full bbolt packs pages split by appends. Index keys
// (queue + sequence) and time-ordered msgids land at the tail, where
// bbolt's default of half-full pages would leave half of every page
// empty for ever; random v4 msgids cost a little more splitting.
const appendFill = 0.95

// deleteJob removes a job and its index entry; found is false when it
// was not stored.
func deleteJob(tx *bolt.Tx, id []byte) (found bool, err error) {
	jobs := tx.Bucket(migrations.Jobs)
	rec := jobs.Get(id)
	if rec == nil {
		return false, nil
	}
	state, key, err := indexKey(id, rec)
	if err != nil {
		return false, jobError{err}
	}
	if err := index(tx, state).Delete(key); err != nil {
		return false, err
	}
	return true, jobs.Delete(id)
}

// keepDone makes a stored job done: its state, its finish time and its
// index entry move; found is false when it was not stored.
func keepDone(tx *bolt.Tx, id []byte, now time.Time, trail []TrailEvent) (found bool, err error) {
	jobs := tx.Bucket(migrations.Jobs)
	rec := jobs.Get(id)
	if rec == nil {
		return false, nil
	}
	j, err := decodeJob(id, rec, true)
	if err != nil {
		return false, jobError{err}
	}
	key := queueKey(j.Queue, j.Seq)
	if err := index(tx, j.State).Delete(key); err != nil {
		return false, err
	}
	if err := index(tx, Done).Put(key, id); err != nil {
		return false, err
	}
	j.State, j.Finished, j.NotBefore = Done, now, time.Time{}
	j.Trail = withTrail(j.Trail, trail)
	return true, jobs.Put(id, j.encode())
}

// Complete implements Journal.
func (b *Bolt) Complete(msgid string, result []byte, keepUntil time.Time, trail []TrailEvent, done func(found bool, err error)) {
	id := []byte(msgid)
	now := time.Now()
	var found bool
	b.enqueue(write{
		apply: func(tx *bolt.Tx) (err error) {
			if keepUntil.IsZero() {
				found, err = deleteJob(tx, id)
				return err
			}
			if found, err = keepDone(tx, id, now, trail); err != nil || !found {
				return err
			}
			exp := migrations.ExpiryBytes(keepUntil.UnixNano())
			if err := tx.Bucket(migrations.Results).Put(id, append(exp, result...)); err != nil {
				return err
			}
			return tx.Bucket(migrations.ResultExp).Put(migrations.ResultExpKey(exp, id), nil)
		},
		finish: func(err error) {
			if done != nil {
				done(found && err == nil, err)
			}
		},
		lazy: true,
	})
}

// resultKept reports whether the job msgid is done and its result not yet
// expired: sent again, it is a duplicate, not a new job.
func resultKept(tx *bolt.Tx, id []byte) bool {
	v := tx.Bucket(migrations.Results).Get(id)
	return len(v) >= 8 && int64(binary.BigEndian.Uint64(v[:8])) >= time.Now().UnixNano()
}

// Remove implements Journal. A done job's kept result goes with it, so
// its msgid is free again.
func (b *Bolt) Remove(msgid string, done func(found bool, err error)) {
	id := []byte(msgid)
	var found bool
	b.enqueue(write{
		apply: func(tx *bolt.Tx) (err error) {
			if found, err = deleteJob(tx, id); err != nil || !found {
				return err
			}
			return tx.Bucket(migrations.Results).Delete(id) // its expiry entry finds nothing to delete
		},
		finish: func(err error) {
			if done != nil {
				done(found && err == nil, err)
			}
		},
	})
}

// change reads one job, lets fn change it (and its index entries), and
// writes it back. fn refuses with a jobError before it changes anything.
func (b *Bolt) change(msgid string, fn func(tx *bolt.Tx, j *Job) error, done func(*Job, error)) {
	id := []byte(msgid)
	var out *Job
	b.enqueue(write{
		apply: func(tx *bolt.Tx) error {
			jobs := tx.Bucket(migrations.Jobs)
			rec := jobs.Get(id)
			if rec == nil {
				return jobError{fmt.Errorf("%w: %s", ErrNotFound, msgid)}
			}
			j, err := decodeJob(id, rec, true)
			if err != nil {
				return jobError{err}
			}
			if err := fn(tx, j); err != nil {
				return err
			}
			out = j
			return jobs.Put(id, j.encode())
		},
		finish: func(err error) {
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
func (b *Bolt) RecordAttempt(msgid, reason string, notBefore time.Time, trail []TrailEvent, done func(*Job, error)) {
	b.change(msgid, func(_ *bolt.Tx, j *Job) error {
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
func (b *Bolt) Bury(msgid, reason string, trail []TrailEvent, done func(*Job, error)) {
	b.change(msgid, func(tx *bolt.Tx, j *Job) error {
		if j.State != Pending {
			return jobError{fmt.Errorf("%w: job %s is %s already", ErrWrongState, msgid, j.State)}
		}
		key := queueKey(j.Queue, j.Seq)
		if err := index(tx, Pending).Delete(key); err != nil {
			return err
		}
		j.Attempts++
		j.LastError, j.State, j.NotBefore = reason, Dead, time.Time{}
		j.Trail = withTrail(j.Trail, trail)
		return index(tx, Dead).Put(key, []byte(msgid))
	}, done)
}

// Revive implements Journal.
func (b *Bolt) Revive(msgid string, trail []TrailEvent, done func(*Job, error)) {
	b.change(msgid, func(tx *bolt.Tx, j *Job) error {
		if j.State != Dead {
			return jobError{fmt.Errorf("%w: job %s is not dead (it is %s)", ErrWrongState, msgid, j.State)}
		}
		if err := index(tx, Dead).Delete(queueKey(j.Queue, j.Seq)); err != nil {
			return err
		}
		seq, err := tx.Bucket(migrations.Jobs).NextSequence()
		if err != nil {
			return err
		}
		j.Seq, j.State, j.Attempts, j.NotBefore = seq, Pending, 0, time.Time{}
		j.Trail = withTrail(j.Trail, trail)
		return index(tx, Pending).Put(queueKey(j.Queue, seq), []byte(msgid))
	}, done)
}

// countWrite queues a write whose outcome is a count (of what it removed).
func (b *Bolt) countWrite(apply func(tx *bolt.Tx) (int, error), done func(int, error)) {
	var n int
	b.enqueue(write{
		apply: func(tx *bolt.Tx) (err error) {
			n, err = apply(tx)
			return err
		},
		finish: func(err error) {
			if done != nil {
				done(n, err)
			}
		},
	})
}

// PurgeQueue implements Journal.
func (b *Bolt) PurgeQueue(queue string, done func(removed int, err error)) {
	b.countWrite(func(tx *bolt.Tx) (int, error) {
		idx, jobs := index(tx, Pending), tx.Bucket(migrations.Jobs)
		prefix := queuePrefix(queue)
		var keys, ids [][]byte
		c := idx.Cursor()
		for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
			if _, ok := splitQueueKey(k); ok { // a malformed key is left alone
				keys, ids = append(keys, bytes.Clone(k)), append(ids, bytes.Clone(v))
			}
		}
		for i := range keys {
			if err := idx.Delete(keys[i]); err != nil {
				return 0, err
			}
			if err := jobs.Delete(ids[i]); err != nil {
				return 0, err
			}
		}
		return len(keys), nil
	}, done)
}

// ExpireBatch is the most results one ExpireResults deletes.
const ExpireBatch = 10000

// ExpireResults implements Journal. One call deletes at most 10,000.
func (b *Bolt) ExpireResults(now time.Time, done func(removed int, err error)) {
	limit := migrations.ExpiryBytes(now.UnixNano())
	b.countWrite(func(tx *bolt.Tx) (int, error) {
		idx, results := tx.Bucket(migrations.ResultExp), tx.Bucket(migrations.Results)
		var keys [][]byte
		c := idx.Cursor()
		for k, _ := c.First(); k != nil && len(keys) < ExpireBatch && bytes.Compare(k[:8], limit) <= 0; k, _ = c.Next() {
			keys = append(keys, bytes.Clone(k))
		}
		removed := 0
		for _, k := range keys {
			if err := idx.Delete(k); err != nil {
				return 0, err
			}
			// Only if the stored result is the one this entry is for (a
			// msgid can complete again after a re-run, and its new
			// result is not up): the count is of results, not entries.
			if v := results.Get(k[8:]); len(v) >= 8 && bytes.Equal(v[:8], k[:8]) {
				if err := results.Delete(k[8:]); err != nil {
					return 0, err
				}
				if rec := tx.Bucket(migrations.Jobs).Get(k[8:]); len(rec) > recState && State(rec[recState]) == Done {
					if _, err := deleteJob(tx, k[8:]); err != nil { // the done job goes with its result
						return 0, err
					}
				}
				removed++
			}
		}
		return removed, nil
	}, done)
}
