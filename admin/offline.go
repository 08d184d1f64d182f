package admin

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/store"
)

// Offline is the API on a journal no broker holds: a stopped broker's
// file (boltstore), or a group's journal in etcd while no broker of the
// group leads (group.OpenJournal). Its writes go to the journal
// directly; the broker that opens it next replays them. What only a
// running broker knows is ErrNeedsBroker.
type Offline struct {
	j       store.Journal
	release func() // after the journal's Close: ends what opening it held
}

var _ API = (*Offline)(nil)

// NewOffline is the API on j; Close closes j, then calls release (if
// not nil).
func NewOffline(j store.Journal, release func()) *Offline { return &Offline{j: j, release: release} }

func (o *Offline) Stats(context.Context) (StatsInfo, error) { return StatsInfo{}, ErrNeedsBroker }

func (o *Offline) Queues(context.Context) ([]broker.QueueInfo, error) {
	return broker.StoredQueues(o.j)
}

func (o *Offline) Workers(context.Context) ([]broker.WorkerInfo, error) { return nil, ErrNeedsBroker }

func (o *Offline) Overview(context.Context) (Overview, error) { return Overview{}, ErrNeedsBroker }

func (o *Offline) Jobs(_ context.Context, f JobFilter) (JobPage, error) {
	if f.State == "inflight" {
		return JobPage{}, ErrNeedsBroker
	}
	p, err := o.j.List(f.ListOptions(time.Now()))
	if err != nil {
		return JobPage{}, err
	}
	page := JobPage{Next: p.Next}
	for _, j := range p.Jobs {
		page.Jobs = append(page.Jobs, NewJobInfo(j, "", false))
	}
	return page, nil
}

func (o *Offline) Job(_ context.Context, msgid string, payload bool) (JobInfo, error) {
	j, err := o.j.Get(msgid)
	if err != nil {
		return JobInfo{}, err
	}
	ji := jobInfoWithTrail(j, "", payload, o.j.Result)
	withFamily(&ji, o.j.Get, o.j.Children)
	return ji, nil
}

func (o *Offline) Payload(_ context.Context, msgid string) ([]byte, error) {
	j, err := o.j.Get(msgid)
	if err != nil {
		return nil, err
	}
	return j.Payload, nil
}

func (o *Offline) Result(_ context.Context, msgid string) ([]byte, error) { return o.j.Result(msgid) }

func (o *Offline) RemoveJob(_ context.Context, msgid string) error {
	found, err := store.Wait(func(done func(bool, error)) { o.j.Remove(msgid, done) })
	if err == nil && !found {
		err = fmt.Errorf("%w: %s", store.ErrNotFound, msgid)
	}
	return err
}

func (o *Offline) RetryJob(_ context.Context, msgid string) error {
	_, err := store.Wait(func(done func(*store.Job, error)) { o.j.Revive(msgid, broker.AdminRevived(), done) })
	return err
}

// CancelJob cancels a pending job (offline, a job in flight is pending
// too). No broker runs to say how long its done jobs are kept
// (result-ttl), so the cancelled job is deleted, not kept: the JobInfo
// returned is the last of it.
func (o *Offline) CancelJob(_ context.Context, msgid string) (JobInfo, error) {
	j, err := store.Wait(func(done func(*store.Job, error)) {
		o.j.Cancel(msgid, time.Time{}, broker.CancelledBy(CancelledBy), done)
	})
	if err != nil {
		return JobInfo{}, err
	}
	return jobInfoWithTrail(j, "", false, o.j.Result), nil
}

// BulkCancel cancels the matching pending jobs, a page at a time, each
// page's writes queued at once; like CancelJob it keeps none. Jobs in
// flight alone (state inflight) only a running broker knows.
func (o *Offline) BulkCancel(ctx context.Context, f JobFilter, confirmed bool) (BulkResult, error) {
	state, inFlightOnly, err := cancelFilter(f)
	switch {
	case err != nil:
		return BulkResult{}, err
	case inFlightOnly:
		return BulkResult{}, ErrNeedsBroker
	}
	var act func([]*store.Job) (int, error)
	if confirmed {
		act = func(jobs []*store.Job) (int, error) {
			errs := make(chan error, len(jobs))
			trail := broker.CancelledBy(CancelledBy)
			for _, j := range jobs {
				o.j.Cancel(j.MsgID, time.Time{}, trail, func(_ *store.Job, err error) { errs <- err })
			}
			return tally(len(jobs), errs)
		}
	}
	return bulk(ctx, o.j.List, f, state, nil, act)
}

