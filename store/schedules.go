package store

import (
	"fmt"
	"time"
)

// validSchedule checks s as validate checks a job: its fires must fit as
// jobs, whatever their msgids.
func (jn *Core) validSchedule(s *Schedule) error {
	switch size := MaxIDLen + len(s.Queue) + len(s.Headers) + len(s.Payload); {
	case s.ID == "" || len(s.ID) > MaxIDLen:
		return fmt.Errorf("%w: schedule id must be 1 to %d bytes, got %d", ErrBadSchedule, MaxIDLen, len(s.ID))
	case s.Queue == "" || len(s.Queue) > MaxQueueLen:
		return fmt.Errorf("%w: queue name must be 1 to %d bytes, got %d", ErrBadSchedule, MaxQueueLen, len(s.Queue))
	case size > jn.opts.MaxJobSize:
		return fmt.Errorf("%w: schedule %s's jobs would be up to %d bytes, over the journal's limit of %d", ErrTooLarge, s.ID, size, jn.opts.MaxJobSize)
	case !jn.fits(2 * size): // a fire stores the schedule and its job at once
		return fmt.Errorf("%w: schedule %s and one of its jobs would be %d bytes, over what one write of the journal stores (%d)", ErrTooLarge, s.ID, 2*size, jn.opts.MaxWrite)
	}
	return nil
}

// PutSchedule implements Journal.
func (jn *Core) PutSchedule(s *Schedule, done func(created bool, err error)) {
	if err := jn.validSchedule(s); err != nil {
		if done != nil {
			done(false, err)
		}
		return
	}
	id, rec := []byte(s.ID), s.encode()
	var created bool
	jn.enqueue(write{
		apply: func(t Tx) error {
			created = t.Get(BucketSchedules, id) == nil
			return t.Put(BucketSchedules, id, rec)
		},
		reads: []Key{{Bucket: BucketSchedules, Key: id}},
		finish: func(err error) {
			if done != nil {
				done(created && err == nil, err)
			}
		},
		size: len(rec),
	})
}

// RemoveSchedule implements Journal.
func (jn *Core) RemoveSchedule(id string, done func(found bool, err error)) {
	key := []byte(id)
	var found bool
	jn.enqueue(write{
		apply: func(t Tx) error {
			if found = t.Get(BucketSchedules, key) != nil; !found {
				return nil
			}
			return t.Delete(BucketSchedules, key)
		},
		reads: []Key{{Bucket: BucketSchedules, Key: key}},
		finish: func(err error) {
			if done != nil {
				done(found && err == nil, err)
			}
		},
	})
}

