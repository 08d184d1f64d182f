package admin

import (
	"context"
	"errors"
	"time"

	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/group"
	"github.com/eventmq/emq/store"
)

// Live is the API of a broker running in this process, through the
// broker's named API alone.
type Live struct {
	b     *broker.Broker
	group func() GroupInfo // nil: a broker on its own
}

var _ API = (*Live)(nil)

// NewLive is the API of b; group, if not nil, says what b is in its
// replicated group (it leads it).
func NewLive(b *broker.Broker, group func() GroupInfo) *Live { return &Live{b: b, group: group} }

func (l *Live) groupInfo() *GroupInfo {
	if l.group == nil {
		return nil
	}
	g := l.group()
	return &g
}

func (l *Live) Stats(context.Context) (StatsInfo, error) { return statsInfo(l.b, l.groupInfo()), nil }

func (l *Live) Queues(ctx context.Context) ([]broker.QueueInfo, error) { return l.b.Queues(ctx) }

func (l *Live) Workers(ctx context.Context) ([]broker.WorkerInfo, error) { return l.b.Workers(ctx) }

// Overview gathers the dashboard's first page.
func (l *Live) Overview(ctx context.Context) (Overview, error) {
	o := Overview{Time: time.Now(), Mode: "single", Ready: l.b.Serving(), Stats: statsInfo(l.b, l.groupInfo())}
	if l.group != nil {
		o.Mode = group.RoleLeader.String()
	}
	st, err := l.b.State(ctx)
	if err != nil {
		return o, err
	}
	o.Workers, o.Schedulers = st.Workers, st.Schedulers
	if o.Queues, err = l.b.Queues(ctx); o.Queues == nil {
		o.Queues = []broker.QueueInfo{}
	}
	return o, err
}

func (l *Live) Jobs(ctx context.Context, f JobFilter) (JobPage, error) {
	listing, err := l.b.ListJobs(ctx, f.ListOptions(time.Now()), f.State == "inflight")
	if err != nil {
		return JobPage{}, err
	}
	page := JobPage{Next: listing.Next}
	for _, j := range listing.Jobs {
		page.Jobs = append(page.Jobs, NewJobInfo(j, listing.Workers[j.MsgID], false))
	}
	return page, nil
}

// Job shows a job; one in flight with its worker's latest progress.
func (l *Live) Job(ctx context.Context, msgid string, payload bool) (JobInfo, error) {
	j, h, err := l.b.Job(ctx, msgid)
	if err != nil {
		return JobInfo{}, err
	}
	ji := jobInfoWithTrail(j, h.Worker, payload, l.b.Result)
	ji.Progress = h.Progress
	withFamily(&ji, l.b.JournalJob, l.b.Children)
	return ji, nil
}

// CancelJob cancels a job the broker holds pending, delayed or in flight
// (its worker is sent CANCEL) and returns it as it was cancelled.
func (l *Live) CancelJob(ctx context.Context, msgid string) (JobInfo, error) {
	j, err := l.b.Cancel(ctx, msgid, CancelledBy)
	if err != nil {
		return JobInfo{}, err
	}
	return jobInfoWithTrail(j, "", false, l.b.Result), nil
}

// BulkCancel cancels the matching jobs a page at a time, each page's
// writes sharing commits; one finished meanwhile is skipped.
func (l *Live) BulkCancel(ctx context.Context, f JobFilter, confirmed bool) (BulkResult, error) {
	state, inFlightOnly, err := cancelFilter(f)
	if err != nil {
		return BulkResult{}, err
	}
	var keep func(*store.Job) bool
	if inFlightOnly {
		held, err := l.b.InFlight(ctx, f.Queue)
		if err != nil {
			return BulkResult{}, err
		}
		keep = func(j *store.Job) bool { return held[j.MsgID] != "" }
	}
	var act func([]*store.Job) (int, error)
	if confirmed {
		act = func(jobs []*store.Job) (int, error) { return l.b.CancelJobs(ctx, msgids(jobs), CancelledBy) }
	}
	return bulk(ctx, l.list, f, state, keep, act)
}

func (l *Live) Payload(_ context.Context, msgid string) ([]byte, error) { return l.b.Payload(msgid) }
func (l *Live) Result(_ context.Context, msgid string) ([]byte, error)  { return l.b.Result(msgid) }

func (l *Live) RemoveJob(ctx context.Context, msgid string) error { return l.b.RemoveJob(ctx, msgid) }
func (l *Live) RetryJob(ctx context.Context, msgid string) error  { return l.b.RetryDead(ctx, msgid) }

// list pages through the journal.
func (l *Live) list(opts store.ListOptions) (store.Page, error) { return l.b.List(opts) }

// BulkDead's writes of a page share commits.
func (l *Live) BulkDead(ctx context.Context, f JobFilter, remove, confirmed bool) (BulkResult, error) {
	var act func([]*store.Job) (int, error)
	if confirmed {
		act = func(jobs []*store.Job) (int, error) {
			if remove {
				return l.b.RemoveDeadJobs(ctx, msgids(jobs))
			}
			return l.b.RetryDeadJobs(ctx, msgids(jobs))
		}
	}
	return bulk(ctx, l.list, f, store.Dead, nil, act)
}

