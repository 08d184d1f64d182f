package store

import (
	"errors"
	"time"

	"github.com/eventmq/emq/migrations"
)

// Journal is the durable store of jobs. The broker writes through it and
// the admin tools read and repair through it. No bbolt type appears here,
// so another backend (etcd) can implement it too.
//
// Writes are asynchronous: each call queues its change and returns at
// once; done is called after the change is durable (fsynced), or has
// failed, with the outcome. Writes are applied in the order they were
// made. done runs on the journal's goroutine: it must not block, and must
// not wait for another write. A nil done is allowed. Wait turns a write
// into a blocking call.
type Journal interface {
	// Append stores a new pending job at the tail of its queue. dup reports
	// that the msgid was already stored (pending or dead), or that its job
	// is done and its result still kept: nothing changed. Append sets j.Seq.
	Append(j *Job, done func(dup bool, err error))
	// Complete removes a job its worker replied to; when keepUntil is set
	// the result is kept until then. No ACK waits for it, so it may wait a
	// little (Options.LazyDelay) to share the next Append's commit.
	Complete(msgid string, result []byte, keepUntil time.Time, done func(found bool, err error))
	// Remove deletes a job in any state (an admin's action).
	Remove(msgid string, done func(found bool, err error))
	// RecordAttempt counts a delivery that ended without a REPLY, with its
	// reason, and when the job may run again.
	RecordAttempt(msgid, reason string, notBefore time.Time, done func(*Job, error))
	// Bury counts a last attempt and moves the job to the dead letters.
	Bury(msgid, reason string, done func(*Job, error))
	// Revive brings a dead job back to the tail of its queue with its
	// attempts reset.
	Revive(msgid string, done func(*Job, error))
	// PurgeQueue deletes every pending job of a queue.
	PurgeQueue(queue string, done func(removed int, err error))
	// ExpireResults deletes results whose time is up.
	ExpireResults(now time.Time, done func(removed int, err error))

	// Load calls fn for every pending job, queue by queue, each queue in
	// FIFO order, without holding them all in memory.
	Load(fn func(*Job) error) error
	// Get returns one job; ErrNotFound when it is not stored.
	Get(msgid string) (*Job, error)
	// List returns one page of jobs.
	List(opts ListOptions) (Page, error)
	// Counts returns the number of jobs per queue and state.
	Counts() ([]Count, error)
	// Result returns a kept result; ErrNotFound when there is none (or its
	// time is up).
	Result(msgid string) ([]byte, error)

	// Compact copies the live data to a fresh file and swaps it in.
	Compact() (CompactStats, error)
	// Close finishes the queued writes and closes the journal.
	Close() error
}

// ListOptions filter and page a listing.
type ListOptions struct {
	Queue string // "" = every queue
	State State  // 0 = pending, then dead
	After string // the Next of the previous page; "" = from the start
	Limit int    // jobs per page; 0 = 100
}

// Page is one page of a listing.
type Page struct {
	Jobs []*Job
	Next string // pass as After for the next page; "" = no more
}

// Count is the number of jobs of one queue in each state.
type Count struct {
	Queue   string
	Pending int
	Dead    int
}

// CompactStats tells what a compaction did.
type CompactStats struct {
	Before, After int64 // file sizes in bytes
}

// Errors of the journal, matched with errors.Is.
var (
	ErrNotFound   = errors.New("no such job")
	ErrClosed     = errors.New("journal is closed")
	ErrInvalidJob = errors.New("invalid job")
	ErrLocked     = errors.New("journal file is locked by another process")
	ErrCorrupt    = errors.New("journal file is not a bbolt file or is damaged")
	ErrTooNew     = migrations.ErrTooNew
)

// Wait runs one asynchronous write and waits for its outcome:
//
//	dup, err := store.Wait(func(done func(bool, error)) { j.Append(job, done) })
func Wait[T any](write func(done func(T, error))) (T, error) {
	type outcome struct {
		v   T
		err error
	}
	ch := make(chan outcome, 1)
	write(func(v T, err error) { ch <- outcome{v, err} })
	o := <-ch
	return o.v, o.err
}
