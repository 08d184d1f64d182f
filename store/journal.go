package store

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Journal is the durable store of jobs. The broker writes through it and
// the admin tools read and repair through it. No bbolt type appears here:
// Bolt implements it in one file, and any other backend that passes the
// conformance suite (package storetest) can stand in for it.
//
// Writes are asynchronous: each call queues its change and returns at
// once; done is called after the change is durable (fsynced, or held by a
// majority), or has failed, with the outcome. Writes are applied in the
// order they were made. done runs on the journal's goroutine: it must not
// block, and must not wait for another write. A nil done is allowed. Wait
// turns a write into a blocking call.
//
// Every refusal is one of the errors below, matched with errors.Is:
// ErrNotFound, ErrWrongState, ErrInvalidJob, ErrTooLarge and ErrBadFilter
// concern one call and change nothing; ErrClosed, ErrReadOnly and
// ErrFenced say the journal takes no more writes. Anything else is a
// failure of the storage itself (I/O, a damaged record: ErrCorrupt).
type Journal interface {
	// Append stores a new pending job at the tail of its queue. dup reports
	// that the msgid was already stored (pending or dead), or that its job
	// is done and its result still kept, or done within the hold of its
	// unique key: nothing changed. A job with a unique key (Job.Unique)
	// that another job of its queue holds is refused with a *UniqueError. Once the job is
	// stored, Append sets j.Seq before it calls done, so the caller must
	// leave j alone until then. A bad msgid or queue name is
	// ErrInvalidJob; a job over the backend's size limit, ErrTooLarge.
	Append(j *Job, done func(dup bool, err error))
	// AppendBulk stores jobs as Append stores each, in one transaction:
	// all of them or none. dups[i] reports job i stored already (as
	// Append's dup: nothing changed for it; a msgid twice in the bulk is
	// stored once, the second a dup). A refusal of any job refuses the
	// bulk: a *BulkError naming the first job refused, its index and why
	// (its error wraps Append's: *UniqueError, ErrInvalidJob,
	// ErrTooLarge, the workflow errors...), and nothing is stored. Two
	// jobs of one queue with the same unique key refuse the bulk with a
	// *UniqueError naming the first as holder. The jobs of one queue
	// keep their order in it, each with its j.Seq (and State, Waits) set
	// before done, as Append sets them: the caller leaves the jobs alone
	// until then. A job may wait for (After) one before it in the bulk,
	// or join a batch with others of it. An empty bulk stores nothing.
	//
	// A bulk is one write: it shares its commit (one fsync) with the
	// other writes queued, and a backend that bounds a write bounds it.
	// On etcd a bulk is one transaction: at most --max-txn-ops keys (128
	// by default: 128 jobs, a job with a unique key two, a workflow's
	// more) and --max-request-bytes less 8 KiB (1.5 MiB by default);
	// one over is refused with ErrTooLarge naming the limit, nothing
	// stored (Core.MaxBulk gives the figure). bbolt bounds only its
	// jobs' sizes (10,000 jobs of 100 bytes: one commit).
	AppendBulk(jobs []*Job, done func(dups []bool, err error))
	// Complete removes a job its worker replied to; when keepUntil is set
	// the result is kept until then. No ACK waits for it, so it may wait a
	// little (Options.LazyDelay) to share the next Append's commit.
	//
	// The trail arguments of Complete, RecordAttempt, Bury and Revive are
	// events to add to the job's trail with the change (see Job.Trail);
	// nil adds none. Complete keeps them only with a keep time. A
	// backend that bounds one write (etcd: one request) does not keep a
	// result too large to store beside its job: the job is completed
	// without it.
	Complete(msgid string, result []byte, keepUntil time.Time, trail []TrailEvent, done func(found bool, err error))
	// Remove deletes a job in any state (an admin's action).
	Remove(msgid string, done func(found bool, err error))
	// RecordAttempt counts a delivery that ended without a REPLY, with its
	// reason, and when the job may run again. ErrNotFound when the job is
	// not stored, ErrWrongState when it is not pending.
	RecordAttempt(msgid, reason string, notBefore time.Time, trail []TrailEvent, done func(*Job, error))
	// Bury counts a last attempt and moves the job to the dead letters.
	// ErrNotFound, or ErrWrongState when it is not pending (dead, done).
	Bury(msgid, reason string, trail []TrailEvent, done func(*Job, error))
	// Revive brings a dead job back to the tail of its queue with its
	// attempts reset. ErrNotFound, or ErrWrongState when it is not dead.
	Revive(msgid string, trail []TrailEvent, done func(*Job, error))
	// Cancel takes a pending or waiting job out of its queue for good,
	// its unique key let go. With keepUntil set it is kept until then in state
	// Cancelled, with the trail events added, as Complete keeps a done
	// job; else it is deleted. done gets the job as it was cancelled.
	// ErrNotFound, or ErrWrongState when it is not pending (dead, done,
	// cancelled).
	Cancel(msgid string, keepUntil time.Time, trail []TrailEvent, done func(*Job, error))
	// Import stores a job taken from another journal as it was there
	// (pending or dead, with its attempts and trail); dup as Append's.
	Import(j *Job, done func(dup bool, err error))
	// PurgeQueue deletes every pending and waiting job of a queue.
	PurgeQueue(queue string, done func(removed int, err error))
	// ExpireResults deletes results whose time is up at now, and reports
	// how many it deleted.
	ExpireResults(now time.Time, done func(removed int, err error))

	// PutSchedule stores s, or replaces the schedule of its ID; created
	// reports a new one. An empty ID or queue, or one over its limit, is
	// ErrBadSchedule; one whose fires (with a msgid of up to MaxIDLen
	// bytes) would be over the job size limit, ErrTooLarge.
	PutSchedule(s *Schedule, done func(created bool, err error))
	// RemoveSchedule deletes a schedule; found is false when there was
	// none.
	RemoveSchedule(id string, done func(found bool, err error))
	// PauseSchedule pauses or resumes a schedule (ErrNoSchedule).
	PauseSchedule(id string, paused bool, done func(*Schedule, error))
	// FireSchedule makes the fire of schedule id due at due, in one
	// transaction: a new pending job msgid, made of the schedule's queue,
	// headers and payload (as Append would store it; msgid "" skips this
	// fire, making no job), the fire counted (Fires, LastFire, one fewer
	// Left), and Next moved to next. A schedule with no fires left, or
	// with a zero next, is removed. due must be the schedule's Next, or
	// the fire was made already (or the schedule changed since), and the
	// schedule must not be paused: else ErrWrongState, nothing changed;
	// no such schedule is ErrNotFound.
	// done gets the job stored, with dup when its msgid was stored
	// already (no new job), or nil when the fire was skipped.
	FireSchedule(id string, due, next time.Time, msgid string, done func(j *Job, dup bool, err error))

	// PutQueueSettings keeps an operator's controls of a queue, zero
	// settings too (they say "no controls", whatever a default would).
	// Bad settings or a bad queue name are ErrBadSettings.
	PutQueueSettings(queue string, s QueueSettings, done func(error))
	// PutTenantSettings keeps an operator's settings of one tenant of a
	// queue (tenant "": its jobs without a tenant); zero settings delete
	// them (the tenant has the queue's defaults again). Bad settings, a
	// queue name of not 1 to MaxQueueLen bytes or a tenant name over
	// MaxTenantLen are ErrBadSettings.
	PutTenantSettings(queue, tenant string, s TenantSettings, done func(error))
	// PutLimiter keeps a named limiter, or replaces the one of its name.
	// Bad settings (or none: a limiter must limit something) or a name
	// of not 1 to MaxLimiterLen bytes are ErrBadSettings.
	PutLimiter(name string, s LimiterSettings, done func(error))
	// RemoveLimiter deletes a limiter; found is false when there was
	// none.
	RemoveLimiter(name string, done func(found bool, err error))

	// Load calls fn for every pending job, queue by queue, each queue in
	// FIFO order, without holding them all in memory, and without their
	// payloads (Payload is nil, PayloadSize set): read those with Payloads
	// when they are needed.
	Load(fn func(*Job) error) error
	// Payloads reads the payloads of the jobs msgids names, in one read,
	// and calls fn for each in order with a copy the caller keeps, or
	// with the item's error (ErrNotFound when the job is not stored). The
	// returned error is the read's as a whole; fn is then not called for
	// the rest.
	Payloads(msgids []string, fn func(i int, payload []byte, err error)) error
	// Get returns one job; ErrNotFound when it is not stored.
	Get(msgid string) (*Job, error)
	// List returns one page of jobs. A cursor that no listing gave, one
	// that does not fit the state asked for, or an unknown state, is
	// ErrBadFilter.
	List(opts ListOptions) (Page, error)
	// Counts returns the number of jobs per queue and state: of the
	// states given, or of every state when none is.
	Counts(only ...State) ([]Count, error)
	// LoadSchedules calls fn for every schedule, by ID.
	LoadSchedules(fn func(*Schedule) error) error
	// ListSchedules returns up to limit schedules (0 = 100) whose IDs
	// come after after, by ID, and the after of the next page ("" = no
	// more).
	ListSchedules(after string, limit int) ([]*Schedule, string, error)
	// GetSchedule returns one schedule; ErrNoSchedule when there is none.
	GetSchedule(id string) (*Schedule, error)
	// Result returns a kept result; ErrNotFound when there is none (or its
	// time is up).
	Result(msgid string) ([]byte, error)
	// QueueSettings returns the controls kept for each queue that has any.
	QueueSettings() (map[string]QueueSettings, error)
	// TenantSettings returns the settings kept for each tenant that has
	// any: queue -> tenant -> settings.
	TenantSettings() (map[string]map[string]TenantSettings, error)
	// Limiters returns every limiter by name.
	Limiters() (map[string]LimiterSettings, error)

	// Workflows (workflow.go). Append stores a job with After or
	// AfterBatch as Waiting when it has something to wait for (it sets
	// j.State and j.Waits before done), or refuses it with
	// ErrUnknownParent, ErrParentFailed or ErrUnknownBatch.
	//
	// Follow sets fn to be told, after each commit, of the jobs it
	// released (now pending) or cancelled (a job they waited for failed);
	// fn runs on the committer and must not block. Jobs it cancels are
	// kept keep long, as Cancel keeps them (0: deleted).
	Follow(fn func(WorkflowChange), keep time.Duration)
	// OpenBatch opens (open) or closes a batch, made if it is not known;
	// a batch closed with nothing left to run is complete and releases
	// what waits for it. A bad name is ErrInvalidJob.
	OpenBatch(name string, open bool, done func(*Batch, error))
	// GetBatch returns a batch; ErrNotFound when it is not known.
	GetBatch(name string) (*Batch, error)
	// ListBatches returns up to limit batches (0 = 100) whose names come
	// after after, by name, and the after of the next page ("" = none).
	ListBatches(after string, limit int) ([]*Batch, string, error)
	// Children returns up to limit (0 = all) of the jobs that wait for
	// msgid.
	Children(msgid string, limit int) ([]string, error)

	// SetKeys makes k the keys of a journal encrypted at rest: its first
	// key seals what is written from now on. Keys without one the journal
	// still needs are refused, naming it (rekey.go).
	SetKeys(k *Keyring) error
	// Rekey seals again, under the first key and in the background, what
	// is stored under older keys, rate values a second at most (0: the
	// default); RekeyStatus tells how far it is.
	Rekey(rate int) (RekeyStatus, error)
	RekeyStatus() RekeyStatus

	// Close finishes the queued writes and closes the journal. Writes
	// made after it fail with ErrClosed.
	Close() error
}

