package broker

import (
	"github.com/eventmq/emq/store"
)

// queue is one named queue: its pending jobs in order (by priority, then
// FIFO) and the workers that serve it.
type queue struct {
	name    string
	jobs    jobQueue
	live    int // jobs held in memory (journaling, pending, delayed, in flight)
	workers []*peer
	tenants map[string]*tenant // of the jobs held (fair.go)

	// The operator's controls (controls.go).
	set     store.QueueSettings
	running int    // jobs held by workers, for set.Concurrency
	rate    bucket // of set.Rate
	refill  alarm  // wakes the loop when a token is due
	filling bool   // in b.toFill

	// Since the queue was made (it is forgotten when it has neither jobs
	// nor workers): for the dashboard's rates.
	acked, replied, failed int64
}

func (b *Broker) queue(name string) *queue {
	q := b.queues[name]
	if q == nil {
		q = b.newQueue(name)
		b.queues[name] = q
	}
	return q
}

// dropIfUnused forgets a queue with no jobs and no workers, so that queue
// names that come and go do not pile up.
func (b *Broker) dropIfUnused(q *queue) {
	if q.live == 0 && len(q.workers) == 0 {
		b.timers.stop(&q.refill)
		delete(b.queues, q.name)
	}
}

// offer gives a worker with free slots jobs from its highest-weight queue
// that has some its controls let go. Nothing is dispatched once the
// broker stops taking work.
func (b *Broker) offer(w *peer) {
	for w.free > 0 && b.phase == serving {
		var j *job
		for _, s := range w.queues {
			if s.q.jobs.len() > 0 && b.canDispatch(s.q) {
				if j = b.take(s.q); j != nil {
					break
				}
			}
		}
		if j == nil {
			return
		}
		b.deliver(w, j)
	}
}

// fill gives q's jobs to free workers: the one weighing q highest, least
// recently used first.
func (b *Broker) fill(q *queue) {
	for q.jobs.len() > 0 && b.phase == serving && b.canDispatch(q) {
		var best *peer
		bestWeight := 0
		for _, w := range q.workers {
			if w.free == 0 {
				continue
			}
			wt := w.weight(q)
			if best == nil || wt > bestWeight || wt == bestWeight && w.lastUsed < best.lastUsed {
				best, bestWeight = w, wt
			}
		}
		if best == nil {
			return
		}
		j := b.take(q)
		if j == nil {
			return
		}
		b.deliver(best, j)
	}
}

// HeaderAttempt is added to a forwarded REQUEST from its second delivery
// on: attempt:2 is the first retry.
const HeaderAttempt = "attempt"

// deliver gives job j to worker w, using one of its slots: at once when
// its payload is in memory, else once it is read (payloads.go).
func (b *Broker) deliver(w *peer, j *job) {
	w.free--
	b.useSeq++
	w.lastUsed = b.useSeq
	j.state, j.holder, j.overdue = inFlight, w, false
	w.held[j.id] = j
	b.inFlight++
	j.q.dispatched()
	b.dispatched(j)
	b.emitJob(EventDispatched, j, "")
	if j.inMemory() && w.reading == 0 {
		b.sendJob(w, j, nil)
		return
	}
	// Behind a read for the same worker, even a job in memory waits its
	// turn: a worker gets its jobs in the order they were given.
	b.startReading(j)
}

// release takes j from the worker holding it, and stops its timeout (and
// the sending of its payload, if it was being read).
func (b *Broker) release(j *job) {
	b.stopReading(j, false)
	if j.holder != nil {
		delete(j.holder.held, j.id)
		delete(b.progressOf, j)
		j.holder = nil
		b.inFlight--
		b.freed(j)
	}
	b.timers.stop(j)
}

// dispatched counts j, given to a worker, against its tenant's limits and
// its limiters.
func (b *Broker) dispatched(j *job) {
	t := j.ten
	t.running++
	if t.lim.rate > 0 {
		t.rate.tokens--
	}
	b.useLimiters(j)
}

// freed counts j as no longer held by a worker. What its queue, tenant or
// limiters held back for it is offered at the end of the loop's turn
// (not at once: the caller may be putting the job back at the head of its
// queue).
func (b *Broker) freed(j *job) {
	q, t := j.q, j.ten
	q.running--
	if q.set.Concurrency > 0 && q.jobs.len() > 0 {
		b.fillLater(q)
	}
	t.running--
	if t.blocked && (t.lim.concurrency == 0 || t.running < t.lim.concurrency) {
		if ok, _ := b.room(t.lim, t.running, &t.rate, &clock{}); ok {
			b.unblock(t)
		}
	}
	b.freeLimiters(j)
}

// fillLater has q filled at the end of the loop's turn.
func (b *Broker) fillLater(q *queue) {
	if !q.filling {
		q.filling = true
		b.toFill = append(b.toFill, q)
	}
}
