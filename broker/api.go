package broker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"time"

	"github.com/eventmq/emq/emqp"
	"github.com/eventmq/emq/store"
)

// The broker's named API: what everyone outside the loop may ask and
// change (package admin, package group, cmd/emq, tests). Each call that
// touches loop state goes through query or change: they post a closure
// to the loop and hand what it produced back over a channel. The closure
// builds its answer from loop state and returns it; the caller reads
// nothing else the closure touched. A caller that gives up (its context
// ends) may leave the closure to run later, harmlessly: nobody reads
// what it made. Reads of the journal alone (a job, a payload, a page of
// a listing) run on the caller's goroutine: the journal is safe for that.

// ErrStopped is returned by a query or an admin change that the loop can
// no longer answer.
var ErrStopped = errors.New("broker is not running")

// query runs fn on the loop and returns what it returned.
func query[T any](ctx context.Context, b *Broker, fn func() T) (T, error) {
	var zero T
	if !b.running.Load() {
		return zero, ErrStopped
	}
	out := make(chan T, 1)
	b.post(func() { out <- fn() })
	select {
	case v := <-out:
		return v, nil
	case <-b.stopped:
		select {
		case v := <-out:
			return v, nil
		default:
			return zero, ErrStopped
		}
	case <-ctx.Done():
		return zero, ctx.Err()
	}
}

// change runs fn on the loop; fn, or a journal callback it starts, calls
// reply with the outcome (once: later calls are dropped), and change
// returns it.
func change[T any](ctx context.Context, b *Broker, fn func(reply func(T, error))) (T, error) {
	type outcome struct {
		v   T
		err error
	}
	var zero T
	if !b.running.Load() {
		return zero, ErrStopped
	}
	out := make(chan outcome, 1)
	reply := func(v T, err error) {
		select {
		case out <- outcome{v, err}:
		default:
		}
	}
	ran := make(chan struct{})
	b.post(func() { close(ran); fn(reply) })
	select {
	case <-ran:
	case <-b.stopped:
		select {
		case <-ran:
		default:
			return zero, ErrStopped // the loop ended before it ran
		}
	case <-ctx.Done():
		return zero, ctx.Err()
	}
	// It ran: its outcome comes from the loop or the journal, also after
	// the broker stopped (the journal reports every write it took, and
	// Run hands the loop's last posts their turn).
	select {
	case o := <-out:
		return o.v, o.err
	case <-ctx.Done():
		return zero, ctx.Err()
	}
}

// QueueInfo describes one queue.
type QueueInfo struct {
	Name      string  `json:"name"`
	Pending   int     `json:"pending"` // waiting for a worker
	Delayed   int     `json:"delayed"` // waiting for their time (delay, retry backoff)
	InFlight  int     `json:"in_flight"`
	Dead      int     `json:"dead"`      // in the dead letters (from the journal; 0 where a damaged file cannot be counted)
	Done      int     `json:"done"`      // done and kept with their result (retain-done; from the journal; likewise)
	Cancelled int     `json:"cancelled"` // cancelled and kept (retain-done; from the journal; likewise)
	Workers   int     `json:"workers"`
	OldestAge float64 `json:"oldest_age_seconds"` // of the jobs not done; 0 when none

	// The operator's controls (emq queues pause|resume|set).
	Paused      bool    `json:"paused"`
	Concurrency int     `json:"concurrency,omitempty"` // jobs in flight at most; 0 = no limit
	Rate        float64 `json:"rate,omitempty"`        // dispatches a second at most; 0 = no limit
	Burst       int     `json:"burst,omitempty"`
	// The defaults of each of its tenants (emq queues set --tenant-*).
	TenantConcurrency int     `json:"tenant_concurrency,omitempty"`
	TenantRate        float64 `json:"tenant_rate,omitempty"`
	TenantBurst       int     `json:"tenant_burst,omitempty"`

	// Jobs ACKed, replied and failed since the broker last had this queue
	// in memory (it forgets a queue without jobs or workers): a dashboard
	// takes its rates from their change.
	Acked   int64 `json:"acked_total"`
	Replied int64 `json:"replied_total"`
	Failed  int64 `json:"failed_total"`
}