// Compactor is a journal that can reclaim the space of deleted jobs (a
// bbolt file never shrinks by itself). Not every backend needs it: callers
// check with a type assertion and answer errors.ErrUnsupported otherwise.
type Compactor interface {
	// Compact copies the live data to fresh storage and swaps it in.
	Compact() (CompactStats, error)
}

// ListOptions filter and page a listing.
type ListOptions struct {
	Queue string // "" = every queue
	State State  // 0 = pending, then dead
	After string // the Next of the previous page; "" = from the start
	Limit int    // jobs per page; 0 = 100

	// Filters: a job is listed when it matches every one that is set.
	MsgIDPrefix    string    // its msgid starts with this
	Header         string    // an item of its headers: "key" (any value) or "key:value"
	Error          string    // its last error contains this
	EnqueuedBefore time.Time // stored before this
	EnqueuedAfter  time.Time // stored after this

	// NoPayloads leaves the payloads out (PayloadSize is set), for a
	// caller that wants the jobs, not what they carry.
	NoPayloads bool

	// MaxScan bounds how many jobs one call looks at (0 = 100,000), so
	// that a filter matching few of many jobs answers in bounded time: the
	// page may then hold fewer than Limit jobs, with Next set to go on.
	MaxScan int
}

// filtered reports whether o has any filter set.
func (o ListOptions) filtered() bool {
	return o.MsgIDPrefix != "" || o.Header != "" || o.Error != "" || !o.EnqueuedBefore.IsZero() || !o.EnqueuedAfter.IsZero()
}

