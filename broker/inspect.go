package broker

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/eventmq/emq/store"
)

// ErrStopped is returned by a query or an admin change that the loop can
// no longer answer.
var ErrStopped = errors.New("broker is not running")

// onLoop runs fn on the loop and waits for it. Admin reads and changes go
// through it, so they see and change the loop's state without locks.
func (b *Broker) onLoop(ctx context.Context, fn func()) error {
	if !b.running.Load() {
		return ErrStopped
	}
	done := make(chan struct{})
	b.post(func() { fn(); close(done) })
	select {
	case <-done:
		return nil
	case <-b.stopped:
		return ErrStopped
	case <-ctx.Done():
		return ctx.Err()
	}
}

// QueueInfo describes one queue.
type QueueInfo struct {
	Name      string  `json:"name"`
	Pending   int     `json:"pending"` // waiting for a worker
	Delayed   int     `json:"delayed"` // waiting for their time (delay, retry backoff)
	InFlight  int     `json:"in_flight"`
	Dead      int     `json:"dead"` // in the dead letters (from the journal)
	Done      int     `json:"done"` // done and kept with their result (retain-done; from the journal)
	Workers   int     `json:"workers"`
	OldestAge float64 `json:"oldest_age_seconds"` // of the jobs not done; 0 when none

	// The operator's controls (emq queues pause|resume|set).
	Paused      bool    `json:"paused"`
	Concurrency int     `json:"concurrency,omitempty"` // jobs in flight at most; 0 = no limit
	Rate        float64 `json:"rate,omitempty"`        // dispatches a second at most; 0 = no limit
	Burst       int     `json:"burst,omitempty"`

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
	return qi
}

// Queues describes every queue the broker knows, by name. It looks at the
// head of each FIFO, the delayed jobs and the held ones, never at every
// stored job.
func (b *Broker) Queues(ctx context.Context) ([]QueueInfo, error) {
	var out []QueueInfo
	err := b.onLoop(ctx, func() {
		now := time.Now()
		index := make(map[*queue]int, len(b.queues))
		for _, q := range b.queues {
			index[q] = len(out)
			qi := QueueInfo{Name: q.name, Pending: q.jobs.len(), Workers: len(q.workers),
				Acked: q.acked, Replied: q.replied, Failed: q.failed}.WithControls(q.set)
			if q.jobs.len() > 0 {
				qi.OldestAge = age(now, q.jobs.front())
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
	})
	sort.Slice(out, func(i, k int) bool { return out[i].Name < out[k].Name })
	return out, err
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

// Workers describes every worker.
func (b *Broker) Workers(ctx context.Context) ([]WorkerInfo, error) {
	var out []WorkerInfo
	err := b.onLoop(ctx, func() {
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
	})
	sort.Slice(out, func(i, k int) bool { return out[i].ID < out[k].ID })
	return out, err
}

// InFlight returns the msgids held by workers (of queue, or all when "")
// with the worker holding each.
func (b *Broker) InFlight(ctx context.Context, queue string) (map[string]string, error) {
	out := map[string]string{}
	err := b.onLoop(ctx, func() {
		for _, w := range b.peers {
			for id, j := range w.held {
				if queue == "" || j.q.name == queue {
					out[id] = printableID(w.key.id)
				}
			}
		}
	})
	return out, err
}

// RetryDead brings a dead job back to the tail of its queue. It returns
// once the journal has it pending; the loop then dispatches it.
func (b *Broker) RetryDead(ctx context.Context, msgid string) error {
	result := make(chan error, 1)
	err := b.onLoop(ctx, func() { b.revive(msgid, func(err error) { result <- err }) })
	if err != nil {
		return err
	}
	select {
	case err := <-result:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// revive asks the journal to revive a dead job, an admin's action, and
// holds it once stored; done gets the outcome, on the journal's goroutine.
func (b *Broker) revive(msgid string, done func(error)) {
	b.journal.Revive(msgid, AdminRevived(), func(sj *store.Job, err error) {
		if err == nil {
			b.post(func() { b.revived(sj) })
		}
		b.noticeFence(err)
		done(err)
	})
}

// revived holds a revived job. A REQUEST resending its msgid may be
// waiting for its own write (a duplicate, since the job is stored): the
// revived job takes its place in b.jobs.
func (b *Broker) revived(sj *store.Job) {
	j := b.jobFromStore(sj)
	b.jobs[j.id] = j
	j.q.live++
	b.emitJob(EventRevived, j, "")
	b.enqueue(j, time.Now())
}

// RemoveJob deletes a job in any state (an admin's action). A worker
// holding it may still run it; its REPLY is then ignored. A job whose
// write is in progress is removed once it lands: its client gets the ACK
// (it was stored), and it is not dispatched.
func (b *Broker) RemoveJob(ctx context.Context, msgid string) error {
	return b.removeJob(ctx, msgid, false)
}

// ErrHeld is removeJob's answer about a job a worker holds when told to
// leave those alone.
var ErrHeld = errors.New("held by a worker")

// removeJob is RemoveJob; with notHeld, a job a worker holds at that
// moment is left alone (ErrHeld).
func (b *Broker) removeJob(ctx context.Context, msgid string, notHeld bool) error {
	result := make(chan error, 1)
	err := b.onLoop(ctx, func() {
		if j := b.jobs[msgid]; j != nil && notHeld && j.holder != nil {
			result <- fmt.Errorf("%w: %s", ErrHeld, msgid)
			return
		}
		if j := b.jobs[msgid]; j != nil {
			b.emitJob(EventRemoved, j, "")
			if j.state == journaling {
				j.removed = true
			} else {
				b.unlink(j)
			}
		}
		b.journal.Remove(msgid, func(found bool, err error) {
			if err == nil && !found {
				err = fmt.Errorf("%w: %s", store.ErrNotFound, msgid)
			}
			b.adminWriteFailed(err, "journal could not remove a job; it stays stored and runs again after the next start", msgid)
			result <- err
		})
	})
	if err != nil {
		return err
	}
	select {
	case err := <-result:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// PurgeQueue deletes every stored pending job of queue, in flight or not,
// and those whose write is in progress: they are ACKed when it lands (they
// were stored), then forgotten.
func (b *Broker) PurgeQueue(ctx context.Context, queue string) (int, error) {
	type outcome struct {
		n   int
		err error
	}
	result := make(chan outcome, 1)
	err := b.onLoop(ctx, func() {
		b.emit(Event{Kind: EventPurged, Queue: queue})
		b.purge(queue)
		b.journal.PurgeQueue(queue, func(n int, err error) {
			b.adminWriteFailed(err, "journal could not purge a queue; its jobs stay stored and run again after the next start", "")
			result <- outcome{n, err}
		})
	})
	if err != nil {
		return 0, err
	}
	select {
	case o := <-result:
		return o.n, o.err
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// Compact rewrites the journal without its free space, when the journal
// can (store.Compactor); otherwise the error is errors.ErrUnsupported.
func (b *Broker) Compact() (store.CompactStats, error) {
	c, ok := b.journal.(store.Compactor)
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
	for id, j := range b.jobs {
		if j.q != q {
			continue
		}
		if j.state == journaling { // the journal purges it after storing it
			j.removed = true
			continue
		}
		if j.state == inFlight {
			b.release(j)
		}
		b.uncache(j)
		delete(b.jobs, id)
		delete(b.trails, j)
		q.live--
	}
	q.jobs = deque{}
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