// WithControls is qi with the controls s.
func (qi QueueInfo) WithControls(s store.QueueSettings) QueueInfo {
	qi.Paused, qi.Concurrency, qi.Rate, qi.Burst = s.Paused, s.Concurrency, s.Rate, s.Burst
	qi.TenantConcurrency, qi.TenantRate, qi.TenantBurst = s.TenantConcurrency, s.TenantRate, s.TenantBurst
	return qi
}

// Queues describes every queue: those the broker holds (from memory),
// with the journal's dead and done counts, and those that only have dead
// or done jobs, by name.
func (b *Broker) Queues(ctx context.Context) ([]QueueInfo, error) {
	qs, err := query(ctx, b, b.liveQueues)
	if err != nil {
		return nil, err
	}
	counts, err := b.journal.Counts(store.Dead, store.Done, store.Cancelled) // pending: from memory
	if errors.Is(err, store.ErrCorrupt) {
		// A damaged file cannot be counted, and the queues are what an
		// operator watches through it: what memory knows, and the damage
		// in the log (and emq_journal_damaged_total).
		b.damageLog.Warn(b.log, "the journal cannot count its dead and done jobs; queues show them as 0", "err", err)
		counts, err = nil, nil
	}
	if err != nil {
		return nil, err
	}
	return withStored(qs, counts, false), nil
}

// StoredQueues describes every queue of a journal no broker holds: its
// counts and controls, as Queues would show them but for what only a
// running broker knows (delayed, in flight, workers).
func StoredQueues(j store.Journal) ([]QueueInfo, error) {
	counts, err := j.Counts()
	if err != nil {
		return nil, err
	}
	controls, err := j.QueueSettings()
	if err != nil {
		return nil, err
	}
	var qs []QueueInfo
	for name, s := range controls {
		if !s.IsZero() {
			qs = append(qs, QueueInfo{Name: name}.WithControls(s))
		}
	}
	return withStored(qs, counts, true), nil
}

// withStored adds the journal's counts to qs (and a queue for each one
// qs lacks), pending ones too with pending set, and sorts them by name.
func withStored(qs []QueueInfo, counts []store.Count, pending bool) []QueueInfo {
	index := make(map[string]int, len(qs))
	for i, q := range qs {
		index[q.Name] = i
	}
	for _, c := range counts {
		if c.Dead == 0 && c.Done == 0 && c.Cancelled == 0 && (!pending || c.Pending == 0) {
			continue
		}
		i, ok := index[c.Queue]
		if !ok {
			i = len(qs)
			index[c.Queue] = i
			qs = append(qs, QueueInfo{Name: c.Queue})
		}
		qs[i].Dead, qs[i].Done, qs[i].Cancelled = c.Dead, c.Done, c.Cancelled
		if pending {
			qs[i].Pending = c.Pending
		}
	}
	sort.Slice(qs, func(i, k int) bool { return qs[i].Name < qs[k].Name })
	return qs
}

