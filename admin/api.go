package admin

import (
	"context"
	"errors"
	"io"

	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/store"
)

// API is what an operator may see and do: emq's admin commands, the
// HTTP routes and the dashboard all go through it. It has three
// implementations, which one shared test table checks:
//
//   - Live, in process, on a running broker (through its named API);
//   - Client, over HTTP, on a broker's admin listener (the CLI's);
//   - Offline, on a journal no broker holds (a stopped broker's file,
//     or a group's journal in etcd while no broker leads).
//
// Offline answers what only a running broker knows (workers, jobs in
// flight, counters, events) with ErrNeedsBroker.
type API interface {
	// Stats are the broker's counters, and what it is in a group.
	Stats(ctx context.Context) (StatsInfo, error)
	Queues(ctx context.Context) ([]broker.QueueInfo, error)
	Workers(ctx context.Context) ([]broker.WorkerInfo, error)
	// Overview is the dashboard's first page.
	Overview(ctx context.Context) (Overview, error)

	// Jobs lists a page of jobs; Job shows one, with its trail and, with
	// payload, its payload and a done job's result.
	Jobs(ctx context.Context, f JobFilter) (JobPage, error)
	Job(ctx context.Context, msgid string, payload bool) (JobInfo, error)
	Payload(ctx context.Context, msgid string) ([]byte, error)
	Result(ctx context.Context, msgid string) ([]byte, error)
	RemoveJob(ctx context.Context, msgid string) error
	RetryJob(ctx context.Context, msgid string) error
	// BulkDead retries (or, with remove, deletes) every dead job f
	// matches; not confirmed, it only counts them. BulkRemove deletes
	// every pending (not held), dead or done job f matches (f.State says
	// which), or counts them.
	BulkDead(ctx context.Context, f JobFilter, remove, confirmed bool) (BulkResult, error)
	BulkRemove(ctx context.Context, f JobFilter, confirmed bool) (BulkResult, error)
	// CancelJob cancels a pending, delayed or in-flight job for good (a
	// worker running it is told to stop) and returns it as it was
	// cancelled: store.ErrNotFound for an unknown job, ErrWrongState for
	// one dead, done or cancelled already. It is kept in state cancelled
	// while a done job would be (retain-done); else deleted.
	CancelJob(ctx context.Context, msgid string) (JobInfo, error)
	// BulkCancel cancels every pending, delayed and in-flight job f
	// matches (f.State "" or pending; inflight: those in flight alone);
	// not confirmed, it only counts them.
	BulkCancel(ctx context.Context, f JobFilter, confirmed bool) (BulkResult, error)
	PurgeQueue(ctx context.Context, queue string) (int, error)
	ChangeQueue(ctx context.Context, queue string, c broker.QueueChange) (broker.QueueInfo, error)

	// Tenants lists a page of queue's tenants, the largest backlog first
	// (offline: those with settings of their own, no counts). ChangeTenant
	// changes one tenant's own settings (tenant "": the jobs without
	// one) and returns them as stored.
	Tenants(ctx context.Context, queue string, offset, limit int) (broker.TenantPage, error)
	ChangeTenant(ctx context.Context, queue, tenant string, c broker.TenantChange) (store.TenantSettings, error)
	// Limiters lists the named limiters (offline: without counts);
	// SetLimiter makes or replaces one; RemoveLimiter deletes one,
	// store.ErrNotFound when there is none.
	Limiters(ctx context.Context) ([]broker.LimiterInfo, error)
	SetLimiter(ctx context.Context, name string, s store.LimiterSettings) error
	RemoveLimiter(ctx context.Context, name string) error
	// Why says why a job is where it is (broker.Why); an unknown msgid is
	// store.ErrNotFound, naming it.
	Why(ctx context.Context, msgid string) (broker.Why, error)

	Compact(ctx context.Context) (store.CompactStats, error)

	// Rekey starts sealing again, under the journal's first key, what it
	// holds under older keys or in clear, at most rate values a second
	// (0: the default, or the rate of the rekey under way), or sets the
	// rate of the one under way; it returns at once (store.Core.Rekey).
	// A journal without keys is store.ErrNoKeys. RekeyStatus is its
	// progress: the rekey under way, or the last one. Offline the rekey
	// runs until Close (it goes on at the journal's next open for
	// writing); over HTTP Rekey needs the full admin token.
	Rekey(ctx context.Context, rate int) (store.RekeyStatus, error)
	RekeyStatus(ctx context.Context) (store.RekeyStatus, error)

	Schedules(ctx context.Context, after string, limit int) (SchedulePage, error)
	Schedule(ctx context.Context, id string, payload bool) (ScheduleInfo, error)
	AddSchedule(ctx context.Context, sp ScheduleSpec) (ScheduleInfo, error)
	RemoveSchedule(ctx context.Context, id string) error
	PauseSchedule(ctx context.Context, id string, paused bool) error

	// Batches lists a page of batches; Batch shows one; OpenBatch opens
	// or closes one (made if it is not known): a batch closed with
	// nothing left to run is complete and releases what waits for it.
	Batches(ctx context.Context, after string, limit int) (BatchPage, error)
	Batch(ctx context.Context, name string) (BatchInfo, error)
	OpenBatch(ctx context.Context, name string, open bool) (BatchInfo, error)

	// Backup writes the journal, as one moment, to w (store.Backuper's
	// format), at most pace bytes a second (0: as fast as it goes): the
	// broker serves meanwhile. Over HTTP it needs the full admin token.
	Backup(ctx context.Context, w io.Writer, pace int64) (store.BackupStats, error)

	// Events follows what happens to the jobs of queue and msgid ("" =
	// all) until the stream is closed, falls behind, or the broker stops.
	Events(ctx context.Context, queue, msgid string) (Events, error)

	// Close lets go of what the API holds (an offline journal).
	Close() error
}

// Events is a stream of events (broker.Events in process, Server-Sent
// Events over HTTP).
type Events interface {
	// Next returns the events that came since the last call, waiting for
	// one if none has; after the last, why the stream ended
	// (broker.ErrDropped, broker.ErrStopped).
	Next(ctx context.Context) ([]broker.Event, error)
	Close()
}

// ErrNeedsBroker answers, offline, what only a running broker knows.
var ErrNeedsBroker = errors.New("only a running broker knows this: use --admin instead of --data-dir")