// Matches reports whether j passes o's filters (not Queue and State).
func (o ListOptions) Matches(j *Job) bool {
	switch {
	case !strings.HasPrefix(j.MsgID, o.MsgIDPrefix),
		o.Error != "" && !strings.Contains(j.LastError, o.Error),
		!o.EnqueuedBefore.IsZero() && !j.Enqueued.Before(o.EnqueuedBefore),
		!o.EnqueuedAfter.IsZero() && !j.Enqueued.After(o.EnqueuedAfter):
		return false
	case o.Header == "":
		return true
	}
	for item := range strings.SplitSeq(j.Headers, ",") {
		if item == o.Header || !strings.Contains(o.Header, ":") && strings.HasPrefix(item, o.Header+":") {
			return true
		}
	}
	return false
}

// Page is one page of a listing.
type Page struct {
	Jobs []*Job
	Next string // pass as After for the next page; "" = no more
}

// Count is the number of jobs of one queue in each state.
type Count struct {
	Queue     string
	Waiting   int // for other jobs or a batch (workflow.go)
	Pending   int
	Dead      int
	Done      int // kept with their result (Complete with a keep time)
	Cancelled int // kept after a Cancel with a keep time
}

// CompactStats tells what a compaction did.
type CompactStats struct {
	Before, After int64 // file sizes in bytes
}