// liveQueues describes the queues the loop holds, and those with
// controls and nothing in memory. It looks at the head of each FIFO, the
// delayed jobs and the held ones, never at every stored job.
func (b *Broker) liveQueues() []QueueInfo {
	now := time.Now()
	out := make([]QueueInfo, 0, len(b.queues))
	index := make(map[*queue]int, len(b.queues))
	for _, q := range b.queues {
		index[q] = len(out)
		qi := QueueInfo{Name: q.name, Pending: q.jobs.len(), Workers: len(q.workers),
			Acked: q.acked, Replied: q.replied, Failed: q.failed}.WithControls(q.set)
		if j := b.oldest(q); j != nil {
			qi.OldestAge = age(now, j)
		}
		out = append(out, qi)
	}
	for name, s := range b.controls { // controlled, nothing in memory now
		if b.queues[name] == nil && !s.IsZero() {
			out = append(out, QueueInfo{Name: name}.WithControls(s))
		}
	}
	count := func(j *job, n func(*QueueInfo) *int) {
		if i, ok := index[j.q]; ok {
			*n(&out[i])++
			out[i].OldestAge = max(out[i].OldestAge, age(now, j))
		}
	}
	for _, x := range b.timers {
		if j, ok := x.(*job); ok && j.state == delayed {
			count(j, func(qi *QueueInfo) *int { return &qi.Delayed })
		}
	}
	for _, w := range b.peers {
		for _, j := range w.held {
			count(j, func(qi *QueueInfo) *int { return &qi.InFlight })
		}
	}
	sort.Slice(out, func(i, k int) bool { return out[i].Name < out[k].Name })
	return out
}

// QueueLoad is one queue as an autoscaler reads it: its QueueInfo, the
// age of the job that has waited longest for a worker, and the slots the
// workers serving it offer and do not use.
type QueueLoad struct {
	QueueInfo
	OldestPendingAge float64 `json:"oldest_pending_age_seconds"` // 0 when none waits
	// FreeSlots are the unused slots of the workers serving the queue. A
	// worker serving several queues counts its slots in each: any of them
	// may take the next job.
	FreeSlots int `json:"free_slots"`
}

// QueueLoad describes the queue called name, from one visit to the loop
// and the journal's dead and done counts; store.ErrNotFound when the
// broker knows no such queue: none of its jobs is held or kept, no
// worker serves it, it has no controls. (The broker forgets a queue
// without jobs or workers, so an idle queue is unknown.) It costs what a
// scrape of /metrics costs, and a count of the journal's dead and done
// jobs.
func (b *Broker) QueueLoad(ctx context.Context, name string) (QueueLoad, error) {
	type found struct {
		load  QueueLoad
		known bool
	}
	f, err := query(ctx, b, func() found {
		var f found
		for _, qi := range b.liveQueues() {
			if qi.Name == name {
				f.load.QueueInfo, f.known = qi, true
			}
		}
		if q := b.queues[name]; q != nil {
			if j := b.oldest(q); j != nil {
				f.load.OldestPendingAge = age(time.Now(), j)
			}
			for _, w := range q.workers {
				f.load.FreeSlots += w.free
			}
		}
		return f
	})
	if err != nil {
		return QueueLoad{}, err
	}
	counts, err := b.journal.Counts(store.Dead, store.Done, store.Cancelled)
	switch {
	case errors.Is(err, store.ErrCorrupt): // as Queues: what memory knows
		counts = nil
	case err != nil:
		return QueueLoad{}, err
	}
	for _, c := range counts {
		if c.Queue == name && c.Dead+c.Done+c.Cancelled > 0 {
			f.load.Dead, f.load.Done, f.load.Cancelled, f.known = c.Dead, c.Done, c.Cancelled, true
		}
	}
	if !f.known {
		return QueueLoad{}, fmt.Errorf("%w: queue %q: no job of it is held or kept, no worker serves it", store.ErrNotFound, name)
	}
	f.load.Name = name
	return f.load, nil
}

// age is how long ago j was stored, in seconds.
func age(now time.Time, j *job) float64 { return now.Sub(fromNanos(j.enqueued)).Seconds() }

// WorkerInfo describes one worker.
type WorkerInfo struct {
	ID            string    `json:"id"` // the routing id, as text or 0x-hex
	Endpoint      string    `json:"endpoint"`
	Queues        []string  `json:"queues"`
	Weights       []int     `json:"weights"` // of Queues, in their order
	FreeSlots     int       `json:"free_slots"`
	InFlight      int       `json:"in_flight"`
	LastHeartbeat time.Time `json:"last_heartbeat"`
}