// BulkDead retries or removes the matching dead jobs, a page at a time,
// each page's writes queued at once.
func (o *Offline) BulkDead(ctx context.Context, f JobFilter, remove, confirmed bool) (BulkResult, error) {
	var act func([]*store.Job) (int, error)
	if confirmed {
		act = func(jobs []*store.Job) (int, error) {
			errs := make(chan error, len(jobs))
			for _, j := range jobs {
				if remove {
					o.j.Remove(j.MsgID, func(found bool, err error) {
						if err == nil && !found {
							err = broker.ErrGone
						}
						errs <- err
					})
				} else {
					o.j.Revive(j.MsgID, broker.AdminRevived(), func(_ *store.Job, err error) { errs <- err })
				}
			}
			return tally(len(jobs), errs)
		}
	}
	return bulk(ctx, o.j.List, f, store.Dead, nil, act)
}

// tally counts n writes' outcomes: how many succeeded, and the first
// refusal other than a job gone or changed meanwhile.
func tally(n int, errs <-chan error) (int, error) {
	done := 0
	var first error
	for range n {
		switch err := <-errs; {
		case err == nil:
			done++
		case first == nil && !broker.Gone(err):
			first = err
		}
	}
	return done, first
}

func (o *Offline) BulkRemove(ctx context.Context, f JobFilter, confirmed bool) (BulkResult, error) {
	st, err := bulkState(f)
	if err != nil {
		return BulkResult{}, err
	}
	if st == store.Dead {
		return o.BulkDead(ctx, f, true, confirmed)
	}
	var act func([]*store.Job) (int, error)
	if confirmed {
		act = func(jobs []*store.Job) (int, error) {
			return removeEach(jobs, func(id string) error { return o.RemoveJob(ctx, id) })
		}
	}
	return bulk(ctx, o.j.List, f, st, nil, act)
}

func (o *Offline) PurgeQueue(_ context.Context, queue string) (int, error) {
	return store.Wait(func(done func(int, error)) { o.j.PurgeQueue(queue, done) })
}

// ChangeQueue changes a queue's stored controls; the broker that opens
// the journal next applies them.
func (o *Offline) ChangeQueue(_ context.Context, queue string, c broker.QueueChange) (broker.QueueInfo, error) {
	controls, err := o.j.QueueSettings()
	if err != nil {
		return broker.QueueInfo{}, err
	}
	s := c.Apply(controls[queue])
	if _, err := store.Wait(func(done func(struct{}, error)) {
		o.j.PutQueueSettings(queue, s, func(err error) { done(struct{}{}, err) })
	}); err != nil {
		return broker.QueueInfo{}, err
	}
	return broker.QueueInfo{Name: queue}.WithControls(s), nil
}

// Tenants lists the tenants of queue with settings of their own, by
// name, with the limits that apply to them: what the journal holds (how
// many jobs each has only a running broker knows).
func (o *Offline) Tenants(_ context.Context, queue string, offset, limit int) (broker.TenantPage, error) {
	if limit <= 0 {
		limit = 100
	}
	all, err := o.j.TenantSettings()
	if err != nil {
		return broker.TenantPage{}, err
	}
	controls, err := o.j.QueueSettings()
	if err != nil {
		return broker.TenantPage{}, err
	}
	q := controls[queue]
	var ts []broker.TenantInfo
	for name, own := range all[queue] {
		t := broker.TenantInfo{Name: name, Own: own, Concurrency: q.TenantConcurrency, Rate: q.TenantRate,
			Burst: q.TenantBurst, Weight: max(1, own.Weight)}
		if own.Concurrency != nil {
			t.Concurrency = *own.Concurrency
		}
		if own.Rate != nil {
			t.Rate = *own.Rate
		}
		if own.Burst != nil {
			t.Burst = *own.Burst
		}
		ts = append(ts, t)
	}
	sort.Slice(ts, func(i, k int) bool { return ts[i].Name < ts[k].Name })
	page := broker.TenantPage{Total: len(ts)}
	if offset < len(ts) {
		page.Tenants = ts[offset:min(len(ts), offset+limit)]
		if offset+limit < len(ts) {
			page.Next = offset + limit
		}
	}
	return page, nil
}