// Errors of the journal, matched with errors.Is. Each error a journal
// returns wraps one of them, or is a failure of the storage itself.
var (
	// Refusals of one call; nothing was changed.
	ErrNotFound   = errors.New("no such job")
	ErrWrongState = errors.New("job is in the wrong state for this change")
	ErrInvalidJob = errors.New("invalid job")
	ErrTooLarge   = errors.New("job is over the journal's size limit")
	ErrBadFilter  = errors.New("bad listing filter or cursor")
	// ErrDuplicate: another job holds the unique key (a *UniqueError
	// says which).
	ErrDuplicate = errors.New("another job holds the unique key")

	// The same refusals about a schedule: errors.Is matches them with
	// ErrNotFound and ErrInvalidJob too.
	ErrNoSchedule  error = kindOf{"no such schedule", ErrNotFound}
	ErrBadSchedule error = kindOf{"invalid schedule", ErrInvalidJob}
	// ErrBadSettings: queue controls out of range (errors.Is matches
	// ErrInvalidJob too).
	ErrBadSettings error = kindOf{"invalid queue settings", ErrInvalidJob}

	// The journal takes no more writes.
	ErrClosed   = errors.New("journal is closed")
	ErrReadOnly = errors.New("journal is open read-only")
	// ErrFenced: this process can no longer write as the journal's owner
	// (another broker took over, or its lease ended). A broker that gets
	// it stops serving.
	ErrFenced = errors.New("journal is fenced: this broker may no longer write to it")

	// Opening fails.
	ErrLocked  = errors.New("journal file is locked by another process")
	ErrCorrupt = errors.New("journal is damaged (or the file is not a bbolt file)")
	ErrTooNew  = errors.New("journal schema is newer than this binary knows")
)

// UniqueError refuses an Append whose unique key another job of its
// queue holds; errors.Is matches it with ErrDuplicate.
type UniqueError struct {
	Queue, Key string
	Holder     string // the msgid of the job that holds the key
}

func (e *UniqueError) Error() string {
	return fmt.Sprintf("queue %q: unique key %q is held by job %s", e.Queue, e.Key, e.Holder)
}

// Is matches ErrDuplicate.
func (e *UniqueError) Is(target error) bool { return target == ErrDuplicate }

// kindOf is an error with its own text that errors.Is also matches with
// a more general one.
type kindOf struct {
	text string
	kind error
}

func (e kindOf) Error() string        { return e.text }
func (e kindOf) Is(target error) bool { return target == e.kind }

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