// Workers describes every worker, by id.
func (b *Broker) Workers(ctx context.Context) ([]WorkerInfo, error) {
	return query(ctx, b, func() []WorkerInfo {
		var out []WorkerInfo
		for _, w := range b.peers {
			if !w.isWorker() {
				continue
			}
			out = append(out, WorkerInfo{
				ID:            printableID(w.key.id),
				Endpoint:      endpointName(w.key.ep),
				Queues:        queueNames(w.queues),
				Weights:       queueWeights(w.queues),
				FreeSlots:     w.free,
				InFlight:      len(w.held),
				LastHeartbeat: w.lastSeen,
			})
		}
		sort.Slice(out, func(i, k int) bool { return out[i].ID < out[k].ID })
		return out
	})
}

// State is what the loop holds, counted, in one visit: the figures of
// /metrics and of the dashboard's overview.
type State struct {
	Queues           []QueueInfo // from memory: no dead or done counts
	Workers          int
	FreeSlots        int // offered by workers (READY) and not used
	Schedulers       int
	SchedulesActive  int
	SchedulesPaused  int
	CachedBytes      int64 // payloads held in memory for dispatch
	SendQueueBytes   int64 // queued for sending, every connection together
	ReceivedBytes    int64 // received messages held (the receive budget)
	ReceiveLimit     int64 // the receive budget's bound (max-receive-buffer)
	Listeners        int   // of the event stream
	Connections      int   // every eMQP and pub/sub endpoint's, handshakes included
	Refused          int64 // connections closed at once: a bound reached
	HandshakesFailed int64
}

// State counts what the loop holds now.
func (b *Broker) State(ctx context.Context) (State, error) {
	return query(ctx, b, func() State {
		s := State{Queues: b.liveQueues(), Schedulers: len(b.schedulers), CachedBytes: b.cached,
			Listeners: len(b.listeners), ReceivedBytes: b.budget.Used(), ReceiveLimit: b.opts.MaxReceiveBuffer,
			Connections: b.conns.Connections(), Refused: b.conns.Refused(), HandshakesFailed: b.conns.HandshakesFailed()}
		for _, r := range b.routers {
			s.SendQueueBytes += r.QueuedBytes()
		}
		for _, p := range b.peers {
			if p.isWorker() {
				s.Workers++
				s.FreeSlots += p.free
			}
		}
		for _, sc := range b.scheds {
			if sc.paused {
				s.SchedulesPaused++
			} else {
				s.SchedulesActive++
			}
		}
		return s
	})
}

// InFlight returns the msgids held by workers (of queue, or all when "")
// with the worker holding each.
func (b *Broker) InFlight(ctx context.Context, queue string) (map[string]string, error) {
	return query(ctx, b, func() map[string]string { return b.holders(queue) })
}

// holders maps the jobs workers hold (of queue, or all when "") to them.
func (b *Broker) holders(queue string) map[string]string {
	out := map[string]string{}
	for _, w := range b.peers {
		for id, j := range w.held {
			if queue == "" || j.q.name == queue {
				out[id] = printableID(w.key.id)
			}
		}
	}
	return out
}

// Holder is who holds a job in flight, and how far it says the job has
// come; the zero Holder: no worker holds it.
type Holder struct {
	Worker   string
	Progress *Progress // nil: no PROGRESS yet
}

// Job returns a stored job and who holds it. Its Trail has the events the
// journal keeps, then those of the broker not yet written (a delivery
// under way).
func (b *Broker) Job(ctx context.Context, msgid string) (*store.Job, Holder, error) {
	j, err := b.journal.Get(msgid)
	if err != nil {
		return nil, Holder{}, err
	}
	type live struct {
		holder Holder
		trail  []store.TrailEvent
	}
	l, err := query(ctx, b, func() live {
		lj := b.jobs.get(msgid)
		if lj == nil {
			return live{}
		}
		return live{b.holding(lj), slices.Clone(b.trails[lj])}
	})
	if err != nil {
		return nil, Holder{}, err
	}
	j.Trail = append(j.Trail, l.trail...)
	return j, l.holder, nil
}