// BulkRemove removes pending and done jobs one by one, as RemoveJob
// does; pending ones a worker holds are left alone (also one dispatched
// after it was counted).
func (l *Live) BulkRemove(ctx context.Context, f JobFilter, confirmed bool) (BulkResult, error) {
	st, err := bulkState(f)
	if err != nil {
		return BulkResult{}, err
	}
	if st == store.Dead {
		return l.BulkDead(ctx, f, true, confirmed)
	}
	var keep func(*store.Job) bool
	if st == store.Pending { // the journal keeps jobs in flight as pending
		held, err := l.b.InFlight(ctx, f.Queue)
		if err != nil {
			return BulkResult{}, err
		}
		keep = func(j *store.Job) bool { return held[j.MsgID] == "" }
	}
	var act func([]*store.Job) (int, error)
	if confirmed {
		act = func(jobs []*store.Job) (int, error) {
			return removeEach(jobs, func(id string) error {
				if st == store.Pending {
					return l.b.RemoveUnlessHeld(ctx, id)
				}
				return l.b.RemoveJob(ctx, id)
			})
		}
	}
	return bulk(ctx, l.list, f, st, keep, act)
}

// bulkState is the stored state a bulk remove of f acts on; an error
// when f names none (ErrNeedState).
func bulkState(f JobFilter) (store.State, error) {
	switch f.State {
	case "waiting", "pending", "dead", "done", "cancelled":
		st, _ := store.ParseState(f.State)
		return st, nil
	}
	return 0, ErrNeedState
}

// removeEach removes jobs one by one with remove and counts those it
// removed; one gone meanwhile, or dispatched since it was counted, is
// skipped.
func removeEach(jobs []*store.Job, remove func(msgid string) error) (n int, err error) {
	for _, j := range jobs {
		switch err := remove(j.MsgID); {
		case err == nil:
			n++
		case errors.Is(err, store.ErrNotFound), errors.Is(err, broker.ErrHeld):
		default:
			return n, err
		}
	}
	return n, nil
}

func (l *Live) PurgeQueue(ctx context.Context, queue string) (int, error) {
	return l.b.PurgeQueue(ctx, queue)
}

func (l *Live) ChangeQueue(ctx context.Context, queue string, c broker.QueueChange) (broker.QueueInfo, error) {
	s, err := l.b.ChangeQueue(ctx, queue, c)
	return broker.QueueInfo{Name: queue}.WithControls(s), err
}

func (l *Live) Tenants(ctx context.Context, queue string, offset, limit int) (broker.TenantPage, error) {
	return l.b.Tenants(ctx, queue, offset, limit)
}

func (l *Live) ChangeTenant(ctx context.Context, queue, tenant string, c broker.TenantChange) (store.TenantSettings, error) {
	return l.b.ChangeTenant(ctx, queue, tenant, c)
}

func (l *Live) Limiters(ctx context.Context) ([]broker.LimiterInfo, error) { return l.b.Limiters(ctx) }

func (l *Live) SetLimiter(ctx context.Context, name string, s store.LimiterSettings) error {
	return l.b.SetLimiter(ctx, name, s)
}

func (l *Live) RemoveLimiter(ctx context.Context, name string) error {
	return l.b.RemoveLimiter(ctx, name)
}

func (l *Live) Why(ctx context.Context, msgid string) (broker.Why, error) { return l.b.Why(ctx, msgid) }

func (l *Live) Compact(context.Context) (store.CompactStats, error) { return l.b.Compact() }

func (l *Live) Schedules(_ context.Context, after string, limit int) (SchedulePage, error) {
	return schedulePage(l.b.Schedules(after, limit))
}

func (l *Live) Schedule(_ context.Context, id string, payload bool) (ScheduleInfo, error) {
	s, err := l.b.Schedule(id)
	if err != nil {
		return ScheduleInfo{}, err
	}
	return NewScheduleInfo(s, payload), nil
}

// AddSchedule stores a schedule as a SCHEDULE does; the same schedule as
// one kept goes on as it was.
func (l *Live) AddSchedule(ctx context.Context, sp ScheduleSpec) (ScheduleInfo, error) {
	interval, h, payload, err := sp.parts()
	if err != nil {
		return ScheduleInfo{}, err
	}
	s, err := l.b.AddSchedule(ctx, sp.Queue, h, interval, sp.Cron, payload)
	if err != nil {
		return ScheduleInfo{}, err
	}
	return NewScheduleInfo(s, false), nil
}

func (l *Live) RemoveSchedule(ctx context.Context, id string) error {
	return l.b.RemoveSchedule(ctx, id)
}

func (l *Live) PauseSchedule(ctx context.Context, id string, paused bool) error {
	return l.b.PauseSchedule(ctx, id, paused)
}

func (l *Live) Events(ctx context.Context, queue, msgid string) (Events, error) {
	return l.b.Listen(ctx, queue, msgid)
}

// Close does nothing: the broker is its owner's to stop.
func (l *Live) Close() error { return nil }