// changeSchedule reads one schedule, lets fn change it, and writes it back
// (or deletes it when fn says so). fn refuses with a jobError before it
// changes anything.
func (jn *Core) changeSchedule(id string, reads []Key, fn func(t Tx, s *Schedule) (remove bool, err error), done func(*Schedule, error)) {
	key := []byte(id)
	var out *Schedule
	jn.enqueue(write{
		reads: append(reads, Key{Bucket: BucketSchedules, Key: key}),
		apply: func(t Tx) error {
			rec := t.Get(BucketSchedules, key)
			if rec == nil {
				return jobError{fmt.Errorf("%w: %s", ErrNoSchedule, id)}
			}
			s, err := decodeSchedule(key, rec)
			if err != nil {
				return jobError{err}
			}
			remove, err := fn(t, s)
			if err != nil {
				return err
			}
			out = s
			if remove {
				return t.Delete(BucketSchedules, key)
			}
			return t.Put(BucketSchedules, key, s.encode())
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

// PauseSchedule implements Journal.
func (jn *Core) PauseSchedule(id string, paused bool, done func(*Schedule, error)) {
	jn.changeSchedule(id, nil, func(_ Tx, s *Schedule) (bool, error) {
		s.Paused = paused
		return false, nil
	}, done)
}

// FireSchedule implements Journal.
func (jn *Core) FireSchedule(id string, due, next time.Time, msgid string, done func(j *Job, dup bool, err error)) {
	var job *Job
	var dup bool
	var reads []Key
	if msgid != "" {
		reads = takenReads([]byte(msgid))
	}
	jn.changeSchedule(id, reads, func(t Tx, s *Schedule) (bool, error) {
		if !s.Next.Equal(due) {
			return false, jobError{fmt.Errorf("%w: schedule %s is due at %s, not %s: that fire was made", ErrWrongState,
				id, s.Next.UTC().Format(time.RFC3339Nano), due.UTC().Format(time.RFC3339Nano))}
		}
		if s.Paused {
			return false, jobError{fmt.Errorf("%w: schedule %s is paused", ErrWrongState, id)}
		}
		if msgid != "" {
			j := &Job{MsgID: msgid, Queue: s.Queue, Headers: s.Headers, Payload: s.Payload, Enqueued: time.Now(), State: Pending}
			if err := jn.validate(j); err != nil {
				return false, jobError{err}
			}
			var err error
			if dup, err = jn.store(t, j); err != nil {
				return false, err
			}
			j.PayloadSize = len(j.Payload)
			job = j
			s.Fires++
			s.LastFire = due
			if s.Left > 0 {
				s.Left--
			}
		}
		s.Next = next
		return s.Left == 0 || next.IsZero(), nil
	}, func(_ *Schedule, err error) {
		if done == nil {
			return
		}
		if err != nil {
			job, dup = nil, false
		}
		done(job, dup, err)
	})
}

// store puts a new pending job in tx as Append does, setting its Seq;
// dup when its msgid is stored (or done with its result kept).
func (jn *Core) store(t Tx, j *Job) (dup bool, err error) {
	id := []byte(j.MsgID)
	if dup, err := taken(t, id); dup || err != nil {
		return dup, err
	}
	if j.Seq, err = t.NextSeq(); err != nil {
		return false, err
	}
	if err := t.Put(BucketJobs, id, j.encode()); err != nil {
		return false, err
	}
	return false, t.Put(BucketPending, queueKey(j.Queue, j.Seq), id)
}

// LoadSchedules implements Journal.
func (jn *Core) LoadSchedules(fn func(*Schedule) error) error {
	return jn.view(func(t Tx) error {
		return t.Scan(BucketSchedules, nil, func(k, v []byte) (bool, error) {
			s, err := decodeSchedule(k, v)
			if err != nil {
				return false, fmt.Errorf("journal %s: %w", jn.name, err)
			}
			return true, fn(s)
		})
	})
}

// ListSchedules implements Journal.
func (jn *Core) ListSchedules(after string, limit int) ([]*Schedule, string, error) {
	if limit <= 0 {
		limit = 100
	}
	var out []*Schedule
	next := ""
	err := jn.view(func(t Tx) error {
		var from []byte
		if after != "" {
			from = []byte(after)
		}
		return t.Scan(BucketSchedules, from, func(k, v []byte) (bool, error) {
			switch {
			case string(k) == after:
				return true, nil
			case len(out) == limit:
				next = out[len(out)-1].ID
				return false, nil
			}
			s, err := decodeSchedule(k, v)
			if err != nil {
				return false, fmt.Errorf("journal %s: %w", jn.name, err)
			}
			out = append(out, s)
			return true, nil
		})
	})
	return out, next, err
}

// GetSchedule implements Journal.
func (jn *Core) GetSchedule(id string) (*Schedule, error) {
	var s *Schedule
	err := jn.view(func(t Tx) error {
		rec := t.Get(BucketSchedules, []byte(id))
		if err := t.Err(); err != nil {
			return err
		}
		if rec == nil {
			return fmt.Errorf("%w: %s", ErrNoSchedule, id)
		}
		var err error
		if s, err = decodeSchedule([]byte(id), rec); err != nil {
			return fmt.Errorf("journal %s: %w", jn.name, err)
		}
		return nil
	})
	return s, err
}