// holding is who holds j and its latest progress, copied.
func (b *Broker) holding(j *job) Holder {
	if j.holder == nil {
		return Holder{}
	}
	h := Holder{Worker: printableID(j.holder.key.id)}
	if p := b.progressOf[j]; p != nil {
		out := p.Progress
		h.Progress = &out
	}
	return h
}

// List returns a page of the stored jobs opts selects (jobs in flight
// are pending there).
func (b *Broker) List(opts store.ListOptions) (store.Page, error) { return b.journal.List(opts) }

// Listing is a page of stored jobs and the workers holding any of them.
type Listing struct {
	store.Page
	Workers map[string]string // msgid -> the worker holding it
}

// ListJobs returns a page of the stored jobs opts selects. With inFlight,
// it lists the jobs workers hold that pass opts' filters, at most
// opts.Limit (100 when 0), in no order and on one page.
func (b *Broker) ListJobs(ctx context.Context, opts store.ListOptions, inFlight bool) (Listing, error) {
	held, err := b.InFlight(ctx, opts.Queue)
	if err != nil {
		return Listing{}, err
	}
	l := Listing{Workers: held}
	if !inFlight {
		l.Page, err = b.List(opts)
		return l, err
	}
	if opts.Limit == 0 {
		opts.Limit = 100
	}
	for id := range held {
		if len(l.Jobs) == opts.Limit {
			break
		}
		if j, err := b.journal.Get(id); err == nil && opts.Matches(j) {
			l.Jobs = append(l.Jobs, j)
		}
	}
	return l, nil
}

// Payload returns a stored job's payload.
func (b *Broker) Payload(msgid string) ([]byte, error) {
	j, err := b.journal.Get(msgid)
	if err != nil {
		return nil, err
	}
	return j.Payload, nil
}

// Result returns the result kept for a done job (ErrNotFound: none).
func (b *Broker) Result(msgid string) ([]byte, error) { return b.journal.Result(msgid) }

// RetryDead brings a dead job back to the tail of its queue. It returns
// once the journal has it pending; the loop then dispatches it.
func (b *Broker) RetryDead(ctx context.Context, msgid string) error {
	_, err := change(ctx, b, func(reply func(struct{}, error)) {
		b.revive(msgid, func(err error) { reply(struct{}{}, err) })
	})
	return err
}

// revive asks the journal to revive a dead job, an admin's action, and
// holds it once stored; done gets the outcome.
func (b *Broker) revive(msgid string, done func(error)) {
	b.journal.Revive(msgid, AdminRevived(), func(sj *store.Job, err error) {
		if err == nil {
			b.revived(sj)
		}
		b.noticeFence(err)
		done(err)
	})
}

// revived holds a revived job. A REQUEST resending its msgid may be
// waiting for its own write (a duplicate, since the job is stored): the
// revived job takes its place in b.jobs.
func (b *Broker) revived(sj *store.Job) {
	j := b.jobFromStore(sj, nil)
	b.jobs.set(j.id, j)
	b.adopt(j)
	b.emitJob(EventRevived, j, "")
	b.enqueue(j, time.Now())
}

// ErrGone: a listed dead job was removed or revived meanwhile (a bulk
// action skips it).
var ErrGone = fmt.Errorf("%w: no longer dead", store.ErrWrongState)

// Gone reports whether err says a job is not there, or no longer in the
// state a change wanted: one a bulk action skips.
func Gone(err error) bool {
	return errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrWrongState)
}

// RetryDeadJobs revives the dead jobs msgids names, their writes queued
// at once, and returns how many it revived. One removed or revived
// meanwhile is skipped; the first other refusal is returned.
func (b *Broker) RetryDeadJobs(ctx context.Context, msgids []string) (int, error) {
	return b.deadJobs(ctx, msgids, false)
}