// ChangeTenant changes a tenant's stored settings; the broker that opens
// the journal next applies them.
func (o *Offline) ChangeTenant(_ context.Context, queue, tenant string, c broker.TenantChange) (store.TenantSettings, error) {
	all, err := o.j.TenantSettings()
	if err != nil {
		return store.TenantSettings{}, err
	}
	s, err := c.Apply(all[queue][tenant])
	if err != nil {
		return store.TenantSettings{}, err
	}
	if _, err := store.Wait(func(done func(struct{}, error)) {
		o.j.PutTenantSettings(queue, tenant, s, func(err error) { done(struct{}{}, err) })
	}); err != nil {
		return store.TenantSettings{}, err
	}
	return s, nil
}

// Limiters lists the stored limiters, by name (what waits for them only
// a running broker knows).
func (o *Offline) Limiters(context.Context) ([]broker.LimiterInfo, error) {
	stored, err := o.j.Limiters()
	if err != nil {
		return nil, err
	}
	out := make([]broker.LimiterInfo, 0, len(stored))
	for name, s := range stored {
		out = append(out, broker.LimiterInfo{Name: name, LimiterSettings: s})
	}
	sort.Slice(out, func(i, k int) bool { return out[i].Name < out[k].Name })
	return out, nil
}

func (o *Offline) SetLimiter(_ context.Context, name string, s store.LimiterSettings) error {
	_, err := store.Wait(func(done func(struct{}, error)) {
		o.j.PutLimiter(name, s, func(err error) { done(struct{}{}, err) })
	})
	return err
}

func (o *Offline) RemoveLimiter(_ context.Context, name string) error {
	found, err := store.Wait(func(done func(bool, error)) { o.j.RemoveLimiter(name, done) })
	if err == nil && !found {
		err = fmt.Errorf("limiter %q: %w", name, store.ErrNotFound)
	}
	return err
}

// Why needs a running broker: where a job waits is the broker's.
func (o *Offline) Why(context.Context, string) (broker.Why, error) {
	return broker.Why{}, ErrNeedsBroker
}

func (o *Offline) Compact(context.Context) (store.CompactStats, error) { return broker.Compact(o.j) }

func (o *Offline) Schedules(_ context.Context, after string, limit int) (SchedulePage, error) {
	return schedulePage(o.j.ListSchedules(after, limit))
}

func (o *Offline) Schedule(_ context.Context, id string, payload bool) (ScheduleInfo, error) {
	s, err := o.j.GetSchedule(id)
	if err != nil {
		return ScheduleInfo{}, err
	}
	return NewScheduleInfo(s, payload), nil
}

// AddSchedule stores a schedule for the broker to keep when it starts;
// the same schedule as one stored is left as it is, as a running broker
// leaves it.
func (o *Offline) AddSchedule(_ context.Context, sp ScheduleSpec) (ScheduleInfo, error) {
	s, err := sp.Schedule(time.Now())
	if err != nil {
		return ScheduleInfo{}, err
	}
	if old, err := o.j.GetSchedule(s.ID); err == nil && broker.SameSchedule(old, s) {
		return NewScheduleInfo(old, false), nil
	}
	if _, err := store.Wait(func(done func(bool, error)) { o.j.PutSchedule(s, done) }); err != nil {
		return ScheduleInfo{}, err
	}
	return NewScheduleInfo(s, false), nil
}

func (o *Offline) RemoveSchedule(_ context.Context, id string) error {
	found, err := store.Wait(func(done func(bool, error)) { o.j.RemoveSchedule(id, done) })
	if err == nil && !found {
		err = fmt.Errorf("%w: %s", store.ErrNoSchedule, id)
	}
	return err
}

func (o *Offline) PauseSchedule(_ context.Context, id string, paused bool) error {
	_, err := store.Wait(func(done func(*store.Schedule, error)) { o.j.PauseSchedule(id, paused, done) })
	return err
}

func (o *Offline) Events(context.Context, string, string) (Events, error) { return nil, ErrNeedsBroker }

// Close closes the journal, then lets go of what opening it held.
func (o *Offline) Close() error {
	err := o.j.Close()
	if o.release != nil {
		o.release()
	}
	return err
}
