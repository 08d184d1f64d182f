package store

import (
	"fmt"
	"time"
)

// Import stores a job taken from another journal (a queue moved between
// shards) as it was there: pending or dead, with its attempts, last
// error, not-before time, receipt and trail, at the tail of its queue
// (import a queue's jobs in their order to keep it). dup reports that
// the msgid is stored already (imported before, or sent here too):
// nothing changed. A pending job takes its unique key, as Append; a job
// of a workflow (after, batch) is refused with ErrInvalidJob: its
// parents and batch are in the other journal.
func (jn *Core) Import(j *Job, done func(dup bool, err error)) {
	if err := jn.validate(j); err != nil {
		done(false, err)
		return
	}
	switch {
	case j.State != Pending && j.State != Dead:
		done(false, fmt.Errorf("%w: job %s is %s: only pending and dead jobs are imported", ErrInvalidJob, j.MsgID, j.State))
		return
	case j.workflow():
		done(false, fmt.Errorf("%w: job %s is part of a workflow (after, batch): it is not imported without its parents", ErrInvalidJob, j.MsgID))
		return
	}
	rec := *j
	if rec.Enqueued.IsZero() {
		rec.Enqueued = time.Now()
	}
	if rec.State == Dead {
		rec.NotBefore = time.Time{}
	}
	id := []byte(j.MsgID)
	reads := takenReads(id)
	var uk []byte
	if j.Unique != "" && j.State == Pending {
		uk = uniqueKey(j.Queue, j.Unique)
		reads = append(reads, Key{Bucket: BucketUnique, Key: uk})
	}
	var dup bool
	var seq uint64
	jn.enqueue(write{
		apply: func(t Tx) error {
			var err error
			if dup, err = taken(t, id); dup || err != nil {
				return err
			}
			if uk != nil {
				if dup, err = takeUnique(t, uk, id, rec.Queue, rec.Unique); dup || err != nil {
					return err
				}
			}
			if seq, err = t.NextSeq(); err != nil {
				return err
			}
			rec.Seq = seq
			if err := t.Put(BucketJobs, id, rec.encode()); err != nil {
				return err
			}
			return t.Put(index(rec.State), queueKey(rec.Queue, seq), id)
		},
		reads: reads,
		finish: func(err error) {
			if err == nil && !dup {
				j.Seq = seq
			}
			done(dup && err == nil, err)
		},
		size: len(j.Payload) + len(j.Headers),
	})
}