// RemoveDeadJobs deletes the dead jobs msgids names, as RetryDeadJobs
// revives them.
func (b *Broker) RemoveDeadJobs(ctx context.Context, msgids []string) (int, error) {
	return b.deadJobs(ctx, msgids, true)
}

func (b *Broker) deadJobs(ctx context.Context, msgids []string, remove bool) (int, error) {
	return changeN(ctx, b, len(msgids), func(each func(error)) {
		for _, id := range msgids {
			if !remove {
				b.revive(id, each)
				continue
			}
			if b.jobs.get(id) != nil { // revived since it was listed: no longer dead
				each(ErrGone)
				continue
			}
			b.journal.Remove(id, func(found bool, err error) {
				b.adminWriteFailed(err, "journal could not remove a dead job", id)
				if err == nil && !found {
					err = ErrGone
				}
				each(err)
			})
		}
	})
}

// changeN is change for fn starting n writes, each of which reports to
// each once: it returns how many succeeded and the first refusal other
// than a job gone meanwhile.
func changeN(ctx context.Context, b *Broker, n int, fn func(each func(error))) (int, error) {
	results := make(chan error, n)
	if _, err := query(ctx, b, func() struct{} { fn(func(err error) { results <- err }); return struct{}{} }); err != nil {
		return 0, err
	}
	done := 0
	var first error
	for range n {
		select {
		case err := <-results:
			switch {
			case err == nil:
				done++
			case first == nil && !Gone(err):
				first = err
			}
		case <-ctx.Done():
			return done, ctx.Err()
		}
	}
	return done, first
}

// RemoveJob deletes a job in any state (an admin's action). A worker
// holding it may still run it; its REPLY is then ignored. A job whose
// write is in progress is removed once it lands: its client gets the ACK
// (it was stored), and it is not dispatched.
func (b *Broker) RemoveJob(ctx context.Context, msgid string) error {
	return b.removeJob(ctx, msgid, false)
}

// ErrHeld is RemoveUnlessHeld's answer about a job a worker holds.
var ErrHeld = errors.New("held by a worker")

// RemoveUnlessHeld is RemoveJob, but a job a worker holds at that moment
// is left alone (ErrHeld).
func (b *Broker) RemoveUnlessHeld(ctx context.Context, msgid string) error {
	return b.removeJob(ctx, msgid, true)
}

func (b *Broker) removeJob(ctx context.Context, msgid string, unlessHeld bool) error {
	_, err := change(ctx, b, func(reply func(struct{}, error)) {
		j := b.jobs.get(msgid)
		if j != nil && unlessHeld && j.holder != nil {
			reply(struct{}{}, fmt.Errorf("%w: %s", ErrHeld, msgid))
			return
		}
		if j != nil {
			b.emitJob(EventRemoved, j, "")
			if j.state == journaling {
				j.dropped = true
			} else {
				b.unlink(j)
			}
		}
		b.journal.Remove(msgid, func(found bool, err error) {
			if err == nil && !found {
				err = fmt.Errorf("%w: %s", store.ErrNotFound, msgid)
			}
			if found {
				b.over(msgid)
			}
			b.adminWriteFailed(err, "journal could not remove a job; it stays stored and runs again after the next start", msgid)
			reply(struct{}{}, err)
		})
	})
	return err
}

// PurgeQueue deletes every stored pending job of queue, in flight or not,
// and those whose write is in progress: they are ACKed when it lands (they
// were stored), then forgotten.
func (b *Broker) PurgeQueue(ctx context.Context, queue string) (int, error) {
	return change(ctx, b, func(reply func(int, error)) {
		b.emit(Event{Kind: EventPurged, Queue: queue})
		b.purge(queue)
		b.journal.PurgeQueue(queue, func(n int, err error) {
			b.adminWriteFailed(err, "journal could not purge a queue; its jobs stay stored and run again after the next start", "")
			reply(n, err)
		})
	})
}

// Compact rewrites the journal without its free space, when the journal
// can (store.Compactor); otherwise the error is errors.ErrUnsupported.
func (b *Broker) Compact() (store.CompactStats, error) { return Compact(b.journal.j) }

