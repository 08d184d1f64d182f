package store

import (
	"fmt"
	"time"

	"github.com/eventmq/emq/migrations"
	bolt "go.etcd.io/bbolt"
)

// validSchedule checks s as validate checks a job: its fires must fit as
// jobs, whatever their msgids.
func (b *Bolt) validSchedule(s *Schedule) error {
	switch size := MaxIDLen + len(s.Queue) + len(s.Headers) + len(s.Payload); {
	case s.ID == "" || len(s.ID) > MaxIDLen:
		return fmt.Errorf("%w: schedule id must be 1 to %d bytes, got %d", ErrBadSchedule, MaxIDLen, len(s.ID))
	case s.Queue == "" || len(s.Queue) > MaxQueueLen:
		return fmt.Errorf("%w: queue name must be 1 to %d bytes, got %d", ErrBadSchedule, MaxQueueLen, len(s.Queue))
	case size > b.opts.MaxJobSize:
		return fmt.Errorf("%w: schedule %s's jobs would be up to %d bytes, over the journal's limit of %d", ErrTooLarge, s.ID, size, b.opts.MaxJobSize)
	}
	return nil
}

// PutSchedule implements Journal.
func (b *Bolt) PutSchedule(s *Schedule, done func(created bool, err error)) {
	if err := b.validSchedule(s); err != nil {
		if done != nil {
			done(false, err)
		}
		return
	}
	id, rec := []byte(s.ID), s.encode()
	var created bool
	b.enqueue(write{
		apply: func(tx *bolt.Tx) error {
			bkt := tx.Bucket(migrations.Schedules)
			created = bkt.Get(id) == nil
			return bkt.Put(id, rec)
		},
		finish: func(err error) {
			if done != nil {
				done(created && err == nil, err)
			}
		},
		size: len(rec),
	})
}

// RemoveSchedule implements Journal.
func (b *Bolt) RemoveSchedule(id string, done func(found bool, err error)) {
	key := []byte(id)
	var found bool
	b.enqueue(write{
		apply: func(tx *bolt.Tx) error {
			bkt := tx.Bucket(migrations.Schedules)
			if found = bkt.Get(key) != nil; !found {
				return nil
			}
			return bkt.Delete(key)
		},
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
func (b *Bolt) changeSchedule(id string, fn func(tx *bolt.Tx, s *Schedule) (remove bool, err error), done func(*Schedule, error)) {
	key := []byte(id)
	var out *Schedule
	b.enqueue(write{
		apply: func(tx *bolt.Tx) error {
			bkt := tx.Bucket(migrations.Schedules)
			rec := bkt.Get(key)
			if rec == nil {
				return jobError{fmt.Errorf("%w: %s", ErrNoSchedule, id)}
			}
			s, err := decodeSchedule(key, rec)
			if err != nil {
				return jobError{err}
			}
			remove, err := fn(tx, s)
			if err != nil {
				return err
			}
			out = s
			if remove {
				return bkt.Delete(key)
			}
			return bkt.Put(key, s.encode())
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
func (b *Bolt) PauseSchedule(id string, paused bool, done func(*Schedule, error)) {
	b.changeSchedule(id, func(_ *bolt.Tx, s *Schedule) (bool, error) {
		s.Paused = paused
		return false, nil
	}, done)
}

// FireSchedule implements Journal.
func (b *Bolt) FireSchedule(id string, due, next time.Time, msgid string, done func(j *Job, dup bool, err error)) {
	var job *Job
	var dup bool
	b.changeSchedule(id, func(tx *bolt.Tx, s *Schedule) (bool, error) {
		if !s.Next.Equal(due) {
			return false, jobError{fmt.Errorf("%w: schedule %s is due at %s, not %s: that fire was made", ErrWrongState,
				id, s.Next.UTC().Format(time.RFC3339Nano), due.UTC().Format(time.RFC3339Nano))}
		}
		if s.Paused {
			return false, jobError{fmt.Errorf("%w: schedule %s is paused", ErrWrongState, id)}
		}
		if msgid != "" {
			j := &Job{MsgID: msgid, Queue: s.Queue, Headers: s.Headers, Payload: s.Payload, Enqueued: time.Now(), State: Pending}
			if err := b.validate(j); err != nil {
				return false, jobError{err}
			}
			var err error
			if dup, err = b.store(tx, j); err != nil {
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
func (b *Bolt) store(tx *bolt.Tx, j *Job) (dup bool, err error) {
	id := []byte(j.MsgID)
	jobs, pending := tx.Bucket(migrations.Jobs), tx.Bucket(migrations.Pending)
	if dup, err := taken(tx, id); dup || err != nil {
		return dup, err
	}
	if j.Seq, err = jobs.NextSequence(); err != nil {
		return false, err
	}
	if err := jobs.Put(id, j.encode()); err != nil {
		return false, err
	}
	return false, pending.Put(queueKey(j.Queue, j.Seq), id)
}

// LoadSchedules implements Journal.
func (b *Bolt) LoadSchedules(fn func(*Schedule) error) error {
	return b.view(func(tx *bolt.Tx) error {
		return tx.Bucket(migrations.Schedules).ForEach(func(k, v []byte) error {
			s, err := decodeSchedule(k, v)
			if err != nil {
				return fmt.Errorf("journal %s: %w", b.path, err)
			}
			return fn(s)
		})
	})
}

// ListSchedules implements Journal.
func (b *Bolt) ListSchedules(after string, limit int) ([]*Schedule, string, error) {
	if limit <= 0 {
		limit = 100
	}
	var out []*Schedule
	next := ""
	err := b.view(func(tx *bolt.Tx) error {
		c := tx.Bucket(migrations.Schedules).Cursor()
		k, v := c.First()
		if after != "" {
			if k, v = c.Seek([]byte(after)); k != nil && string(k) == after {
				k, v = c.Next()
			}
		}
		for ; k != nil; k, v = c.Next() {
			if len(out) == limit {
				next = out[len(out)-1].ID
				return nil
			}
			s, err := decodeSchedule(k, v)
			if err != nil {
				return fmt.Errorf("journal %s: %w", b.path, err)
			}
			out = append(out, s)
		}
		return nil
	})
	return out, next, err
}

// GetSchedule implements Journal.
func (b *Bolt) GetSchedule(id string) (*Schedule, error) {
	var s *Schedule
	err := b.view(func(tx *bolt.Tx) error {
		rec := tx.Bucket(migrations.Schedules).Get([]byte(id))
		if rec == nil {
			return fmt.Errorf("%w: %s", ErrNoSchedule, id)
		}
		var err error
		if s, err = decodeSchedule([]byte(id), rec); err != nil {
			return fmt.Errorf("journal %s: %w", b.path, err)
		}
		return nil
	})
	return s, err
}