// Compact compacts j when it can (store.Compactor); otherwise the error
// is errors.ErrUnsupported.
func Compact(j store.Journal) (store.CompactStats, error) {
	c, ok := j.(store.Compactor)
	if !ok {
		return store.CompactStats{}, fmt.Errorf("this journal does not compact: %w", errors.ErrUnsupported)
	}
	return c.Compact()
}

// purge forgets every stored job of a queue, in one pass over the jobs
// (unlinking each from its FIFO would take time squared).
func (b *Broker) purge(queue string) {
	q := b.queues[queue]
	if q == nil {
		return
	}
	for id, j := range b.jobs.all() {
		if j.q != q {
			continue
		}
		if j.state == journaling { // the journal purges it after storing it
			j.dropped = true
			continue
		}
		if j.state == inFlight {
			b.release(j)
		}
		if j.state == pending {
			if lm := j.parkedOn(); lm != nil {
				lm.stale++
			}
			j.state = removed
		}
		b.uncache(j)
		b.jobs.del(id)
		delete(b.trails, j)
		b.disown(j)
	}
	q.jobs = jobQueue{}
	for _, t := range q.tenants { // their lanes went with the jobs
		clear(t.lanes)
		clear(t.held)
		t.lanes, t.held, t.pending, t.blocked = t.lanes[:0], t.held[:0], 0, false
	}
	b.timers.removeIf(func(x timed) bool { j, ok := x.(*job); return ok && j.q == q && j.state == delayed })
	b.dropIfUnused(q)
}

// unlink takes a job out of the loop's state wherever it is.
func (b *Broker) unlink(j *job) {
	switch j.state {
	case pending:
		j.q.jobs.remove(j)
	case delayed:
		b.timers.stop(j)
	case inFlight:
		b.release(j)
	}
	b.forget(j)
}

// ChangeQueue changes a queue's controls, and returns them once the
// journal has them. Bad settings wrap store.ErrBadSettings.
func (b *Broker) ChangeQueue(ctx context.Context, name string, c QueueChange) (store.QueueSettings, error) {
	return change(ctx, b, func(reply func(store.QueueSettings, error)) { b.changeQueue(name, c, reply) })
}

// Schedules lists up to limit schedules (0 = 100) with ids after after,
// by id, as the journal has them, and the after of the next page.
func (b *Broker) Schedules(after string, limit int) ([]*store.Schedule, string, error) {
	if !b.running.Load() {
		return nil, "", ErrStopped
	}
	return b.journal.ListSchedules(after, limit)
}

// Schedule returns a kept schedule (store.ErrNoSchedule: none).
func (b *Broker) Schedule(id string) (*store.Schedule, error) { return b.journal.GetSchedule(id) }

// AddSchedule stores a schedule, as a SCHEDULE of these parts does; the
// same schedule as one kept goes on as it was. It returns the schedule
// as stored. A bad part is store.ErrBadSchedule, saying which.
func (b *Broker) AddSchedule(ctx context.Context, queue string, h emqp.Headers, interval int, cron string, payload []byte) (*store.Schedule, error) {
	type kept struct {
		id     string
		stored *store.Schedule // nil: nothing was written
	}
	k, err := change(ctx, b, func(reply func(kept, error)) {
		b.keepSchedule(queue, h, interval, cron, payload, func(id string, ss *store.Schedule, err error) {
			reply(kept{id, ss}, err)
		})
	})
	if err != nil {
		return nil, err
	}
	if k.stored != nil {
		return k.stored, nil
	}
	return b.journal.GetSchedule(k.id)
}

// RemoveSchedule removes a schedule (an admin's UNSCHEDULE by id).
func (b *Broker) RemoveSchedule(ctx context.Context, id string) error {
	_, err := change(ctx, b, func(reply func(struct{}, error)) {
		b.dropSchedule(id, func(found bool, err error) {
			if err == nil && !found {
				err = fmt.Errorf("%w: %s", store.ErrNoSchedule, id)
			}
			reply(struct{}{}, err)
		})
	})
	return err
}

// PauseSchedule pauses (or resumes) a schedule.
func (b *Broker) PauseSchedule(ctx context.Context, id string, paused bool) error {
	_, err := change(ctx, b, func(reply func(struct{}, error)) {
		b.pauseSchedule(id, paused, func(err error) { reply(struct{}{}, err) })
	})
	return err
}

// Batch returns a batch as the journal has it (store.ErrNotFound when it
// is not known), and how many of its pending jobs workers hold now.
func (b *Broker) Batch(ctx context.Context, name string) (*store.Batch, int, error) {
	bt, err := b.journal.GetBatch(name)
	if err != nil {
		return nil, 0, err
	}
	inFlight, err := query(ctx, b, func() int {
		n := 0
		for _, w := range b.peers {
			for _, j := range w.held {
				if v, _ := j.headers.Get(emqp.HeaderBatch); v == name {
					n++
				}
			}
		}
		return n
	})
	return bt, inFlight, err
}

// Batches lists up to limit batches (0 = 100) whose names come after
// after, by name, and the after of the next page.
func (b *Broker) Batches(after string, limit int) ([]*store.Batch, string, error) {
	if !b.running.Load() {
		return nil, "", ErrStopped
	}
	return b.journal.ListBatches(after, limit)
}

// OpenBatch opens or closes a batch (made if it is not known) and
// returns it once the journal has the change; a batch closed with
// nothing left to run releases the jobs that wait for it.
func (b *Broker) OpenBatch(ctx context.Context, name string, open bool) (*store.Batch, error) {
	return change(ctx, b, func(reply func(*store.Batch, error)) {
		b.journal.OpenBatch(name, open, func(bt *store.Batch, err error) {
			b.adminWriteFailed(err, "journal could not open or close a batch", name)
			reply(bt, err)
		})
	})
}

// JournalJob returns a job as the journal has it (no trail of the
// broker's, no holder): for showing a job's parents.
func (b *Broker) JournalJob(msgid string) (*store.Job, error) { return b.journal.Get(msgid) }

// Children returns up to limit of the jobs that wait for msgid.
func (b *Broker) Children(msgid string, limit int) ([]string, error) {
	if !b.running.Load() {
		return nil, ErrStopped
	}
	return b.journal.Children(msgid, limit)
}

// Backup writes the journal, as one moment, to w (store.Backuper: every
// journal EMQ has is one); errors.ErrUnsupported for a journal that is
// not. The broker goes on serving meanwhile.
func (b *Broker) Backup(ctx context.Context, w io.Writer, h store.BackupHeader) (store.BackupStats, error) {
	if !b.running.Load() {
		return store.BackupStats{}, ErrStopped
	}
	bk, ok := b.journal.j.(store.Backuper)
	if !ok {
		return store.BackupStats{}, fmt.Errorf("the journal %T cannot back itself up: %w", b.journal.j, errors.ErrUnsupported)
	}
	return bk.Backup(w, h)
}

// SchedulerInfo describes a scheduler connected to the broker.
type SchedulerInfo struct {
	ID            string    `json:"id"` // the routing id, as text or 0x-hex
	Endpoint      string    `json:"endpoint"`
	LastHeartbeat time.Time `json:"last_heartbeat"`
}

// Schedulers describes every scheduler, in the order SCHEDULEs go round.
func (b *Broker) Schedulers(ctx context.Context) ([]SchedulerInfo, error) {
	return query(ctx, b, func() []SchedulerInfo {
		out := make([]SchedulerInfo, 0, len(b.schedulers))
		for _, s := range b.schedulers {
			out = append(out, SchedulerInfo{ID: printableID(s.key.id), Endpoint: endpointName(s.key.ep), LastHeartbeat: s.lastSeen})
		}
		return out
	})
}
